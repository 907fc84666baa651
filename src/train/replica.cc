// The replica actor: a step's computation and sum under the quorum's communicator, commits,
// snapshots for healers, healing from a peer, and checkpoint capture and restore.
#include <sys/resource.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <future>
#include <mutex>
#include <stdexcept>
#include <thread>

#include "sceptre/actor/proc.h"
#include "sceptre/gpu/runtime.h"
#include "sceptre/train/ft_ddp.h"
#include "train/buffers.h"
#include "train/collectives.h"
#include "train/replica_servers.h"

namespace sceptre::train {

using Clock = std::chrono::steady_clock;

namespace {
double ms_since(Clock::time_point t) { return std::chrono::duration<double, std::milli>(Clock::now() - t).count(); }
}  // namespace

// --- the replica --------------------------------------------------------------------------------
struct Replica::Impl {
  TrainOptions options;
  ActorStore store;
  std::string job;  // the store's id: this job's entry in Collectives
  ReplicaCore core;
  std::string collective;            // "gloo" or "nccl", resolved
  bool device_sum = false;           // the model on a GPU and NCCL: the sum stays in device memory
  std::unique_ptr<Staging> staging;  // nccl with the model on the CPU
  std::shared_ptr<collective::Communicator> comm;
  std::uint64_t comm_quorum = 0;
  std::shared_ptr<StateServer::Shared> shared = std::make_shared<StateServer::Shared>();
  ActorRef<StateServer> server;
  std::shared_ptr<CheckpointWriter::Shared> to_write = std::make_shared<CheckpointWriter::Shared>();
  ActorRef<CheckpointWriter> writer;
  std::string hostname = "127.0.0.1";  // where this replica's collectives listen: its proc's address
  // The snapshot buffer, made and warmed in the background from the start (see warm()), with
  // two buffers for the gradients logged while a peer heals.
  std::future<std::shared_ptr<std::string>> warming;
  std::shared_ptr<GradientPool> gradients = std::make_shared<GradientPool>();

  // The attempt in progress: its samples, this replica's gradient of them, and the sum.
  struct Pending {
    std::uint64_t step = ~0ull, first = 0, count = 0, size = 0;
    bool computed = false;        // the core keeps this attempt's gradient
    GradientPool::Buffer summed;  // the sum in host memory (the model on the CPU)
    float loss = 0;
    bool reduced = false;
  } pending;

  Impl(TrainOptions o, ActorRef<StoreActor> s)
      : options(std::move(o)), store(s), job(s.id().to_string()), core(options.model, options.device) {}
  ~Impl() { Collectives::of_this_proc().forget(job); }

  // The quorum's communicator, made when the quorum is new, on a thread of its own: begun when a
  // step's plan arrives, so that the rendezvous runs while the gradient is computed (a member
  // whose computation is slower, e.g. a replacement's first, does not make the others' rendezvous
  // wait out its timeout), and awaited before the sum. The controller aborts the quorum when one
  // of its members dies: the rendezvous ends then, not at its timeout. The store's waits ask as
  // they poll; the library's own connect cannot be interrupted (Gloo's pairs wait for their
  // peers' connections), so an abort leaves the thread behind to end at its timeout.
  using Made = Result<std::unique_ptr<collective::Communicator>>;
  struct Connecting {
    std::uint64_t quorum = 0;
    std::future<Made> ready;
  };
  std::optional<Connecting> connecting;

  void begin_connect(const StepPlan& plan) {
    if ((comm && comm_quorum == plan.quorum) || (connecting && connecting->quorum == plan.quorum)) return;
    drop_comm();
    collective::CommOptions o{.prefix = "quorum-" + std::to_string(plan.quorum),
                              .timeout = options.collective_timeout,
                              .rendezvous_timeout = options.rendezvous_timeout,
                              .hostname = hostname};
    auto abandoned = [job = job, q = plan.quorum] { return Collectives::of_this_proc().aborted(job, q); };
    auto rendezvous = std::make_shared<ActorStore>(store.ref(), abandoned);
    auto made = std::make_shared<std::promise<Made>>();
    connecting = Connecting{plan.quorum, made->get_future()};
    std::thread([made, rendezvous, o, rank = plan.rank, size = plan.size, nccl = collective == "nccl"] {
      made->set_value(nccl ? collective::connect_nccl(*rendezvous, rank, size, o, gpu::runtime(), 0)
                           : collective::connect_gloo(*rendezvous, rank, size, o));
    }).detach();
  }
  // The communicator of the plan's quorum, once made; an error, before any sum begins, if the
  // controller has aborted that quorum.
  Status connect(const StepPlan& plan) {
    auto gone = [&] {
      auto why = Collectives::of_this_proc().aborted(job, plan.quorum);
      return Error(Code::kAborted, "quorum " + std::to_string(plan.quorum) + " was aborted: " + why.value_or("?"));
    };
    if (Collectives::of_this_proc().aborted(job, plan.quorum)) return gone();
    begin_connect(plan);
    if (comm && comm_quorum == plan.quorum) return ok_status();
    Connecting c = std::move(*connecting);
    connecting.reset();
    while (c.ready.wait_for(std::chrono::milliseconds(5)) != std::future_status::ready) {
      if (auto why = Collectives::of_this_proc().aborted(job, c.quorum)) {
        return Error(Code::kAborted, "the rendezvous of quorum " + std::to_string(c.quorum) + " was abandoned: " + *why);
      }
    }
    auto made = c.ready.get();
    if (!made.ok()) return made.error();
    comm = std::move(made).value();
    comm_quorum = c.quorum;
    if (!Collectives::of_this_proc().set(job, c.quorum, comm)) {
      comm->abort("quorum " + std::to_string(c.quorum) + " was aborted by the controller");
      return gone();
    }
    return ok_status();
  }
  void drop_comm() {
    comm.reset();
    connecting.reset();  // a communicator being made is left to its thread
    Collectives::of_this_proc().set(job, 0, nullptr);
  }

  void end_live() { shared->end_live(options.step_timeout); }

  // Sums the kept gradient over the quorum, where the model is.
  Status allreduce() {
    if (device_sum) return comm->allreduce_sum(core.sum_buffer());
    pending.summed = gradients->take(core.parameter_count());
    core.gradient_to(*pending.summed);
    if (staging) return staging->allreduce(*comm, *pending.summed);
    return comm->allreduce_sum(std::span(*pending.summed));
  }
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
  // A model on the CPU is served live (its tensors are sent), with no snapshot buffer. (Its
  // tensors are not read by the kernel ahead of time here: training writes them meanwhile.)
  const bool live = !impl_->core.on_gpu();
  impl_->warming = std::async(std::launch::async, [size = impl_->core.state_bytes(), live,
                                                    n = impl_->core.parameter_count(), pool = impl_->gradients] {
    ::setpriority(PRIO_PROCESS, 0, 19);  // this thread only: it takes what CPU training leaves
    for (int i = 0; i < 2; ++i) {
      auto v = std::make_unique<std::vector<float>>(n);
      warm(v->data(), v->size() * sizeof(float));
      pool->give(std::move(v));
    }
    if (live) return std::shared_ptr<std::string>();
    auto b = std::make_shared<std::string>();
    b->resize(size);
    warm(b->data(), b->size());
    return b;
  });
  auto& m = *impl_;
  // NCCL needs a GPU of its own per member: a proc that spawn_procs bound to one (it says which).
  const bool own_gpu = std::getenv("SCEPTRE_GPU_BUS_ID") != nullptr;
  m.collective = m.options.collective == "auto" ? (m.core.on_gpu() && own_gpu ? "nccl" : "gloo") : m.options.collective;
  m.device_sum = m.core.on_gpu() && m.collective == "nccl";
  if (m.collective == "nccl") {
    if (gpu::runtime().device_count() == 0) {
      const Status& why = gpu::load_status();
      throw std::runtime_error("replica: collective nccl needs a GPU, and this proc has none (" +
                               (why.ok() ? gpu::why_none() : why.error().to_string()) + ")");
    }
    if (!m.core.on_gpu()) m.staging = std::make_unique<Staging>(gpu::runtime(), m.core.parameter_count());
  } else if (m.collective != "gloo") {
    throw std::invalid_argument("replica: collective \"" + m.collective + "\" is not auto, gloo or nccl");
  }
  impl_->server = spawn<StateServer>("state", impl_->shared);
  impl_->writer = spawn<CheckpointWriter>("checkpoint", impl_->to_write);
}

StepReply Replica::step(StepPlan plan) {
  auto& m = *impl_;
  StepReply reply;
  reply.at_step = m.core.step();
  reply.quorum = plan.quorum;
  if (plan.step != m.core.step()) {
    reply.error = "replica is at step " + std::to_string(m.core.step()) + ", asked for step " + std::to_string(plan.step);
    return reply;
  }
  auto& p = m.pending;
  reply.device = m.core.device();
  m.begin_connect(plan);
  auto t0 = Clock::now();
  if (p.step == plan.step && p.first == plan.first && p.count == plan.count && p.computed) {
    reply.reused = true;
  } else {
    p = {};
    p.step = plan.step;
    p.first = plan.first;
    p.count = plan.count;
    p.loss = m.core.compute(plan.first, plan.count);
    p.computed = true;
  }
  reply.loss = p.loss;
  reply.compute_ms = ms_since(t0);
  p.reduced = false;
  p.size = plan.size;

  // The sum, under the plan's quorum or, when the controller re-forms it without a member it
  // lost (CollectiveAbort::abort with a successor), under each successor in turn: the gradient
  // is kept, and only the sum is made again.
  auto t1 = Clock::now();
  StepPlan at = plan;
  for (;;) {
    Status r = m.connect(at);
    const bool began = r.ok();
    if (began) {
      reply.collective = std::string(m.comm->backend());
      r = m.allreduce();
      if (!r.ok()) {
        m.comm->abort(r.error().message());  // the peers still waiting on us fail at once
        m.drop_comm();
      }
    }
    if (r.ok()) break;
    if (began) reply.abandoned.push_back(at.quorum);
    // The controller's word first: a sum that failed because a member was lost goes on under
    // the quorum re-formed without it (the controller learns of the loss from supervision, a
    // moment after this replica's connection to it closed). It aborts the quorum either way, or
    // this waits for up to a collective timeout.
    Collectives::of_this_proc().await_abort(m.job, at.quorum, Clock::now() + m.options.collective_timeout);
    auto next = Collectives::of_this_proc().successor(m.job, at.quorum);
    if (!next) {
      reply.reduce_ms = ms_since(t1);
      reply.quorum = at.quorum;
      reply.error = r.error().to_string();
      return reply;
    }
    at.quorum = next->quorum;
    at.rank = next->rank;
    at.size = next->size;
  }
  reply.reduce_ms = ms_since(t1);
  reply.quorum = at.quorum;
  p.size = at.size;
  p.reduced = true;
  // While a peer heals from this replica, the sum goes into the log as soon as it is reduced,
  // under the step its commit reaches: the healer's last round of replay fetches it while this
  // replica commits. (A retry of the step replaces it; only a committed step's is fetched.)
  bool logging;
  {
    std::lock_guard lock(m.shared->mu);
    logging = m.shared->logging;
  }
  if (logging) {  // (only this thread changes it)
    if (m.device_sum) {  // the log is served from host memory
      p.summed = m.gradients->take(m.core.parameter_count());
      m.core.sum_to(*p.summed);
    }
    auto& v = *p.summed;
    std::lock_guard lock(m.shared->mu);
    m.shared->log[plan.step + 1] = {wire::Part::view(v.data(), v.size() * sizeof(float), p.summed), p.size};
  }
  reply.ok = true;
  return reply;
}

Committed Replica::commit(std::uint64_t step) {
  auto& m = *impl_;
  auto& p = m.pending;
  if (p.step != step || !p.reduced) {
    throw std::logic_error("commit of step " + std::to_string(step) + " that this replica has not reduced");
  }
  auto t0 = Clock::now();
  m.end_live();  // before the state changes
  if (m.device_sum) {
    m.core.apply_sum(p.size);
  } else {
    m.core.apply(*p.summed, p.size);
  }
  p = {};  // the sum goes back to the pool unless the log holds it
  return Committed{m.core.step(), 0, ms_since(t0)};
}

Committed Replica::digest() { return Committed{impl_->core.step(), impl_->core.digest()}; }

Snapshot Replica::snapshot(std::size_t healers) {
  auto& m = *impl_;
  auto& sh = *m.shared;
  m.end_live();  // (a snapshot is taken at a step boundary: one still live has no healer left)
  std::shared_ptr<const void> last;  // the last snapshot's lease: dropped outside the lock, which its deleter takes
  std::map<std::uint64_t, wire::Part> copies;
  {
    std::lock_guard lock(sh.mu);
    last = std::move(sh.lease);
    sh.lease.reset();
    copies = std::move(sh.copies);
    sh.copies.clear();
  }
  last.reset();
  copies.clear();
  std::unique_lock lock(sh.mu);
  sh.chunk_bytes = std::max<std::uint64_t>(1, m.options.chunk_bytes);
  sh.logging = true;
  sh.log.clear();
  sh.step = m.core.step();
  if (!m.core.on_gpu()) {
    sh.live = &m.core;
    sh.bytes = m.core.state_bytes() - m.core.header_bytes();
    sh.healers = std::max<std::size_t>(1, healers);
    sh.fetched.assign(static_cast<std::size_t>((sh.bytes + sh.chunk_bytes - 1) / sh.chunk_bytes), 0);
    return Snapshot{sh.step, sh.bytes, sh.chunk_bytes, m.server, m.core.header()};
  }
  // The warmed buffer once it is ready. Else the last one, once no view of the last snapshot is
  // left (each goes once sent and acknowledged); a new, cold one if one stays in a send queue.
  if (m.warming.valid() && m.warming.wait_for(std::chrono::seconds(0)) == std::future_status::ready) {
    sh.buffer = m.warming.get();
    sh.leased.reset();
  } else if (!sh.buffer || !sh.released.wait_for(lock, std::chrono::seconds(1), [&] { return !sh.leased; })) {
    sh.buffer = std::make_shared<std::string>();
    sh.leased.reset();
  }
  // Nothing reads the buffer now (no lease is out), so the copy is made without the lock, which
  // the senders dropping views of an older buffer take.
  auto buffer = sh.buffer;
  lock.unlock();
  m.core.save(*buffer);
  lock.lock();
  sh.data_at = m.core.header_bytes();
  sh.leased = sh.buffer;
  std::weak_ptr<StateServer::Shared> weak = m.shared;
  sh.lease = std::shared_ptr<const void>(sh.buffer->data(), [weak, buffer = sh.buffer](const void*) {
    if (auto s = weak.lock()) {
      std::lock_guard l(s->mu);
      if (s->leased == buffer) s->leased.reset();
      s->released.notify_all();
    }
  });
  sh.bytes = sh.buffer->size() - sh.data_at;
  return Snapshot{sh.step, sh.bytes, sh.chunk_bytes, m.server, sh.buffer->substr(0, sh.data_at)};
}

void Replica::stop_logging() {
  auto& m = *impl_;
  m.end_live();
  std::shared_ptr<const void> lease;  // dropped after the lock: its deleter takes the lock
  decltype(m.shared->log) log;
  {
    std::lock_guard lock(m.shared->mu);
    m.shared->logging = false;
    log = std::move(m.shared->log);
    m.shared->log.clear();
    lease = std::move(m.shared->lease);
    m.shared->lease.reset();
  }
}

HealReport Replica::heal(Snapshot from) {
  auto& m = *impl_;
  auto t0 = Clock::now();
  std::uint64_t chunks = from.chunk_bytes ? (from.bytes + from.chunk_bytes - 1) / from.chunk_bytes : 0;
  m.pending = {};
  m.drop_comm();
  m.core.load_begin(from.header);  // checked against this model before any byte is fetched
  // Each chunk is copied from the buffer it was received into straight into the tensors.
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
    m.core.load_data(at, part.data(), part.size());
  }
  m.core.load_end();
  double seconds = std::chrono::duration<double>(Clock::now() - t0).count();
  return HealReport{m.core.step(), 0, from.bytes, seconds};
}

HealReport Replica::catch_up(Snapshot from, std::uint64_t upto) {
  auto& m = *impl_;
  auto t0 = Clock::now();
  std::uint64_t bytes = 0;
  while (m.core.step() < upto) {
    auto [sum, members] = from.server.call<&StateServer::logged>(m.core.step() + 1).get(m.options.step_timeout);
    bytes += sum.size();
    if (sum.size() % sizeof(float) != 0 || reinterpret_cast<std::uintptr_t>(sum.data()) % alignof(float) != 0) {
      throw std::runtime_error("catch-up: a logged gradient of " + std::to_string(sum.size()) + " bytes, misaligned");
    }
    m.core.apply(std::span(reinterpret_cast<const float*>(sum.data()), sum.size() / sizeof(float)), members);
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
  m.drop_comm();
  return Restored{true, "", m.core.step(), m.core.digest()};
}

}  // namespace sceptre::train
