// Replays every input the fuzzers ever found interesting (tests/fuzz/regressions/<target>/)
// through the fuzz targets' bodies under the normal build: a crash found once stays a test.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <iterator>

#include "fuzz/targets.h"

namespace sceptre::fuzz {
namespace {

std::vector<std::uint8_t> read_file(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

void replay(const char* target, void (*fn)(const std::uint8_t*, std::size_t)) {
  std::filesystem::path dir = std::filesystem::path(SCEPTRE_FUZZ_REGRESSIONS) / target;
  ASSERT_TRUE(std::filesystem::is_directory(dir)) << dir;
  int count = 0;
  for (const auto& entry : std::filesystem::directory_iterator(dir)) {
    auto bytes = read_file(entry.path());
    SCOPED_TRACE(entry.path().string());
    fn(bytes.data(), bytes.size());
    ++count;
  }
  EXPECT_GT(count, 0) << "no saved inputs in " << dir;
}

TEST(FuzzRegressions, FrameDecoder) { replay("frame_fuzz", fuzz_frame); }
TEST(FuzzRegressions, MessageDecoder) { replay("message_fuzz", fuzz_message); }

}  // namespace
}  // namespace sceptre::fuzz
