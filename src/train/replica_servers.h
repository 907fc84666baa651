// What a replica shares with the actors beside it, each on a thread of its own: its state server
// (snapshots and the log of summed gradients, which healers fetch) and its checkpoint writer.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "sceptre/train/checkpoint.h"
#include "sceptre/train/ft_ddp.h"
#include "sceptre/train/replica_core.h"
#include "sceptre/wire/part.h"

namespace sceptre::train {

// A replica's snapshots go into one buffer, kept for the replica's life: its pages stay touched.
// A snapshot's chunks are views that lease the buffer; the next snapshot waits until every view
// of the last one is dropped (sent and acknowledged), or takes a new buffer if they are not.
struct StateServer::Shared {
  std::mutex mu;
  std::condition_variable released;
  std::uint64_t step = 0;                       // of the snapshot
  std::shared_ptr<std::string> buffer;          // the snapshot's bytes: ReplicaCore::save()
  std::uint64_t data_at = 0;                    // where the header ends
  std::shared_ptr<const void> lease;            // of the snapshot served; null when none
  std::shared_ptr<std::string> leased;          // the buffer some view may still read
  std::uint64_t chunk_bytes = 0;
  // A snapshot of a model on the CPU is served live: straight from the replica's tensors, which
  // nothing writes until its next commit, which ends it (end_live): the chunks that not every
  // healer has fetched are copied first, and the commit waits until no view of the tensors is
  // left in a send queue. Usually the transfer is over before the step is computed, and nothing
  // is copied at all. (A snapshot of a model on a GPU is copied into `buffer` at once.)
  const ReplicaCore* live = nullptr;
  std::uint64_t bytes = 0;                      // of the snapshot's data
  std::size_t healers = 0;                      // who fetch every chunk of it
  std::vector<std::size_t> fetched;             // per chunk, while live
  std::size_t live_views = 0;                   // views of the tensors not yet dropped
  std::map<std::uint64_t, wire::Part> copies;   // chunks copied when it stopped being live
  bool logging = false;
  std::map<std::uint64_t, std::pair<wire::Part, std::uint64_t>> log;  // committed step -> (sum, members)

  // Ends the live serving of a snapshot before the state changes: the chunks not every healer
  // has fetched are copied, then it waits until no view of the tensors is left in a send queue.
  // A send that is stuck (its channel neither delivers nor fails it within `wait`) is left to
  // it, and the snapshot is withdrawn: its healers' other fetches fail, and they are replaced.
  void end_live(std::chrono::milliseconds wait);
};

struct CheckpointWriter::Shared {
  std::mutex mu;
  CheckpointPlan plan;
  std::vector<TensorBytes> tensors;  // captured, not yet written
  bool captured = false;
};

}  // namespace sceptre::train
