// Fault-tolerant data parallelism: replica groups, a per-step quorum run by the controller, and
// live healing of replacements from a peer.
//
//   sceptre::Runtime runtime(argc, argv);
//   auto procs = runtime.this_host().spawn_procs({{"replicas", 4}}, "replicas");
//   sceptre::train::FtDdp ddp(procs, options);
//   sceptre::train::Summary s = ddp.run();     // trains options.steps committed steps
//
// Every step runs under a quorum: the replicas that are live and hold the committed state. The
// controller gives each member a block of samples (it alone owns the mapping from steps to
// samples), each member computes its gradient, and the quorum's Communicator sums them. The step
// commits only if every member reduced; then each applies the average and the step is done
// everywhere. If a member is lost during the step (it dies, or its heartbeat stops), the step
// goes on without it: the controller re-forms the quorum of the others at once, they keep the
// gradients they computed and reduce under the new quorum (a loss during the computation costs
// them nothing, one during the reduction only the reduction), and its samples go back to the
// front of the queue. If a member fails in another way, or too few are left, the step is
// discarded everywhere and retried under a new quorum, again with the gradients already
// computed. Committed steps are never rolled back.
//
// A failed replica's proc is respawned (the mesh's failure hook); the new replica fetches the
// committed state from a live peer (chunked, several chunks in flight, from a state server on
// its own thread so the peer keeps training), replays the averaged gradients of the steps
// committed meanwhile, and joins at a step boundary. Below options.min_replicas live members
// training pauses, and says so, until replacements arrive.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "sceptre/actor/actor.h"
#include "sceptre/actor/endpoint.h"
#include "sceptre/collective/communicator.h"
#include "sceptre/mesh/actor_mesh.h"
#include "sceptre/mesh/runtime.h"
#include "sceptre/train/replica_core.h"
#include "sceptre/wire/part.h"

namespace sceptre::train {

// --- the rendezvous store, served by the controller ---------------------------------------------
class StoreActor : public Actor {
 public:
  void set(std::string key, std::string value) { values_[std::move(key)] = std::move(value); }
  std::optional<std::string> get(std::string key) {
    auto it = values_.find(key);
    if (it == values_.end()) return std::nullopt;
    return it->second;
  }
  // Forgets every key that starts with `prefix` (a communicator that is gone).
  void erase_prefix(std::string prefix);

 private:
  std::map<std::string, std::string> values_;
};
SCEPTRE_ACTOR(StoreActor, set, get, erase_prefix);

// A KeyValue client of a StoreActor (polls for a key not yet set). A wait also ends, with
// kAborted, as soon as `abandoned` (when given) returns a reason: a rendezvous whose quorum the
// controller has given up.
class ActorStore final : public collective::KeyValue {
 public:
  explicit ActorStore(ActorRef<StoreActor> store, std::function<std::optional<std::string>()> abandoned = {})
      : store_(std::move(store)), abandoned_(std::move(abandoned)) {}
  Result<void> set(const std::string& key, std::string value) override;
  Result<std::string> get(const std::string& key, std::chrono::milliseconds timeout) override;
  const ActorRef<StoreActor>& ref() const { return store_; }

 private:
  ActorRef<StoreActor> store_;
  std::function<std::optional<std::string>()> abandoned_;
};

// --- messages -----------------------------------------------------------------------------------
struct StepPlan {
  std::uint64_t step = 0;        // the step being attempted (committed steps so far)
  std::uint64_t quorum = 0;      // the quorum's id: a new one means a new communicator
  std::uint64_t rank = 0;        // this member's place in the quorum
  std::uint64_t size = 0;        // members in the quorum
  std::uint64_t first = 0;       // this member's samples: [first, first + count)
  std::uint64_t count = 0;
  SCEPTRE_FIELDS(step, quorum, rank, size, first, count)
};

struct StepReply {
  bool ok = false;          // reduced under `quorum`: ready to commit
  bool reused = false;      // the gradient was computed by an earlier attempt of this step
  float loss = 0;           // this member's loss on its samples
  std::string error;        // why not, when !ok
  double compute_ms = 0, reduce_ms = 0;
  std::uint64_t at_step = 0;  // the replica's committed steps
  std::string device;         // where the model is: "cpu", "cuda:0"
  std::string collective;     // the communicator's backend ("gloo", "nccl", "rccl"); "" before one
  std::uint64_t quorum = 0;   // the last quorum it reduced under: the plan's, or a successor's (see Regroup)
  std::vector<std::uint64_t> abandoned;  // quorums of this step whose reduction it began and gave up (its last's too, when !ok)
  SCEPTRE_FIELDS(ok, reused, loss, error, compute_ms, reduce_ms, at_step, device, collective, quorum, abandoned)
};

struct Committed {
  std::uint64_t step = 0;    // steps committed by this replica, this one included
  std::uint64_t digest = 0;  // of its whole state after the commit
  double ms = 0;             // the commit's own time: the optimizer step (after any copy of a live snapshot)
  SCEPTRE_FIELDS(step, digest, ms)
};

class StateServer;
struct Snapshot {
  std::uint64_t step = 0;   // the committed step the state is at
  std::uint64_t bytes = 0;  // of the state's data, served in chunks (the header comes here)
  std::uint64_t chunk_bytes = 0;
  ActorRef<StateServer> server;
  std::string header;       // ReplicaCore's header of the state
  SCEPTRE_FIELDS(step, bytes, chunk_bytes, server, header)
};

struct HealReport {
  std::uint64_t step = 0;  // the replica's committed step after healing
  std::uint64_t digest = 0;
  std::uint64_t bytes = 0;
  double seconds = 0;      // the state transfer
  SCEPTRE_FIELDS(step, digest, bytes, seconds)
};

// Checkpoints for the loss of the whole job (see checkpoint.h for the files). At a step boundary
// the writers (quorum members) each copy their shard of the committed state in memory, the only
// stall of training; their CheckpointWriters persist it in the background, and the controller
// writes the manifest once every shard is on disk. A failed write (a full disk, a writer lost)
// is reported and abandoned; training goes on and earlier checkpoints stay as they were.
struct CheckpointOptions {
  std::string dir;              // empty: no checkpoints
  std::uint64_t every = 0;      // committed steps between checkpoints; 0: only at the end of run()
  std::size_t keep = 3;         // complete checkpoints kept
  std::size_t writers = 0;      // shards (one per writing member); 0: every member of the quorum
  bool resume = true;           // run() starts from the newest complete checkpoint in dir
  SCEPTRE_FIELDS(dir, every, keep, writers, resume)
};

class CheckpointWriter;
struct CheckpointPlan {
  std::uint64_t step = 0;
  std::string dir;            // the checkpoint's directory (created by the controller)
  std::uint64_t shard = 0, shards = 1;
  SCEPTRE_FIELDS(step, dir, shard, shards)
};

struct Captured {  // a shard copied in memory, waiting for its writer
  std::uint64_t bytes = 0;
  double copy_ms = 0;
  ActorRef<CheckpointWriter> writer;
  SCEPTRE_FIELDS(bytes, copy_ms, writer)
};

struct ShardWritten {
  bool ok = false;
  std::string error;
  ShardFile file;
  double seconds = 0;
  SCEPTRE_FIELDS(ok, error, file, seconds)
};

struct Restored {
  bool ok = false;
  std::string error;         // why the checkpoint could not be loaded (the replica is unchanged)
  std::uint64_t step = 0;
  std::uint64_t digest = 0;
  SCEPTRE_FIELDS(ok, error, step, digest)
};

struct TrainOptions {
  ModelSpec model;
  std::uint64_t steps = 200;               // committed steps to train (a resumed job counts those it resumed)
  std::uint64_t batch = 64;                // samples per member per step
  std::size_t min_replicas = 2;            // below this, training pauses
  std::chrono::milliseconds collective_timeout{1000};  // silence a collective waits out
  std::chrono::milliseconds rendezvous_timeout{2000};  // a new quorum's communicator
  std::chrono::milliseconds step_timeout{30000};       // a member's whole step
  std::uint64_t chunk_bytes = 4u << 20;    // healing transfer unit
  std::size_t chunks_in_flight = 4;
  bool respawn = true;                     // replace failed replicas
  bool end_with_all_replicas = false;      // run() waits (up to 2 step_timeouts) for every replica to rejoin
  CheckpointOptions checkpoint;
  // Where each replica's model lives: "auto" (its GPU when its libtorch sees one: a CUDA or ROCm
  // libtorch, the proc bound to a GPU by spawn_procs({{"gpus", N}})), "cpu" or "cuda".
  std::string device = "auto";
  // How the quorum sums gradients: "auto" (NCCL/RCCL when the model is on a GPU of the proc's
  // own, as spawn_procs({{"gpus", N}}) binds one; else Gloo, from host memory), "gloo" or "nccl"
  // (the GPU's vendor picks NCCL or RCCL; each member needs a GPU of its own). "nccl" with a model on the CPU
  // stages the gradients through device memory (a CPU-only libtorch on a GPU host; the tests).
  // With NCCL, collective_timeout bounds a whole collective, not only its silences.
  std::string collective = "auto";
  SCEPTRE_FIELDS(model, steps, batch, min_replicas, collective_timeout, rendezvous_timeout, step_timeout, chunk_bytes,
                 chunks_in_flight, respawn, end_with_all_replicas, checkpoint, device, collective)
};

// --- the replica ----------------------------------------------------------------------------------
// Serves chunks of its replica's last snapshot, and the averaged gradients committed since then,
// on a thread of its own (the replica keeps training while a peer heals from it).
class StateServer : public Actor {
 public:
  static constexpr bool kOwnThread = true;
  struct Shared;
  explicit StateServer(std::shared_ptr<Shared> shared) : shared_(std::move(shared)) {}
  wire::Part chunk(std::uint64_t step, std::uint64_t index);
  // The averaged gradient (summed, members) that committed step `step` (1-based) applied.
  std::pair<wire::Part, std::uint64_t> logged(std::uint64_t step);
  // Drops the logged gradients of steps up to `step`, which every healer has replayed.
  void forget(std::uint64_t step);

 private:
  std::shared_ptr<Shared> shared_;
};
SCEPTRE_ACTOR(StateServer, chunk, logged, forget);

// Persists its replica's captured checkpoint shard on a thread of its own.
class CheckpointWriter : public Actor {
 public:
  static constexpr bool kOwnThread = true;
  struct Shared;
  explicit CheckpointWriter(std::shared_ptr<Shared> shared) : shared_(std::move(shared)) {}
  ShardWritten write(std::uint64_t step);

 private:
  std::shared_ptr<Shared> shared_;
};
SCEPTRE_ACTOR(CheckpointWriter, write);

// A quorum re-formed during a step's attempt, without a member the controller lost: this
// member's place in it. Its gradient is kept, and only the sum is made again.
struct Regroup {
  std::uint64_t quorum = 0, rank = 0, size = 0;
  SCEPTRE_FIELDS(quorum, rank, size)
};

// Aborts the collective a replica of this proc is in, from another thread: the controller sends
// it to the other members of a quorum when one of them is lost, so that they stop waiting for it
// at once (a dead peer's NCCL collective otherwise lasts until its deadline). One per proc,
// beside its Replica (the same job: the same store).
class CollectiveAbort : public Actor {
 public:
  explicit CollectiveAbort(ActorRef<StoreActor> store);
  // Aborts the communicator of quorum `quorum` (and any this replica makes for it later). With
  // `next`, the replica's step in flight goes on under that quorum instead of failing.
  void abort(std::uint64_t quorum, std::string why, std::optional<Regroup> next);

 private:
  std::string job_;
};
SCEPTRE_ACTOR(CollectiveAbort, abort);

class Replica : public Actor {
 public:
  static constexpr bool kOwnThread = true;
  Replica(TrainOptions options, ActorRef<StoreActor> store);
  ~Replica() override;
  void on_start() override;

  StepReply step(StepPlan plan);
  Committed commit(std::uint64_t step);
  Committed digest();
  // Snapshots the committed state into the state server and starts logging committed gradients.
  // `healers` fetch it: each of its chunks is served that many times.
  Snapshot snapshot(std::size_t healers);
  void stop_logging();
  // Fetches `from`'s snapshot into this replica's state (its step is the snapshot's).
  HealReport heal(Snapshot from);
  // Replays the gradients `from`'s replica logged up to step `upto`, from this replica's step.
  HealReport catch_up(Snapshot from, std::uint64_t upto);
  // Copies this replica's shard of the committed state for its CheckpointWriter.
  Captured capture(CheckpointPlan plan);
  // Loads a checkpoint (every shard, checked against the manifest); on failure the state is unchanged.
  Restored restore(std::string dir, Manifest manifest);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};
SCEPTRE_ACTOR(Replica, step, commit, digest, snapshot, stop_logging, heal, catch_up, capture, restore);

// --- the controller -------------------------------------------------------------------------------
struct Event {
  enum class Kind {
    kCommitted, kRetried, kFailed, kRespawned, kHealing, kHealFailed, kJoined, kPaused, kResumed,
    kCheckpointing,     // shards captured (the stall is over), being persisted
    kCheckpointed,      // the manifest is written: the checkpoint is complete
    kCheckpointFailed,  // abandoned (a full disk, an I/O error, a writer lost); training goes on
    kCheckpointSkipped, // at start: a torn or corrupt checkpoint passed over
    kRestored,          // at start: the state comes from a checkpoint
    kRegrouped,         // a member lost during a step: the others go on with it under a new quorum
  };
  Kind kind = Kind::kCommitted;
  std::uint64_t step = 0;
  std::size_t replica = 0;
  std::string what;
  std::chrono::steady_clock::time_point when;
  std::uint64_t bytes = 0;  // kJoined: the state fetched, and how long it took; kCheckpointed:
  double seconds = 0;       // the bytes persisted and how long the slowest shard and the manifest took
  double stall_ms = 0;      // kCheckpointing: how long training stood still for the copy
};

struct StepRecord {  // one committed step, for replays and plots
  std::uint64_t step = 0;
  std::vector<std::size_t> members;        // replicas, in quorum rank order
  std::vector<std::uint64_t> first;        // each member's first sample
  std::uint64_t count = 0;
  float loss = 0;                          // mean over members
  double seconds = 0;                      // since run() started, at commit
  // Tries of this step by a quorum that began to reduce it, the committing one included (a
  // quorum re-formed before any member began to reduce is not one: see Regroup), and quorums
  // re-formed during its attempts.
  std::size_t attempts = 1, regroups = 0;
  // Of the committing attempt, per member: its gradient's computation (about 0 when reused from
  // an earlier attempt) and its reductions, the quorum's communicator made first when it is new
  // (summed over its calls, when asked again under a re-formed quorum); and its commit (0 where
  // the commit failed).
  std::vector<double> compute_ms, reduce_ms, commit_ms;
};

struct Summary {
  std::uint64_t committed = 0, attempted = 0;  // committed: the step reached (from start_step); attempted: see StepRecord::attempts
  std::size_t regroups = 0;                // quorums re-formed during an attempt, without a member lost
  std::uint64_t start_step = 0;            // restored from a checkpoint; 0 when fresh
  std::size_t checkpoints = 0, checkpoint_failures = 0;
  std::size_t failures = 0, heals = 0;
  double seconds = 0;
  std::uint64_t samples = 0;               // committed samples
  // Work, in replica-steps of gradient computation: every one computed (a failed member's
  // included; a retry that reuses a gradient computes none) and those that went into commits.
  std::uint64_t gradients_computed = 0, gradients_committed = 0;
  std::vector<StepRecord> steps;
  std::map<std::size_t, std::uint64_t> digests;  // live replicas at the end
  std::vector<Event> events;
  std::string device, collective;  // as the members of the last committed step reported them
};

class FtDdp {
 public:
  FtDdp(ProcMesh procs, TrainOptions options);
  ~FtDdp();
  // Called on the controller thread for every event, and after each committed step.
  void on_event(std::function<void(const Event&)> fn);
  void on_step(std::function<void(const StepRecord&, std::size_t live)> fn);
  Summary run();
  // Ends run() at the next step boundary (thread-safe).
  void cancel();

 private:
  struct State;  // src/train/ft_ddp_state.h
  friend class Attempt;
  friend class Checkpointer;
  friend class Healer;
  std::shared_ptr<State> state_;
};

// A failure-free replay of committed steps: one model, each step's members' gradients computed
// one after another and summed by a Gloo communicator of that step's size among threads, exactly
// as the quorum did. Returns the state's digest after the last step.
std::uint64_t replay(const TrainOptions& options, const std::vector<StepRecord>& steps);

}  // namespace sceptre::train
