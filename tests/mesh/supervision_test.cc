// Supervision with real procs: each way a proc fails (killed, crashed, exited, frozen, an actor
// failing, a handler stuck) becomes one MeshFailure naming it; what waits on a failed member
// fails at once; the rest of the mesh keeps working; a stop is not a failure; and a failure
// nobody handles ends the controller with a report, root cause first. How fast each is
// detected is measured by bench/supervision_bench, not here: the bounds below are generous.
#include <gtest/gtest.h>
#include <signal.h>

#include <condition_variable>
#include <mutex>
#include <sstream>

#include "mesh/mesh_actors.h"
#include "mesh/proc_util.h"

namespace sceptre::testing {
namespace {

constexpr auto kWait = std::chrono::seconds(120);  // generous: sanitizer builds on 2 cores

// Collects what a mesh's failure handler receives.
class Failures {
 public:
  FailureHandler handler() {
    return [this](const MeshFailure& f) {
      std::lock_guard lock(mu_);
      got_.push_back(f);
      cv_.notify_all();
      return Supervise::kHandled;
    };
  }
  std::vector<MeshFailure> wait_for(std::size_t n, std::chrono::seconds limit = kWait) {
    std::unique_lock lock(mu_);
    cv_.wait_for(lock, limit, [&] { return got_.size() >= n; });
    return got_;
  }
  std::vector<MeshFailure> now() {
    std::lock_guard lock(mu_);
    return got_;
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  std::vector<MeshFailure> got_;
};

std::string joined(const std::vector<std::string>& lines) {
  std::string all;
  for (const auto& l : lines) all += l + "\n";
  return all;
}

TEST(Supervision, AKilledProcFailsWhatWaitsOnItAtOnceAndTheRestOfTheMeshKeepsWorking) {
  auto procs = this_host().spawn_procs({{"gpus", 4}}, "victims");
  Failures failures;
  procs.on_failure(failures.handler());
  auto members = procs.spawn<Faulty>("faulty");
  auto pids = members.call<&Faulty::pid>().get(kWait);

  // Ranks 1 and 2 are busy for 8 s; rank 1 is killed while the call waits on both.
  auto in_flight = members.slice("gpus", Range{1, 3}).call<&Faulty::stuck_ms>(std::int64_t{8000});
  std::this_thread::sleep_for(200ms);
  auto direct = members.at(1).call<&Faulty::pid>();  // an ActorRef call, queued behind the sleep
  const auto killed_at = std::chrono::steady_clock::now();
  ASSERT_EQ(::kill(static_cast<pid_t>(pids.at(1)), SIGKILL), 0);
  try {
    in_flight.get(kWait);
    ADD_FAILURE() << "the call to a killed member succeeded";
  } catch (const SupervisionError& e) {
    EXPECT_NE(std::string(e.what()).find("rank 1 {gpus=1} of 'victims'"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("killed by signal 9"), std::string::npos) << e.what();
  }
  EXPECT_THROW(direct.get(kWait), SupervisionError);
  // At once: long before the 8 s the other member still sleeps.
  EXPECT_LT(std::chrono::steady_clock::now() - killed_at, 4s);

  auto got = failures.wait_for(1);
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(got[0].mesh, "victims");
  EXPECT_EQ(got[0].rank, 1u);
  EXPECT_EQ(got[0].point.to_string(), "{gpus=1}");
  EXPECT_EQ(got[0].cause, FailureCause::kKilled);
  EXPECT_EQ(got[0].signal, SIGKILL);
  EXPECT_EQ(got[0].pid, pids.at(1));
  EXPECT_GE(got[0].when, killed_at);
  EXPECT_EQ(procs.failed_ranks(), std::vector<std::size_t>{1});

  // Views without the failed rank work; one with it fails at once, naming it.
  EXPECT_EQ(members.slice("gpus", 0).call_one<&Faulty::pid>().get(kWait), pids.at(0));
  EXPECT_EQ(members.slice("gpus", Range{3, 4}).call<&Faulty::pid>().get(kWait).at(0), pids.at(3));
  EXPECT_THROW(members.call<&Faulty::pid>().get(5s), SupervisionError);
  EXPECT_THROW(members.sum<&Faulty::pid>().get(5s), SupervisionError);
  EXPECT_THROW(members.at(1).call<&Faulty::pid>().get(5s), SupervisionError);  // not a channel's timeout
  // A stream over ranks 0-1: rank 1's failure, rank 0's answer.
  auto s = members.slice("gpus", Range{0, 2}).stream<&Faulty::pid>();
  int values = 0, errors = 0;
  for (int i = 0; i < 2; ++i) {
    try {
      auto item = s.next(kWait);
      ASSERT_TRUE(item);
      EXPECT_EQ(item->first.rank(), 0u);
      EXPECT_EQ(item->second, pids.at(0));
      ++values;
    } catch (const SupervisionError&) {
      ++errors;
    }
  }
  EXPECT_EQ(values, 1);
  EXPECT_EQ(errors, 1);
  EXPECT_FALSE(s.next(1s));
  // A broadcast skips the failed member and reaches the others (their answers come after it).
  members.broadcast<&Faulty::stuck_ms>(std::int64_t{1});
  EXPECT_EQ(members.slice("gpus", 0).call_one<&Faulty::pid>().get(kWait), pids.at(0));

  // Once per failed rank: nothing more arrives for it.
  std::this_thread::sleep_for(500ms);
  EXPECT_EQ(failures.now().size(), 1u);
}

TEST(Supervision, ACastFailsAtOnceWhenAProcThatOnlyRelaysItDies) {
  auto procs = this_host().spawn_procs({{"gpus", 4}}, "relays");
  Failures failures;
  procs.on_failure(failures.handler());
  auto members = procs.spawn<Faulty>("faulty");
  auto pids = members.call<&Faulty::pid>().get(kWait);
  // With the tests' fan-outs of 2 (main.cc), a cast to rank 3 goes through rank 2's proc, which
  // has no target of it; rank 3's reply would come back the same way.
  auto call = members.slice("gpus", 3).call_one<&Faulty::stuck_ms>(std::int64_t{3000});
  std::this_thread::sleep_for(200ms);
  ASSERT_EQ(::kill(static_cast<pid_t>(pids.at(2)), SIGKILL), 0);
  EXPECT_THROW(call.get(30s), SupervisionError);  // not a timeout, not a value that cannot come
  EXPECT_EQ(failures.wait_for(1).size(), 1u);
}

class Deaths : public ::testing::TestWithParam<std::string> {};

TEST_P(Deaths, EachWayOfDyingIsNamedWithWhatTheProcLastWrote) {
  const std::string how = GetParam();
  auto procs = this_host().spawn_procs({{"gpus", 2}}, "crashers");
  Failures failures;
  procs.on_failure(failures.handler());
  auto members = procs.spawn<Faulty>("faulty");
  members.slice("gpus", 1).broadcast<&Faulty::crash>(how);
  auto got = failures.wait_for(1);
  ASSERT_EQ(got.size(), 1u);
  const MeshFailure& f = got[0];
  EXPECT_EQ(f.rank, 1u);
  const std::string tail = joined(f.last_lines);
  EXPECT_NE(tail.find("about to " + how), std::string::npos) << f.to_string();
  if (how == "segv") {
    EXPECT_EQ(f.cause, FailureCause::kKilled) << f.to_string();
    EXPECT_EQ(f.signal, SIGSEGV) << f.to_string();
    EXPECT_NE(tail.find("fatal signal; stack"), std::string::npos) << f.to_string();
  } else if (how == "abort") {
    EXPECT_EQ(f.cause, FailureCause::kKilled) << f.to_string();
    EXPECT_EQ(f.signal, SIGABRT) << f.to_string();
  } else {
    EXPECT_EQ(f.cause, FailureCause::kExited) << f.to_string();
    EXPECT_EQ(f.exit_code, 1) << f.to_string();
    EXPECT_NE(f.what.find("exit code 1"), std::string::npos) << f.what;
  }
  // The other rank is unharmed, and choose() only ever picks it.
  const auto survivor = members.slice("gpus", 0).call_one<&Faulty::pid>().get(kWait);
  for (int i = 0; i < 6; ++i) EXPECT_EQ(members.choose<&Faulty::pid>().get(kWait), survivor);
}
INSTANTIATE_TEST_SUITE_P(Kinds, Deaths, ::testing::Values("segv", "abort", "exit"));

TEST(Supervision, AFrozenProcIsDeclaredLostByItsSilenceAndKilled) {
  auto procs = this_host().spawn_procs({{"gpus", 2}}, "sleepers");
  Failures failures;
  procs.on_failure(failures.handler());
  auto members = procs.spawn<Faulty>("faulty");
  auto pids = members.call<&Faulty::pid>().get(kWait);
  const pid_t frozen = static_cast<pid_t>(pids.at(0));
  const auto stopped_at = std::chrono::steady_clock::now();
  ASSERT_EQ(::kill(frozen, SIGSTOP), 0);
  auto waiting = members.slice("gpus", 0).call_one<&Faulty::pid>();  // can never be answered
  auto got = failures.wait_for(1);
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(got[0].rank, 0u);
  EXPECT_EQ(got[0].cause, FailureCause::kHeartbeatLost) << got[0].to_string();
  // Not before it fell silent: the last heartbeat it sent may be up to an interval (more on a
  // loaded machine) older than the stop, so only a loose lower bound holds.
  EXPECT_GE(got[0].when - stopped_at, Runtime::current().config().heartbeat_timeout / 2) << got[0].to_string();
  EXPECT_THROW(waiting.get(kWait), SupervisionError);
  // Killed, so that it can never come back as a member; and reported only once.
  EXPECT_TRUE(gone_within({frozen}, 30s));
  std::this_thread::sleep_for(300ms);
  auto all = failures.now();
  EXPECT_EQ(all.size(), 1u) << all.back().to_string();
  EXPECT_GT(members.slice("gpus", 1).call_one<&Faulty::pid>().get(kWait), 0);
}

TEST(Supervision, AStuckHandlerIsReportedWithItsEndpointAndItsActorLives) {
  // The procs of this mesh read a short watchdog limit from their environment.
  ::setenv("SCEPTRE_WATCHDOG_TIMEOUT", "300ms", 1);
  auto procs = this_host().spawn_procs({{"gpus", 2}}, "stuck");
  ::unsetenv("SCEPTRE_WATCHDOG_TIMEOUT");
  Failures failures;
  procs.on_failure(failures.handler());
  auto members = procs.spawn<Faulty>("faulty");
  auto pids = members.call<&Faulty::pid>().get(kWait);
  auto call = members.slice("gpus", 1).call_one<&Faulty::stuck_ms>(std::int64_t{2500});
  auto got = failures.wait_for(1);
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(got[0].rank, 1u);
  EXPECT_EQ(got[0].cause, FailureCause::kStuck) << got[0].to_string();
  EXPECT_EQ(got[0].endpoint, "stuck_ms");
  EXPECT_NE(got[0].actor.find("faulty"), std::string::npos) << got[0].actor;
  EXPECT_NE(got[0].what.find("300 ms"), std::string::npos) << got[0].what;  // the limit it broke
  EXPECT_THROW(call.get(kWait), SupervisionError);  // the caller is told instead of waiting
  // Not killed: its proc runs on, and the actor answers a direct call once the handler returns.
  EXPECT_TRUE(alive(static_cast<pid_t>(pids.at(1))));
  EXPECT_EQ(members.at(1).call<&Faulty::pid>().get(kWait), pids.at(1));
}

TEST(Supervision, AnActorThatFailsIsReportedWithItsException) {
  auto procs = this_host().spawn_procs({{"gpus", 2}}, "throwers");
  Failures failures;
  procs.on_failure(failures.handler());
  auto members = procs.spawn<Faulty>("faulty");
  members.slice("gpus", 1).broadcast<&Faulty::throw_now>(std::string("bad batch 17"));
  auto got = failures.wait_for(1);
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(got[0].rank, 1u);
  EXPECT_EQ(got[0].cause, FailureCause::kActorFailed) << got[0].to_string();
  EXPECT_EQ(got[0].exception_type, "std::logic_error");
  EXPECT_EQ(got[0].endpoint, "throw_now");
  EXPECT_NE(got[0].what.find("bad batch 17"), std::string::npos) << got[0].what;
}

TEST(Supervision, StoppingAMeshIsNotAFailure) {
  Failures failures;
  {
    auto procs = this_host().spawn_procs({{"gpus", 3}}, "quiet");
    procs.on_failure(failures.handler());
    auto members = procs.spawn<Faulty>("faulty");
    (void)members.call<&Faulty::pid>().get(kWait);
    procs.stop();
  }
  // Longer than a heartbeat timeout: silence after a stop is expected.
  std::this_thread::sleep_for(Runtime::current().config().heartbeat_timeout + 500ms);
  EXPECT_TRUE(failures.now().empty());
}

TEST(Supervision, AFailedRankRespawnedByItsHandlerRejoinsAtItsRankWithItsActors) {
  // Declared before the mesh, so that they outlive its handler.
  std::mutex mu;
  std::condition_variable cv;
  int handled = 0;
  std::string error;
  ProcMesh procs;
  // The handler holds the mesh by reference (a copy inside it would keep the mesh alive), and is
  // given at spawn time, so that no failure can come before it.
  procs = this_host().spawn_procs({{"gpus", 3}}, "phoenix", [&](const MeshFailure& f) {
    std::string why;
    try {
      procs.respawn({f.rank});
    } catch (const std::exception& e) {
      why = e.what();
    }
    std::lock_guard lock(mu);
    error = why;
    ++handled;
    cv.notify_all();
    return Supervise::kHandled;
  });
  // Two actor meshes on the procs, one with constructor arguments: {gpus=3, local=2}.
  auto probes = procs.spawn_many<Probe>("probe", Extent{{"local", 2}}, std::int64_t{42});
  auto faulty = procs.spawn<Faulty>("faulty");
  auto before = probes.call<&Probe::whoami>().get(kWait);
  const pid_t old = procs.pid(1);
  ASSERT_EQ(::kill(old, SIGKILL), 0);
  {
    std::unique_lock lock(mu);
    ASSERT_TRUE(cv.wait_for(lock, kWait, [&] { return handled == 1; }));
    EXPECT_TRUE(error.empty()) << error;
  }
  EXPECT_TRUE(procs.failed_ranks().empty());
  const pid_t fresh = procs.pid(1);
  EXPECT_NE(fresh, old);
  EXPECT_TRUE(alive(fresh));
  // The whole mesh answers again, the new members at the old ranks, made with the old arguments.
  auto after = probes.call<&Probe::whoami>().get(kWait);
  for (const auto& [point, who] : after) {
    EXPECT_EQ(who.tag, 42);
    EXPECT_EQ(static_cast<std::size_t>(who.cast_rank), point.rank());
    const bool moved = point["gpus"] == 1;
    EXPECT_EQ(who.pid, moved ? fresh : before[point].pid) << point.to_string();
  }
  EXPECT_EQ(faulty.slice("gpus", 1).call_one<&Faulty::pid>().get(kWait), fresh);
  EXPECT_EQ(probes.at(3).call<&Probe::whoami>().get(kWait).pid, fresh);  // refs taken now are the new ones
  EXPECT_EQ(probes.sum<&Probe::rank_times>(std::int64_t{1}).get(kWait), 0 + 1 + 2 + 3 + 4 + 5);
  EXPECT_THROW(procs.respawn({0}), CallError);  // rank 0 has not failed
  // choose() never picks a failed member while a live one is left.
  ASSERT_EQ(::kill(procs.pid(2), SIGSTOP), 0);  // rank 2 is lost (by silence) and respawned
  {
    std::unique_lock lock(mu);
    ASSERT_TRUE(cv.wait_for(lock, kWait, [&] { return handled == 2; }));
    EXPECT_TRUE(error.empty()) << error;
  }
  EXPECT_TRUE(procs.failed_ranks().empty());
  EXPECT_EQ(probes.call<&Probe::whoami>().get(kWait).size(), 6u);
}

TEST(Supervision, TheProcsOfAFrozenControllerStopThemselvesAfterTheOrphanTimeout) {
  Child c = run_self({"--orphan-controller", "sleep"}, {"SCEPTRE_ORPHAN_TIMEOUT=1500ms"});
  std::vector<pid_t> pids = read_pids(c.out);
  ASSERT_EQ(pids.size(), 3u);
  // Frozen, the controller keeps the lifelines open but acknowledges nothing.
  ASSERT_EQ(::kill(c.pid, SIGSTOP), 0);
  const auto frozen_at = std::chrono::steady_clock::now();
  EXPECT_TRUE(gone_within(pids, 60s));
  EXPECT_GE(std::chrono::steady_clock::now() - frozen_at, 1s);  // not before their timeout
  ::kill(c.pid, SIGKILL);
  ::kill(c.pid, SIGCONT);
  wait_child(c.pid);
  std::fclose(c.out);
}

// A host agent is a proc of the controller's: it and its procs stop when the controller is frozen
// (the orphan rule: their health channels acknowledge nothing) and when it is killed (lifelines:
// the agent's to the controller, its procs' to the agent).
TEST(Supervision, HostAgentsAndTheirProcsStopThemselvesWhenTheirControllerIsFrozenOrKilled) {
  for (const bool freeze : {true, false}) {
    SCOPED_TRACE(freeze ? "frozen" : "killed");
    Child c = run_self({"--orphan-controller", "hosts"}, {"SCEPTRE_ORPHAN_TIMEOUT=1500ms", "SCEPTRE_TRANSPORT=unix"});
    std::vector<pid_t> pids = read_pids(c.out);
    ASSERT_EQ(pids.size(), 3u);
    const auto at = std::chrono::steady_clock::now();
    ASSERT_EQ(::kill(c.pid, freeze ? SIGSTOP : SIGKILL), 0);
    EXPECT_TRUE(gone_within(pids, 60s));
    if (freeze) EXPECT_GE(std::chrono::steady_clock::now() - at, 1s);  // not before their timeout
    ::kill(c.pid, SIGKILL);
    ::kill(c.pid, SIGCONT);
    wait_child(c.pid);
    std::fclose(c.out);
  }
}

TEST(Supervision, AFailureNobodyHandlesEndsTheControllerWithAReportRootCauseFirst) {
  Child c = run_self({"--unhandled-controller"}, {}, /*merge_stderr=*/true);
  std::vector<pid_t> pids = read_pids(c.out);
  ASSERT_EQ(pids.size(), 4u);
  auto lines = read_all_lines(c.out);
  std::fclose(c.out);
  int status = wait_child(c.pid);
  const std::string all = joined(lines);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 1) << status << "\n" << all;
  EXPECT_NE(all.find("root cause (detected first): rank 2 {gpus=2} of 'victims'"), std::string::npos) << all;
  EXPECT_NE(all.find("killed by signal 11"), std::string::npos) << all;
  EXPECT_NE(all.find("fatal signal; stack"), std::string::npos) << all;  // its stderr, in the report
  EXPECT_NE(all.find("killed by signal 9"), std::string::npos) << all;   // the consequences
  EXPECT_EQ(all.find("controller went on"), std::string::npos) << all;
  EXPECT_TRUE(gone_within(pids, 30s));
}

}  // namespace
}  // namespace sceptre::testing
