// The actor tests' main. The binary is also its own peer process, as a user's program is the
// image of its procs: with SCEPTRE_ACTOR_TEST_PEER=<listen address> it serves a Proc there,
// prints the proc's id on stdout, and runs until its stdin closes (the test that started it is
// gone or done).
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>

#include "actor/test_actors.h"

int main(int argc, char** argv) {
  if (const char* listen = std::getenv("SCEPTRE_ACTOR_TEST_PEER")) {
    sceptre::Proc proc(sceptre::testing::test_options(listen));
    std::printf("%s\n", proc.id().to_string().c_str());
    std::fflush(stdout);
    char c;
    while (::read(0, &c, 1) > 0) {
    }
    return 0;
  }
  ::testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}
