// The controller of fault-tolerant data parallelism: quorum, step commit, sample plan, respawn
// and healing. Runs in the controller; no libtorch here.
#include "sceptre/train/ft_ddp.h"

#include <signal.h>

#include <algorithm>
#include <condition_variable>
#include <deque>
#include <future>
#include <mutex>
#include <set>
#include <thread>

#include "sceptre/actor/proc.h"

namespace sceptre::train {

using Clock = std::chrono::steady_clock;

namespace {
enum class Status { kLive, kDead, kFresh, kHealing };
}

struct FtDdp::State {
  ProcMesh procs;
  TrainOptions options;
  ActorRef<StoreActor> store;
  ActorMesh<Replica> replicas;
  std::function<void(const Event&)> on_event;
  std::function<void(const StepRecord&, std::size_t)> on_step;

  std::mutex mu;
  std::condition_variable cv;
  std::vector<Status> status;
  std::deque<std::size_t> to_respawn;
  std::vector<Event> events;  // not yet delivered to on_event
  bool stopping = false;
  bool cancelled = false;
  std::thread respawner;

  void event(Event::Kind kind, std::uint64_t step, std::size_t replica, std::string what, std::uint64_t bytes = 0,
             double seconds = 0) {
    std::lock_guard lock(mu);
    events.push_back(Event{kind, step, replica, std::move(what), Clock::now(), bytes, seconds});
  }

  // A replica is out: its proc is killed if it is not already gone (a call that timed out), so
  // supervision reports it and it is respawned.
  // (Its failure is counted when supervision reports it.)
  void lost(std::size_t r) {
    {
      std::lock_guard lock(mu);
      if (status[r] == Status::kDead) return;
      status[r] = Status::kDead;
    }
    int pid = procs.pid(r);
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
      try {
        procs.respawn({r});
      } catch (const std::exception& e) {
        failed = e.what();
      }
      lock.lock();
      if (stopping) return;
      if (failed.empty()) {
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
    return Supervise::kHandled;
  });
  s.replicas = s.procs.spawn<Replica>("replica", s.options, s.store);
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
      if (e.kind == Event::Kind::kFailed && e.step == 0) e.step = sum.committed;
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
  struct Heal {
    std::size_t replica;
    Future<HealReport> done;
  };
  std::optional<std::size_t> donor;
  Snapshot snap;
  std::vector<Heal> heals;
  auto heal_step = [&](const std::vector<std::size_t>& live) {
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
        s.lost(h.replica);
      }
      heals.clear();
      donor.reset();
    }
    // Finished transfers: replay what committed meanwhile, then join.
    for (auto it = heals.begin(); it != heals.end();) {
      if (!it->done.ready()) {
        ++it;
        continue;
      }
      std::size_t r = it->replica;
      try {
        auto report = it->done.get();
        // The replay comes from the donor too: if the donor goes while it runs, the healer
        // would wait out its calls, so it is replaced instead.
        auto caught = s.replicas.at(r).call<&Replica::catch_up>(snap, sum.committed);
        auto until = Clock::now() + o.step_timeout;
        while (!caught.wait_for(std::chrono::milliseconds(2))) {
          bool gone;
          {
            std::lock_guard lock(s.mu);
            gone = s.status[*donor] != Status::kLive;
          }
          if (gone || Clock::now() >= until) throw std::runtime_error("the donor was lost during the replay");
        }
        caught.get();
        {
          std::lock_guard lock(s.mu);
          if (s.status[r] == Status::kHealing) s.status[r] = Status::kLive;
        }
        ++sum.heals;
        char line[200];
        std::snprintf(line, sizeof line, "healed from replica %zu: %.1f MB in %.3f s (%.2f GB/s), %llu steps replayed",
                      *donor, report.bytes / 1e6, report.seconds,
                      report.seconds > 0 ? report.bytes / report.seconds / 1e9 : 0.0,
                      static_cast<unsigned long long>(sum.committed - report.step));
        s.event(Event::Kind::kJoined, sum.committed, r, line, report.bytes, report.seconds);
      } catch (const std::exception& e) {
        s.event(Event::Kind::kHealFailed, sum.committed, r, std::string("healing failed: ") + e.what());
        s.lost(r);  // it may still be waiting on the donor: a new one heals again
      }
      it = heals.erase(it);
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
    if (fresh.empty() || live.empty() || !heals.empty()) return;
    donor = live.front();
    try {
      snap = s.replicas.at(*donor).call<&Replica::snapshot>().get(o.step_timeout);
    } catch (const std::exception& e) {
      s.lost(*donor);
      donor.reset();
      return;
    }
    for (auto r : fresh) {
      {
        std::lock_guard lock(s.mu);
        s.status[r] = Status::kHealing;
      }
      heals.push_back(Heal{r, s.replicas.at(r).call<&Replica::heal>(snap)});
      s.event(Event::Kind::kHealing, sum.committed, r,
              "healing from replica " + std::to_string(*donor) + " at step " + std::to_string(snap.step));
    }
  };

  auto live_now = [&] {
    std::vector<std::size_t> v;
    std::lock_guard lock(s.mu);
    for (std::size_t r = 0; r < s.status.size(); ++r)
      if (s.status[r] == Status::kLive) v.push_back(r);
    return v;
  };

  std::uint64_t quorum = 0;
  std::vector<std::size_t> last_members;
  bool paused = false, broken = false;
  std::size_t attempts = 0;
  while (sum.committed < o.steps) {
    {
      std::lock_guard lock(s.mu);
      if (s.cancelled) break;
    }
    heal_step(live_now());  // joins happen here, at the step boundary, before the quorum is formed
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
      ++quorum;
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

    std::vector<Future<StepReply>> replies;
    for (std::size_t i = 0; i < members.size(); ++i) {
      replies.push_back(s.replicas.at(members[i]).call<&Replica::step>(
          StepPlan{sum.committed, quorum, i, members.size(), assigned[members[i]], o.batch}));
    }
    ++sum.attempted;
    ++attempts;
    bool all_ok = true;
    float loss = 0;
    std::string why;
    for (std::size_t i = 0; i < members.size(); ++i) {
      try {
        auto r = replies[i].get(o.step_timeout);
        if (!r.reused) ++sum.gradients_computed;
        loss += r.loss;
        if (!r.ok) {
          all_ok = false;
          if (r.at_step != sum.committed) {  // not holding the committed state: heal it again
            std::lock_guard lock(s.mu);
            if (s.status[members[i]] == Status::kLive) s.status[members[i]] = Status::kFresh;
          }
          if (why.empty()) why = "replica " + std::to_string(members[i]) + ": " + r.error;
        }
      } catch (const std::exception& e) {
        all_ok = false;
        why = "replica " + std::to_string(members[i]) + " lost: " + e.what();
        ++sum.gradients_computed;  // (or begun): lost with it
        s.lost(members[i]);
      }
    }
    if (!all_ok) {
      broken = true;
      s.event(Event::Kind::kRetried, sum.committed, 0, "step " + std::to_string(sum.committed) + " discarded: " + why);
      deliver();
      continue;
    }
    std::vector<Future<Committed>> commits;
    for (auto m : members) commits.push_back(s.replicas.at(m).call<&Replica::commit>(sum.committed));
    for (std::size_t i = 0; i < members.size(); ++i) {
      try {
        commits[i].get(o.step_timeout);
      } catch (const std::exception& e) {
        s.lost(members[i]);
      }
    }
    StepRecord rec;
    rec.step = sum.committed;
    rec.members = members;
    for (auto m : members) rec.first.push_back(assigned[m]);
    rec.count = o.batch;
    rec.loss = loss / static_cast<float>(members.size());
    rec.seconds = since();
    rec.attempts = attempts;
    attempts = 0;
    assigned.clear();
    ++sum.committed;
    sum.samples += o.batch * members.size();
    sum.gradients_committed += members.size();
    if (s.on_step) s.on_step(rec, members.size());
    sum.steps.push_back(std::move(rec));
    deliver();
  }
  // Let heals under way join so that the digests cover every replica that can be live (and,
  // when asked, wait for every replica to be back).
  auto deadline = Clock::now() + 2 * o.step_timeout;
  for (;;) {
    auto live = live_now();
    heal_step(live);
    deliver();
    bool all = live_now().size() == s.status.size();
    if (all || Clock::now() >= deadline || live.empty()) break;
    if (!o.end_with_all_replicas && heals.empty()) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
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
  ReplicaCore core(options.model);
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
