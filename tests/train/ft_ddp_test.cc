// Fault-tolerant training with real procs, real sockets, real Gloo and real libtorch, and the
// torchft-style oracle: after injected failures every live replica holds the same bits as the
// others and as a failure-free replay of the committed steps; no sample is committed twice.
//
// The binary is its own proc image (its main makes the Runtime first).
#include <gtest/gtest.h>
#include <signal.h>

#include <sys/mount.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <set>
#include <thread>

#include "sceptre/sceptre.h"
#include "sceptre/train/ft_ddp.h"
#include "train/oracle.h"

namespace sceptre::train {
namespace {

using namespace std::chrono_literals;

int pid_of(const ProcMesh& procs, std::size_t r) { return procs.pid(r); }

TEST(FtDdp, WithoutFailuresEveryReplicaEqualsTheReplay) {
  auto procs = this_host().spawn_procs({{"replicas", 3}}, "plain");
  auto o = small(25);
  FtDdp ddp(procs, o);
  Summary s = ddp.run();
  EXPECT_EQ(s.attempted, o.steps);
  EXPECT_EQ(s.failures, 0u);
  EXPECT_EQ(s.digests.size(), 3u);
  expect_oracle(o, s, 3);
  EXPECT_LT(s.steps.back().loss, s.steps.front().loss) << "it does not learn";
}

TEST(FtDdp, KilledReplicasAreReplacedAndHealedWhileTheOthersTrain) {
  auto procs = this_host().spawn_procs({{"replicas", 4}}, "killed");
  auto o = small(60);
  FtDdp ddp(procs, o);
  ddp.on_step([&](const StepRecord& r, std::size_t) {
    if (r.step == 8) ::kill(pid_of(procs, 1), SIGKILL);
    if (r.step == 30) ::kill(pid_of(procs, 3), SIGKILL);
  });
  Summary s = ddp.run();
  EXPECT_GE(s.failures, 2u);
  EXPECT_GE(s.heals, 1u);
  for (auto& e : s.events) EXPECT_NE(e.kind, Event::Kind::kHealFailed) << e.what;  // the donors live
  // Survivors never restarted: replicas 0 and 2 took part in every committed step.
  for (auto& r : s.steps) {
    EXPECT_NE(std::find(r.members.begin(), r.members.end(), 0u), r.members.end());
    EXPECT_NE(std::find(r.members.begin(), r.members.end(), 2u), r.members.end());
  }
  expect_oracle(o, s, 2);
}

// With dropout too: a killed replica's replacement, the retried step and the replay all draw the
// masks of the blocks they compute, so every live replica still equals the replay.
TEST(FtDdp, WithDropoutAKilledReplicaHealsAndEveryReplicaEqualsTheReplay) {
  auto procs = this_host().spawn_procs({{"replicas", 3}}, "dropout");
  auto o = small(30);
  o.model.dropout = 0.25;
  FtDdp ddp(procs, o);
  ddp.on_step([&](const StepRecord& r, std::size_t) {
    if (r.step == 6) ::kill(pid_of(procs, 1), SIGKILL);
  });
  Summary s = ddp.run();
  EXPECT_GE(s.failures, 1u);
  EXPECT_GE(s.heals, 1u);
  expect_oracle(o, s, 3);
}

// Deaths in a quorum cost the survivors no timeout: after a kill the others go on under a new
// quorum (re-formed during the step, or its retry's), one of whose members is frozen before it
// can take part. The others wait for it in the new quorum's rendezvous and then Gloo; when its
// heartbeat stops and it is killed, the controller aborts both for them. Every timeout of a
// collective or rendezvous here is 60 s.
TEST(FtDdp, AMemberLostInANewQuorumsRendezvousCostsNoTimeout) {
  auto procs = this_host().spawn_procs({{"replicas", 4}}, "rendezvous");
  auto o = small(30);
  o.collective_timeout = 60s;
  o.rendezvous_timeout = 60s;
  o.step_timeout = 120s;
  FtDdp ddp(procs, o);
  std::chrono::steady_clock::time_point frozen_at{};
  ddp.on_step([&](const StepRecord& r, std::size_t) {
    if (r.step == 8) ::kill(pid_of(procs, 1), SIGKILL);
  });
  ddp.on_event([&](const Event& e) {
    if ((e.kind == Event::Kind::kRetried || e.kind == Event::Kind::kRegrouped) &&
        frozen_at == std::chrono::steady_clock::time_point{}) {
      ::kill(pid_of(procs, 3), SIGSTOP);  // a member of the next quorum, still live to the controller
      frozen_at = std::chrono::steady_clock::now();
    }
  });
  Summary s = ddp.run();
  ASSERT_NE(frozen_at, std::chrono::steady_clock::time_point{}) << "no step was retried or re-formed";
  // The first step committed after the kill: the survivors 0 and 2 (and maybe 1's replacement).
  ASSERT_GT(s.steps.size(), 9u);
  const StepRecord* next = &s.steps[9];
  auto in = [&](std::size_t r) { return std::find(next->members.begin(), next->members.end(), r) != next->members.end(); };
  EXPECT_TRUE(in(0) && in(2) && !in(3)) << "members of step 9: " << next->members.size();
  // The run's t0 is a little before the first step; `seconds` counts from it.
  auto committed_at = std::chrono::duration<double>(next->seconds - s.steps[8].seconds);
  EXPECT_LT(committed_at, 20s) << "the survivors waited out a timeout";
  expect_oracle(o, s, 2);
}

// A member lost while the others compute costs them nothing: the controller re-forms the
// step's quorum without it, and they reduce the gradients they computed under the new one. The
// step commits at its first attempt with no gradient computed twice, and the lost member's
// samples go to the next step. To have the loss land before the others reduce, whatever the
// machine's speed, every replica is stopped as the step begins and the others continued only
// once the controller has re-formed the quorum.
TEST(FtDdp, AMemberKilledDuringTheComputationLeavesItsStepToTheOthers) {
  auto procs = this_host().spawn_procs({{"replicas", 3}}, "regroup");
  auto o = small(8);
  o.model.hidden = 512;  // steps of ~0.3 s here
  o.batch = 256;
  o.respawn = false;
  o.end_with_all_replicas = false;
  FtDdp ddp(procs, o);
  std::thread killer;
  auto go_on = [&] {
    ::kill(pid_of(procs, 0), SIGCONT);
    ::kill(pid_of(procs, 2), SIGCONT);
  };
  ddp.on_step([&](const StepRecord& r, std::size_t) {
    if (r.step != 3) return;
    for (std::size_t i = 0; i < 3; ++i) ::kill(pid_of(procs, i), SIGSTOP);
    killer = std::thread([&, pid = pid_of(procs, 1)] {
      std::this_thread::sleep_for(50ms);  // the step's calls are sent meanwhile
      ::kill(pid, SIGKILL);
      std::this_thread::sleep_for(400ms);
      go_on();  // (in case the controller never re-forms the quorum: the test fails below)
    });
  });
  ddp.on_event([&](const Event& e) {
    if (e.kind == Event::Kind::kRegrouped) go_on();
  });
  Summary s = ddp.run();
  if (killer.joinable()) killer.join();
  ASSERT_EQ(s.steps.size(), o.steps);
  const StepRecord& lost = s.steps[4];
  EXPECT_EQ(lost.members, (std::vector<std::size_t>{0, 2}));
  EXPECT_EQ(lost.attempts, 1u);
  EXPECT_EQ(lost.regroups, 1u);
  EXPECT_EQ(s.attempted, o.steps);
  EXPECT_EQ(s.regroups, 1u);
  EXPECT_EQ(s.gradients_computed, s.gradients_committed + 1) << "only the lost member's gradient is lost";
  bool regrouped = false;
  for (auto& e : s.events) {
    EXPECT_NE(e.kind, Event::Kind::kRetried) << e.what;
    regrouped |= e.kind == Event::Kind::kRegrouped && e.replica == 1 && e.step == 4;
  }
  EXPECT_TRUE(regrouped);
  // Every block handed out is committed once, the lost member's by the step after.
  std::set<std::uint64_t> blocks;
  for (auto& r : s.steps) blocks.insert(r.first.begin(), r.first.end());
  ASSERT_FALSE(blocks.empty());
  EXPECT_EQ(*blocks.rbegin(), (blocks.size() - 1) * o.batch) << "a sample block was skipped";
  EXPECT_EQ(s.steps[5].first.front(), s.steps[3].first.back() + 2 * o.batch) << "the lost block is not trained next";
  expect_oracle(o, s, 2);
}

// A member lost while the others already wait for it in the reduction costs them that
// reduction only: they go on under the re-formed quorum with the gradients they computed, and
// the step commits (counted as two attempts: the first quorum had begun to reduce). Here the
// member is stopped as its step begins (the others' gradients take a few ms), and killed 200 ms
// later.
TEST(FtDdp, AMemberKilledWhileTheOthersReduceCostsThemOnlyTheReduction) {
  auto procs = this_host().spawn_procs({{"replicas", 3}}, "regroup-reducing");
  auto o = small(8);
  o.respawn = false;
  o.end_with_all_replicas = false;
  o.collective_timeout = 60s;  // the others wait in the reduction until the kill, not a timeout
  FtDdp ddp(procs, o);
  std::thread killer;
  ddp.on_step([&](const StepRecord& r, std::size_t) {
    if (r.step != 3) return;
    const int pid = pid_of(procs, 1);
    ::kill(pid, SIGSTOP);
    killer = std::thread([pid] {
      std::this_thread::sleep_for(200ms);
      ::kill(pid, SIGKILL);
    });
  });
  Summary s = ddp.run();
  if (killer.joinable()) killer.join();
  ASSERT_EQ(s.steps.size(), o.steps);
  const StepRecord& lost = s.steps[4];
  EXPECT_EQ(lost.members, (std::vector<std::size_t>{0, 2}));
  EXPECT_EQ(lost.regroups, 1u);
  EXPECT_EQ(lost.attempts, 2u) << "the others had begun to reduce";
  for (double ms : lost.reduce_ms) EXPECT_GT(ms, 100.0) << "a survivor did not wait in the reduction";
  EXPECT_EQ(s.attempted, o.steps + 1);
  EXPECT_EQ(s.gradients_computed, s.gradients_committed + 1) << "a survivor computed its gradient twice";
  for (auto& e : s.events) EXPECT_NE(e.kind, Event::Kind::kRetried) << e.what;
  expect_oracle(o, s, 2);
}

// Every member's rendezvous begins with its step, not after its gradient: a member that computes
// for longer than the rendezvous timeout (here on 512 times the samples) does not fail its quorum.
TEST(FtDdp, AMemberThatComputesLongerThanTheRendezvousTimeoutDoesNotFailItsQuorum) {
  auto procs = this_host().spawn_procs({{"replicas", 2}}, "uneven");
  auto o = small(1);
  o.model.hidden = 1024;
  o.rendezvous_timeout = 300ms;
  o.collective_timeout = 120s;
  auto store = Proc::current().spawn<StoreActor>("rendezvous-uneven");
  auto replicas = procs.spawn<Replica>("replica", o, store);
  auto fast = replicas.at(0).call<&Replica::step>(StepPlan{.step = 0, .quorum = 1, .rank = 0, .size = 2, .first = 0, .count = 8});
  auto slow = replicas.at(1).call<&Replica::step>(StepPlan{.step = 0, .quorum = 1, .rank = 1, .size = 2, .first = 8, .count = 4096});
  StepReply a = fast.get(300s), b = slow.get(300s);
  ASSERT_GT(b.compute_ms, 3 * 300.0) << "the slow member's gradient took too little time to show anything";
  EXPECT_TRUE(a.ok) << a.error;
  EXPECT_TRUE(b.ok) << b.error;
  EXPECT_LT(a.compute_ms, b.compute_ms);
}

// A snapshot of a model on the CPU is served from the donor's live tensors until its next commit,
// which first copies what its healer has not fetched. Here the transfer (tiny chunks, one in
// flight, some across two tensors) lasts many steps, so the donor commits during it.
TEST(FtDdp, ADonorThatCommitsDuringATransferServesTheStateOfItsSnapshot) {
  auto procs = this_host().spawn_procs({{"replicas", 2}}, "live");
  auto o = small(300);
  o.chunk_bytes = 100;
  o.chunks_in_flight = 1;
  FtDdp ddp(procs, o);
  ddp.on_step([&](const StepRecord& r, std::size_t) {
    if (r.step == 5) ::kill(pid_of(procs, 1), SIGKILL);
  });
  Summary s = ddp.run();
  std::uint64_t healing = 0, joined = 0;
  for (auto& e : s.events) {
    if (e.kind == Event::Kind::kHealing) healing = e.step;
    if (e.kind == Event::Kind::kJoined) joined = e.step;
    EXPECT_NE(e.kind, Event::Kind::kHealFailed) << e.what;
  }
  ASSERT_EQ(s.heals, 1u);
  EXPECT_GT(joined, healing + 1) << "the donor did not commit during the transfer";
  expect_oracle(o, s, 2);
}

// Whether supervision's heartbeat found a failure (a frozen proc: nothing crashed).
bool heartbeat_found(const Summary& s) {
  for (auto& e : s.events)
    if (e.what.find("heartbeat") != std::string::npos) return true;
  return false;
}

TEST(FtDdp, AFrozenReplicaIsDroppedAndReplaced) {
  auto procs = this_host().spawn_procs({{"replicas", 3}}, "frozen");
  auto o = small(40);
  FtDdp ddp(procs, o);
  ddp.on_step([&](const StepRecord& r, std::size_t) {
    if (r.step == 5) ::kill(pid_of(procs, 2), SIGSTOP);
  });
  Summary s = ddp.run();
  EXPECT_GE(s.failures, 1u);
  EXPECT_TRUE(heartbeat_found(s)) << "the frozen replica was not found by its heartbeat";
  expect_oracle(o, s, 2);
}

// A fault during a heal: replica `first` is killed after step 5, and when its replacement
// begins to heal, `sig` goes to the healer, or to the donor (replica 0, the first live member).
// SIGSTOP is a freeze: no crash for anyone to see, only a proc that stops answering, found by
// its heartbeat. Returns the run's summary; `hit` says whether the second fault was sent.
enum class During { kHealer, kDonor };
Summary fault_during_heal(const std::string& name, TrainOptions o, std::size_t first, int sig, During whom, bool& hit) {
  auto procs = this_host().spawn_procs({{"replicas", 3}}, name);
  FtDdp ddp(procs, o);
  hit = false;
  ddp.on_step([&](const StepRecord& r, std::size_t) {
    if (r.step == 5) ::kill(pid_of(procs, first), SIGKILL);
  });
  ddp.on_event([&](const Event& e) {
    if (e.kind == Event::Kind::kHealing && !hit) {
      hit = true;
      ::kill(pid_of(procs, whom == During::kHealer ? e.replica : 0), sig);
    }
  });
  return ddp.run();
}

TEST(FtDdp, AReplicaKilledWhileHealingHealsAgain) {
  auto o = small(60);
  o.chunks_in_flight = 1;
  bool hit;
  Summary s = fault_during_heal("reheal", o, 1, SIGKILL, During::kHealer, hit);
  EXPECT_TRUE(hit);
  EXPECT_GE(s.failures, 2u);
  expect_oracle(o, s, 2);
}

TEST(FtDdp, ADonorKilledWhileAPeerHealsFromItLeavesTheOthersTraining) {
  auto o = small(60);
  bool hit;
  Summary s = fault_during_heal("donor", o, 2, SIGKILL, During::kDonor, hit);
  EXPECT_TRUE(hit);
  expect_oracle(o, s, 1);
}

TEST(FtDdp, AReplicaFrozenWhileHealingIsReplacedAndHealsAgain) {
  auto o = small(40);
  o.chunks_in_flight = 1;
  bool hit;
  Summary s = fault_during_heal("frozen-healer", o, 1, SIGSTOP, During::kHealer, hit);
  EXPECT_TRUE(hit);
  EXPECT_TRUE(heartbeat_found(s)) << "the frozen healer was not found by its heartbeat";
  EXPECT_GE(s.heals, 1u) << "no replacement healed after the frozen one";
  // The survivors took part in every committed step.
  for (auto& r : s.steps) {
    EXPECT_NE(std::find(r.members.begin(), r.members.end(), 0u), r.members.end());
    EXPECT_NE(std::find(r.members.begin(), r.members.end(), 2u), r.members.end());
  }
  expect_oracle(o, s, 3);
}

TEST(FtDdp, ADonorFrozenWhileAPeerHealsFromItIsReplacedAndTheOthersTrainOn) {
  auto o = small(40);
  o.chunks_in_flight = 1;
  bool hit;
  Summary s = fault_during_heal("frozen-donor", o, 2, SIGSTOP, During::kDonor, hit);
  EXPECT_TRUE(hit);
  EXPECT_TRUE(heartbeat_found(s)) << "the frozen donor was not found by its heartbeat";
  expect_oracle(o, s, 1);
}

TEST(FtDdp, BelowTheMinimumTrainingPausesUntilAReplacementJoins) {
  auto procs = this_host().spawn_procs({{"replicas", 2}}, "pause");
  auto o = small(30);
  o.min_replicas = 2;
  FtDdp ddp(procs, o);
  ddp.on_step([&](const StepRecord& r, std::size_t) {
    if (r.step == 10) ::kill(pid_of(procs, 1), SIGKILL);
  });
  Summary s = ddp.run();
  bool paused = false, resumed = false;
  for (auto& e : s.events) {
    paused |= e.kind == Event::Kind::kPaused;
    resumed |= e.kind == Event::Kind::kResumed;
  }
  EXPECT_TRUE(paused);
  EXPECT_TRUE(resumed);
  for (auto& r : s.steps) EXPECT_EQ(r.members.size(), 2u) << "step " << r.step << " ran below the minimum";
  expect_oracle(o, s, 2);
}

// --- checkpoints ------------------------------------------------------------------------------
struct CheckpointDir {
  std::string path;
  CheckpointDir() {
    char t[] = "/tmp/sceptre-ftckpt-XXXXXX";
    path = ::mkdtemp(t);
  }
  ~CheckpointDir() {
    ::umount2(path.c_str(), MNT_DETACH);  // when it was a tmpfs
    std::filesystem::remove_all(path);
  }
};

std::size_t count(const Summary& s, Event::Kind kind) {
  return static_cast<std::size_t>(
      std::count_if(s.events.begin(), s.events.end(), [&](const Event& e) { return e.kind == kind; }));
}

// A checkpoint still being written when the next one is due makes that one skipped (and
// reported). Steps of the small model take a few ms, its persist (fsync) tens: a test that counts
// checkpoints gives each time to persist, here 0.5 s two steps before the next one is due.
void pace_checkpoints(const StepRecord& r, std::uint64_t steps) {
  if (r.step % 10 == 8 || r.step + 2 == steps) std::this_thread::sleep_for(500ms);
}

TEST(FtDdpCheckpoint, AKilledJobResumesFromItsCheckpointAsIfNeverStopped) {
  CheckpointDir dir;
  auto o = small(30);
  o.checkpoint.dir = dir.path;
  o.checkpoint.every = 10;
  Summary first;
  {
    auto procs = this_host().spawn_procs({{"replicas", 3}}, "ckpt-a");
    FtDdp ddp(procs, o);
    // A replica killed once the checkpoint of step 10 is on disk (killed while it persists, a
    // writer abandons that checkpoint: the next test).
    bool persisted = false, killed = false;
    ddp.on_event([&](const Event& e) { persisted |= e.kind == Event::Kind::kCheckpointed && e.step == 10; });
    ddp.on_step([&](const StepRecord& r, std::size_t) {
      pace_checkpoints(r, o.steps);
      if (persisted && !killed) {
        killed = true;
        ::kill(pid_of(procs, 1), SIGKILL);
      }
    });
    first = ddp.run();
    EXPECT_TRUE(killed);
    expect_oracle(o, first, 2);
    EXPECT_EQ(first.start_step, 0u);
    EXPECT_EQ(first.checkpoints, 3u);  // steps 10, 20 and the end
    EXPECT_EQ(first.checkpoint_failures, 0u);
    for (auto r : first.digests) ::kill(pid_of(procs, r.first), SIGKILL);  // the job is gone
  }
  // The newest is corrupted on disk: the second job passes over it, with a warning.
  auto found = find_checkpoints(dir.path, nullptr);
  ASSERT_EQ(found.size(), 3u) << "keep 3";
  ASSERT_EQ(found[0].manifest.step, 30u);
  {
    std::string shard = found[0].dir + "/" + found[0].manifest.shards[0].file;
    std::fstream f(shard, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(-7, std::ios::end);
    f.put('\x5a');
  }
  auto o2 = o;
  o2.steps = 45;
  auto procs = this_host().spawn_procs({{"replicas", 3}}, "ckpt-b");
  FtDdp ddp(procs, o2);
  ddp.on_step([&](const StepRecord& r, std::size_t) { pace_checkpoints(r, o2.steps); });
  Summary second = ddp.run();
  EXPECT_EQ(second.start_step, 20u);
  EXPECT_EQ(count(second, Event::Kind::kRestored), 1u);
  bool warned = false;
  for (auto& e : second.events)
    warned |= e.kind == Event::Kind::kCheckpointSkipped && e.what.find("checksum") != std::string::npos;
  EXPECT_TRUE(warned) << "the corrupt checkpoint was not reported";
  expect_oracle(o2, second, 3, first.steps);
  EXPECT_EQ(find_checkpoints(dir.path, nullptr).front().manifest.step, 45u);
}

TEST(FtDdpCheckpoint, AWriterKilledWhilePersistingAbandonsOnlyThatCheckpoint) {
  CheckpointDir dir;
  auto procs = this_host().spawn_procs({{"replicas", 3}}, "ckpt-kill");
  auto o = small(40);
  o.checkpoint.dir = dir.path;
  o.checkpoint.every = 10;
  FtDdp ddp(procs, o);
  bool killed = false;
  ddp.on_event([&](const Event& e) {
    // The copies are made and the writes not yet begun: the writer dies during the persist.
    if (e.kind == Event::Kind::kCheckpointing && e.step == 10 && !killed) {
      killed = true;
      ::kill(pid_of(procs, 2), SIGKILL);
    }
  });
  Summary s = ddp.run();
  EXPECT_TRUE(killed);
  // Under load, checkpoint 20 may be skipped (and reported) if replica 2's death is noticed only
  // after step 20: until then checkpoint 10 counts as still being written.
  std::size_t skipped = 0;
  bool abandoned = false;
  for (auto& e : s.events) {
    abandoned |= e.kind == Event::Kind::kCheckpointFailed && e.step == 10;
    skipped += e.kind == Event::Kind::kCheckpointFailed && e.what.find("skipped") != std::string::npos;
  }
  EXPECT_LE(skipped, 1u);
  EXPECT_EQ(s.checkpoint_failures, 1u + skipped);
  EXPECT_TRUE(abandoned);
  EXPECT_FALSE(std::filesystem::exists(dir.path + "/" + checkpoint_name(10))) << "the abandoned files stayed";
  EXPECT_EQ(s.checkpoints, 3u - skipped);  // 20 (unless skipped), 30 and the end
  expect_oracle(o, s, 2);
  auto found = find_checkpoints(dir.path, nullptr);
  ASSERT_FALSE(found.empty());
  EXPECT_EQ(found.front().manifest.step, 40u);
}

TEST(FtDdpCheckpoint, AFullDiskIsReportedAndNeitherStopsTrainingNorHarmsTheLastCheckpoint) {
  if (::geteuid() != 0) GTEST_SKIP() << "mounting a small tmpfs needs root";
  CheckpointDir dir;
  // Room for one checkpoint of this model (about 85 kB in 3 shards), not for two.
  ASSERT_EQ(::mount("tmpfs", dir.path.c_str(), "tmpfs", 0, "size=128k"), 0) << std::strerror(errno);
  auto o = small(30);
  o.checkpoint.dir = dir.path;
  o.checkpoint.every = 10;
  Summary s;
  {
    auto procs = this_host().spawn_procs({{"replicas", 3}}, "ckpt-full");
    FtDdp ddp(procs, o);
    s = ddp.run();
    for (auto r : s.digests) ::kill(pid_of(procs, r.first), SIGKILL);
  }
  expect_oracle(o, s, 3);
  EXPECT_EQ(s.checkpoints, 1u);
  EXPECT_EQ(s.checkpoint_failures, 2u);  // 20 and the end
  bool no_space = false;
  for (auto& e : s.events)
    no_space |= e.kind == Event::Kind::kCheckpointFailed && e.what.find("No space") != std::string::npos;
  EXPECT_TRUE(no_space) << "the full disk was not reported";
  // The checkpoint of step 10 is whole: a new job resumes from it.
  auto o2 = o;
  o2.steps = 15;
  auto procs = this_host().spawn_procs({{"replicas", 3}}, "ckpt-full-b");
  FtDdp ddp(procs, o2);
  Summary resumed = ddp.run();
  EXPECT_EQ(resumed.start_step, 10u);
  expect_oracle(o2, resumed, 3, s.steps);
}

TEST(ReplicaCore, StateRoundTripsBitwiseAndBadBytesAreRefused) {
  TrainOptions o = small(1);
  ReplicaCore a(o.model), b(o.model);
  for (std::uint64_t step = 0; step < 3; ++step) {
    float loss = 0;
    auto g = a.local_gradients(step * 32, 32, &loss);
    a.apply(g, 1);
  }
  EXPECT_NE(a.digest(), b.digest());
  std::string bytes = a.save();
  b.load(bytes);
  EXPECT_EQ(a.digest(), b.digest());
  EXPECT_EQ(b.step(), 3u);
  // The same next step on both: still equal (optimizer state came along).
  auto g = a.local_gradients(96, 32, nullptr);
  a.apply(g, 1);
  b.apply(b.local_gradients(96, 32, nullptr), 1);
  EXPECT_EQ(a.digest(), b.digest());

  ReplicaCore c(o.model);
  auto before = c.digest();
  EXPECT_THROW(c.load(bytes.substr(0, bytes.size() / 2)), std::runtime_error);
  EXPECT_THROW(c.load("garbage"), std::runtime_error);
  EXPECT_THROW(c.load(bytes + "x"), std::runtime_error);
  EXPECT_EQ(c.digest(), before) << "a refused state changed the replica";
}

// Dropout's masks are drawn for the samples, not from a generator's running state: the same
// block gives the same bits on another replica and on a second computation.
TEST(ReplicaCore, DropoutMasksAreAFunctionOfTheSampleBlock) {
  ModelSpec spec = small(1).model;
  ModelSpec plain = spec;
  spec.dropout = 0.5;
  ReplicaCore a(spec), b(spec), none(plain);
  auto g = a.local_gradients(64, 32, nullptr);
  EXPECT_EQ(a.local_gradients(64, 32, nullptr), g) << "a second computation drew other masks";
  b.local_gradients(0, 32, nullptr);  // another history of draws
  EXPECT_EQ(b.local_gradients(64, 32, nullptr), g) << "another replica drew other masks for the same block";
  EXPECT_NE(none.local_gradients(64, 32, nullptr), g) << "dropout changed nothing";
  spec.dropout = 1.0;
  EXPECT_THROW(ReplicaCore{spec}, std::invalid_argument);
  spec.dropout = -0.1;
  EXPECT_THROW(ReplicaCore{spec}, std::invalid_argument);
}

TEST(ReplicaCore, SaveWritesIntoTheBufferItIsGiven) {
  ReplicaCore a(small(1).model);
  std::string out(a.state_bytes(), 'x');  // a buffer already touched, as a state server keeps one
  const char* before = out.data();
  a.save(out);
  EXPECT_EQ(out.data(), before) << "save() gave up the buffer it was given";
  EXPECT_EQ(out, a.save());
}

TEST(ReplicaCore, TheDeviceIsChosenAndOneNotThereIsAClearError) {
  const ModelSpec spec = small(1).model;
  EXPECT_THROW(ReplicaCore(spec, "tpu"), std::invalid_argument);
  ReplicaCore cpu(spec, "cpu");
  EXPECT_EQ(cpu.device(), "cpu");
  EXPECT_FALSE(cpu.on_gpu());
  EXPECT_THROW(cpu.sum_buffer(), std::logic_error);
  EXPECT_EQ(ReplicaCore(spec, "auto").device(), ReplicaCore::gpu_available() ? "cuda:0" : "cpu");
  if (!ReplicaCore::gpu_available()) {
    try {
      ReplicaCore gpu(spec, "cuda");
      ADD_FAILURE() << "a model on a GPU this libtorch does not see";
    } catch (const std::runtime_error& e) {
      EXPECT_NE(std::string(e.what()).find("this libtorch sees no GPU"), std::string::npos) << e.what();
    }
  }
}

// With a CUDA or ROCm libtorch on a GPU machine (scripts/gpu-check): the state's bytes do not
// depend on the device, and a step through the device sum equals one through host memory.
TEST(ReplicaCore, OnAGpuTheStateMovesToAndFromTheCpuBitwise) {
  if (!ReplicaCore::gpu_available()) GTEST_SKIP() << "this libtorch sees no GPU";
  const ModelSpec spec = small(1).model;
  ReplicaCore gpu(spec, "cuda"), host(spec, "cpu"), other(spec, "cuda");
  EXPECT_EQ(gpu.device(), "cuda:0");
  EXPECT_EQ(gpu.digest(), host.digest()) << "the initial weights depend on the device";
  for (std::uint64_t step = 0; step < 3; ++step) {
    gpu.compute(step * 32, 32);
    auto sum = gpu.sum_buffer();
    EXPECT_EQ(sum.size(), gpu.parameter_count());
    std::vector<float> via_host(gpu.parameter_count());
    gpu.sum_to(via_host);
    gpu.apply_sum(1);
    other.apply(other.local_gradients(step * 32, 32, nullptr), 1);
  }
  EXPECT_EQ(gpu.digest(), other.digest()) << "the device sum and the host sum stepped differently";
  host.load(gpu.save());
  EXPECT_EQ(host.digest(), gpu.digest());
  ReplicaCore back(spec, "cuda");
  back.load(host.save());
  EXPECT_EQ(back.digest(), gpu.digest());
  EXPECT_EQ(back.tensors().size(), host.tensors().size());
}

}  // namespace
}  // namespace sceptre::train

int main(int argc, char** argv) {
  auto config = sceptre::Config::load();
  if (!config) return 2;
  if (!std::getenv("SCEPTRE_HEARTBEAT_TIMEOUT")) config->heartbeat_timeout = std::chrono::seconds(3);
  sceptre::Runtime runtime(argc, argv, *config);
  ::testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}
