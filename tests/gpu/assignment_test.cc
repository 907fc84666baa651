// Device assignment with real procs: spawn_procs({{"gpus", N}}) on a GPU host binds each proc to
// the GPU at its "gpus" coordinate and to the CPUs near it. The host's GPUs are the fake vendor
// library's (tests/gpu/fake, found through LD_LIBRARY_PATH, which the procs inherit), and the
// topology a fake sysfs tree (SCEPTRE_SYSFS). CTest runs this binary once per vendor, with
// SCEPTRE_GPU=cuda and with SCEPTRE_GPU=hip.
#include <sched.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <set>
#include <string>

#include <gtest/gtest.h>

#include "gpu/gpu_probe.h"

namespace {

using namespace std::chrono_literals;
using sceptre::testing::GpuProbe;
using sceptre::testing::GpuView;
constexpr auto kWait = 120s;

std::string bus(int host_device) {
  char b[16];
  std::snprintf(b, sizeof b, "0000:%02x:00.0", 0x10 + host_device);
  return b;
}

// The CPUs this process (and so each proc it starts) may run on.
std::set<int> allowed() {
  std::set<int> out;
  cpu_set_t set;
  if (::sched_getaffinity(0, sizeof set, &set) == 0) {
    for (int c = 0; c < CPU_SETSIZE; ++c) {
      if (CPU_ISSET(c, &set)) out.insert(c);
    }
  }
  return out;
}
std::string allowed_list() {
  std::string s;
  for (int c : allowed()) s += (s.empty() ? "" : ",") + std::to_string(c);
  return s;
}

bool is_cuda() { return sceptre::gpu::runtime().vendor() == sceptre::gpu::Vendor::kCuda; }

// What proc `rank` of a spawn should see when bound to host device `d`.
void expect_bound(const GpuView& v, int d, std::size_t rank) {
  SCOPED_TRACE("rank " + std::to_string(rank) + " on GPU " + std::to_string(d));
  EXPECT_EQ(v.vendor, is_cuda() ? "cuda" : "hip");
  EXPECT_EQ(v.devices, 1);  // its own, alone
  EXPECT_EQ(v.bus_id, bus(d));
  if (is_cuda()) {
    EXPECT_EQ(v.cuda_visible, std::to_string(d));
  } else {
    EXPECT_EQ(v.rocr_visible, std::to_string(d));
    EXPECT_EQ(v.hip_visible, "0");
  }
  EXPECT_EQ(v.cpus_env, std::to_string(d % 2));
  // Pinned near its device where this process may run there, else left as it was.
  EXPECT_EQ(v.cpus, allowed().count(d % 2) ? std::to_string(d % 2) : allowed_list());
}

TEST(Assignment, EachProcIsBoundToTheGpuAtItsCoordinate) {
  ASSERT_EQ(sceptre::gpu::runtime().device_count(), 8) << sceptre::gpu::why_none();
  const char* asked = std::getenv("SCEPTRE_GPU");  // CTest runs the suite with --gpu=cuda and --gpu=hip
  ASSERT_TRUE(asked);
  EXPECT_EQ(sceptre::gpu::vendor_name(sceptre::gpu::runtime().vendor()), asked);
  auto procs = sceptre::this_host().spawn_procs({{"gpus", 4}}, "bound");
  auto views = procs.spawn<GpuProbe>("probe").call<&GpuProbe::view>().get(kWait);
  ASSERT_EQ(views.size(), 4u);
  for (std::size_t r = 0; r < 4; ++r) expect_bound(views.at(r), static_cast<int>(r), r);
}

TEST(Assignment, TheCoordinateNotTheRankChoosesTheGpu) {
  auto procs = sceptre::this_host().spawn_procs({{"replicas", 2}, {"gpus", 3}}, "grid");
  auto views = procs.spawn<GpuProbe>("probe").call<&GpuProbe::view>().get(kWait);
  ASSERT_EQ(views.size(), 6u);
  for (std::size_t r = 0; r < 6; ++r) expect_bound(views.at(r), static_cast<int>(r % 3), r);
}

TEST(Assignment, MoreGpusThanTheHostHasIsAClearError) {
  try {
    sceptre::this_host().spawn_procs({{"gpus", 9}}, "greedy");
    FAIL() << "9 procs bound to 8 GPUs";
  } catch (const sceptre::CallError& e) {
    EXPECT_EQ(e.code(), sceptre::Code::kInvalidArgument) << e.what();
    EXPECT_NE(std::string(e.what()).find("has 8 GPUs"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("no GPU 8"), std::string::npos) << e.what();
  }
}

TEST(Assignment, HostAgentsBindTheProcsOfTheirHost) {
  auto hosts = sceptre::Runtime::current().launch_hosts(1);
  auto procs = hosts.spawn_procs({{"gpus", 2}}, "remote");
  auto views = procs.spawn<GpuProbe>("probe").call<&GpuProbe::view>().get(kWait);
  ASSERT_EQ(views.size(), 2u);
  for (std::size_t r = 0; r < 2; ++r) expect_bound(views.at(r), static_cast<int>(r), r);
  try {
    hosts.spawn_procs({{"gpus", 12}}, "remote-greedy");
    FAIL() << "12 procs bound to 8 GPUs";
  } catch (const sceptre::CallError& e) {
    EXPECT_EQ(e.code(), sceptre::Code::kInvalidArgument) << e.what();
    EXPECT_NE(std::string(e.what()).find("has 8 GPUs"), std::string::npos) << e.what();
  }
}

}  // namespace

