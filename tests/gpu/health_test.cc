// GPU health reaching supervision, with real procs: a GPU whose (fake) NVML or ROCm SMI starts
// reporting a fault mid-run has the procs bound to it killed by their host, and each one's
// failure says which GPU failed and how; the procs on healthy GPUs go on. Faults are injected
// through the fakes' fault file (tests/gpu/fake/fake_gpus.h). CTest runs it once per vendor.
#include <chrono>
#include <condition_variable>
#include <fstream>
#include <mutex>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "gpu/gpu_probe.h"

namespace {

using namespace std::chrono_literals;
using sceptre::MeshFailure;
using sceptre::Supervise;
using sceptre::testing::GpuProbe;
constexpr auto kWait = 120s;

class Failures {
 public:
  sceptre::FailureHandler handler() {
    return [this](const MeshFailure& f) {
      std::lock_guard lock(mu_);
      got_.push_back(f);
      cv_.notify_all();
      return Supervise::kHandled;
    };
  }
  std::vector<MeshFailure> wait_for(std::size_t n) {
    std::unique_lock lock(mu_);
    cv_.wait_for(lock, kWait, [&] { return got_.size() >= n; });
    return got_;
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  std::vector<MeshFailure> got_;
};

// Writes the fault file (all faults at once; "" clears them) and clears it at the end.
class Inject {
 public:
  explicit Inject(const std::string& lines) { std::ofstream(sceptre::testing::faults_file()) << lines; }
  ~Inject() { std::ofstream(sceptre::testing::faults_file()).flush(); }
};

std::string joined(const std::vector<std::string>& lines) {
  std::string out;
  for (const auto& l : lines) out += l + "\n";
  return out;
}

// Spawns 4 procs on `hosts` (the controller's own host when empty), fails GPU `rank_of_gpu` with
// `fault` and checks that its proc, alone, fails saying so.
void expect_gpu_failure(const std::string& fault, const std::string& says, std::size_t rank_of_gpu,
                        const sceptre::HostMesh& hosts = sceptre::this_host()) {
  Failures failures;
  auto procs = hosts.spawn_procs({{"gpus", 4}}, "watched", failures.handler());
  auto probes = procs.spawn<GpuProbe>("probe");
  ASSERT_EQ(probes.call<&GpuProbe::view>().get(kWait).size(), 4u);
  Inject inject(std::to_string(rank_of_gpu) + " " + fault + "\n");
  auto got = failures.wait_for(1);
  ASSERT_EQ(got.size(), 1u) << "no failure after the GPU's fault";
  const MeshFailure& f = got[0];
  EXPECT_EQ(f.rank, rank_of_gpu);
  EXPECT_EQ(f.cause, sceptre::FailureCause::kKilled) << f.to_string();
  ASSERT_FALSE(f.last_lines.empty()) << f.to_string();
  const std::string& last = f.last_lines.back();
  char bus[16];
  std::snprintf(bus, sizeof bus, "0000:%02zx:00.0", 0x10 + rank_of_gpu);
  EXPECT_NE(last.find(std::string("its GPU ") + bus + " failed: " + says), std::string::npos) << joined(f.last_lines);
  // The others are on healthy GPUs: they answer, and nobody else failed.
  for (std::size_t r = 0; r < 4; ++r) {
    if (r != rank_of_gpu) {
      EXPECT_EQ(probes.slice("gpus", r).call<&GpuProbe::view>().get(kWait).size(), 1u);
    }
  }
  EXPECT_EQ(failures.wait_for(0).size(), 1u);
}

TEST(Health, AnUncorrectableEccErrorTakesOutTheProcOnThatGpu) {
  expect_gpu_failure("ecc 2", "2 uncorrectable ECC errors", 2);
}

TEST(Health, AGpuLostFromTheBusTakesOutItsProc) { expect_gpu_failure("lost", "lost from the bus", 1); }

TEST(Health, AHostAgentWatchesTheGpusOfItsProcsToo) {
  auto hosts = sceptre::Runtime::current().launch_hosts(1);
  expect_gpu_failure("ecc 1", "1 uncorrectable ECC error", 1, hosts);
}

TEST(Health, RetiredPagesAndLastingThrottlingAreFaultsOnNvidia) {
  if (sceptre::gpu::runtime().vendor() != sceptre::gpu::Vendor::kCuda) GTEST_SKIP() << "NVML's, not ROCm SMI's";
  expect_gpu_failure("pending", "memory pages retired, pending a reset", 3);
  expect_gpu_failure("throttle", "throttled by the hardware (thermal) on 3 polls in a row", 0);
}

}  // namespace
