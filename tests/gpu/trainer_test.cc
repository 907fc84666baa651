// The fault-tolerant trainer on a (fake) GPU host: which collective it chooses, training with
// NCCL between real procs each bound to its own GPU, and a failed member's peers aborted by the
// controller at once instead of at their collectives' deadline. The procs' libtorch is Debian's
// CPU one, so their models are on the CPU and "nccl" stages the gradients through the fake
// devices' memory; the fake NCCL (tests/gpu/fake/fake_nccl.cc) sums them. CTest runs it once per
// vendor (NCCL, RCCL).
#include <sys/stat.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <regex>
#include <set>
#include <string>
#include <thread>

#include <gtest/gtest.h>

#include "sceptre/gpu/runtime.h"
#include "sceptre/sceptre.h"
#include "sceptre/train/ft_ddp.h"
#include "sceptre/train/replica_core.h"

namespace sceptre::testing {
namespace {

using namespace std::chrono_literals;

train::TrainOptions small(std::uint64_t steps) {
  train::TrainOptions o;
  o.model = {.inputs = 8, .hidden = 16, .classes = 4, .seed = 3};
  o.steps = steps;
  o.batch = 16;
  o.collective_timeout = 30s;  // generous: procs of busy sanitizer builds
  o.rendezvous_timeout = 60s;
  o.step_timeout = 120s;
  o.end_with_all_replicas = true;
  return o;
}

std::string expected_device() { return train::ReplicaCore::gpu_available() ? "cuda:0" : "cpu"; }
std::string vendor_nccl() { return gpu::runtime().vendor() == gpu::Vendor::kHip ? "rccl" : "nccl"; }

void expect_replicas_agree(const train::Summary& s, std::size_t replicas) {
  ASSERT_EQ(s.digests.size(), replicas);
  std::set<std::uint64_t> distinct;
  for (auto& [r, d] : s.digests) distinct.insert(d);
  EXPECT_EQ(distinct.size(), 1u) << "the live replicas differ";
}

TEST(TrainerOnGpuHost, AutoSumsWithGlooWhenTheModelIsOnTheCpu) {
  if (train::ReplicaCore::gpu_available()) GTEST_SKIP() << "this libtorch sees a GPU: auto picks NCCL";
  auto procs = sceptre::this_host().spawn_procs({{"gpus", 2}}, "train-auto");
  train::FtDdp ddp(procs, small(4));
  auto s = ddp.run();
  EXPECT_EQ(s.committed, 4u);
  EXPECT_EQ(s.device, "cpu");
  EXPECT_EQ(s.collective, "gloo");
  expect_replicas_agree(s, 2);
}

TEST(TrainerOnGpuHost, TrainsWithNcclOverProcsEachOnItsGpu) {
  auto procs = sceptre::this_host().spawn_procs({{"gpus", 3}}, "train-nccl");
  auto o = small(6);
  o.collective = "nccl";
  train::FtDdp ddp(procs, o);
  auto s = ddp.run();
  EXPECT_EQ(s.committed, 6u);
  EXPECT_EQ(s.device, expected_device());
  EXPECT_EQ(s.collective, vendor_nccl());
  EXPECT_EQ(s.failures, 0u);
  expect_replicas_agree(s, 3);
}

TEST(TrainerOnGpuHost, ABadChoiceOfDeviceOrCollectiveIsAClearError) {
  auto procs = sceptre::this_host().spawn_procs({{"gpus", 1}}, "train-bad");
  auto o = small(1);
  o.collective = "mpi";
  try {
    train::FtDdp ddp(procs, o);
    ADD_FAILURE() << "no error";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("TrainOptions::collective is \"mpi\", not one of auto, gloo, nccl"),
              std::string::npos)
        << e.what();
  }
}

// Whether some communicator folder under `dir` has the allreduce of ranks 0 and 1 and not of 2:
// both are waiting for rank 2.
bool waiting_for_rank_2(const std::string& dir) {
  std::error_code ec;
  for (auto& d : std::filesystem::directory_iterator(dir, ec)) {
    std::set<int> ranks;
    std::error_code inner;
    for (auto& f : std::filesystem::directory_iterator(d.path(), inner)) {
      std::smatch m;
      std::string name = f.path().filename().string();
      if (std::regex_match(name, m, std::regex("op-[0-9]+-([0-9]+)"))) ranks.insert(std::stoi(m[1]));
    }
    if (ranks == std::set<int>{0, 1}) return true;
  }
  return false;
}

TEST(TrainerOnGpuHost, AFailedMemberAbortsItsPeersCollectivesAtOnce) {
  // Rank 2's collectives never arrive (a member stuck on its GPU); the test kills it while
  // ranks 0 and 1 wait for it in their allreduce. Their collectives' deadline is 90 s: they
  // end sooner only because the controller, told of the failure, aborts them.
  const std::string root = std::string(std::getenv("SCEPTRE_FAKE_NCCL_DIR"));
  const std::string dir = root + "/abort-test";
  ::mkdir(dir.c_str(), 0755);
  ::setenv("SCEPTRE_FAKE_NCCL_DIR", dir.c_str(), 1);  // the procs inherit both
  ::setenv("SCEPTRE_FAKE_NCCL_HANG_RANK", "2", 1);
  auto procs = sceptre::this_host().spawn_procs({{"gpus", 3}}, "train-abort");
  ::unsetenv("SCEPTRE_FAKE_NCCL_HANG_RANK");
  ::setenv("SCEPTRE_FAKE_NCCL_DIR", root.c_str(), 1);

  auto o = small(3);
  o.collective = "nccl";
  o.collective_timeout = 90s;
  o.step_timeout = 600s;
  o.respawn = false;
  o.end_with_all_replicas = false;
  train::FtDdp ddp(procs, o);
  std::thread killer([&] {
    const auto give_up = std::chrono::steady_clock::now() + 120s;
    while (!waiting_for_rank_2(dir) && std::chrono::steady_clock::now() < give_up) std::this_thread::sleep_for(20ms);
    ::kill(procs.pid(2), SIGKILL);
  });
  const auto t0 = std::chrono::steady_clock::now();
  auto s = ddp.run();
  const auto took = std::chrono::steady_clock::now() - t0;
  killer.join();

  EXPECT_EQ(s.committed, 3u);
  EXPECT_LT(took, 60s);  // well below the collectives' deadline
  bool aborted = false;
  std::string events;
  for (auto& e : s.events) {
    events += "\n  " + e.what;
    if ((e.kind == train::Event::Kind::kRetried && e.what.find("aborted: replica 2 failed") != std::string::npos) ||
        e.kind == train::Event::Kind::kRegrouped) {
      aborted = true;
    }
  }
  EXPECT_TRUE(aborted) << "no step was discarded or re-formed at the controller's abort; the events:" << events;
  EXPECT_EQ(s.steps.front().members, (std::vector<std::size_t>{0, 1}));
  expect_replicas_agree(s, 2);
}

}  // namespace
}  // namespace sceptre::testing
