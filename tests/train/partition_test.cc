// Fault-tolerant training across hosts in network namespaces: two replicas on each of two
// hosts, and one host cut off from the others (its veth taken down, or a one-way drop of what
// is sent to it) in the middle of training. The replicas on the far side are lost (they cannot
// be replaced: their host is gone), the two on the near side go on training, and they hold the
// bits of a failure-free replay of the committed steps.
//
// Needs root and iproute2 (and nftables for the drop): main runs with Config::transport "netns"
// when it can, and the tests skip otherwise, saying why.
#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <thread>

#include "host/host_network.h"
#include "sceptre/sceptre.h"
#include "sceptre/train/ft_ddp.h"
#include "train/oracle.h"

namespace sceptre::train {
namespace {

bool netns() { return Runtime::current().config().transport == "netns"; }

void partition(const std::string& how) {
  if (!netns()) GTEST_SKIP() << "needs Config::transport netns (root, iproute2)";
  HostLaunch launch;
  launch.netns = true;
  std::atomic<int> hosts_lost{0};
  launch.on_failure = [&](const MeshFailure&) {  // the far host: its replicas are FtDdp's to handle
    ++hosts_lost;
    return Supervise::kHandled;
  };
  auto hosts = Runtime::current().launch_hosts(2, launch);
  auto procs = hosts.spawn_procs({{"replicas", 2}}, "partition");
  ASSERT_EQ(procs.size(), 4u);
  auto o = small(40);
  o.end_with_all_replicas = false;  // the far host does not come back
  FtDdp ddp(procs, o);
  ddp.on_event([](const Event& e) {  // for the log of a failing run
    std::printf("  event step %llu replica %zu: %s\n", static_cast<unsigned long long>(e.step), e.replica, e.what.c_str());
  });
  std::string table = "sceptre_partition_test_" + std::to_string(::getpid());
  bool cut = false;
  ddp.on_step([&](const StepRecord& r, std::size_t) {
    if (r.step != 10 || cut) return;
    cut = true;
    if (how == "link") {
      EXPECT_TRUE(host::run_command({"ip", "link", "set", hosts.link(1), "down"}).ok());
    } else {
      for (const auto& cmd : std::vector<std::vector<std::string>>{
               {"nft", "add", "table", "ip", table},
               {"nft", "add", "chain", "ip", table, "out", "{ type filter hook output priority 0 ; }"},
               {"nft", "add", "rule", "ip", table, "out", "ip", "daddr", hosts.address(1), "drop"}}) {
        Status s = host::run_command(cmd);
        EXPECT_TRUE(s.ok()) << s.error().to_string();
      }
    }
  });
  Summary s = ddp.run();
  if (how == "drop") (void)host::run_command({"nft", "delete", "table", "ip", table});
  EXPECT_TRUE(cut);
  EXPECT_GE(s.failures, 2u);
  // The far host's own loss is reported on its heartbeat, independently of its procs' (which
  // may come first and let the run end before it).
  for (auto until = std::chrono::steady_clock::now() + std::chrono::seconds(30);
       hosts_lost.load() == 0 && std::chrono::steady_clock::now() < until;)
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  EXPECT_EQ(hosts_lost.load(), 1);
  // Replicas 0 and 1 (host 0) took part in every committed step; 2 and 3 in none after the cut.
  for (auto& r : s.steps) {
    EXPECT_NE(std::find(r.members.begin(), r.members.end(), 0u), r.members.end());
    EXPECT_NE(std::find(r.members.begin(), r.members.end(), 1u), r.members.end());
  }
  EXPECT_EQ(s.steps.back().members.size(), 2u);
  EXPECT_EQ(s.digests.count(2) + s.digests.count(3), 0u);
  expect_oracle(o, s, 2);
  hosts.stop();
}

TEST(FtDdpPartition, AHostWhoseLinkGoesDownLosesItsReplicasAndTheOthersTrainOn) { partition("link"); }
TEST(FtDdpPartition, AHostCutOffOneWayLosesItsReplicasAndTheOthersTrainOn) { partition("drop"); }

}  // namespace
}  // namespace sceptre::train

int main(int argc, char** argv) {
  auto config = sceptre::Config::load();
  if (!config) return 2;
  if (!std::getenv("SCEPTRE_ROLE") && !std::getenv("SCEPTRE_TRANSPORT") && ::geteuid() == 0 &&
      sceptre::host::run_command({"ip", "-V"}).ok()) {
    config->transport = "netns";
  }
  if (!std::getenv("SCEPTRE_HEARTBEAT_TIMEOUT")) config->heartbeat_timeout = std::chrono::seconds(3);
  sceptre::Runtime runtime(argc, argv, *config);
  ::testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}
