// The GPU layer against the vendors' real libraries where this host has them (Debian's
// libamdhip64 and ROCm SMI, which CI installs), through the same path as the fakes: on a host
// without an AMD GPU each is not viable, in its own words; on one with, it finds the devices.
// A binary of its own, without the fakes: a library loaded once stands for its SONAME in the
// whole process.
#include <gtest/gtest.h>

#include "gpu/scoped_env.h"
#include "sceptre/gpu/health.h"
#include "sceptre/gpu/runtime.h"

// LeakSanitizer (the asan preset): what the vendors' own libraries keep until the process ends
// is theirs, not a leak of ours.
extern "C" const char* __lsan_default_suppressions() {
  return "leak:libamdhip64.so\nleak:libhsa-runtime64.so\nleak:librocm_smi64.so\n";
}

namespace sceptre::gpu {
namespace {

using testing::ScopedEnv;

// Debian's real HIP runtime (libamdhip64-dev, which CI installs), through the same path: on a
// host without an AMD GPU it is not viable, in its own words; on one with, it finds them.
TEST(RealLibraries, TheRealHipRuntimeLoadsThroughTheSamePath) {
  ScopedEnv env;
  env.set("SCEPTRE_HIP_LIBRARY", "libamdhip64.so.5");
  auto rt = load("hip");
  if (rt.ok()) {
    EXPECT_GT((*rt)->device_count(), 0);
    EXPECT_EQ((*rt)->origin().library.find("/gpu/fake/"), std::string::npos);
    return;
  }
  if (rt.error().message().find("libamdhip64.so.5: cannot open") != std::string::npos) {
    GTEST_SKIP() << "no ROCm HIP runtime on this host: " << rt.error().message();
  }
  EXPECT_EQ(rt.error().code(), Code::kUnavailable);
  EXPECT_EQ(rt.error().message().rfind("hip: hip", 0), 0u) << rt.error().message();
}

// Debian's real ROCm SMI (librocm-smi-dev, which CI installs), through the same path: on a host
// without an AMD GPU it is not viable, in its own words.
TEST(RealLibraries, TheRealRocmSmiLoadsThroughTheSamePath) {
  ScopedEnv e;
  e.set("SCEPTRE_ROCM_SMI_LIBRARY", "/usr/lib/librocm_smi64.so.1");
  auto m = load_health(Vendor::kHip);
  if (m.ok()) {
    EXPECT_EQ((*m)->library().find("/gpu/fake/"), std::string::npos);
    return;
  }
  if (m.error().message().find("cannot open") != std::string::npos) GTEST_SKIP() << m.error().message();
  EXPECT_EQ(m.error().code(), Code::kUnavailable);
  EXPECT_EQ(m.error().message().rfind("rocm-smi: rsmi_init: ", 0), 0u) << m.error().message();
}

}  // namespace
}  // namespace sceptre::gpu
