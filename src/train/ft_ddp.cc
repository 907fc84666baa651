// The controller of fault-tolerant data parallelism: quorum, step commit, sample plan, respawn
// and healing. Runs in the controller; no libtorch here.
#include "sceptre/train/ft_ddp.h"

#include <signal.h>

#include <algorithm>
#include <condition_variable>
#include <deque>
#include <filesystem>
#include <future>
#include <mutex>
#include <set>
#include <thread>

#include <nlohmann/json.hpp>

#include "sceptre/actor/proc.h"

namespace sceptre::train {

using Clock = std::chrono::steady_clock;

namespace {
enum class Status { kLive, kDead, kFresh, kHealing };

// What a checkpoint's state depends on besides its bytes: resuming with another model or batch
// (the data position is in samples of blocks of `batch`) is refused.
std::string model_json(const TrainOptions& o) {
  const auto& m = o.model;
  return nlohmann::json{{"inputs", m.inputs},   {"hidden", m.hidden},
                        {"classes", m.classes}, {"seed", m.seed},
                        {"learning_rate", m.learning_rate}, {"dropout", m.dropout}, {"batch", o.batch}}
      .dump();
}

void check_choice(const char* option, const std::string& value, std::initializer_list<std::string_view> allowed) {
  if (std::find(allowed.begin(), allowed.end(), value) != allowed.end()) return;
  std::string list;
  for (auto a : allowed) list += (list.empty() ? "" : ", ") + std::string(a);
  throw std::invalid_argument(std::string("TrainOptions::") + option + " is \"" + value + "\", not one of " + list);
}

std::string megabytes(std::uint64_t bytes) {
  char b[32];
  std::snprintf(b, sizeof b, "%.1f MB", bytes / 1e6);
  return b;
}
}  // namespace

struct FtDdp::State {
  ProcMesh procs;
  TrainOptions options;
  ActorRef<StoreActor> store;
  ActorMesh<Replica> replicas;
  ActorMesh<CollectiveAbort> aborts;
  std::function<void(const Event&)> on_event;
  std::function<void(const StepRecord&, std::size_t)> on_step;

  std::mutex mu;
  std::condition_variable cv;
  std::vector<Status> status;
  std::vector<int> pids;  // of each rank's proc as this controller knows it (set at respawn)
  std::deque<std::size_t> to_respawn;
  std::vector<Event> events;  // not yet delivered to on_event
  bool stopping = false;
  bool cancelled = false;
  std::uint64_t quorums = 0;  // ids given out: a new quorum takes the next
  // The step attempt in flight: its quorum and members (none between attempts, and once its
  // outcome is decided).
  std::uint64_t flight_quorum = 0;
  std::vector<std::size_t> flight_members;
  std::thread respawner;

  std::uint64_t new_quorum() {
    std::lock_guard lock(mu);
    return ++quorums;
  }

  // Member `r` of the attempt in flight is lost. If enough members are left, the attempt goes
  // on without it under a new quorum of the others, who keep their gradients and only sum them
  // again (a loss during the computation costs them nothing); else the others' quorum is only
  // aborted, and the step is discarded and retried. Either way they stop waiting for `r` now,
  // not at their collectives' deadline. Called both by supervision and by the controller when
  // a call to `r` fails, whichever learns of it first; once for each member.
  void drop_from_flight(std::size_t r, const std::string& why) {
    std::vector<std::pair<std::size_t, std::optional<Regroup>>> notices;
    std::uint64_t from = 0;
    {
      std::lock_guard lock(mu);
      auto& in = flight_members;
      if (std::find(in.begin(), in.end(), r) == in.end()) return;
      from = flight_quorum;
      std::vector<std::size_t> rest;
      for (auto m : in)
        if (m != r && status[m] == Status::kLive) rest.push_back(m);
      if (rest.size() >= std::max<std::size_t>(1, options.min_replicas)) {
        flight_quorum = ++quorums;
        flight_members = rest;
        for (std::size_t i = 0; i < rest.size(); ++i) notices.emplace_back(rest[i], Regroup{flight_quorum, i, rest.size()});
        events.push_back(Event{Event::Kind::kRegrouped, 0, r,
                               "replica " + std::to_string(r) + " lost during the step: " + std::to_string(rest.size()) +
                                   " members go on under quorum " + std::to_string(flight_quorum),
                               Clock::now()});
      } else {
        for (auto m : in)
          if (m != r) notices.emplace_back(m, std::nullopt);
      }
    }
    for (auto& [m, next] : notices) {
      try {
        aborts.at(m).send<&CollectiveAbort::abort>(from, why, next);
      } catch (const std::exception&) {  // (that one is gone too: supervision reports it)
      }
    }
  }

  void event(Event::Kind kind, std::uint64_t step, std::size_t replica, std::string what, std::uint64_t bytes = 0,
             double seconds = 0, double stall_ms = 0) {
    std::lock_guard lock(mu);
    events.push_back(Event{kind, step, replica, std::move(what), Clock::now(), bytes, seconds, stall_ms});
  }

  std::vector<std::size_t> live() {
    std::vector<std::size_t> v;
    std::lock_guard lock(mu);
    for (std::size_t r = 0; r < status.size(); ++r)
      if (status[r] == Status::kLive) v.push_back(r);
    return v;
  }

  bool is_live(std::size_t r) {
    std::lock_guard lock(mu);
    return status[r] == Status::kLive;
  }

  int pid_of(std::size_t r) {
    std::lock_guard lock(mu);
    return pids[r];
  }

  // A replica is out: its proc `pid` (what rank r had when the failed call was made) is killed if
  // it is not already gone (a call that timed out), so supervision reports it and it is respawned.
  // A rank whose proc is a new one by now is left alone: that one did nothing wrong.
  // (Its failure is counted when supervision reports it.)
  void lost(std::size_t r, int pid) {
    {
      std::lock_guard lock(mu);
      if (pids[r] != pid || status[r] == Status::kDead) return;
      status[r] = Status::kDead;
    }
    if (pid > 0) ::kill(pid, SIGKILL);
  }

  void respawn_loop() {
    std::unique_lock lock(mu);
    for (;;) {
      cv.wait(lock, [&] { return stopping || !to_respawn.empty(); });
      if (stopping) return;
      auto r = to_respawn.front();
      to_respawn.pop_front();
      lock.unlock();
      std::string failed;
      int pid = 0;
      try {
        procs.respawn({r});
        pid = procs.pid(r);
      } catch (const std::exception& e) {
        failed = e.what();
      }
      lock.lock();
      if (stopping) return;
      if (failed.empty()) {
        pids[r] = pid;
        status[r] = Status::kFresh;
        events.push_back(Event{Event::Kind::kRespawned, 0, r, "replica respawned", Clock::now()});
      } else {
        events.push_back(Event{Event::Kind::kFailed, 0, r, "respawn failed: " + failed, Clock::now()});
        to_respawn.push_back(r);  // the next failure report, or this retry, brings it back
        lock.unlock();
        std::this_thread::sleep_for(std::chrono::seconds(1));
        lock.lock();
      }
    }
  }
};

FtDdp::FtDdp(ProcMesh procs, TrainOptions options) : state_(std::make_shared<State>()) {
  auto& s = *state_;
  s.procs = std::move(procs);
  s.options = std::move(options);
  s.status.assign(s.procs.size(), Status::kLive);
  for (std::size_t r = 0; r < s.procs.size(); ++r) s.pids.push_back(s.procs.pid(r));
  s.store = Proc::current().spawn<StoreActor>("rendezvous");
  std::weak_ptr<State> weak = state_;
  s.procs.on_failure([weak](const MeshFailure& f) {
    auto st = weak.lock();
    if (!st) return Supervise::kHandled;
    {
      std::lock_guard lock(st->mu);
      st->status[f.rank] = Status::kDead;
      st->events.push_back(Event{Event::Kind::kFailed, 0, f.rank, f.summary(), f.when});
      if (st->options.respawn) st->to_respawn.push_back(f.rank);
    }
    st->cv.notify_all();
    st->drop_from_flight(f.rank, "replica " + std::to_string(f.rank) + " failed");
    return Supervise::kHandled;
  });
  check_choice("device", s.options.device, {"auto", "cpu", "cuda"});
  check_choice("collective", s.options.collective, {"auto", "gloo", "nccl"});
  s.replicas = s.procs.spawn<Replica>("replica", s.options, s.store);
  s.aborts = s.procs.spawn<CollectiveAbort>("collective-abort", s.store);
  s.respawner = std::thread([st = state_.get()] { st->respawn_loop(); });
}

FtDdp::~FtDdp() {
  {
    std::lock_guard lock(state_->mu);
    state_->stopping = true;
  }
  state_->cv.notify_all();
  if (state_->respawner.joinable()) state_->respawner.join();
}

void FtDdp::on_event(std::function<void(const Event&)> fn) { state_->on_event = std::move(fn); }
void FtDdp::on_step(std::function<void(const StepRecord&, std::size_t)> fn) { state_->on_step = std::move(fn); }
void FtDdp::cancel() {
  std::lock_guard lock(state_->mu);
  state_->cancelled = true;
}

// The controller's side of checkpoints: capture at a step boundary, persist in the background
// (polled at step boundaries), manifest last, prune; and the resume at start.
class Checkpointer {
 public:
  Checkpointer(FtDdp::State& s, Summary& sum) : s_(s), sum_(sum), c_(s.options.checkpoint) {}
  bool enabled() const { return !c_.dir.empty(); }

  // Captures the committed state of step `step` on `writers`; returns once the copies are made.
  // `deliver` runs when the stall is over, before the writes begin.
  void start(std::uint64_t step, std::vector<std::size_t> writers, DataPosition data,
             const std::function<void()>& deliver) {
    if (!enabled() || step == last_step_ || writers.empty()) return;
    poll();
    if (flight_) {
      fail(step, "skipped: the checkpoint of step " + std::to_string(flight_->step) + " is still being written");
      return;
    }
    std::string dir = c_.dir + "/" + checkpoint_name(step);
    remove_checkpoint(dir);  // an earlier run's, newer than the one it resumed from: not complete
    std::error_code ec;
    std::filesystem::create_directories(dir, ec);
    if (ec) {
      fail(step, "cannot create " + dir + ": " + ec.message());
      return;
    }
    if (c_.writers > 0 && writers.size() > c_.writers) writers.resize(c_.writers);
    const auto& o = s_.options;
    auto t0 = Clock::now();
    std::vector<Future<Captured>> captures;
    std::vector<int> writer_pids;
    for (std::size_t k = 0; k < writers.size(); ++k) {
      writer_pids.push_back(s_.pid_of(writers[k]));
      captures.push_back(
          s_.replicas.at(writers[k]).call<&Replica::capture>(CheckpointPlan{step, dir, k, writers.size()}));
    }
    Flight f;
    f.step = step;
    f.dir = dir;
    f.manifest = Manifest{step, model_json(o), std::move(data), {}};
    f.writers = writers;
    std::string why;
    for (std::size_t k = 0; k < writers.size(); ++k) {
      try {
        f.captured.push_back(captures[k].get(o.step_timeout));
        f.bytes += f.captured.back().bytes;
      } catch (const std::exception& e) {
        why = "writer replica " + std::to_string(writers[k]) + " lost during the copy: " + e.what();
        s_.lost(writers[k], writer_pids[k]);
      }
    }
    double stall_ms = std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
    if (!why.empty()) {
      remove_checkpoint(dir);
      fail(step, why);
      return;
    }
    s_.event(Event::Kind::kCheckpointing, step, 0,
             "checkpoint of step " + std::to_string(step) + ": " + megabytes(f.bytes) + " in " +
                 std::to_string(writers.size()) + " shards copied in " + std::to_string(stall_ms) + " ms, persisting",
             f.bytes, 0, stall_ms);
    deliver();
    f.started = Clock::now();
    for (auto& c : f.captured) f.writes.push_back(c.writer.call<&CheckpointWriter::write>(step));
    f.files.resize(writers.size());
    f.done.assign(writers.size(), false);
    flight_ = std::move(f);
  }

  // At step boundaries: finishes the checkpoint in flight once every shard is written.
  void poll() {
    if (!flight_) return;
    auto& f = *flight_;
    bool all = true;
    for (std::size_t k = 0; k < f.writers.size(); ++k) {
      if (f.done[k]) continue;
      if (f.writes[k].ready()) {
        f.done[k] = true;
        try {
          auto w = f.writes[k].get();
          f.write_seconds = std::max(f.write_seconds, w.seconds);
          if (w.ok) {
            f.files[k] = std::move(w.file);
          } else if (f.why.empty()) {
            f.why = "replica " + std::to_string(f.writers[k]) + ": " + w.error;
          }
        } catch (const std::exception& e) {
          if (f.why.empty()) f.why = "writer replica " + std::to_string(f.writers[k]) + " lost: " + e.what();
        }
      } else if (!s_.is_live(f.writers[k])) {
        f.done[k] = true;  // a dead writer's call may never answer
        if (f.why.empty()) f.why = "writer replica " + std::to_string(f.writers[k]) + " lost while persisting";
      } else {
        all = false;
      }
    }
    if (!all) return;
    double manifest_s = 0;
    if (f.why.empty()) {
      f.manifest.shards = f.files;
      auto t0 = Clock::now();
      if (auto r = write_manifest(f.dir, f.manifest); !r) f.why = r.error().to_string();
      manifest_s = std::chrono::duration<double>(Clock::now() - t0).count();
    }
    if (!f.why.empty()) {
      remove_checkpoint(f.dir);
      fail(f.step, "abandoned: " + f.why);
    } else {
      // The persist: the slowest shard's write and the manifest's (the manifest waits for the
      // step boundary that finds every shard written: `after` counts that too).
      double secs = f.write_seconds + manifest_s;
      double after = std::chrono::duration<double>(Clock::now() - f.started).count();
      auto removed = prune_checkpoints(c_.dir, c_.keep);
      char line[300];
      std::snprintf(line, sizeof line,
                    "checkpoint of step %llu complete: %s persisted in %.3f s (%.2f GB/s), complete %.3f s after the "
                    "copy%s",
                    static_cast<unsigned long long>(f.step), megabytes(f.bytes).c_str(), secs,
                    secs > 0 ? f.bytes / secs / 1e9 : 0.0, after,
                    removed.empty() ? "" : (", " + std::to_string(removed.size()) + " older removed").c_str());
      s_.event(Event::Kind::kCheckpointed, f.step, 0, line, f.bytes, secs);
      ++sum_.checkpoints;
      last_step_ = f.step;
    }
    flight_.reset();
  }

  // Waits for the checkpoint in flight, up to `deadline`.
  void finish(Clock::time_point deadline) {
    while (flight_ && Clock::now() < deadline) {
      poll();
      if (flight_) std::this_thread::sleep_for(std::chrono::milliseconds(2));
    }
    if (flight_) {
      fail(flight_->step, "still being written when run() ended");
      flight_.reset();
    }
  }

  // At start: loads the newest checkpoint that the live replicas can load. Replicas that fail
  // one that others loaded are replaced (they heal from a peer); one that none can load is
  // skipped with a warning.
  std::optional<Manifest> resume(const std::vector<std::size_t>& members) {
    if (!enabled() || !c_.resume) return std::nullopt;
    const auto& o = s_.options;
    std::vector<std::string> skipped;
    auto found = find_checkpoints(c_.dir, &skipped);
    for (auto& why : skipped) s_.event(Event::Kind::kCheckpointSkipped, 0, 0, "skipping " + why);
    auto ours = nlohmann::json::parse(model_json(o));
    for (auto& cand : found) {
      auto theirs = nlohmann::json::parse(cand.manifest.model, nullptr, false);
      if (theirs != ours) {
        throw std::runtime_error("checkpoint " + cand.dir + " was trained with " + cand.manifest.model +
                                 "; this job has " + ours.dump() + " (resume with the same model and batch, or "
                                 "use another checkpoint directory)");
      }
      std::vector<Future<Restored>> loads;
      std::vector<int> pids;
      for (auto r : members) {
        pids.push_back(s_.pid_of(r));
        loads.push_back(s_.replicas.at(r).call<&Replica::restore>(cand.dir, cand.manifest));
      }
      std::vector<std::size_t> failed;  // indices into members
      std::optional<std::uint64_t> digest;
      std::string why;
      for (std::size_t i = 0; i < members.size(); ++i) {
        try {
          auto got = loads[i].get(o.step_timeout);
          if (got.ok && (!digest || *digest == got.digest)) {
            digest = got.digest;
            continue;
          }
          if (why.empty()) why = got.ok ? "replicas loaded different states" : got.error;
        } catch (const std::exception& e) {
          if (why.empty()) why = std::string("replica lost: ") + e.what();
        }
        failed.push_back(i);
      }
      if (!digest) {
        s_.event(Event::Kind::kCheckpointSkipped, cand.manifest.step, 0, "skipping " + cand.dir + ": " + why);
        continue;
      }
      for (auto i : failed) {
        const std::size_t r = members[i];
        s_.event(Event::Kind::kCheckpointSkipped, cand.manifest.step, r,
                 "replica " + std::to_string(r) + " could not load " + cand.dir + " (" + why + "): replaced");
        s_.lost(r, pids[i]);
      }
      s_.event(Event::Kind::kRestored, cand.manifest.step, 0,
               "resumed from " + cand.dir + " (step " + std::to_string(cand.manifest.step) + ")");
      last_step_ = cand.manifest.step;
      return cand.manifest;
    }
    return std::nullopt;
  }

 private:
  struct Flight {
    std::uint64_t step = 0;
    std::string dir;
    Manifest manifest;
    std::vector<std::size_t> writers;
    std::vector<Captured> captured;
    std::uint64_t bytes = 0;
    Clock::time_point started;
    std::vector<Future<ShardWritten>> writes;
    std::vector<ShardFile> files;
    std::vector<bool> done;
    std::string why;  // the first failure
    double write_seconds = 0;  // the slowest shard's
  };

  void fail(std::uint64_t step, const std::string& why) {
    s_.event(Event::Kind::kCheckpointFailed, step, 0, "checkpoint of step " + std::to_string(step) + " " + why);
    ++sum_.checkpoint_failures;
  }

  FtDdp::State& s_;
  Summary& sum_;
  const CheckpointOptions& c_;
  std::optional<Flight> flight_;
  std::uint64_t last_step_ = ~0ull;  // of the last complete (or restored) checkpoint
};

Summary FtDdp::run() {
  auto& s = *state_;
  const auto& o = s.options;
  Summary sum;
  auto t0 = Clock::now();
  auto since = [&] { return std::chrono::duration<double>(Clock::now() - t0).count(); };
  auto deliver = [&] {
    std::vector<Event> out;
    {
      std::lock_guard lock(s.mu);
      out.swap(s.events);
    }
    for (auto& e : out) {
      if ((e.kind == Event::Kind::kFailed || e.kind == Event::Kind::kRegrouped) && e.step == 0) e.step = sum.committed;
      if (e.kind == Event::Kind::kFailed) ++sum.failures;
      if (s.on_event) s.on_event(e);
      sum.events.push_back(std::move(e));
    }
  };

  // The sample plan: blocks of o.batch samples; a block whose step did not commit goes back to
  // the front, so every sample is committed exactly once.
  std::uint64_t cursor = 0;
  std::deque<std::uint64_t> returned;
  std::map<std::size_t, std::uint64_t> assigned;
  Checkpointer checkpoints(s, sum);
  if (auto m = checkpoints.resume(s.live())) {
    sum.start_step = sum.committed = m->step;
    cursor = m->data.cursor;
    returned.assign(m->data.returned.begin(), m->data.returned.end());
  }
  deliver();
  auto take = [&] {
    if (!returned.empty()) {
      auto f = returned.front();
      returned.pop_front();
      return f;
    }
    auto f = cursor;
    cursor += o.batch;
    return f;
  };

  // Healing: one snapshot of one donor serves every replica that is fresh when it is taken.
  // A heal is a transfer of the snapshot, then rounds of replay of the sums committed since,
  // each while the others train on, then a last round that the others wait for. The first round
  // always runs while they train (a fresh process's first optimizer step touches its memory for
  // the first time, several times slower than later ones). The last round replays one step: it
  // begins as soon as that step is decided (its sum is in the donor's log once reduced), while
  // the members commit, so that the others wait at the boundary only for what is left of it.
  // A replica still further behind after kRounds rounds replays the rest in its last round.
  struct Heal {
    std::size_t replica = 0;
    int pid = 0;                       // its proc's
    Future<HealReport> done;           // the transfer, then each round of replay
    bool taken = false;                // `done`'s result is in `at` (and `transfer`) or `failed`
    std::string failed;                // why `done` failed
    bool replaying = false;            // the transfer is over
    HealReport transfer;               // once replaying
    std::size_t rounds = 0;            // of replay, begun
    std::uint64_t at = 0;              // the replica's step, as last reported
    std::optional<Future<HealReport>> last;  // the last round, begun as its step was decided
  };
  constexpr std::size_t kRounds = 4;
  std::optional<std::size_t> donor;
  int donor_pid = 0;
  Snapshot snap;
  std::vector<Heal> heals;
  // Takes a finished transfer or round from its future; false while it runs.
  auto take_report = [](Heal& h) {
    if (h.taken) return true;
    if (!h.done.ready()) return false;
    h.taken = true;
    try {
      auto report = h.done.get();
      if (!h.replaying) h.transfer = report;
      h.replaying = true;
      h.at = report.step;
    } catch (const std::exception& e) {
      h.failed = e.what();
    }
    return true;
  };
  // A round of replay ends with the donor live; if the donor goes while it runs, the healer
  // would wait out its calls, so it is replaced.
  auto await_round = [&](Future<HealReport>& round) {
    auto until = Clock::now() + o.step_timeout;
    while (!round.wait_for(std::chrono::milliseconds(2))) {
      bool gone;
      {
        std::lock_guard lock(s.mu);
        gone = s.status[*donor] != Status::kLive;
      }
      if (gone || Clock::now() >= until) throw std::runtime_error("the donor was lost during the replay");
    }
    round.get();
  };
  // Step `step` is decided (every member reduced it): the last rounds that end with it begin.
  auto decided = [&](std::uint64_t step) {
    for (auto& h : heals) {
      if (h.last || !take_report(h) || !h.failed.empty() || h.rounds == 0) continue;
      if (h.at == step || h.rounds >= kRounds) h.last = s.replicas.at(h.replica).call<&Replica::catch_up>(snap, step + 1);
    }
  };
  // `retry`: the next attempt retries a discarded step, its members' gradients reused. No
  // snapshot is taken before it: its commit follows at once, before the transfer is over, and a
  // commit during a transfer first copies what is left of it (see Replica::snapshot).
  auto heal_step = [&](const std::vector<std::size_t>& live, bool retry) {
    // A donor lost mid-transfer: its healers would wait out their chunk calls; they hold
    // nothing yet, so they are replaced at once and heal again from another peer.
    bool donor_lost = false;
    if (donor) {
      std::lock_guard lock(s.mu);
      donor_lost = s.status[*donor] != Status::kLive;
    }
    if (donor_lost) {
      for (auto& h : heals) {
        s.event(Event::Kind::kHealFailed, sum.committed, h.replica,
                "donor replica " + std::to_string(*donor) + " lost mid-transfer: restarting this heal");
        s.lost(h.replica, h.pid);
      }
      heals.clear();
      donor.reset();
    }
    // Finished transfers and rounds: another round, or the last one and the join.
    for (auto it = heals.begin(); it != heals.end();) {
      if (!it->last && !take_report(*it)) {
        ++it;
        continue;
      }
      std::size_t r = it->replica;
      try {
        if (!it->failed.empty()) throw std::runtime_error(it->failed);
        if (it->last) {
          await_round(*it->last);
        } else if (it->at < sum.committed && it->rounds < kRounds) {  // while the others train on
          ++it->rounds;
          it->done = s.replicas.at(r).call<&Replica::catch_up>(snap, sum.committed);
          it->taken = false;
          ++it;
          continue;
        } else if (it->at < sum.committed) {  // the last round, all of it while the others wait
          auto caught = s.replicas.at(r).call<&Replica::catch_up>(snap, sum.committed);
          await_round(caught);
        }
        {
          std::lock_guard lock(s.mu);
          if (s.status[r] == Status::kHealing) s.status[r] = Status::kLive;
        }
        ++sum.heals;
        const auto& t = it->transfer;
        char line[200];
        std::snprintf(line, sizeof line, "healed from replica %zu: %.1f MB in %.3f s (%.2f GB/s), %llu steps replayed",
                      *donor, t.bytes / 1e6, t.seconds, t.seconds > 0 ? t.bytes / t.seconds / 1e9 : 0.0,
                      static_cast<unsigned long long>(sum.committed - t.step));
        s.event(Event::Kind::kJoined, sum.committed, r, line, t.bytes, t.seconds);
      } catch (const std::exception& e) {
        s.event(Event::Kind::kHealFailed, sum.committed, r, std::string("healing failed: ") + e.what());
        s.lost(r, it->pid);  // it may still be waiting on the donor: a new one heals again
      }
      it = heals.erase(it);
    }
    // The donor's log needs no sum that every healer has replayed (its buffers go back to the pool).
    if (donor && !heals.empty()) {
      std::uint64_t below = ~0ull;
      for (auto& h : heals) below = std::min(below, h.replaying ? h.at : snap.step);
      if (below > snap.step) snap.server.call<&StateServer::forget>(below);
    }
    if (heals.empty() && donor) {
      try {
        s.replicas.at(*donor).call<&Replica::stop_logging>().get(o.step_timeout);
      } catch (const std::exception&) {
      }
      donor.reset();
    }
    // New transfers, from a live member's snapshot at this step boundary.
    std::vector<std::size_t> fresh;
    {
      std::lock_guard lock(s.mu);
      for (std::size_t r = 0; r < s.status.size(); ++r)
        if (s.status[r] == Status::kFresh) fresh.push_back(r);
    }
    if (fresh.empty() || live.empty() || !heals.empty() || retry) return;
    donor = live.front();
    donor_pid = s.pid_of(*donor);
    try {
      snap = s.replicas.at(*donor).call<&Replica::snapshot>(fresh.size()).get(o.step_timeout);
    } catch (const std::exception& e) {
      s.lost(*donor, donor_pid);
      donor.reset();
      return;
    }
    for (auto r : fresh) {
      {
        std::lock_guard lock(s.mu);
        s.status[r] = Status::kHealing;
      }
      Heal h;
      h.replica = r;
      h.pid = s.pid_of(r);
      h.done = s.replicas.at(r).call<&Replica::heal>(snap);
      heals.push_back(std::move(h));
      s.event(Event::Kind::kHealing, sum.committed, r,
              "healing from replica " + std::to_string(*donor) + " at step " + std::to_string(snap.step));
    }
  };

  auto live_now = [&] { return s.live(); };

  std::uint64_t quorum = 0;
  std::vector<std::size_t> last_members;
  bool paused = false, broken = false;
  // Of the step being tried: rounds of step calls (the first retry of a discarded step takes no
  // snapshot for a heal), attempts as StepRecord counts them, and quorums re-formed.
  std::size_t tries = 0, step_attempts = 0, step_regroups = 0;
  while (sum.committed < o.steps) {
    {
      std::lock_guard lock(s.mu);
      if (s.cancelled) break;
    }
    checkpoints.poll();
    // Joins happen here, at the step boundary, before the quorum is formed.
    // (Only the first retry waits: heals are not held back by a step that keeps failing.)
    auto before = live_now();
    heal_step(before, tries == 1 && before.size() >= std::max<std::size_t>(1, o.min_replicas));
    std::vector<std::size_t> members = live_now();
    deliver();
    if (members.size() < std::max<std::size_t>(1, o.min_replicas)) {
      if (!paused) {
        s.event(Event::Kind::kPaused, sum.committed, 0,
                "paused: " + std::to_string(members.size()) + " live replicas, " + std::to_string(o.min_replicas) +
                    " needed");
        paused = true;
      }
      if (members.empty() && heals.empty()) {
        throw std::runtime_error("every replica was lost by step " + std::to_string(sum.committed) +
                                 ": no live peer to heal from (restart from a checkpoint)");
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
      continue;
    }
    if (paused) {
      s.event(Event::Kind::kResumed, sum.committed, 0, "resumed with " + std::to_string(members.size()) + " replicas");
      paused = false;
    }
    if (members != last_members || broken) {
      if (quorum > 0) s.store.send<&StoreActor::erase_prefix>("quorum-" + std::to_string(quorum) + "/");
      quorum = s.new_quorum();
      last_members = members;
      broken = false;
    }
    for (auto it = assigned.begin(); it != assigned.end();) {  // blocks of replicas no longer members
      if (std::find(members.begin(), members.end(), it->first) == members.end()) {
        returned.push_front(it->second);
        it = assigned.erase(it);
      } else {
        ++it;
      }
    }
    for (auto m : members)
      if (!assigned.count(m)) assigned[m] = take();

    // The attempt. A member lost meanwhile is dropped from it (State::drop_from_flight): the
    // others go on under a new quorum, and one whose answer came under a quorum re-formed since
    // is asked again under the new one (its gradient is reused). The step commits once every
    // member of the attempt's quorum, as it is then, has reduced under it; a member that fails
    // in another way discards the attempt, and the step is retried at the next boundary.
    struct Call {
      std::size_t replica = 0;
      int pid = 0;
      Future<StepReply> reply;
      Clock::time_point asked;
      bool open = false, lost = false;
      std::optional<StepReply> got;
    };
    std::map<std::size_t, Call> calls;
    auto ask = [&](Call& c, std::uint64_t q, std::size_t rank, std::size_t size) {
      c.reply = s.replicas.at(c.replica).call<&Replica::step>(
          StepPlan{sum.committed, q, rank, size, assigned[c.replica], o.batch});
      c.asked = Clock::now();
      c.open = true;
      c.got.reset();
    };
    {
      std::lock_guard lock(s.mu);
      s.flight_quorum = quorum;
      s.flight_members = members;
    }
    for (std::size_t i = 0; i < members.size(); ++i) {
      auto& c = calls[members[i]];
      c.replica = members[i];
      c.pid = s.pid_of(members[i]);
      ask(c, quorum, i, members.size());
    }
    ++tries;
    std::set<std::uint64_t> redone;  // quorums of this attempt whose reduction was begun and given up
    std::uint64_t fq = quorum;       // the attempt's quorum and members, as they are now
    std::vector<std::size_t> fm = members;
    std::vector<std::uint64_t> chain{quorum};
    std::string why;
    auto failed = [&](std::size_t r, const std::string& what) {
      why += (why.empty() ? "replica " : "; replica ") + std::to_string(r) + what;
    };
    bool decided_ok = false, done = false;
    while (!done) {
      // The answers that are in.
      for (auto& [r, c] : calls) {
        if (!c.open) continue;
        const bool late = Clock::now() - c.asked >= o.step_timeout;
        if (!c.reply.ready() && !late) continue;
        c.open = false;
        try {
          auto got = c.reply.get(std::chrono::milliseconds(0));  // (late and not in: TimeoutError)
          if (!got.reused) ++sum.gradients_computed;
          for (auto q : got.abandoned) redone.insert(q);
          c.got = std::move(got);
        } catch (const std::exception& e) {
          c.lost = true;
          ++sum.gradients_computed;  // (or begun): lost with it
          s.lost(r, c.pid);
          s.drop_from_flight(r, "replica " + std::to_string(r) + " lost: " + e.what());
          failed(r, std::string(" lost: ") + e.what());
        }
      }
      // The attempt as it is now: decided once complete or failed, and then not re-formed.
      bool complete = true, broke = false;
      {
        std::lock_guard lock(s.mu);
        if (s.flight_quorum != fq) chain.push_back(s.flight_quorum);
        fq = s.flight_quorum;
        fm = s.flight_members;
        for (auto m : fm) {
          auto& c = calls[m];
          if (c.open) {
            complete = false;
          } else if (c.lost || (c.got && !c.got->ok && c.got->quorum == fq)) {
            broke = true;
            complete = false;
          } else if (!c.got || !c.got->ok || c.got->quorum != fq) {
            complete = false;
          }
        }
        if (complete || broke) s.flight_members.clear();
      }
      if (chain.size() > 1 && !complete && !broke) deliver();  // (kRegrouped)
      if (complete) {
        decided_ok = true;
        break;
      }
      if (broke) {
        for (auto m : fm) {
          auto& c = calls[m];
          if (c.got && !c.got->ok) {
            if (c.got->at_step != sum.committed) {  // not holding the committed state: heal it again
              std::lock_guard lock(s.mu);
              if (s.status[m] == Status::kLive) s.status[m] = Status::kFresh;
            }
            failed(m, ": " + c.got->error);
          }
          // The others stop waiting for it at once.
          if (c.open) s.aborts.at(m).send<&CollectiveAbort::abort>(fq, "step " + std::to_string(sum.committed) + " discarded", std::nullopt);
        }
        break;
      }
      // Members whose answer came under a quorum re-formed since: asked again under the new one.
      for (std::size_t i = 0; i < fm.size(); ++i) {
        auto& c = calls[fm[i]];
        if (c.open || !c.got || c.got->quorum == fq) continue;
        if (c.got->ok) redone.insert(c.got->quorum);
        ask(c, fq, i, fm.size());
      }
      for (auto& [r, c] : calls) {
        if (!c.open) continue;
        c.reply.wait_for(std::chrono::milliseconds(2));
        break;
      }
    }
    for (std::size_t i = 0; i + 1 < chain.size(); ++i)
      s.store.send<&StoreActor::erase_prefix>("quorum-" + std::to_string(chain[i]) + "/");
    quorum = fq;
    if (!decided_ok) {
      // What is still under way ends at once now (aborted) or at its deadline.
      for (auto& [r, c] : calls) {
        if (!c.open) continue;
        try {
          auto got = c.reply.get(std::max(std::chrono::milliseconds(0), std::chrono::duration_cast<std::chrono::milliseconds>(
                                                                              c.asked + o.step_timeout - Clock::now())));
          if (!got.reused) ++sum.gradients_computed;
        } catch (const std::exception& e) {
          ++sum.gradients_computed;
          s.lost(r, c.pid);
        }
      }
      step_attempts += 1 + redone.size();
      sum.attempted += 1 + redone.size();
      broken = true;
      s.event(Event::Kind::kRetried, sum.committed, 0, "step " + std::to_string(sum.committed) + " discarded: " + why);
      deliver();
      continue;
    }
    step_attempts += 1 + redone.size();
    sum.attempted += 1 + redone.size();
    step_regroups += chain.size() - 1;
    sum.regroups += chain.size() - 1;
    members = fm;
    last_members = fm;
    for (auto& [r, c] : calls)  // a member dropped whose call is still open: its gradient is lost with it
      if (c.open && std::find(members.begin(), members.end(), r) == members.end()) ++sum.gradients_computed;
    for (auto it = assigned.begin(); it != assigned.end(); ++it)  // the blocks of members dropped from it
      if (std::find(members.begin(), members.end(), it->first) == members.end()) returned.push_front(it->second);
    float loss = 0;
    std::vector<double> compute_ms, reduce_ms;
    std::vector<int> pids;
    for (auto m : members) {
      const auto& r = *calls[m].got;
      loss += r.loss;
      compute_ms.push_back(r.compute_ms);
      reduce_ms.push_back(r.reduce_ms);
      pids.push_back(calls[m].pid);
      sum.device = r.device;
      sum.collective = r.collective;
    }
    std::vector<Future<Committed>> commits;
    for (auto m : members) commits.push_back(s.replicas.at(m).call<&Replica::commit>(sum.committed));
    decided(sum.committed);
    std::vector<double> commit_ms(members.size());
    for (std::size_t i = 0; i < members.size(); ++i) {
      try {
        commit_ms[i] = commits[i].get(o.step_timeout).ms;
      } catch (const std::exception& e) {
        s.lost(members[i], pids[i]);
      }
    }
    StepRecord rec;
    rec.step = sum.committed;
    rec.members = members;
    for (auto m : members) rec.first.push_back(assigned[m]);
    rec.count = o.batch;
    rec.loss = loss / static_cast<float>(members.size());
    rec.seconds = since();
    rec.attempts = step_attempts;
    rec.regroups = step_regroups;
    rec.compute_ms = std::move(compute_ms);
    rec.reduce_ms = std::move(reduce_ms);
    rec.commit_ms = std::move(commit_ms);
    tries = step_attempts = step_regroups = 0;
    assigned.clear();
    ++sum.committed;
    sum.samples += o.batch * members.size();
    sum.gradients_committed += members.size();
    if (s.on_step) s.on_step(rec, members.size());
    sum.steps.push_back(std::move(rec));
    deliver();
    if (o.checkpoint.every > 0 && sum.committed % o.checkpoint.every == 0 && sum.committed < o.steps) {
      checkpoints.start(sum.committed, live_now(), DataPosition{cursor, {returned.begin(), returned.end()}}, deliver);
    }
  }
  bool finished = sum.committed >= o.steps;
  if (finished) {  // the final state, whatever the interval
    checkpoints.start(sum.committed, live_now(), DataPosition{cursor, {returned.begin(), returned.end()}}, deliver);
  }
  // Let heals under way join so that the digests cover every replica that can be live (and,
  // when asked, wait for every replica to be back).
  auto deadline = Clock::now() + 2 * o.step_timeout;
  for (;;) {
    auto live = live_now();
    heal_step(live, false);
    deliver();
    bool all = live_now().size() == s.status.size();
    if (all || Clock::now() >= deadline || live.empty()) break;
    if (!o.end_with_all_replicas && heals.empty()) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  checkpoints.finish(Clock::now() + 2 * o.step_timeout);
  for (auto r : live_now()) {
    try {
      sum.digests[r] = s.replicas.at(r).call<&Replica::digest>().get(o.step_timeout).digest;
    } catch (const std::exception& e) {
      s.event(Event::Kind::kFailed, sum.committed, r, std::string("digest: ") + e.what());
    }
  }
  deliver();
  sum.seconds = since();
  return sum;
}

std::uint64_t replay(const TrainOptions& options, const std::vector<StepRecord>& steps) {
  ReplicaCore core(options.model, options.device);
  collective::MemoryStore store;
  std::map<std::size_t, std::vector<std::unique_ptr<collective::Communicator>>> comms;  // by size
  for (const auto& rec : steps) {
    std::size_t k = rec.members.size();
    std::vector<std::vector<float>> grads;
    for (std::size_t i = 0; i < k; ++i) grads.push_back(core.local_gradients(rec.first[i], rec.count, nullptr));
    if (k > 1) {
      auto& c = comms[k];
      if (c.empty()) {
        std::vector<std::future<Result<std::unique_ptr<collective::Communicator>>>> connecting;
        for (std::size_t i = 0; i < k; ++i) {
          connecting.push_back(std::async(std::launch::async, [&, i] {
            return collective::connect_gloo(store, i, k, {.prefix = "replay-" + std::to_string(k), .timeout = std::chrono::seconds(30)});
          }));
        }
        for (auto& f : connecting) c.push_back(f.get().value());
      }
      std::vector<std::thread> threads;
      std::vector<Result<void>> results(k);
      for (std::size_t i = 0; i < k; ++i)
        threads.emplace_back([&, i] { results[i] = c[i]->allreduce_sum(std::span(grads[i])); });
      for (auto& t : threads) t.join();
      for (auto& r : results) r.check();
    }
    core.apply(grads[0], k);
  }
  return core.digest();
}

}  // namespace sceptre::train
