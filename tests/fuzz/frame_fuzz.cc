#include "fuzz/targets.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  sceptre::fuzz::fuzz_frame(data, size);
  return 0;
}
