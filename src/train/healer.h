// The controller's side of healing (FtDdp): a replaced replica fetches the committed state from
// a live peer and replays the steps committed meanwhile while the others train, then joins at
// a step boundary. Runs in the controller, on its training thread.
//
// One snapshot of one donor serves every replica that is fresh when it is taken. A heal is a transfer of the snapshot, then rounds of replay of the sums committed since,
// each while the others train on, then a last round that the others wait for. The first round
// always runs while they train (a fresh process's first optimizer step touches its memory for
// the first time, several times slower than later ones). The last round replays one step: it
// begins as soon as that step is decided (its sum is in the donor's log once reduced), while
// the members commit, so that the others wait at the boundary only for what is left of it.
// A replica still further behind after kRounds rounds replays the rest in its last round.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "sceptre/train/ft_ddp.h"
#include "train/ft_ddp_state.h"

namespace sceptre::train {

class Healer {
 public:
  Healer(FtDdp::State& s, Summary& sum) : s_(s), sum_(sum) {}
  // At a step boundary, before the quorum is formed: joins, further rounds, and new transfers
  // for fresh replicas from a snapshot of `live.front()`. `retry`: the next attempt retries a
  // discarded step, its members' gradients reused. No snapshot is taken before it: its commit
  // follows at once, before the transfer is over, and a commit during a transfer first copies
  // what is left of it (see Replica::snapshot).
  void boundary(const std::vector<std::size_t>& live, bool retry);
  // Step `step` is decided (every member reduced it): the last rounds that end with it begin.
  void decided(std::uint64_t step);
  bool idle() const { return heals_.empty(); }

 private:
  // One replica healing.
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
  static constexpr std::size_t kRounds = 4;

  // Takes a finished transfer or round from its future; false while it runs.
  static bool take_report(Heal& h);
  // A round of replay ends with the donor live; if the donor goes while it runs, the healer
  // would wait out its calls, so it is replaced.
  void await_round(Future<HealReport>& round);

  FtDdp::State& s_;
  Summary& sum_;
  std::optional<std::size_t> donor_;
  int donor_pid_ = 0;
  Snapshot snap_;
  std::vector<Heal> heals_;
};

}  // namespace sceptre::train
