// Communicator: collectives among the members of one quorum (data-parallel replicas).
//
// A communicator is made for one fixed set of members and is thrown away when the set changes
// (a replica died, a replacement joined): making a new one is the recovery, never repairing an
// old one. Every collective has a deadline (CommOptions::timeout), and abort() makes one in
// flight fail at once from any thread, so a collective stuck on a dead or frozen peer costs a
// bounded time and an error, never a hang or a crash of the caller. The deadline counts silence
// (each wait for a peer's bytes), not the collective's length, so a short one is safe for big
// tensors. abort() fails the peers' collectives waiting on this member at once (its connections
// close) and every later one of its own with kAborted. With Gloo, a collective of its own in
// flight ends as the failure that caused the abort reaches it (a dead peer's connections close,
// and every member that fails closes its own), and its connections close then: closing them
// under it would leave it deaf to those failures until its deadline. NCCL ends it at once.
//
// Rendezvous goes through a KeyValue store: each member publishes its address under the
// communicator's prefix and reads the others'. The store is served by the controller (see
// train/ft_ddp.h), or lives in memory for members that are threads of one process.
//
//   auto comm = collective::connect_gloo(store, rank, size, {.prefix = "quorum-7"});
//   if (!comm.ok()) ...;
//   Result<void> r = (*comm)->allreduce_sum(std::span(grads));
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <map>
#include <memory>
#include <mutex>
#include <span>
#include <string>

#include "sceptre/core/result.h"

namespace sceptre::gpu {
class Runtime;
}  // namespace sceptre::gpu

namespace sceptre::collective {

// The rendezvous store: set a key once, read it when it appears.
class KeyValue {
 public:
  virtual ~KeyValue() = default;
  virtual Result<void> set(const std::string& key, std::string value) = 0;
  // The value of `key`, waiting for it up to `timeout` (kDeadlineExceeded after that).
  virtual Result<std::string> get(const std::string& key, std::chrono::milliseconds timeout) = 0;
};

// A store in this process's memory (members that are threads of one process; tests).
class MemoryStore final : public KeyValue {
 public:
  Result<void> set(const std::string& key, std::string value) override;
  Result<std::string> get(const std::string& key, std::chrono::milliseconds timeout) override;

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  std::map<std::string, std::string> values_;
};

struct CommOptions {
  std::string prefix;                                // the communicator's keys in the store
  std::chrono::milliseconds timeout{5000};           // each wait of a collective for a peer
  std::chrono::milliseconds rendezvous_timeout{0};   // connecting; 0: the same as `timeout`
  std::string hostname = "127.0.0.1";                // the address this member listens on
};

class Communicator {
 public:
  virtual ~Communicator() = default;
  virtual std::size_t rank() const = 0;
  virtual std::size_t size() const = 0;
  virtual std::string_view backend() const = 0;
  // Sums `data` elementwise over all members, in place; every member ends with the same bits.
  // On an error (a peer gone, the deadline, abort) `data` holds garbage and the communicator
  // is unusable: make a new one.
  virtual Result<void> allreduce_sum(std::span<float> data) = 0;
  // Leaves the communicator: the connections close (peers blocked on this member fail at once;
  // with Gloo, once this member's own collective in flight has ended, as above), and every later
  // collective fails with kAborted. Thread-safe.
  virtual void abort(const std::string& why) = 0;
};

// A Gloo communicator over TCP (libgloo: the library c10d's ProcessGroupGloo is built on).
Result<std::unique_ptr<Communicator>> connect_gloo(KeyValue& store, std::size_t rank, std::size_t size,
                                                   const CommOptions& options);

// A communicator over NCCL (NVIDIA) or RCCL (AMD), whichever matches `gpu`'s vendor, loaded at
// run time (libnccl.so.2 / librccl.so.1; SCEPTRE_NCCL_LIBRARY / SCEPTRE_RCCL_LIBRARY name other
// files). `data` of allreduce_sum is device memory of `device`. Rank 0 makes NCCL's unique id
// and publishes it in the store under the prefix. Every wait is bounded: joining by
// rendezvous_timeout, a collective by `timeout` (the whole collective: NCCL shows no progress
// within one), abort() at once; a peer that aborted fails the others' collectives
// (kUnavailable). kFailedPrecondition without a GPU runtime; kUnavailable when the library is
// not viable here.
Result<std::unique_ptr<Communicator>> connect_nccl(KeyValue& store, std::size_t rank, std::size_t size,
                                                   const CommOptions& options, gpu::Runtime& gpu, int device = 0);

}  // namespace sceptre::collective
