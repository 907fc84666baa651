// The controller's state of fault-tolerant data parallelism (FtDdp), shared by its training
// thread (run(), the checkpointer, the healer), the supervision hook and the respawner thread.
#pragma once

#include <signal.h>

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "sceptre/train/ft_ddp.h"

namespace sceptre::train {

using Clock = std::chrono::steady_clock;

// A replica as the controller sees it: a quorum member, lost, respawned and waiting to heal, or
// healing.
enum class ReplicaState { kLive, kDead, kFresh, kHealing };

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
  std::vector<ReplicaState> status;
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
        if (m != r && status[m] == ReplicaState::kLive) rest.push_back(m);
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
      if (status[r] == ReplicaState::kLive) v.push_back(r);
    return v;
  }

  bool is_live(std::size_t r) {
    std::lock_guard lock(mu);
    return status[r] == ReplicaState::kLive;
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
      if (pids[r] != pid || status[r] == ReplicaState::kDead) return;
      status[r] = ReplicaState::kDead;
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
        status[r] = ReplicaState::kFresh;
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

}  // namespace sceptre::train
