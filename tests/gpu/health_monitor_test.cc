// gpu::HealthMonitor against the fake NVML and ROCm SMI (tests/gpu/fake), found through
// LD_LIBRARY_PATH as the real ones would be, with faults written to their fault file
// (real_libraries_test.cc has the real ones).
#include <unistd.h>

#include <cstdio>
#include <fstream>

#include <gtest/gtest.h>

#include "gpu/scoped_env.h"
#include "sceptre/gpu/health.h"

namespace sceptre::gpu {
namespace {

using testing::ScopedEnv;

std::string bus(int d) {
  char b[16];
  std::snprintf(b, sizeof b, "0000:%02x:00.0", 0x10 + d);
  return b;
}

class HealthTest : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/sceptre-faults-XXXXXX";
    const int fd = ::mkstemp(tmpl);
    ASSERT_GE(fd, 0);
    ::close(fd);
    file_ = tmpl;
    env_.set("SCEPTRE_FAKE_GPU_FAULTS", file_).set("SCEPTRE_FAKE_GPU_COUNT", std::nullopt);
    env_.set("SCEPTRE_NVML_LIBRARY", std::nullopt).set("SCEPTRE_ROCM_SMI_LIBRARY", std::nullopt);
  }
  void TearDown() override { ::unlink(file_.c_str()); }
  void inject(const std::string& lines) { std::ofstream(file_) << lines; }
  Vendor vendor() const { return GetParam() == "cuda" ? Vendor::kCuda : Vendor::kHip; }
  std::unique_ptr<HealthMonitor> must_load() {
    auto m = load_health(vendor(), 3);
    if (!m) ADD_FAILURE() << m.error().to_string();
    return m ? std::move(*m) : nullptr;
  }
  ScopedEnv env_;
  std::string file_;
};

TEST_P(HealthTest, HealthyDevicesHaveNoFaults) {
  auto m = must_load();
  ASSERT_TRUE(m);
  EXPECT_NE(m->library().find("/gpu/fake/"), std::string::npos) << m->library();
  EXPECT_TRUE(m->poll({bus(0), bus(3), bus(7)}).empty());
}

TEST_P(HealthTest, EccErrorsAndALostDeviceAreFaultsOfThoseDevicesOnly) {
  auto m = must_load();
  ASSERT_TRUE(m);
  inject("3 ecc 1\n5 lost\n");
  auto faults = m->poll({bus(0), bus(3), bus(5)});
  ASSERT_EQ(faults.size(), 2u);
  EXPECT_EQ(faults[0].pci_bus_id, bus(3));
  EXPECT_EQ(faults[0].what, "1 uncorrectable ECC error");
  EXPECT_EQ(faults[1].pci_bus_id, bus(5));
  EXPECT_EQ(faults[1].what.rfind("lost from the bus", 0), 0u) << faults[1].what;
  inject("");
  EXPECT_TRUE(m->poll({bus(0), bus(3), bus(5)}).empty());  // the fake's counters, like a reset GPU's
}

TEST_P(HealthTest, ADeviceTheLibraryDoesNotKnowIsAFault) {
  auto m = must_load();
  ASSERT_TRUE(m);
  auto faults = m->poll({"0000:99:00.0"});
  ASSERT_EQ(faults.size(), 1u);
  EXPECT_EQ(faults[0].pci_bus_id, "0000:99:00.0");
}

TEST_P(HealthTest, NvidiaAlsoReportsRetiredPagesAndThrottlingThatLasts) {
  if (vendor() != Vendor::kCuda) GTEST_SKIP() << "NVML's, not ROCm SMI's";
  auto m = must_load();
  ASSERT_TRUE(m);
  inject("1 pending\n2 throttle\n");
  auto first = m->poll({bus(1), bus(2)});
  ASSERT_EQ(first.size(), 1u);  // throttling is not a fault on one poll ...
  EXPECT_EQ(first[0].what, "memory pages retired, pending a reset of the GPU");
  EXPECT_EQ(m->poll({bus(2)}).size(), 0u);
  auto third = m->poll({bus(2)});  // ... but on 3 in a row
  ASSERT_EQ(third.size(), 1u);
  EXPECT_EQ(third[0].what, "throttled by the hardware (thermal) on 3 polls in a row");
  inject("");
  EXPECT_TRUE(m->poll({bus(2)}).empty());
  inject("2 throttle\n");
  EXPECT_TRUE(m->poll({bus(2)}).empty());  // counted again from the start
}

TEST_P(HealthTest, AMonitorThatIsNotViableSaysWhy) {
  ScopedEnv e;
  e.set(vendor() == Vendor::kCuda ? "SCEPTRE_NVML_LIBRARY" : "SCEPTRE_ROCM_SMI_LIBRARY", "/nonexistent/libsmi.so");
  auto m = load_health(vendor());
  ASSERT_FALSE(m.ok());
  EXPECT_EQ(m.error().code(), Code::kUnavailable);
  EXPECT_NE(m.error().message().find("/nonexistent/libsmi.so"), std::string::npos) << m.error().message();
  EXPECT_EQ(load_health(Vendor::kNone).error().code(), Code::kInvalidArgument);
}

INSTANTIATE_TEST_SUITE_P(Vendors, HealthTest, ::testing::Values("cuda", "hip"),
                         [](const auto& info) { return info.param; });

}  // namespace
}  // namespace sceptre::gpu
