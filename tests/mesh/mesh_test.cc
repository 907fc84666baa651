// Meshes over real procs: bootstrap and environment, every adverb, slices and the ranks their
// members see, reductions in the tree, order through casts, errors, logs, stop and orphans.
// The runtime's cast fan-out is 2 here (see main.cc), so casts go through trees of several levels.
#include <gtest/gtest.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <fstream>
#include <numeric>
#include <set>
#include <sstream>

#include "mesh/mesh_actors.h"
#include "mesh/proc_util.h"

extern char** environ;

namespace sceptre::testing {
namespace {

using namespace std::chrono_literals;

constexpr auto kWait = std::chrono::seconds(120);  // generous: sanitizer builds on 2 cores

// --- bootstrap -------------------------------------------------------------------------------------

TEST(Procs, EveryProcHasItsRankAndTheVariablesATorchUserExpects) {
  auto procs = this_host().spawn_procs({{"gpus", 4}});
  EXPECT_EQ(procs.size(), 4u);
  EXPECT_EQ(procs.extent().to_string(), "{gpus=4}");
  auto probes = procs.spawn<Probe>("probe");
  auto env = [&](const char* name) { return probes.call<&Probe::env>(std::string(name)).get(kWait); };
  auto rank = env("RANK"), local = env("LOCAL_RANK"), world = env("WORLD_SIZE"), lworld = env("LOCAL_WORLD_SIZE");
  auto addr = env("MASTER_ADDR"), port = env("MASTER_PORT"), srank = env("SCEPTRE_RANK"), mesh = env("SCEPTRE_MESH");
  auto role = env("SCEPTRE_ROLE"), fanout = env("SCEPTRE_CAST_FANOUT"), config = env("SCEPTRE_CONFIG");
  for (std::size_t r = 0; r < 4; ++r) {
    EXPECT_EQ(rank.at(r), std::to_string(r));
    EXPECT_EQ(local.at(r), std::to_string(r));
    EXPECT_EQ(srank.at(r), std::to_string(r));
    EXPECT_EQ(world.at(r), "4");
    EXPECT_EQ(lworld.at(r), "4");
    EXPECT_EQ(addr.at(r), "127.0.0.1");
    EXPECT_EQ(port.at(r), port.at(0));
    EXPECT_EQ(mesh.at(r), "procs");
    EXPECT_EQ(role.at(r), "proc");
    // The controller's effective configuration travels whole.
    auto c = Config::from_json(config.at(r));
    ASSERT_TRUE(c.ok()) << config.at(r);
    EXPECT_EQ(*c, Runtime::current().config());
  }
  EXPECT_GT(std::stoi(port.at(0)), 0);
  // Each member is its own process, and the controller knows which.
  auto who = probes.call<&Probe::whoami>().get(kWait);
  std::set<std::int64_t> pids;
  for (std::size_t r = 0; r < 4; ++r) {
    pids.insert(who.at(r).pid);
    EXPECT_EQ(who.at(r).pid, procs.pid(r));
    EXPECT_NE(who.at(r).pid, ::getpid());
  }
  EXPECT_EQ(pids.size(), 4u);
}

// Procs of the binary are forked from a zygote (Config::proc_zygote, on by default): each has the
// environment it was given, and is the controller's child like one executed afresh, so that its
// end is reaped and reported the same way.
TEST(Procs, ProcsAreForkedFromAZygoteAsChildrenOfTheController) {
  auto procs = this_host().spawn_procs({{"gpus", 3}}, "forked");
  procs.on_failure([](const MeshFailure&) { return Supervise::kHandled; });
  auto probes = procs.spawn<Probe>("probe");
  auto from = probes.call<&Probe::env>(std::string("SCEPTRE_FORKED_FROM")).get(kWait);
  auto rank = probes.call<&Probe::env>(std::string("SCEPTRE_RANK")).get(kWait);
  for (std::size_t r = 0; r < 3; ++r) {
    EXPECT_NE(from.at(r), "<unset>") << "rank " << r << " was not forked from a zygote";
    EXPECT_EQ(from.at(r), from.at(0)) << "one zygote per host";
    EXPECT_EQ(rank.at(r), std::to_string(r));
    std::ifstream stat("/proc/" + std::to_string(procs.pid(r)) + "/stat");
    std::string pid, comm, state;
    long ppid = 0;
    stat >> pid >> comm >> state >> ppid;
    EXPECT_EQ(ppid, ::getpid()) << "rank " << r << " is not the controller's child";
  }
  ::kill(procs.pid(1), SIGKILL);
  auto deadline = std::chrono::steady_clock::now() + kWait;
  while (procs.failed_ranks().empty() && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  ASSERT_EQ(procs.failed_ranks(), std::vector<std::size_t>{1});
  EXPECT_NE(procs.failure(1)->summary().find("killed by signal 9"), std::string::npos) << procs.failure(1)->summary();
}

// A variable that a library may read when it is loaded cannot reach a forked proc: a proc whose
// environment has one the controller did not start with is executed afresh, and gets it.
TEST(Procs, AProcWithAnEnvironmentOfItsOwnIsExecutedAfresh) {
  ::setenv("MESH_TEST_LOADED_WITH", "this value", 1);
  auto procs = this_host().spawn_procs({{"gpus", 2}}, "fresh");
  ::unsetenv("MESH_TEST_LOADED_WITH");
  auto probes = procs.spawn<Probe>("probe");
  auto from = probes.call<&Probe::env>(std::string("SCEPTRE_FORKED_FROM")).get(kWait);
  auto value = probes.call<&Probe::env>(std::string("MESH_TEST_LOADED_WITH")).get(kWait);
  for (std::size_t r = 0; r < 2; ++r) {
    EXPECT_EQ(from.at(r), "<unset>") << "rank " << r;
    EXPECT_EQ(value.at(r), "this value") << "rank " << r;
  }
}

TEST(Procs, AProcThatFailsToStartIsNamedWithItsExitAndStderrTail) {
  ::setenv("MESH_TEST_FAIL_RANK", "2", 1);
  std::string what;
  try {
    this_host().spawn_procs({{"gpus", 4}}, "doomed");
  } catch (const CallError& e) {
    what = e.what();
  }
  ::unsetenv("MESH_TEST_FAIL_RANK");
  EXPECT_NE(what.find("'doomed'"), std::string::npos) << what;
  EXPECT_NE(what.find("rank 2 {gpus=2}"), std::string::npos) << what;
  EXPECT_NE(what.find("exit code 3"), std::string::npos) << what;
  EXPECT_NE(what.find("first line of a failing start"), std::string::npos) << what;
  EXPECT_NE(what.find("rank 2 refuses to start"), std::string::npos) << what;
  // And the mesh still works afterwards.
  auto procs = this_host().spawn_procs({{"gpus", 2}});
  EXPECT_EQ(procs.spawn<Probe>("probe").call<&Probe::whoami>().get(kWait).size(), 2u);
}

TEST(Procs, ASpawnThatFailsNamesTheMember) {
  auto procs = this_host().spawn_procs({{"gpus", 2}});
  // A bad actor name, which every proc refuses.
  std::string what;
  try {
    procs.spawn<Probe>("bad/name", std::int64_t{1});
  } catch (const CallError& e) {
    what = e.what();
  }
  EXPECT_NE(what.find("spawning 'bad/name' on rank 0"), std::string::npos) << what;
}

TEST(Procs, StopEndsEveryProcAndAMeshGoneOutOfScopeDoesToo) {
  std::vector<pid_t> pids;
  {
    auto procs = this_host().spawn_procs({{"gpus", 3}});
    for (std::size_t r = 0; r < 3; ++r) pids.push_back(procs.pid(r));
    auto probes = procs.spawn<Probe>("probe");
    probes.call<&Probe::whoami>().get(kWait);
    procs.stop();
    for (pid_t p : pids) EXPECT_FALSE(alive(p)) << p;
    procs.stop();  // idempotent
  }
  pids.clear();
  {
    auto procs = this_host().spawn_procs({{"gpus", 2}});
    for (std::size_t r = 0; r < 2; ++r) pids.push_back(procs.pid(r));
  }
  EXPECT_TRUE(gone_within(pids, 30s));
}

// --- adverbs --------------------------------------------------------------------------------------

class Meshes : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    procs_ = new ProcMesh(this_host().spawn_procs({{"gpus", 5}}));
    // Two actors per proc: the mesh is {gpus=5, local=2}.
    probes_ = new ActorMesh<Probe>(procs_->spawn_many<Probe>("probe", Extent{{"local", 2}}, std::int64_t{7}));
  }
  static void TearDownTestSuite() {
    delete probes_;
    delete procs_;
  }
  static ProcMesh* procs_;
  static ActorMesh<Probe>* probes_;
};
ProcMesh* Meshes::procs_ = nullptr;
ActorMesh<Probe>* Meshes::probes_ = nullptr;

TEST_F(Meshes, CallGivesAValueMeshIndexedAndIterableByPoint) {
  const auto& probes = *probes_;
  EXPECT_EQ(probes.extent().to_string(), "{gpus=5, local=2}");
  ValueMesh<Whoami> who = probes.call<&Probe::whoami>().get(kWait);
  ASSERT_EQ(who.size(), 10u);
  std::size_t n = 0;
  for (auto [point, w] : who) {
    EXPECT_EQ(static_cast<std::size_t>(w.cast_rank), point.rank());
    EXPECT_EQ(w.point, point.to_string());
    EXPECT_EQ(w.pid, procs_->pid(point["gpus"]));  // proc-major: the local actors share a proc
    EXPECT_EQ(w.tag, 7);
    ++n;
  }
  EXPECT_EQ(n, 10u);
  EXPECT_EQ(who[Point(probes.extent(), {3, 1})].cast_rank, 7);
}

TEST_F(Meshes, SlicesAndSelectionsGiveTheirMembersWellDefinedRanks) {
  const auto& probes = *probes_;
  // An index drops the dimension.
  auto one = probes.slice("gpus", 3);
  EXPECT_EQ(one.extent().to_string(), "{local=2}");
  auto w = one.call<&Probe::whoami>().get(kWait);
  for (std::size_t r = 0; r < 2; ++r) {
    EXPECT_EQ(w.at(r).cast_rank, static_cast<std::int64_t>(r));
    EXPECT_EQ(w.at(r).point, "{local=" + std::to_string(r) + "}");
    EXPECT_EQ(w.at(r).pid, procs_->pid(3));
  }
  // A range with a step keeps it.
  auto every_other = probes.slice("gpus", Range{0, 5, 2});
  EXPECT_EQ(every_other.extent().to_string(), "{gpus=3, local=2}");
  w = every_other.call<&Probe::whoami>().get(kWait);
  for (std::size_t r = 0; r < 6; ++r) {
    EXPECT_EQ(w.at(r).cast_rank, static_cast<std::int64_t>(r));
    EXPECT_EQ(w.at(r).pid, procs_->pid(2 * (r / 2)));
  }
  // Slices of slices.
  auto corner = every_other.slice("local", 1).slice("gpus", Range{1, 3});
  EXPECT_EQ(corner.extent().to_string(), "{gpus=2}");
  w = corner.call<&Probe::whoami>().get(kWait);
  EXPECT_EQ(w.at(0).pid, procs_->pid(2));
  EXPECT_EQ(w.at(1).pid, procs_->pid(4));
  EXPECT_EQ(w.at(1).point, "{gpus=1}");
  // A selection is a list of ranks, {rank=N}.
  auto picked = probes.select("1:5:3, 0");
  EXPECT_EQ(picked.extent().to_string(), "{rank=2}");
  w = picked.call<&Probe::whoami>().get(kWait);
  EXPECT_EQ(w.at(0).pid, procs_->pid(1));
  EXPECT_EQ(w.at(1).pid, procs_->pid(4));
  EXPECT_EQ(w.at(1).cast_rank, 1);
  // Bad slices are clear errors.
  EXPECT_THROW(probes.slice("hosts", 0), CallError);
  EXPECT_THROW(probes.slice("gpus", 5), CallError);
  EXPECT_THROW(probes.slice("gpus", Range{2, 9}), CallError);
  EXPECT_THROW(probes.select("gpus=("), CallError);
  // A proc mesh slices the same way.
  EXPECT_EQ(procs_->slice("gpus", Range{1, 4}).size(), 3u);
  EXPECT_EQ(procs_->slice("gpus", Range{1, 4}).pid(0), procs_->pid(1));
}

TEST_F(Meshes, ReductionsAreComputedInTheTree) {
  const auto& probes = *probes_;
  EXPECT_EQ(probes.sum<&Probe::rank_times>(std::int64_t{3}).get(kWait), 3 * 45);
  EXPECT_EQ(probes.min<&Probe::rank_times>(std::int64_t{-1}).get(kWait), -9);
  EXPECT_EQ(probes.max<&Probe::rank_times>(std::int64_t{2}).get(kWait), 18);
  EXPECT_DOUBLE_EQ(probes.sum<&Probe::half_rank>().get(kWait), 22.5);
  auto slice = probes.slice("local", 1);  // view ranks 0..4
  EXPECT_EQ(slice.sum<&Probe::rank_times>(std::int64_t{1}).get(kWait), 10);
  std::vector<std::int64_t> all = probes.reduce<&Probe::ranks_list, Concat>().get(kWait);
  std::vector<std::int64_t> expect(10);
  std::iota(expect.begin(), expect.end(), 0);
  EXPECT_EQ(all, expect);
  // An accumulator that throws fails the call with its message, and the members carry on.
  try {
    probes.reduce<&Probe::rank_times, Refuse>(std::int64_t{1}).get(kWait);
    ADD_FAILURE() << "no error";
  } catch (const Exception& e) {
    EXPECT_NE(std::string(e.what()).find("shapes differ"), std::string::npos) << e.what();
  }
  EXPECT_EQ(probes.sum<&Probe::rank_times>(std::int64_t{1}).get(kWait), 45);
}

TEST_F(Meshes, CallOneChooseAndStream) {
  const auto& probes = *probes_;
  EXPECT_EQ(probes.slice("gpus", 2).slice("local", 1).call_one<&Probe::whoami>().get(kWait).pid, procs_->pid(2));
  EXPECT_THROW(probes.call_one<&Probe::whoami>(), CallError);
  // choose on a view of one member picks it, and the member sees itself as rank 0 of {}.
  auto w = probes.slice("gpus", 4).slice("local", 0).choose<&Probe::whoami>().get(kWait);
  EXPECT_EQ(w.pid, procs_->pid(4));
  EXPECT_EQ(w.cast_rank, 0);
  EXPECT_EQ(w.point, "{}");
  // stream: every member, once each, as they come.
  auto s = probes.stream<&Probe::whoami>();
  std::set<std::size_t> ranks;
  while (auto r = s.next(kWait)) {
    EXPECT_EQ(static_cast<std::size_t>(r->second.cast_rank), r->first.rank());
    ranks.insert(r->first.rank());
  }
  EXPECT_EQ(ranks.size(), 10u);
  EXPECT_EQ(s.remaining(), 0u);
}

TEST_F(Meshes, ChoosePrefersTheMemberWithTheFewestOutstandingRequests) {
  auto row = probes_->slice("local", 0);  // 5 members, one in each proc
  // Four slow requests: each goes to a member that has none, so four different members.
  std::vector<Future<std::int64_t>> held;
  for (int i = 0; i < 4; ++i) held.push_back(row.choose<&Probe::sleep_ms>(std::int64_t{1500}));
  // The fifth goes to the one member left idle, while the four are still busy.
  std::int64_t idle = row.choose<&Probe::sleep_ms>(std::int64_t{0}).get(kWait);
  std::set<std::int64_t> pids;
  for (auto& f : held) pids.insert(f.get(kWait));
  EXPECT_EQ(pids.size(), 4u);
  EXPECT_FALSE(pids.count(idle));
  pids.insert(idle);
  EXPECT_EQ(pids.size(), 5u);
  // Once all are idle again, choose spreads round robin: five picks, five members.
  std::set<std::int64_t> spread;
  for (int i = 0; i < 5; ++i) spread.insert(row.choose<&Probe::sleep_ms>(std::int64_t{0}).get(kWait));
  EXPECT_EQ(spread.size(), 5u);
}

TEST_F(Meshes, OrderHoldsThroughCastsAcrossAdverbsAndViews) {
  const auto& probes = *probes_;
  auto before = probes.call<&Probe::history>().get(kWait);
  std::int64_t seq = 1'000'000;
  // Interleave broadcasts to the whole mesh and to slices; every member must see its own
  // messages in the order they were sent.
  std::vector<std::vector<std::int64_t>> expected(10);
  for (int round = 0; round < 200; ++round) {
    ++seq;
    if (round % 3 == 0) {
      probes.slice("gpus", static_cast<std::size_t>(round % 5)).broadcast<&Probe::record>(seq);
      for (std::size_t l = 0; l < 2; ++l) expected[(round % 5) * 2 + l].push_back(seq);
    } else {
      probes.broadcast<&Probe::record>(seq);
      for (auto& e : expected) e.push_back(seq);
    }
  }
  auto after = probes.call<&Probe::history>().get(kWait);
  for (std::size_t r = 0; r < 10; ++r) {
    std::vector<std::int64_t> got(after.at(r).begin() + static_cast<std::ptrdiff_t>(before.at(r).size()),
                                  after.at(r).end());
    EXPECT_EQ(got, expected[r]) << "rank " << r;
  }
}

TEST_F(Meshes, AFailingMemberFailsTheCallWithTheLowestFailingRanksError) {
  const auto& probes = *probes_;
  try {
    probes.call<&Probe::fail_on>(std::vector<std::int64_t>{7, 3}).get(kWait);
    ADD_FAILURE() << "no error";
  } catch (const RemoteError& e) {
    EXPECT_NE(std::string(e.what()).find("member 3 refuses"), std::string::npos) << e.what();
  }
  try {
    probes.sum<&Probe::fail_on>(std::vector<std::int64_t>{9}).get(kWait);
    ADD_FAILURE() << "no error";
  } catch (const RemoteError& e) {
    EXPECT_NE(std::string(e.what()).find("member 9 refuses"), std::string::npos) << e.what();
  }
  auto s = probes.stream<&Probe::fail_on>(std::vector<std::int64_t>{4});
  int ok = 0, failed = 0;
  for (;;) {
    try {
      if (!s.next(kWait)) break;
      ++ok;
    } catch (const RemoteError&) {
      ++failed;
    }
  }
  EXPECT_EQ(ok, 9);
  EXPECT_EQ(failed, 1);
  // The mesh is still whole.
  EXPECT_EQ(probes.sum<&Probe::fail_on>(std::vector<std::int64_t>{}).get(kWait), 10);
}

TEST(ActorMeshes, StopStopsTheMembersOfAViewAndLeavesTheProcsRunning) {
  auto procs = this_host().spawn_procs({{"gpus", 3}});
  auto probes = procs.spawn_many<Probe>("stoppable", Extent{{"local", 2}});
  probes.slice("local", 1).stop();
  // The other half still answers; the stopped half fails rather than hangs.
  EXPECT_EQ(probes.slice("local", 0).call<&Probe::whoami>().get(kWait).size(), 3u);
  EXPECT_THROW(probes.slice("local", 1).call<&Probe::whoami>().get(kWait), Exception);
  probes.stop();  // the rest, and the stopped ones again
  EXPECT_THROW(probes.call<&Probe::whoami>().get(kWait), Exception);
  // The procs run on: new actors come up in them.
  auto again = procs.spawn<Probe>("again");
  auto who = again.call<&Probe::whoami>().get(kWait);
  for (std::size_t r = 0; r < 3; ++r) EXPECT_EQ(who.at(r).pid, procs.pid(r));
}

// --- logs -----------------------------------------------------------------------------------------

std::vector<std::string> log_run(const std::string& fold, const std::string& transport = "unix") {
  Child c = run_self({"--log-controller"},
                     {"SCEPTRE_LOG_FOLD=" + fold, "SCEPTRE_LOG_FOLD_WINDOW=3s", "SCEPTRE_TRANSPORT=" + transport});
  auto lines = read_all_lines(c.out);
  std::fclose(c.out);
  int status = wait_child(c.pid);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << status;
  return lines;
}
std::size_t count(const std::vector<std::string>& lines, const std::string& line) {
  return static_cast<std::size_t>(std::count(lines.begin(), lines.end(), line));
}

TEST(Logs, ProcOutputReachesTheControllerPrefixedAndFolded) {
  auto lines = log_run("1");
  std::string all;
  for (auto& l : lines) all += l + "\n";
  EXPECT_EQ(count(lines, "[talkers 0-3 ×4] the same line"), 1u) << all;
  for (int r = 0; r < 4; ++r) {
    // Distinct lines are not folded (each rank printed its own).
    EXPECT_EQ(count(lines, "[talkers " + std::to_string(r) + "] hello from " + std::to_string(r)), 1u) << all;
  }
}

TEST(Logs, FoldingCanBeSwitchedOff) {
  auto lines = log_run("0");
  std::string all;
  for (auto& l : lines) all += l + "\n";
  for (int r = 0; r < 4; ++r) {
    EXPECT_EQ(count(lines, "[talkers " + std::to_string(r) + "] the same line"), 1u) << all;
  }
}

TEST(Transports, ProcsAndTheControllerServeTcpWhenConfigured) {
  auto lines = log_run("1", "tcp");
  std::string all;
  for (auto& l : lines) all += l + "\n";
  ASSERT_FALSE(lines.empty());
  EXPECT_EQ(lines[0].rfind("SERVING tcp:127.0.0.1:", 0), 0u) << all;
  EXPECT_NE(lines[0].find(" tcp:127.0.0.1:", 20), std::string::npos) << all;  // the controller too
  EXPECT_EQ(count(lines, "[talkers 0-3 ×4] the same line"), 1u) << all;
}

// --- no orphans -----------------------------------------------------------------------------------

class Orphans : public ::testing::TestWithParam<std::string> {};

TEST_P(Orphans, NoProcOutlivesItsController) {
  const std::string how = GetParam();
  Child c = run_self({"--orphan-controller", how == "sigkill" || how == "sigint" ? "sleep" : how});
  std::vector<pid_t> pids = read_pids(c.out);
  ASSERT_EQ(pids.size(), 3u);
  if (how == "sigkill" || how == "sigint") {
    for (pid_t p : pids) EXPECT_TRUE(alive(p));  // the controller sleeps: they run
  }
  if (how == "sigkill") ::kill(c.pid, SIGKILL);
  if (how == "sigint") ::kill(c.pid, SIGINT);
  int status = wait_child(c.pid);
  std::fclose(c.out);
  if (how == "return") {
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << status;
  }
  if (how == "sigkill") {
    EXPECT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL) << status;
  }
  // "A few seconds" is the promise; the bound is generous for sanitizer builds.
  EXPECT_TRUE(gone_within(pids, 30s));
}
INSTANTIATE_TEST_SUITE_P(Exits, Orphans, ::testing::Values("return", "throw", "sigint", "sigkill"));

}  // namespace
}  // namespace sceptre::testing
