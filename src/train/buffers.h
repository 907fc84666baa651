// Memory a replica keeps and reuses: buffers for the quorum's summed gradients, pages touched
// ahead of their first use, and device memory to sum a CPU model's gradients through with NCCL.
#pragma once

#include <cstddef>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <vector>

#include "sceptre/collective/communicator.h"
#include "sceptre/gpu/runtime.h"

namespace sceptre::train {

// Buffers for the quorum's summed gradients, reused. A sum is kept in the donor's log while a
// peer heals and goes back to the pool once the log and every send of it let go: a new buffer
// each step would be written and sent for the first time each step (slow on this VM, see warm()).
class GradientPool : public std::enable_shared_from_this<GradientPool> {
 public:
  using Buffer = std::shared_ptr<std::vector<float>>;
  // A buffer of `n` floats; its contents are whatever was there.
  Buffer take(std::size_t n);
  // Adds a buffer made (and warmed) elsewhere.
  void give(std::unique_ptr<std::vector<float>> v);

 private:
  static constexpr std::size_t kKept = 4;
  std::mutex mu_;
  std::vector<std::unique_ptr<std::vector<float>>> free_;
};

// Touches every page of [data, data + size), from this process and once from the kernel (its
// bytes are written through a socketpair to a thread that reads and drops them). On this VM each
// is slow only the first time: a first write reaches ~0.5 GB/s, the kernel's first read of user
// pages 0.55 GB/s (the next one 7 GB/s), and a snapshot or a logged sum is sent through a socket.
// Best effort: an error here only means slower sends.
void warm(void* data, std::size_t size);

// A copy of [data, data + size) that the kernel reads fast, for bytes about to be written to a
// file (a captured checkpoint shard): in transparent huge pages where the machine allows them
// (THP "madvise" or "always"), else a plain copy. On this VM the kernel's first read of a 4 KiB
// page that a process has just written runs at ~0.6 GB/s (a write() of 16.8 MB spends ~25 ms in
// the kernel), of a huge page several times faster.
std::string io_copy(const void* data, std::size_t size);

// Device memory of this proc's GPU, for gradients of a model on the CPU summed by NCCL.
class Staging {
 public:
  // std::runtime_error if the device memory cannot be had.
  Staging(gpu::Runtime& gpu, std::size_t floats);
  ~Staging();
  Staging(const Staging&) = delete;
  Staging& operator=(const Staging&) = delete;
  // Sums host `data` with `comm` through the device buffer.
  Status allreduce(collective::Communicator& comm, std::span<float> data);

 private:
  gpu::Runtime& gpu_;
  std::span<float> data_;
};

}  // namespace sceptre::train
