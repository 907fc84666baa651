// ReplicaCore: one replica's model, optimizer and data, in libtorch, behind a header without
// libtorch (only replica_core.cc includes it). The model is an MLP classifier learning a fixed
// random "teacher" on samples generated from their index, so every process makes the same
// samples from the same numbers and no data is downloaded.
//
// Randomness lives in no generator's state: every draw of a step (its samples, its dropout masks)
// is a function of the seed and the index of the block's first sample.
//
// A step is split the way the quorum needs it: compute() computes this replica's gradient of a
// block of samples and keeps it (a retried step reuses it), the quorum sums it, apply() steps the
// optimizer with the sum. The committed state (parameters, optimizer state, step) travels as
// bytes for healing and checkpoints, the same bytes whichever device the model is on.
//
// The model lives on the CPU or on a GPU ("cuda": torch::kCUDA, which a ROCm libtorch maps to
// HIP), device 0 of what the process sees (spawn_procs binds each proc to its own GPU). On a GPU
// the gradients and their sum stay in device memory (sum_buffer()), for a GPU collective.
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
  // Dropout after each hidden layer while training (0: none). Its masks, like the samples, are
  // drawn from a generator seeded by the block's first sample: a block gets the same masks on
  // whichever replica, attempt or replay computes it, so there is no random state to carry
  // across failures, heals or checkpoints.
  double dropout = 0;
  SCEPTRE_FIELDS(inputs, hidden, classes, seed, learning_rate, dropout)
};

class ReplicaCore {
 public:
  // `device`: "cpu", "cuda", or "auto" (cuda when this libtorch sees a GPU). std::runtime_error
  // for "cuda" when it sees none (a CPU-only libtorch, or no device), std::invalid_argument for
  // another name.
  explicit ReplicaCore(const ModelSpec& spec, std::string_view device = "cpu");
  ~ReplicaCore();
  ReplicaCore(const ReplicaCore&) = delete;
  ReplicaCore& operator=(const ReplicaCore&) = delete;

  // Whether this libtorch can put a model on a GPU here (torch::cuda::is_available()).
  static bool gpu_available();
  // "cpu" or "cuda:0".
  std::string device() const;
  bool on_gpu() const;

  // Computes this replica's gradient (flattened, float32) of the mean loss over samples
  // [first, first + count) and keeps it, on the model's device, until the next compute();
  // returns the loss.
  float compute(std::uint64_t first, std::uint64_t count);
  // Copies the kept gradient to `out` (parameter_count() floats of host memory).
  void gradient_to(std::span<float> out) const;
  // compute(), then the gradient in host memory.
  std::vector<float> local_gradients(std::uint64_t first, std::uint64_t count, float* loss);
  // Steps the optimizer with `summed` / `members` as the gradient (host memory); the step
  // counter advances.
  void apply(std::span<const float> summed, std::size_t members);

  // On a GPU: the device buffer a GPU collective sums into (parameter_count() floats of device
  // memory, float32), filled with the kept gradient and its copy finished. apply_sum() steps
  // the optimizer with it / `members`; sum_to() copies it to host memory. std::logic_error on
  // the CPU.
  std::span<float> sum_buffer();
  void apply_sum(std::size_t members);
  void sum_to(std::span<float> out) const;

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
  std::string header() const;  // save()'s first header_bytes()

  // The state's data bytes [at, at + n) (offsets after the header) where they live, for serving a
  // snapshot without copying it first: valid until the state next changes (apply(), a load). On
  // the CPU only (std::logic_error on a GPU). live_view is empty unless the bytes lie within one
  // tensor; copy_live copies any range.
  std::span<const std::byte> live_view(std::uint64_t at, std::size_t n) const;
  void copy_live(std::uint64_t at, void* out, std::size_t n) const;

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
