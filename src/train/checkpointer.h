// The controller's side of checkpoints (FtDdp): capture at a step boundary, persist in the
// background, manifest last, prune; and the resume at start. Runs in the controller, on its
// training thread.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "sceptre/train/checkpoint.h"
#include "sceptre/train/ft_ddp.h"
#include "train/ft_ddp_state.h"

namespace sceptre::train {

class Checkpointer {
 public:
  Checkpointer(FtDdp::State& s, Summary& sum) : s_(s), sum_(sum), c_(s.options.checkpoint) {}
  bool enabled() const { return !c_.dir.empty(); }

  // Captures the committed state of step `step` on `writers`; returns once the copies are made.
  // `deliver` runs when the stall is over, before the writes begin.
  void start(std::uint64_t step, std::vector<std::size_t> writers, DataPosition data,
             const std::function<void()>& deliver);

  // At step boundaries: finishes the checkpoint in flight once every shard is written.
  void poll();

  // Waits for the checkpoint in flight, up to `deadline`.
  void finish(Clock::time_point deadline);

  // At start: loads the newest checkpoint that the live replicas can load. Replicas that fail
  // one that others loaded are replaced (they heal from a peer); one that none can load is
  // skipped with a warning.
  std::optional<Manifest> resume(const std::vector<std::size_t>& members);

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

  void fail(std::uint64_t step, const std::string& why);

  FtDdp::State& s_;
  Summary& sum_;
  const CheckpointOptions& c_;
  std::optional<Flight> flight_;
  std::uint64_t last_step_ = ~0ull;  // of the last complete (or restored) checkpoint
};

}  // namespace sceptre::train
