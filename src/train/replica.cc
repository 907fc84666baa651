// The replica actor, its state server, and the controller's rendezvous store.
#include <algorithm>
#include <chrono>
#include <cstring>
#include <future>
#include <mutex>
#include <stdexcept>
#include <thread>

#include "sceptre/actor/proc.h"
#include "sceptre/train/ft_ddp.h"

namespace sceptre::train {

using Clock = std::chrono::steady_clock;

namespace {
double ms_since(Clock::time_point t) { return std::chrono::duration<double, std::milli>(Clock::now() - t).count(); }

wire::Part part_of(std::vector<float> v) {
  std::vector<std::byte> bytes(v.size() * sizeof(float));
  std::memcpy(bytes.data(), v.data(), bytes.size());
  return wire::Part::adopt(std::move(bytes));
}

std::vector<float> floats_of(const wire::Part& p) {
  std::vector<float> v(p.size() / sizeof(float));
  std::memcpy(v.data(), p.data(), v.size() * sizeof(float));
  return v;
}
}  // namespace

// --- the rendezvous store -----------------------------------------------------------------------
void StoreActor::erase_prefix(std::string prefix) {
  for (auto it = values_.lower_bound(prefix); it != values_.end() && it->first.rfind(prefix, 0) == 0;) {
    it = values_.erase(it);
  }
}

Result<void> ActorStore::set(const std::string& key, std::string value) {
  try {
    store_.call<&StoreActor::set>(key, std::move(value)).get(std::chrono::seconds(30));
    return {};
  } catch (const std::exception& e) {
    return Error(Code::kUnavailable, std::string("rendezvous store: ") + e.what());
  }
}

Result<std::string> ActorStore::get(const std::string& key, std::chrono::milliseconds timeout) {
  auto deadline = Clock::now() + timeout;
  auto pause = std::chrono::microseconds(200);
  for (;;) {
    try {
      auto v = store_.call<&StoreActor::get>(key).get(std::chrono::seconds(30));
      if (v) return std::move(*v);
    } catch (const std::exception& e) {
      return Error(Code::kUnavailable, std::string("rendezvous store: ") + e.what());
    }
    if (Clock::now() >= deadline) {
      return Error(Code::kDeadlineExceeded,
                   "rendezvous: no '" + key + "' after " + std::to_string(timeout.count()) + " ms");
    }
    std::this_thread::sleep_for(pause);
    pause = std::min(pause * 2, std::chrono::microseconds(5000));
  }
}

// --- the state server ---------------------------------------------------------------------------
struct StateServer::Shared {
  std::mutex mu;
  std::uint64_t step = 0;                     // of the snapshot
  std::shared_ptr<const std::string> bytes;   // the snapshot; null when none
  std::uint64_t chunk_bytes = 0;
  bool logging = false;
  std::map<std::uint64_t, std::pair<wire::Part, std::uint64_t>> log;  // committed step -> (sum, members)
};

wire::Part StateServer::chunk(std::uint64_t step, std::uint64_t index) {
  std::lock_guard lock(shared_->mu);
  if (!shared_->bytes || shared_->step != step) {
    throw std::runtime_error("no snapshot of step " + std::to_string(step) + " here");
  }
  auto& b = *shared_->bytes;
  std::uint64_t at = index * shared_->chunk_bytes;
  if (at >= b.size() && !(at == 0 && b.empty())) throw std::out_of_range("chunk " + std::to_string(index));
  auto n = std::min<std::uint64_t>(shared_->chunk_bytes, b.size() - at);
  return wire::Part::view(b.data() + at, n, shared_->bytes);
}

std::pair<wire::Part, std::uint64_t> StateServer::logged(std::uint64_t step) {
  std::lock_guard lock(shared_->mu);
  auto it = shared_->log.find(step);
  if (it == shared_->log.end()) throw std::runtime_error("no logged gradient of step " + std::to_string(step));
  return it->second;
}

// --- the checkpoint writer ----------------------------------------------------------------------
struct CheckpointWriter::Shared {
  std::mutex mu;
  CheckpointPlan plan;
  std::vector<TensorBytes> tensors;  // captured, not yet written
  bool captured = false;
};

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

// --- the replica --------------------------------------------------------------------------------
struct Replica::Impl {
  TrainOptions options;
  ActorStore store;
  ReplicaCore core;
  std::unique_ptr<collective::Communicator> comm;
  std::uint64_t comm_quorum = 0;
  std::shared_ptr<StateServer::Shared> shared = std::make_shared<StateServer::Shared>();
  ActorRef<StateServer> server;
  std::shared_ptr<CheckpointWriter::Shared> to_write = std::make_shared<CheckpointWriter::Shared>();
  ActorRef<CheckpointWriter> writer;
  std::string hostname = "127.0.0.1";  // where this replica's collectives listen: its proc's address
  // One state-sized buffer whose pages are touched in the background from the start, for this
  // replica's first snapshot or heal (a replacement's heal): on this VM first touches of new
  // memory are slower than the transfer itself (0.3 GB/s, against ~10 GB/s for a copy). Later
  // ones get new buffers: a served snapshot's bytes may still be read by a sending thread.
  std::future<std::shared_ptr<std::string>> touching;

  std::shared_ptr<std::string> transfer_buffer() {
    return touching.valid() ? touching.get() : std::make_shared<std::string>();
  }

  // The attempt in progress: its samples, this replica's gradient of them, and the sum.
  struct Pending {
    std::uint64_t step = ~0ull, first = 0, count = 0, size = 0;
    std::vector<float> local, summed;
    float loss = 0;
    bool reduced = false;
  } pending;

  Impl(TrainOptions o, ActorRef<StoreActor> s) : options(std::move(o)), store(std::move(s)), core(options.model) {}
};

Replica::Replica(TrainOptions options, ActorRef<StoreActor> store)
    : impl_(std::make_unique<Impl>(std::move(options), std::move(store))) {}
Replica::~Replica() = default;

void Replica::on_start() {
  // A proc on TCP (a host of its own, a network namespace) is reached at its proc's address;
  // one on a unix socket shares the controller's loopback.
  const std::string& addr = Proc::current().id().addr;
  if (addr.rfind("tcp:", 0) == 0) {
    auto host = addr.substr(4, addr.rfind(':') - 4);
    if (host.size() > 2 && host.front() == '[') host = host.substr(1, host.size() - 2);
    if (!host.empty()) impl_->hostname = host;
  }
  impl_->touching = std::async(std::launch::async, [size = impl_->core.state_bytes()] {
    auto b = std::make_shared<std::string>();
    b->resize(size);
    return b;
  });
  impl_->server = spawn<StateServer>("state", impl_->shared);
  impl_->writer = spawn<CheckpointWriter>("checkpoint", impl_->to_write);
}

StepReply Replica::step(StepPlan plan) {
  auto& m = *impl_;
  StepReply reply;
  reply.at_step = m.core.step();
  if (plan.step != m.core.step()) {
    reply.error = "replica is at step " + std::to_string(m.core.step()) + ", asked for step " + std::to_string(plan.step);
    return reply;
  }
  auto& p = m.pending;
  auto t0 = Clock::now();
  if (p.step == plan.step && p.first == plan.first && p.count == plan.count && !p.local.empty()) {
    reply.reused = true;
  } else {
    p = {};
    p.step = plan.step;
    p.first = plan.first;
    p.count = plan.count;
    p.local = m.core.local_gradients(plan.first, plan.count, &p.loss);
  }
  reply.loss = p.loss;
  reply.compute_ms = ms_since(t0);
  p.reduced = false;
  p.size = plan.size;

  auto t1 = Clock::now();
  if (!m.comm || m.comm_quorum != plan.quorum) {
    m.comm.reset();
    auto c = collective::connect_gloo(m.store, plan.rank, plan.size,
                                      {.prefix = "quorum-" + std::to_string(plan.quorum),
                                       .timeout = m.options.collective_timeout,
                                       .rendezvous_timeout = m.options.rendezvous_timeout,
                                       .hostname = m.hostname});
    if (!c.ok()) {
      reply.error = c.error().to_string();
      return reply;
    }
    m.comm = std::move(c).value();
    m.comm_quorum = plan.quorum;
  }
  p.summed = p.local;
  auto r = m.comm->allreduce_sum(std::span(p.summed));
  reply.reduce_ms = ms_since(t1);
  if (!r.ok()) {
    m.comm->abort(r.error().message());  // the peers still waiting on us fail at once
    m.comm.reset();
    reply.error = r.error().to_string();
    return reply;
  }
  p.reduced = true;
  reply.ok = true;
  return reply;
}

Committed Replica::commit(std::uint64_t step) {
  auto& m = *impl_;
  auto& p = m.pending;
  if (p.step != step || !p.reduced) {
    throw std::logic_error("commit of step " + std::to_string(step) + " that this replica has not reduced");
  }
  m.core.apply(p.summed, p.size);
  {
    std::lock_guard lock(m.shared->mu);
    if (m.shared->logging) m.shared->log[m.core.step()] = {part_of(std::move(p.summed)), p.size};
  }
  p = {};
  return Committed{m.core.step(), 0};
}

Committed Replica::digest() { return Committed{impl_->core.step(), impl_->core.digest()}; }

Snapshot Replica::snapshot() {
  auto& m = *impl_;
  auto buffer = m.transfer_buffer();
  m.core.save(*buffer);
  std::shared_ptr<const std::string> bytes = buffer;
  std::lock_guard lock(m.shared->mu);
  m.shared->step = m.core.step();
  m.shared->bytes = bytes;
  m.shared->chunk_bytes = std::max<std::uint64_t>(1, m.options.chunk_bytes);
  m.shared->logging = true;
  m.shared->log.clear();
  return Snapshot{m.shared->step, bytes->size(), m.shared->chunk_bytes, m.server};
}

void Replica::stop_logging() {
  auto& m = *impl_;
  std::lock_guard lock(m.shared->mu);
  m.shared->logging = false;
  m.shared->log.clear();
  m.shared->bytes.reset();
}

HealReport Replica::heal(Snapshot from) {
  auto& m = *impl_;
  auto t0 = Clock::now();
  std::uint64_t chunks = from.chunk_bytes ? (from.bytes + from.chunk_bytes - 1) / from.chunk_bytes : 0;
  auto buffer = m.transfer_buffer();
  std::string& bytes = *buffer;
  bytes.resize(from.bytes);
  std::vector<std::pair<std::uint64_t, Future<wire::Part>>> flight;
  std::uint64_t next = 0;
  auto window = std::max<std::size_t>(1, m.options.chunks_in_flight);
  while (next < chunks || !flight.empty()) {
    while (next < chunks && flight.size() < window) {
      flight.emplace_back(next, from.server.call<&StateServer::chunk>(from.step, next));
      ++next;
    }
    auto [index, f] = std::move(flight.front());
    flight.erase(flight.begin());
    wire::Part part = f.get(m.options.step_timeout);
    auto at = index * from.chunk_bytes;
    if (part.size() != std::min<std::uint64_t>(from.chunk_bytes, from.bytes - at)) {
      throw std::runtime_error("heal: chunk " + std::to_string(index) + " has " + std::to_string(part.size()) + " bytes");
    }
    std::memcpy(bytes.data() + at, part.data(), part.size());
  }
  double seconds = std::chrono::duration<double>(Clock::now() - t0).count();
  m.core.load(bytes);
  m.pending = {};
  m.comm.reset();
  return HealReport{m.core.step(), 0, from.bytes, seconds};
}

HealReport Replica::catch_up(Snapshot from, std::uint64_t upto) {
  auto& m = *impl_;
  auto t0 = Clock::now();
  std::uint64_t bytes = 0;
  while (m.core.step() < upto) {
    auto [sum, members] = from.server.call<&StateServer::logged>(m.core.step() + 1).get(m.options.step_timeout);
    bytes += sum.size();
    m.core.apply(floats_of(sum), members);
  }
  return HealReport{m.core.step(), m.core.digest(), bytes, std::chrono::duration<double>(Clock::now() - t0).count()};
}

Captured Replica::capture(CheckpointPlan plan) {
  auto& m = *impl_;
  if (plan.step != m.core.step()) {
    throw std::logic_error("checkpoint of step " + std::to_string(plan.step) + " asked of a replica at step " +
                           std::to_string(m.core.step()));
  }
  auto t0 = Clock::now();
  auto tensors = m.core.tensors(plan.shard, plan.shards);  // the copy: training waits only for this
  std::uint64_t bytes = 0;
  for (auto& t : tensors) bytes += t.data.size();
  {
    std::lock_guard lock(m.to_write->mu);
    m.to_write->plan = std::move(plan);
    m.to_write->tensors = std::move(tensors);
    m.to_write->captured = true;
  }
  return Captured{bytes, ms_since(t0), m.writer};
}

Restored Replica::restore(std::string dir, Manifest manifest) {
  auto& m = *impl_;
  auto tensors = load_checkpoint(FoundCheckpoint{std::move(dir), manifest});
  if (!tensors) return Restored{false, tensors.error().to_string(), m.core.step(), 0};
  try {
    m.core.load_tensors(*tensors, manifest.step);
  } catch (const std::exception& e) {
    return Restored{false, e.what(), m.core.step(), 0};
  }
  m.pending = {};
  m.comm.reset();
  return Restored{true, "", m.core.step(), m.core.digest()};
}

}  // namespace sceptre::train
