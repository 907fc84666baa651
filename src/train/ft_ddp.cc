// The controller of fault-tolerant data parallelism: quorum, steps and commits, the sample plan,
// respawn (an attempt at a step: attempt.h; healing: healer.h; checkpoints: checkpointer.h);
// and the replay. Runs in the controller; no libtorch here.
#include "sceptre/train/ft_ddp.h"

#include <algorithm>
#include <deque>
#include <future>
#include <map>
#include <thread>

#include "sceptre/actor/proc.h"
#include "train/attempt.h"
#include "train/checkpointer.h"
#include "train/ft_ddp_state.h"
#include "train/healer.h"

namespace sceptre::train {

namespace {
void check_choice(const char* option, const std::string& value, std::initializer_list<std::string_view> allowed) {
  if (std::find(allowed.begin(), allowed.end(), value) != allowed.end()) return;
  std::string list;
  for (auto a : allowed) list += (list.empty() ? "" : ", ") + std::string(a);
  throw std::invalid_argument(std::string("TrainOptions::") + option + " is \"" + value + "\", not one of " + list);
}
}  // namespace

FtDdp::FtDdp(ProcMesh procs, TrainOptions options) : state_(std::make_shared<State>()) {
  auto& s = *state_;
  s.procs = std::move(procs);
  s.options = std::move(options);
  s.status.assign(s.procs.size(), ReplicaState::kLive);
  for (std::size_t r = 0; r < s.procs.size(); ++r) s.pids.push_back(s.procs.pid(r));
  s.store = Proc::current().spawn<StoreActor>("rendezvous");
  std::weak_ptr<State> weak = state_;
  s.procs.on_failure([weak](const MeshFailure& f) {
    auto st = weak.lock();
    if (!st) return Supervise::kHandled;
    {
      std::lock_guard lock(st->mu);
      st->status[f.rank] = ReplicaState::kDead;
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

  Healer healer(s, sum);

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
    healer.boundary(before, tries == 1 && before.size() >= std::max<std::size_t>(1, o.min_replicas));
    std::vector<std::size_t> members = live_now();
    deliver();
    if (members.size() < std::max<std::size_t>(1, o.min_replicas)) {
      if (!paused) {
        s.event(Event::Kind::kPaused, sum.committed, 0,
                "paused: " + std::to_string(members.size()) + " live replicas, " + std::to_string(o.min_replicas) +
                    " needed");
        paused = true;
      }
      if (members.empty() && healer.idle()) {
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

    // The attempt: a member lost meanwhile is dropped from it, the others going on under a new
    // quorum (see attempt.h); a member that fails in another way discards it, and the step is
    // retried at the next boundary.
    Attempt attempt(s, sum, quorum, members, assigned);
    ++tries;
    bool decided = attempt.run(deliver);
    const auto& chain = attempt.quorums();
    for (std::size_t i = 0; i + 1 < chain.size(); ++i)
      s.store.send<&StoreActor::erase_prefix>("quorum-" + std::to_string(chain[i]) + "/");
    quorum = attempt.quorum();
    step_attempts += attempt.attempts();
    sum.attempted += attempt.attempts();
    if (!decided) {
      broken = true;
      s.event(Event::Kind::kRetried, sum.committed, 0, "step " + std::to_string(sum.committed) + " discarded: " + attempt.why());
      deliver();
      continue;
    }
    step_regroups += attempt.regroups();
    sum.regroups += attempt.regroups();
    members = attempt.members();
    last_members = members;
    for (auto it = assigned.begin(); it != assigned.end(); ++it)  // the blocks of members dropped from it
      if (std::find(members.begin(), members.end(), it->first) == members.end()) returned.push_front(it->second);
    float loss = 0;
    std::vector<double> compute_ms, reduce_ms;
    std::vector<int> pids;
    for (auto m : members) {
      const auto& r = attempt.reply(m);
      loss += r.loss;
      compute_ms.push_back(attempt.compute_ms(m));
      reduce_ms.push_back(attempt.reduce_ms(m));
      pids.push_back(attempt.pid(m));
      sum.device = r.device;
      sum.collective = r.collective;
    }
    std::vector<Future<Committed>> commits;
    for (auto m : members) commits.push_back(s.replicas.at(m).call<&Replica::commit>(sum.committed));
    healer.decided(sum.committed);
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
    healer.boundary(live, false);
    deliver();
    bool all = live_now().size() == s.status.size();
    if (all || Clock::now() >= deadline || live.empty()) break;
    if (!o.end_with_all_replicas && healer.idle()) break;
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
