// Launched hosts: host agents as processes of their own (Runtime::launch_hosts), procs spawned on
// them, and what becomes of the procs when a proc or a whole host fails — killed, frozen, cut
// off by its veth or by a one-way drop. The binary is its own proc image and host agent image.
//
// Hosts in network namespaces need root, iproute2 and (for the drop) nftables: main runs with
// Config::transport "netns" when it can make the bridge, and those tests skip otherwise (with why).
#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <condition_variable>
#include <cstdlib>
#include <mutex>
#include <set>

#include "host/host_network.h"
#include "mesh/mesh_actors.h"
#include "mesh/proc_util.h"

namespace sceptre::testing {
namespace {

using Clock = std::chrono::steady_clock;

// The failures a handler saw.
struct Seen {
  std::mutex mu;
  std::condition_variable cv;
  std::vector<MeshFailure> failures;

  FailureHandler handler() {
    return [this](const MeshFailure& f) {
      std::lock_guard lock(mu);
      failures.push_back(f);
      cv.notify_all();
      return Supervise::kHandled;
    };
  }
  // Waits until `pred` holds of what was seen, up to `limit`.
  template <class P>
  bool wait(P pred, std::chrono::seconds limit = 30s) {
    std::unique_lock lock(mu);
    return cv.wait_for(lock, limit, [&] { return pred(failures); });
  }
  std::vector<MeshFailure> all() {
    std::lock_guard lock(mu);
    return failures;
  }
};

std::string joined(const std::vector<std::string>& lines) {
  std::string all;
  for (const auto& l : lines) all += l + "\n";
  return all;
}

bool netns() { return Runtime::current().config().transport == "netns"; }

TEST(Hosts, ProcsRunOnTheirHostsAgentsWithHostLocalRanks) {
  auto hosts = Runtime::current().launch_hosts(2);
  EXPECT_EQ(hosts.extent().to_string(), Extent({{"hosts", 2}}).to_string());
  auto procs = hosts.spawn_procs({{"gpus", 2}}, "placed");
  EXPECT_EQ(procs.extent().to_string(), Extent({{"hosts", 2}, {"gpus", 2}}).to_string());
  auto probes = procs.spawn<Probe>("probe");
  auto host_ids = probes.call<&Probe::env>(std::string("SCEPTRE_HOST_ID")).get(60s);
  auto local = probes.call<&Probe::env>(std::string("LOCAL_RANK")).get(60s);
  auto world = probes.call<&Probe::env>(std::string("WORLD_SIZE")).get(60s);
  EXPECT_EQ(host_ids.at(0), host_ids.at(1));
  EXPECT_EQ(host_ids.at(2), host_ids.at(3));
  EXPECT_NE(host_ids.at(0), host_ids.at(2));
  EXPECT_EQ(local.at(0), "0");
  EXPECT_EQ(local.at(1), "1");
  EXPECT_EQ(local.at(3), "1");
  EXPECT_EQ(world.at(3), "4");
  // The procs are the agents' children, not the controller's.
  for (std::size_t r = 0; r < procs.size(); ++r) {
    std::ifstream stat("/proc/" + std::to_string(procs.pid(r)) + "/stat");
    std::string line;
    std::getline(stat, line);
    std::istringstream rest(line.substr(line.rfind(')') + 2));
    char state;
    pid_t ppid = 0;
    rest >> state >> ppid;
    EXPECT_EQ(ppid, hosts.agents().pid(r / 2)) << "rank " << r;
  }
  EXPECT_EQ(probes.sum<&Probe::rank_times>(std::int64_t{1}).get(60s), 0 + 1 + 2 + 3);
  std::vector<pid_t> pids;
  for (std::size_t r = 0; r < procs.size(); ++r) pids.push_back(procs.pid(r));
  for (std::size_t k = 0; k < 2; ++k) pids.push_back(hosts.agents().pid(k));
  hosts.stop();
  EXPECT_TRUE(gone_within(pids, 30s));
}

TEST(Hosts, AProcKilledOnAHostIsReportedByItsAgentWithItsHost) {
  Seen seen;
  auto hosts = Runtime::current().launch_hosts(2);
  auto procs = hosts.spawn_procs({{"gpus", 2}}, "reaped", seen.handler());
  auto probes = procs.spawn<Probe>("probe");
  (void)probes.call<&Probe::whoami>().get(60s);
  ::kill(procs.pid(3), SIGKILL);
  ASSERT_TRUE(seen.wait([](auto& f) { return !f.empty(); }));
  auto f = seen.all().at(0);
  EXPECT_EQ(f.rank, 3u);
  EXPECT_EQ(f.cause, FailureCause::kKilled);
  EXPECT_EQ(f.signal, SIGKILL);
  EXPECT_NE(f.host.find("host 1"), std::string::npos) << f.host;
  // The rest of the mesh still works, through a slice without the failed rank.
  EXPECT_EQ(probes.slice("hosts", 0).call<&Probe::whoami>().get(60s).size(), 2u);
  // A killed rank's host takes it back.
  procs.respawn({3});
  EXPECT_TRUE(procs.failed_ranks().empty());
  EXPECT_EQ(probes.sum<&Probe::rank_times>(std::int64_t{1}).get(60s), 6);
  hosts.stop();
}

TEST(Hosts, AHostWhoseAgentDiesTakesItsProcsWithIt) {
  Seen proc_failures, host_failures;
  HostLaunch how;
  how.on_failure = host_failures.handler();
  auto hosts = Runtime::current().launch_hosts(2, how);
  auto procs = hosts.spawn_procs({{"gpus", 2}}, "orphaned", proc_failures.handler());
  auto probes = procs.spawn<Probe>("probe");
  (void)probes.call<&Probe::whoami>().get(60s);
  const pid_t victims[] = {procs.pid(0), procs.pid(1)};
  ::kill(hosts.agents().pid(0), SIGKILL);
  ASSERT_TRUE(host_failures.wait([](auto& f) { return !f.empty(); }));
  EXPECT_EQ(host_failures.all().at(0).cause, FailureCause::kKilled);
  ASSERT_TRUE(proc_failures.wait([](auto& f) { return f.size() >= 2; }));
  std::set<std::size_t> ranks;
  for (const auto& f : proc_failures.all()) {
    ranks.insert(f.rank);
    EXPECT_EQ(f.cause, FailureCause::kHostLost) << f.summary();
  }
  EXPECT_EQ(ranks, (std::set<std::size_t>{0, 1}));
  // Their lifelines were the agent's: they end with it.
  EXPECT_TRUE(gone_within({victims[0], victims[1]}, 30s));
  EXPECT_EQ(probes.slice("hosts", 1).call<&Probe::whoami>().get(60s).size(), 2u);
  hosts.stop();
}

// `sceptre host` is an agent's entry point: the launcher runs the binary through it.
TEST(Hosts, AnAgentCanBeStartedThroughTheSceptreHostCommand) {
  HostLaunch how;
  how.agent_command = {SCEPTRE_TOOL, "host", "--"};
  auto hosts = Runtime::current().launch_hosts(1, how);
  auto procs = hosts.spawn_procs({{"gpus", 2}}, "via_tool");
  EXPECT_EQ(procs.spawn<Probe>("probe").sum<&Probe::rank_times>(std::int64_t{1}).get(60s), 1);
  hosts.stop();
}

TEST(Hosts, AnAgentCommandThatCannotRunFailsTheLaunchNamingIt) {
  HostLaunch how;
  how.agent_command = {"/nonexistent/sceptre", "host", "--"};
  try {
    (void)Runtime::current().launch_hosts(1, how);
    FAIL() << "launched";
  } catch (const CallError& e) {
    EXPECT_NE(std::string(e.what()).find("/nonexistent/sceptre"), std::string::npos) << e.what();
  }
}

TEST(Hosts, TheSceptreHostCommandRefusesToRunWithoutALauncher) {
  Child c = run_program({SCEPTRE_TOOL, "host", "--", "/bin/true"}, {}, /*merge_stderr=*/true);
  auto lines = read_all_lines(c.out);
  std::fclose(c.out);
  const int status = wait_child(c.pid);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 2) << status;
  EXPECT_NE(joined(lines).find("not started by a sceptre launcher: SCEPTRE_BOOT"), std::string::npos) << joined(lines);
}

// A fault of host 1 of two: the host (its agent, and its procs) must fail, host 0 must not.
void cut_off(const std::string& how) {
  if (!netns()) GTEST_SKIP() << "needs Config::transport netns (root, iproute2)";
  Seen proc_failures, host_failures;
  HostLaunch launch;
  launch.netns = true;
  launch.on_failure = host_failures.handler();
  auto hosts = Runtime::current().launch_hosts(2, launch);
  ASSERT_EQ(hosts.address(1).rfind("10.213.", 0), 0u) << hosts.address(1);
  auto procs = hosts.spawn_procs({{"gpus", 2}}, "cut", proc_failures.handler());
  EXPECT_EQ(procs.proc(2).addr.rfind("tcp:" + hosts.address(1) + ":", 0), 0u) << procs.proc(2).addr;
  auto probes = procs.spawn<Probe>("probe");
  // Casts relay through procs of both hosts (fan-out 2): they reach each other across the bridge.
  EXPECT_EQ(probes.sum<&Probe::rank_times>(std::int64_t{1}).get(60s), 6);
  std::string table = "sceptre_hosts_test_" + std::to_string(::getpid());
  const auto t0 = Clock::now();
  if (how == "link") {
    ASSERT_TRUE(host::run_command({"ip", "link", "set", hosts.link(1), "down"}).ok());
  } else if (how == "drop") {
    for (const auto& cmd : std::vector<std::vector<std::string>>{
             {"nft", "add", "table", "ip", table},
             {"nft", "add", "chain", "ip", table, "out", "{ type filter hook output priority 0 ; }"},
             {"nft", "add", "rule", "ip", table, "out", "ip", "daddr", hosts.address(1), "drop"}}) {
      Status s = host::run_command(cmd);
      ASSERT_TRUE(s.ok()) << s.error().to_string();
    }
  } else {
    ::kill(hosts.agents().pid(1), SIGSTOP);
  }
  ASSERT_TRUE(proc_failures.wait([](auto& f) { return f.size() >= 2; }));
  ASSERT_TRUE(host_failures.wait([](auto& f) { return !f.empty(); }));
  const auto limit = Runtime::current().config().heartbeat_timeout * 4;
  for (const auto& f : proc_failures.all()) {
    EXPECT_GE(f.rank, 2u) << f.summary();
    EXPECT_TRUE(f.cause == FailureCause::kHeartbeatLost || f.cause == FailureCause::kHostLost) << f.summary();
    EXPECT_LT(f.when - t0, limit) << f.summary();
  }
  for (const auto& f : host_failures.all()) {
    EXPECT_EQ(f.rank, 1u) << f.summary();
    EXPECT_EQ(f.cause, FailureCause::kHeartbeatLost) << f.summary();
  }
  // (Whether a one-way drop is named as such depends on which comes first: the heartbeats that
  // still arrive reporting that nothing is acknowledged, or their end once TCP backs off.)
  if (how == "drop") (void)host::run_command({"nft", "delete", "table", "ip", table});
  for (const auto& f : host_failures.all()) std::printf("  %s\n", f.summary().c_str());
  for (const auto& f : proc_failures.all()) std::printf("  %s\n", f.summary().c_str());
  EXPECT_EQ(probes.slice("hosts", 0).call<&Probe::whoami>().get(60s).size(), 2u);
  std::vector<pid_t> pids;
  for (std::size_t r = 0; r < procs.size(); ++r) pids.push_back(procs.pid(r));
  for (std::size_t k = 0; k < 2; ++k) pids.push_back(hosts.agents().pid(k));
  hosts.stop();
  EXPECT_TRUE(gone_within(pids, 30s));
}

TEST(HostsInNamespaces, AHostWhoseLinkGoesDownIsLost) { cut_off("link"); }
TEST(HostsInNamespaces, AHostCutOffOneWayIsLost) { cut_off("drop"); }
TEST(HostsInNamespaces, AHostWhoseAgentIsFrozenIsLost) { cut_off("sigstop"); }

TEST(HostsInNamespaces, NamespacedHostsNeedTheNetnsTransport) {
  if (netns()) GTEST_SKIP() << "runs where the transport is not netns";
  HostLaunch how;
  how.netns = true;
  try {
    (void)Runtime::current().launch_hosts(1, how);
    FAIL() << "launched";
  } catch (const CallError& e) {
    EXPECT_NE(std::string(e.what()).find("netns"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace sceptre::testing

int main(int argc, char** argv) {
  auto config = sceptre::Config::load();
  if (!config) {
    std::fprintf(stderr, "%s\n", config.error().to_string().c_str());
    return 2;
  }
  if (!std::getenv("SCEPTRE_ROLE") && !std::getenv("SCEPTRE_TRANSPORT") && ::geteuid() == 0 &&
      sceptre::host::run_command({"ip", "-V"}).ok()) {
    config->transport = "netns";
  }
  // Sanitizer builds on 2 busy cores: a generous silence before a proc is declared lost.
  if (!std::getenv("SCEPTRE_HEARTBEAT_TIMEOUT")) config->heartbeat_timeout = std::chrono::seconds(3);
  sceptre::Runtime runtime(argc, argv, *config);
  ::testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}
