// The controller's side of one attempt at a step (FtDdp): the step calls to the members of a
// quorum, and the quorum re-formed without a member lost meanwhile (State::drop_from_flight),
// until every member of the quorum, as it is then, has reduced under it — the step is decided,
// and its members commit it — or a member fails in another way, or too few are left, and the
// attempt is discarded (the step is retried at the next boundary, the survivors' gradients
// reused). Runs in the controller, on its training thread.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "sceptre/train/ft_ddp.h"
#include "train/ft_ddp_state.h"

namespace sceptre::train {

class Attempt {
 public:
  // `blocks`: the first sample of each member's block.
  Attempt(FtDdp::State& s, Summary& sum, std::uint64_t quorum, std::vector<std::size_t> members,
          const std::map<std::size_t, std::uint64_t>& blocks);
  // Asks every member and waits until the attempt is decided (true) or discarded (false; what
  // was still under way has then ended, aborted or at its deadline). `deliver` is called when
  // the quorum was re-formed (its kRegrouped events).
  bool run(const std::function<void()>& deliver);

  // Once run: the quorum and members it ended with (a decided step's), and every quorum it had
  // (the first, then each re-formed one; their rendezvous keys can go).
  std::uint64_t quorum() const { return quorum_; }
  const std::vector<std::size_t>& members() const { return members_; }
  const std::vector<std::uint64_t>& quorums() const { return chain_; }
  // Attempts as StepRecord counts them: this one, and each earlier quorum of it whose reduction
  // a member began and gave up.
  std::size_t attempts() const;
  std::size_t regroups() const { return chain_.size() - 1; }
  // Why it was discarded.
  const std::string& why() const { return why_; }

  // Of a member of a decided attempt: its answer, its proc, and its time over its calls.
  const StepReply& reply(std::size_t r) const { return *calls_.at(r).got; }
  int pid(std::size_t r) const { return calls_.at(r).pid; }
  double compute_ms(std::size_t r) const { return calls_.at(r).compute_ms; }
  double reduce_ms(std::size_t r) const { return calls_.at(r).reduce_ms; }

 private:
  struct Call {
    std::size_t replica = 0;
    int pid = 0;
    Future<StepReply> reply;
    Clock::time_point asked;
    bool open = false, lost = false;
    std::optional<StepReply> got;
    double compute_ms = 0, reduce_ms = 0;  // over its calls
  };

  void ask(Call& c, std::uint64_t quorum, std::size_t rank, std::size_t size);
  // Takes `c`'s answer, waiting up to `wait` for it (past it, the member is lost).
  void take(Call& c, std::chrono::milliseconds wait);
  void failed(std::size_t r, const std::string& what);

  FtDdp::State& s_;
  Summary& sum_;
  std::uint64_t step_;
  const std::map<std::size_t, std::uint64_t>& blocks_;
  std::map<std::size_t, Call> calls_;
  std::uint64_t quorum_;
  std::vector<std::size_t> members_;
  std::vector<std::uint64_t> chain_;
  std::set<std::uint64_t> redone_;  // quorums whose reduction was begun and given up
  std::string why_;
};

}  // namespace sceptre::train
