// The controller's side of healing: see healer.h.
#include "train/healer.h"

#include <algorithm>

namespace sceptre::train {

bool Healer::take_report(Heal& h) {
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
}

void Healer::await_round(Future<HealReport>& round) {
  auto until = Clock::now() + s_.options.step_timeout;
  while (!round.wait_for(std::chrono::milliseconds(2))) {
    bool gone;
    {
      std::lock_guard lock(s_.mu);
      gone = s_.status[*donor_] != ReplicaState::kLive;
    }
    if (gone || Clock::now() >= until) throw std::runtime_error("the donor was lost during the replay");
  }
  round.get();
}

void Healer::decided(std::uint64_t step) {
  for (auto& h : heals_) {
    if (h.last || !take_report(h) || !h.failed.empty() || h.rounds == 0) continue;
    if (h.at == step || h.rounds >= kRounds) h.last = s_.replicas.at(h.replica).call<&Replica::catch_up>(snap_, step + 1);
  }
}

void Healer::boundary(const std::vector<std::size_t>& live, bool retry) {
  // A donor lost mid-transfer: its healers would wait out their chunk calls; they hold
  // nothing yet, so they are replaced at once and heal again from another peer.
  bool donor_lost = false;
  if (donor_) {
    std::lock_guard lock(s_.mu);
    donor_lost = s_.status[*donor_] != ReplicaState::kLive;
  }
  if (donor_lost) {
    for (auto& h : heals_) {
      s_.event(Event::Kind::kHealFailed, sum_.committed, h.replica,
               "donor replica " + std::to_string(*donor_) + " lost mid-transfer: restarting this heal");
      s_.lost(h.replica, h.pid);
    }
    heals_.clear();
    donor_.reset();
  }
  // Finished transfers and rounds: another round, or the last one and the join.
  for (auto it = heals_.begin(); it != heals_.end();) {
    if (!it->last && !take_report(*it)) {
      ++it;
      continue;
    }
    std::size_t r = it->replica;
    try {
      if (!it->failed.empty()) throw std::runtime_error(it->failed);
      if (it->last) {
        await_round(*it->last);
      } else if (it->at < sum_.committed && it->rounds < kRounds) {  // while the others train on
        ++it->rounds;
        it->done = s_.replicas.at(r).call<&Replica::catch_up>(snap_, sum_.committed);
        it->taken = false;
        ++it;
        continue;
      } else if (it->at < sum_.committed) {  // the last round, all of it while the others wait
        auto caught = s_.replicas.at(r).call<&Replica::catch_up>(snap_, sum_.committed);
        await_round(caught);
      }
      {
        std::lock_guard lock(s_.mu);
        if (s_.status[r] == ReplicaState::kHealing) s_.status[r] = ReplicaState::kLive;
      }
      ++sum_.heals;
      const auto& t = it->transfer;
      char line[200];
      std::snprintf(line, sizeof line, "healed from replica %zu: %.1f MB in %.3f s (%.2f GB/s), %llu steps replayed",
                    *donor_, t.bytes / 1e6, t.seconds, t.seconds > 0 ? t.bytes / t.seconds / 1e9 : 0.0,
                    static_cast<unsigned long long>(sum_.committed - t.step));
      s_.event(Event::Kind::kJoined, sum_.committed, r, line, t.bytes, t.seconds);
    } catch (const std::exception& e) {
      s_.event(Event::Kind::kHealFailed, sum_.committed, r, std::string("healing failed: ") + e.what());
      s_.lost(r, it->pid);  // it may still be waiting on the donor: a new one heals again
    }
    it = heals_.erase(it);
  }
  // The donor_'s log needs no sum that every healer has replayed (its buffers go back to the pool).
  if (donor_ && !heals_.empty()) {
    std::uint64_t below = ~0ull;
    for (auto& h : heals_) below = std::min(below, h.replaying ? h.at : snap_.step);
    if (below > snap_.step) snap_.server.call<&StateServer::forget>(below);
  }
  if (heals_.empty() && donor_) {
    try {
      s_.replicas.at(*donor_).call<&Replica::stop_logging>().get(s_.options.step_timeout);
    } catch (const std::exception&) {
    }
    donor_.reset();
  }
  // New transfers, from a live member's snapshot at this step boundary.
  std::vector<std::size_t> fresh;
  {
    std::lock_guard lock(s_.mu);
    for (std::size_t r = 0; r < s_.status.size(); ++r)
      if (s_.status[r] == ReplicaState::kFresh) fresh.push_back(r);
  }
  if (fresh.empty() || live.empty() || !heals_.empty() || retry) return;
  donor_ = live.front();
  donor_pid_ = s_.pid_of(*donor_);
  try {
    snap_ = s_.replicas.at(*donor_).call<&Replica::snapshot>(fresh.size()).get(s_.options.step_timeout);
  } catch (const std::exception& e) {
    s_.lost(*donor_, donor_pid_);
    donor_.reset();
    return;
  }
  for (auto r : fresh) {
    {
      std::lock_guard lock(s_.mu);
      s_.status[r] = ReplicaState::kHealing;
    }
    Heal h;
    h.replica = r;
    h.pid = s_.pid_of(r);
    h.done = s_.replicas.at(r).call<&Replica::heal>(snap_);
    heals_.push_back(std::move(h));
    s_.event(Event::Kind::kHealing, sum_.committed, r,
             "healing from replica " + std::to_string(*donor_) + " at step " + std::to_string(snap_.step));
  }
}

}  // namespace sceptre::train
