#include "fuzz/targets.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  sceptre::fuzz::fuzz_message(data, size);
  return 0;
}
