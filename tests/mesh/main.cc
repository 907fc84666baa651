// The mesh tests' main. The binary is its own proc image, as a user's program is: the Runtime
// made first thing in main becomes a proc when the binary is re-executed by spawn_procs.
//
// Besides the tests it has controller-child modes, run by the tests as separate processes whose
// fate they control (killed, crashing) or whose terminal output they read:
//   --orphan-controller sleep|throw|return   spawns 3 procs, prints "PIDS a b c", then sleeps
//                                            (to be killed), throws out of main, or returns
//   --orphan-controller hosts                launches 1 host agent, spawns 2 procs on it, prints
//                                            "PIDS agent a b", then sleeps
//   --log-controller                         spawns 4 procs that print, then returns (first it
//                                            prints "SERVING <proc 0's address> <controller's>")
//   --unhandled-controller                   spawns 4 procs, prints "PIDS a b c d", crashes rank
//                                            2, then kills the others, and handles none of it
#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <stdexcept>
#include <string>

#include "mesh/mesh_actors.h"

namespace {

using namespace std::chrono_literals;
using sceptre::testing::Faulty;
using sceptre::testing::Probe;

// A proc that is told to fail at start (the start-failure test sets this in its environment).
void maybe_fail_at_start() {
  const char* role = std::getenv("SCEPTRE_ROLE");
  const char* fail = std::getenv("MESH_TEST_FAIL_RANK");
  const char* rank = std::getenv("SCEPTRE_RANK");
  if (role && fail && rank && std::strcmp(role, "proc") == 0 && std::strcmp(fail, rank) == 0) {
    std::fprintf(stderr, "rank %s: first line of a failing start\n", rank);
    std::fprintf(stderr, "rank %s refuses to start\n", rank);
    std::exit(3);
  }
}

int orphan_controller(int argc, char** argv, const std::string& how) {
  sceptre::Runtime runtime(argc, argv);
  if (how == "hosts") {
    auto hosts = runtime.launch_hosts(1);
    auto procs = hosts.spawn_procs({{"gpus", 2}}, "orphans");
    (void)procs.spawn<Probe>("probe").call<&Probe::whoami>().get(60s);
    std::printf("PIDS %d %d %d\n", hosts.agents().pid(0), procs.pid(0), procs.pid(1));
    std::fflush(stdout);
    for (;;) ::pause();
  }
  auto procs = sceptre::this_host().spawn_procs({{"gpus", 3}}, "orphans");
  auto probes = procs.spawn<Probe>("probe");
  auto who = probes.call<&Probe::whoami>().get(60s);
  std::string line = "PIDS";
  for (std::size_t r = 0; r < procs.size(); ++r) line += " " + std::to_string(procs.pid(r));
  std::printf("%s\n", line.c_str());
  std::fflush(stdout);
  if (how == "throw") throw std::runtime_error("the controller fails");
  if (how == "sleep") {
    for (;;) ::pause();
  }
  return 0;
}

int log_controller(int argc, char** argv) {
  sceptre::Runtime runtime(argc, argv);
  auto procs = sceptre::this_host().spawn_procs({{"gpus", 4}}, "talkers");
  auto probes = procs.spawn<Probe>("probe");
  // Where the procs serve, and whether they reach the controller there.
  std::printf("SERVING %s %s\n", procs.proc(0).addr.c_str(),
              probes.call<&Probe::env>(std::string("SCEPTRE_CONTROLLER")).get(60s).at(0).c_str());
  std::fflush(stdout);
  probes.call<&Probe::say>(std::string("the same line")).get(60s);
  probes.call<&Probe::say_rank>(std::string("hello from")).get(60s);
  return 0;
}

int unhandled_controller(int argc, char** argv) {
  sceptre::Runtime runtime(argc, argv);
  auto procs = sceptre::this_host().spawn_procs({{"gpus", 4}}, "victims");
  auto members = procs.spawn<Faulty>("faulty");
  (void)members.call<&Faulty::pid>().get(60s);
  std::string line = "PIDS";
  for (std::size_t r = 0; r < procs.size(); ++r) line += " " + std::to_string(procs.pid(r));
  std::printf("%s\n", line.c_str());
  std::fflush(stdout);
  members.slice("gpus", 2).broadcast<&Faulty::crash>(std::string("segv"));
  // The root cause is known: the others die of it (as they would of a collective it broke).
  while (procs.failed_ranks().empty()) std::this_thread::sleep_for(1ms);
  for (std::size_t r : {0, 1, 3}) ::kill(procs.pid(r), SIGKILL);
  std::this_thread::sleep_for(60s);  // the supervisor ends the process long before
  std::printf("controller went on\n");
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  maybe_fail_at_start();
  // Under AddressSanitizer, a proc that crashes on purpose must crash as it would in a user's
  // build: by the signal, through sceptre's own fatal-signal handler (ASan would catch SIGSEGV
  // and SIGABRT and exit with 1). Only the procs read this: ASan parsed its options already.
  if (!std::getenv("SCEPTRE_ROLE")) {
    std::string asan = std::getenv("ASAN_OPTIONS") ? std::getenv("ASAN_OPTIONS") : "";
    ::setenv("ASAN_OPTIONS", (asan + (asan.empty() ? "" : ":") + "handle_segv=0:handle_abort=0").c_str(), 1);
  }
  if (argc > 2 && std::strcmp(argv[1], "--orphan-controller") == 0) return orphan_controller(argc, argv, argv[2]);
  if (argc > 1 && std::strcmp(argv[1], "--log-controller") == 0) return log_controller(argc, argv);
  if (argc > 1 && std::strcmp(argv[1], "--unhandled-controller") == 0) return unhandled_controller(argc, argv);
  // A small fan-out, so that even the tests' small meshes cast through trees of several levels
  // (the controller-child modes above keep the defaults: a root fan-out of 1).
  auto config = sceptre::Config::load();
  if (!config) {
    std::fprintf(stderr, "%s\n", config.error().to_string().c_str());
    return 2;
  }
  if (!std::getenv("SCEPTRE_CAST_FANOUT")) config->cast_fanout = 2;
  if (!std::getenv("SCEPTRE_CAST_ROOT_FANOUT")) config->cast_root_fanout = 2;
  // Sanitizer builds on 2 busy cores: a generous silence before a proc is declared lost.
  if (!std::getenv("SCEPTRE_HEARTBEAT_TIMEOUT")) config->heartbeat_timeout = std::chrono::seconds(3);
  // Room for a crash's backtrace (deep in unoptimised sanitizer builds) and what came before it.
  config->stderr_tail_lines = 80;
  sceptre::Runtime runtime(argc, argv, *config);
  ::testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}
