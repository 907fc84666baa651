// The controller's side of one attempt at a step: see attempt.h.
#include "train/attempt.h"

#include <algorithm>

namespace sceptre::train {

Attempt::Attempt(FtDdp::State& s, Summary& sum, std::uint64_t quorum, std::vector<std::size_t> members,
                 const std::map<std::size_t, std::uint64_t>& blocks)
    : s_(s), sum_(sum), step_(sum.committed), blocks_(blocks), quorum_(quorum), members_(std::move(members)),
      chain_{quorum} {}

std::size_t Attempt::attempts() const { return 1 + redone_.size() - (redone_.count(quorum_) ? 1 : 0); }

void Attempt::ask(Call& c, std::uint64_t quorum, std::size_t rank, std::size_t size) {
  c.reply = s_.replicas.at(c.replica).call<&Replica::step>(
      StepPlan{step_, quorum, rank, size, blocks_.at(c.replica), s_.options.batch});
  c.asked = Clock::now();
  c.open = true;
  c.got.reset();
}

void Attempt::failed(std::size_t r, const std::string& what) {
  why_ += (why_.empty() ? "replica " : "; replica ") + std::to_string(r) + what;
}

void Attempt::take(Call& c, std::chrono::milliseconds wait) {
  c.open = false;
  try {
    auto got = c.reply.get(wait);
    if (!got.reused) ++sum_.gradients_computed;
    for (auto q : got.abandoned) redone_.insert(q);
    c.compute_ms += got.compute_ms;
    c.reduce_ms += got.reduce_ms;
    c.got = std::move(got);
  } catch (const std::exception& e) {
    c.lost = true;
    ++sum_.gradients_computed;  // (or begun): lost with it
    s_.lost(c.replica, c.pid);
    s_.drop_from_flight(c.replica, "replica " + std::to_string(c.replica) + " lost: " + e.what());
    failed(c.replica, std::string(" lost: ") + e.what());
  }
}

bool Attempt::run(const std::function<void()>& deliver) {
  const auto& o = s_.options;
  {
    std::lock_guard lock(s_.mu);
    s_.flight_quorum = quorum_;
    s_.flight_members = members_;
  }
  for (std::size_t i = 0; i < members_.size(); ++i) {
    auto& c = calls_[members_[i]];
    c.replica = members_[i];
    c.pid = s_.pid_of(members_[i]);
    ask(c, quorum_, i, members_.size());
  }
  for (;;) {
    // The answers that are in, and those of members past their step's deadline.
    for (auto& [r, c] : calls_) {
      if (!c.open) continue;
      if (c.reply.ready() || Clock::now() - c.asked >= o.step_timeout) take(c, std::chrono::milliseconds(0));
    }
    // The attempt as it is now: decided once complete or failed, and then not re-formed.
    bool complete = true, broke = false;
    {
      std::lock_guard lock(s_.mu);
      if (s_.flight_quorum != quorum_) chain_.push_back(s_.flight_quorum);
      quorum_ = s_.flight_quorum;
      members_ = s_.flight_members;
      for (auto m : members_) {
        auto& c = calls_[m];
        if (c.open) {
          complete = false;
        } else if (c.lost || (c.got && !c.got->ok && c.got->quorum == quorum_)) {
          broke = true;
          complete = false;
        } else if (!c.got || !c.got->ok || c.got->quorum != quorum_) {
          complete = false;
        }
      }
      if (complete || broke) s_.flight_members.clear();
    }
    if (chain_.size() > 1 && !complete && !broke) deliver();  // (kRegrouped)
    if (complete) {
      for (auto& [r, c] : calls_)  // a member dropped whose call is still open: its gradient is lost with it
        if (c.open && std::find(members_.begin(), members_.end(), r) == members_.end()) ++sum_.gradients_computed;
      return true;
    }
    if (broke) {
      for (auto m : members_) {
        auto& c = calls_[m];
        if (c.got && !c.got->ok) {
          if (c.got->at_step != step_) {  // not holding the committed state: heal it again
            std::lock_guard lock(s_.mu);
            if (s_.status[m] == ReplicaState::kLive) s_.status[m] = ReplicaState::kFresh;
          }
          failed(m, ": " + c.got->error);
        }
        // The others stop waiting for it at once.
        if (c.open)
          s_.aborts.at(m).send<&CollectiveAbort::abort>(quorum_, "step " + std::to_string(step_) + " discarded",
                                                         std::nullopt);
      }
      break;
    }
    // Members whose answer came under a quorum re-formed since: asked again under the new one.
    for (std::size_t i = 0; i < members_.size(); ++i) {
      auto& c = calls_[members_[i]];
      if (c.open || !c.got || c.got->quorum == quorum_) continue;
      if (c.got->ok) redone_.insert(c.got->quorum);  // (a failed one lists it in `abandoned` if it began)
      ask(c, quorum_, i, members_.size());
    }
    for (auto& [r, c] : calls_) {
      if (!c.open) continue;
      c.reply.wait_for(std::chrono::milliseconds(2));
      break;
    }
  }
  // Discarded. What is still under way ends at once now (aborted) or at its deadline.
  for (auto& [r, c] : calls_) {
    if (!c.open) continue;
    take(c, std::max(std::chrono::milliseconds(0),
                     std::chrono::duration_cast<std::chrono::milliseconds>(c.asked + o.step_timeout - Clock::now())));
  }
  return false;
}

}  // namespace sceptre::train
