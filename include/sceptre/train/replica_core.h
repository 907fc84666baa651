// ReplicaCore: one replica's model, optimizer and data, in libtorch, behind a header without
// libtorch (only replica_core.cc includes it). The model is an MLP classifier learning a fixed
// random "teacher" on samples generated from their index, so every process makes the same
// samples from the same numbers and no data is downloaded.
//
// A step is split the way the quorum needs it: local_gradients() computes this replica's
// gradient of a block of samples (kept, so a retried step reuses it), apply() takes the sum over
// the quorum and steps the optimizer. The committed state (parameters, optimizer state, step)
// travels as bytes for healing and checkpoints.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "sceptre/train/checkpoint.h"
#include "sceptre/wire/archive.h"

namespace sceptre::train {

struct ModelSpec {
  std::int64_t inputs = 32;
  std::int64_t hidden = 256;
  std::int64_t classes = 10;
  std::int64_t seed = 1;        // initial weights, teacher, samples
  double learning_rate = 1e-3;  // Adam
  SCEPTRE_FIELDS(inputs, hidden, classes, seed, learning_rate)
};

class ReplicaCore {
 public:
  explicit ReplicaCore(const ModelSpec& spec);
  ~ReplicaCore();
  ReplicaCore(const ReplicaCore&) = delete;
  ReplicaCore& operator=(const ReplicaCore&) = delete;

  // This replica's gradient (flattened, float32) of the mean loss over samples
  // [first, first + count), and that loss.
  std::vector<float> local_gradients(std::uint64_t first, std::uint64_t count, float* loss);
  // Steps the optimizer with `summed` / `members` as the gradient; the step counter advances.
  void apply(std::span<const float> summed, std::size_t members);

  std::uint64_t step() const;
  std::size_t parameter_count() const;
  // XXH3 of save()'s bytes (computed in place): equal digests, equal state.
  std::uint64_t digest() const;
  // The whole committed state as bytes, and back (load throws std::runtime_error on bad bytes).
  std::string save() const;
  // The same into `out` (its capacity kept: memory already touched is reused).
  void save(std::string& out) const;
  // The size of save(): its header, then the parameters' and Adam's state's bytes.
  std::size_t state_bytes() const;
  void load(const std::string& bytes);

  // Loading in place, for healing: save()'s first header_bytes() are its header (the step, the
  // tensors' sizes, Adam's step counts), the rest the tensors' data. load_begin checks a donor's
  // header against this model (throws std::runtime_error, changing nothing, on a mismatch);
  // load_data copies data bytes, in any order, to their offset after the header, straight into
  // this replica's tensors; load_end takes the step counters and throws unless every data byte
  // came. In between the state is partial: a replica whose heal fails is replaced, not trained.
  std::size_t header_bytes() const;
  void load_begin(std::string_view header);
  void load_data(std::uint64_t at, const void* data, std::size_t n);
  void load_end();

  // The committed state as named tensors, for checkpoints: "model.<parameter>",
  // "adam.exp_avg.<parameter>", "adam.exp_avg_sq.<parameter>" and "adam.step.<parameter>" (I64;
  // a checkpoint without Adam's tensors loads as an optimizer that has not stepped). With shards > 1, only those assign_shards gives to `shard`
  // are copied. load_tensors takes the union of every shard (throws std::runtime_error on a
  // missing, extra or misshapen tensor) and sets the step counter to `step`.
  std::vector<TensorBytes> tensors(std::size_t shard = 0, std::size_t shards = 1) const;
  void load_tensors(const std::vector<TensorBytes>& tensors, std::uint64_t step);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace sceptre::train
