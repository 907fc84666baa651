#include "train/buffers.h"

#include <sys/mman.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstring>
#include <stdexcept>
#include <string>
#include <thread>

namespace sceptre::train {

GradientPool::Buffer GradientPool::take(std::size_t n) {
  std::unique_ptr<std::vector<float>> v;
  {
    std::lock_guard lock(mu_);
    if (!free_.empty()) {
      v = std::move(free_.back());
      free_.pop_back();
    }
  }
  if (!v) v = std::make_unique<std::vector<float>>();
  v->resize(n);
  std::weak_ptr<GradientPool> weak = weak_from_this();
  return Buffer(v.release(), [weak](std::vector<float>* b) {
    std::unique_ptr<std::vector<float>> owned(b);
    if (auto pool = weak.lock()) {
      std::lock_guard lock(pool->mu_);
      if (pool->free_.size() < kKept) pool->free_.push_back(std::move(owned));
    }
  });
}

void GradientPool::give(std::unique_ptr<std::vector<float>> v) {
  std::lock_guard lock(mu_);
  if (free_.size() < kKept) free_.push_back(std::move(v));
}

void warm(void* data, std::size_t size) {
  auto* b = static_cast<char*>(data);
  std::memset(b, 0, size);
  int fds[2];
  if (::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, fds) != 0) return;
  std::thread drain([fd = fds[1]] {
    std::vector<char> sink(1 << 20);
    while (::read(fd, sink.data(), sink.size()) > 0) {
    }
  });
  for (std::size_t at = 0; at < size;) {
    auto n = ::send(fds[0], b + at, std::min<std::size_t>(size - at, 4u << 20), MSG_NOSIGNAL);
    if (n <= 0 && errno != EINTR) break;
    if (n > 0) at += static_cast<std::size_t>(n);
  }
  ::shutdown(fds[0], SHUT_WR);
  drain.join();
  ::close(fds[0]);
  ::close(fds[1]);
}

std::string io_copy(const void* data, std::size_t size) {
  constexpr std::uintptr_t kHuge = 2u << 20;
  std::string s;
  // Advised before it is filled: pages the allocator maps afresh are then faulted in as huge
  // pages. A span it reuses (tcmalloc's) may already be in 4 KiB pages; there the advice only
  // lets khugepaged merge them later.
  s.reserve(size);
  if (size >= 2 * kHuge) {
    auto at = reinterpret_cast<std::uintptr_t>(s.data());
    std::uintptr_t from = (at + kHuge - 1) & ~(kHuge - 1), to = (at + size) & ~(kHuge - 1);
    if (to > from) (void)::madvise(reinterpret_cast<void*>(from), to - from, MADV_HUGEPAGE);  // best effort
  }
  s.assign(static_cast<const char*>(data), size);  // within the capacity reserved: no new allocation
  return s;
}

Staging::Staging(gpu::Runtime& gpu, std::size_t floats) : gpu_(gpu) {
  auto p = gpu.allocate(floats * sizeof(float));
  if (!p.ok()) throw std::runtime_error("replica: device memory to stage the gradients in: " + p.error().to_string());
  data_ = std::span(static_cast<float*>(*p), floats);
}

Staging::~Staging() { (void)gpu_.free(data_.data()); }

Status Staging::allreduce(collective::Communicator& comm, std::span<float> data) {
  const std::size_t bytes = data.size() * sizeof(float);
  SCEPTRE_RETURN_IF_ERROR(gpu_.copy_to_device(data_.data(), data.data(), bytes, nullptr));
  SCEPTRE_RETURN_IF_ERROR(gpu_.synchronize(nullptr));
  SCEPTRE_RETURN_IF_ERROR(comm.allreduce_sum(data_.first(data.size())));
  SCEPTRE_RETURN_IF_ERROR(gpu_.copy_to_host(data.data(), data_.data(), bytes, nullptr));
  return gpu_.synchronize(nullptr);
}

}  // namespace sceptre::train
