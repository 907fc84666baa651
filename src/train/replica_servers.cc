#include "train/replica_servers.h"

#include <algorithm>
#include <stdexcept>

#include "core/log.h"

namespace sceptre::train {

using Clock = std::chrono::steady_clock;

// --- the state server ---------------------------------------------------------------------------
wire::Part StateServer::chunk(std::uint64_t step, std::uint64_t index) {
  std::lock_guard lock(shared_->mu);
  auto& sh = *shared_;
  if (sh.step != step || !(sh.lease || sh.live || !sh.copies.empty())) {
    throw std::runtime_error("no snapshot of step " + std::to_string(step) + " here");
  }
  if (sh.live || !sh.copies.empty()) {
    std::uint64_t at = index * sh.chunk_bytes;
    if (at >= sh.bytes && !(at == 0 && sh.bytes == 0)) throw std::out_of_range("chunk " + std::to_string(index));
    auto n = std::min<std::uint64_t>(sh.chunk_bytes, sh.bytes - at);
    if (!sh.live) {
      auto it = sh.copies.find(index);
      if (it == sh.copies.end()) throw std::runtime_error("chunk " + std::to_string(index) + " of step " + std::to_string(step) + " was fetched by every healer");
      return it->second;
    }
    ++sh.fetched[index];
    if (auto v = sh.live->live_view(at, n); !v.empty()) {
      ++sh.live_views;
      std::weak_ptr<Shared> weak = shared_;
      return wire::Part::view(v.data(), v.size(), std::shared_ptr<const void>(v.data(), [weak](const void*) {
        if (auto s = weak.lock()) {
          std::lock_guard l(s->mu);
          --s->live_views;
          s->released.notify_all();
        }
      }));
    }
    auto part = wire::Part::allocate(n);  // across two tensors
    sh.live->copy_live(at, part.mutable_data(), n);
    return part;
  }
  auto& b = *shared_->buffer;
  std::uint64_t size = b.size() - shared_->data_at;
  std::uint64_t at = index * shared_->chunk_bytes;
  if (at >= size && !(at == 0 && size == 0)) throw std::out_of_range("chunk " + std::to_string(index));
  auto n = std::min<std::uint64_t>(shared_->chunk_bytes, size - at);
  return wire::Part::view(b.data() + shared_->data_at + at, n, shared_->lease);
}

std::pair<wire::Part, std::uint64_t> StateServer::logged(std::uint64_t step) {
  std::lock_guard lock(shared_->mu);
  auto it = shared_->log.find(step);
  if (it == shared_->log.end()) throw std::runtime_error("no logged gradient of step " + std::to_string(step));
  return it->second;
}

void StateServer::forget(std::uint64_t step) {
  std::vector<wire::Part> dropped;  // released after the lock: a buffer's return to its pool takes another
  std::lock_guard lock(shared_->mu);
  for (auto it = shared_->log.begin(); it != shared_->log.end() && it->first <= step; it = shared_->log.erase(it))
    dropped.push_back(std::move(it->second.first));
}

void StateServer::Shared::end_live(std::chrono::milliseconds wait) {
  std::unique_lock lock(mu);
  if (!live) return;
  for (std::size_t i = 0; i < fetched.size(); ++i) {
    if (fetched[i] >= healers) continue;
    std::uint64_t at = i * chunk_bytes;
    auto n = std::min<std::uint64_t>(chunk_bytes, bytes - at);
    auto part = wire::Part::allocate(n);
    live->copy_live(at, part.mutable_data(), n);
    copies.emplace(i, std::move(part));
  }
  live = nullptr;
  fetched.clear();
  if (!released.wait_for(lock, wait, [&] { return live_views == 0; })) {
    copies.clear();
    sceptre::log().warn("replica: {} views of the state were still being sent after {} ms; the snapshot of step {} is withdrawn",
                        live_views, wait.count(), step);
  }
}

// --- the checkpoint writer ----------------------------------------------------------------------
ShardWritten CheckpointWriter::write(std::uint64_t step) {
  CheckpointPlan plan;
  std::vector<TensorBytes> tensors;
  {
    std::lock_guard lock(shared_->mu);
    if (!shared_->captured || shared_->plan.step != step) {
      return ShardWritten{false, "no captured shard of step " + std::to_string(step) + " here", {}, 0};
    }
    plan = shared_->plan;
    tensors = std::move(shared_->tensors);
    shared_->tensors.clear();
    shared_->captured = false;
  }
  auto t0 = Clock::now();
  auto r = write_shard(plan.dir, shard_name(plan.shard, plan.shards), tensors,
                       {{"format", "sceptre-checkpoint"}, {"step", std::to_string(plan.step)}});
  double seconds = std::chrono::duration<double>(Clock::now() - t0).count();
  if (!r) return ShardWritten{false, r.error().to_string(), {}, seconds};
  return ShardWritten{true, "", *r, seconds};
}

}  // namespace sceptre::train
