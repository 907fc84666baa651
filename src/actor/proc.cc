#include "sceptre/actor/proc.h"

#include <unistd.h>

#include "actor/actor_cell.h"
#include "actor/proc_impl.h"
#include "actor/registry.h"
#include "core/log.h"

namespace sceptre {
namespace {

thread_local Proc* tl_proc = nullptr;  // ProcScope, or the proc an executor thread belongs to
std::atomic<Proc*> g_default_proc{nullptr};

std::string default_listen() {
  static std::atomic<int> counter{0};
  return "unix:@sceptre-" + std::to_string(::getpid()) + "-" + std::to_string(counter++);
}

std::unique_ptr<channel::Rx> serve_or_throw(Proc::Impl& impl, const std::string& listen) {
  auto addr = channel::ChannelAddr::parse(listen);
  if (!addr) throw Exception(std::move(addr).error());
  auto rx = channel::serve(impl.ctx, *addr, impl.options.channel,
                           [&impl](wire::Message m) {
                             impl.remote_received.fetch_add(1, std::memory_order_relaxed);
                             impl.on_message(std::move(m));
                           });
  if (!rx) throw Exception(Error(rx.error()).with_context("proc serving " + listen));
  return std::move(*rx);
}

}  // namespace

namespace detail {
void bind_proc_thread(Proc* proc) { tl_proc = proc; }
}  // namespace detail

// --- Impl: construction, routing ---------------------------------------------------------------

Proc::Impl::Impl(Proc& self_, ProcOptions options_)
    : self(self_), options(std::move(options_)), ctx(options.io) {}

void Proc::Impl::start() {
  // The I/O thread learns its proc before the first message can arrive (and after Proc::impl_
  // is set, which its handlers read).
  ctx.impl().run_sync([this] { detail::bind_thread(&io_executor, &self); });
  rx_ = serve_or_throw(*this, options.listen.empty() ? default_listen() : options.listen);
  // Written on the I/O thread, whose handlers read it; the caller reads it after run_sync.
  ctx.impl().run_sync([this] { id = ProcId{rx_->address().to_string()}; });
}

void Proc::Impl::route(const ProcId& to, wire::Message&& msg) {
  if (to == id) {
    on_message(std::move(msg));
  } else {
    send_remote(to, std::move(msg));
  }
}

void Proc::Impl::on_message(wire::Message&& msg) {
  auto parsed = detail::parse_envelope(msg);
  if (!parsed) {
    log().error("proc {}: dropping a malformed actor message: {}", id.addr, parsed.error().to_string());
    return;
  }
  std::size_t offset = parsed->offset;
  std::visit(
      [&](auto& h) {
        using H = std::decay_t<decltype(h)>;
        if constexpr (std::is_same_v<H, detail::CallHeader>) {
          deliver_call(std::move(h), std::move(msg), offset);
        } else if constexpr (std::is_same_v<H, detail::PortHeader>) {
          deliver_port(h, std::move(msg), offset);
        } else if constexpr (std::is_same_v<H, detail::SpawnHeader>) {
          deliver_spawn(h, std::move(msg), offset);
        } else {
          deliver_bounce(std::move(h));
        }
      },
      parsed->header);
}

std::shared_ptr<detail::ActorCell> Proc::Impl::find_actor(const ActorId& actor) const {
  if (actor.proc != id) return nullptr;
  return find_local(actor.name, actor.index);
}

std::shared_ptr<detail::ActorCell> Proc::Impl::find_local(std::string_view name, std::uint64_t index) const {
  std::lock_guard lock(actors_mu_);
  auto it = actors_.find(index);
  if (it == actors_.end() || it->second->id().name != name) return nullptr;
  return it->second;
}

void Proc::Impl::deliver_local_call(wire::Message&& msg, std::shared_ptr<const void> context) {
  auto parsed = detail::parse_envelope(msg);
  auto* header = parsed ? std::get_if<detail::CallHeader>(&parsed->header) : nullptr;
  if (!header) {
    log().error("proc {}: dropping a local call that is not one", id.addr);
    return;
  }
  deliver_call(std::move(*header), std::move(msg), parsed->offset, std::move(context));
}

void Proc::Impl::deliver_call(detail::CallHeader&& header, wire::Message&& msg, std::size_t offset,
                              std::shared_ptr<const void> context) {
  auto cell = find_local(header.to_name, header.to_index);
  if (!cell) {
    call_failed(header, id, Failure::call(
                                Error(Code::kNotFound, "no actor " + header.to(id).to_string() + " in proc " + id.addr)));
    return;
  }
  cell->enqueue(detail::CallItem{std::move(header), std::move(msg), offset, std::move(context)});
}

void Proc::Impl::deliver_bounce(detail::BounceHeader&& header) {
  auto cell = header.to ? find_actor(*header.to) : nullptr;
  if (cell) {
    cell->enqueue(detail::BounceItem{std::move(header.what)});
  } else {
    report_undeliverable(header.what);
  }
}

void Proc::Impl::call_failed(const detail::CallHeader& call, const ProcId& at, Failure failure) {
  if (call.reply) {
    fail_port(*call.reply, std::move(failure));
    return;
  }
  Undeliverable what{call.to(at).to_string(), std::string(call.endpoint), std::move(failure.error)};
  route(call.from_proc(), detail::begin_envelope(detail::Kind::kBounce, detail::BounceHeader{call.sender, std::move(what)}));
}

// --- ports ---------------------------------------------------------------------------------------

PortId Proc::Impl::open_port(detail::PortSink sink, bool once, std::uint64_t peer) {
  std::lock_guard lock(ports_mu_);
  std::uint64_t index = next_port_++;
  ports_.emplace(index, Port{std::move(sink), once, peer});
  return PortId{id, index};
}

std::uint64_t Proc::Impl::peer_key(const ProcId& peer) {
  return std::hash<std::string>{}(peer.addr) | 1;  // never 0, which means "none"
}

void Proc::Impl::peer_lost(const ProcId& peer, const Error& why) {
  if (peer == id) return;
  std::shared_ptr<channel::Tx> tx;
  {
    std::lock_guard lock(tx_mu_);
    lost_.insert_or_assign(peer.addr, why);
    any_lost_.store(true, std::memory_order_release);
    if (auto it = txs_.find(peer.addr); it != txs_.end()) {
      tx = std::move(it->second);
      txs_.erase(it);
    }
  }
  // The calls waiting on its replies fail first, as supervision failures; what the channel
  // still held then comes back to ports that are gone.
  const std::uint64_t key = peer_key(peer);
  std::vector<detail::PortSink> waiting;
  {
    std::lock_guard lock(ports_mu_);
    for (auto it = ports_.begin(); it != ports_.end();) {
      if (it->second.peer == key) {
        waiting.push_back(std::move(it->second.sink));
        it = ports_.erase(it);
      } else {
        ++it;
      }
    }
  }
  const Error lost = Error(why).with_context("proc " + peer.addr + " was lost");
  for (auto& sink : waiting) {
    sink(detail::PortDelivery{false, wire::encode(Failure::supervision(lost)), 0});
  }
  if (tx) tx->close();
}

void Proc::Impl::fail_lost(wire::Message&& msg, const Error& why, const ProcId& to) {
  auto parsed = detail::parse_envelope(msg);
  if (!parsed) return;
  const Failure f = Failure::supervision(Error(why).with_context("proc " + to.addr + " was lost"));
  if (auto* call = std::get_if<detail::CallHeader>(&parsed->header)) {
    call_failed(*call, to, f);
  } else if (auto* spawn = std::get_if<detail::SpawnHeader>(&parsed->header)) {
    fail_port(spawn->reply, f);
  } else {
    log().debug("proc {}: a message for the lost proc {} is dropped", id.addr, to.addr);
  }
}

void Proc::Impl::close_port(std::uint64_t index) {
  std::lock_guard lock(ports_mu_);
  ports_.erase(index);
}

void Proc::Impl::deliver_port(const detail::PortHeader& header, wire::Message&& msg, std::size_t offset) {
  // The sink runs outside the lock: moved out of a once port, copied from another (its state
  // is shared, so the copy is cheap).
  detail::PortSink sink;
  {
    std::lock_guard lock(ports_mu_);
    auto it = header.to.proc == id ? ports_.find(header.to.index) : ports_.end();
    if (it != ports_.end()) {
      if (it->second.once) {
        sink = std::move(it->second.sink);
        ports_.erase(it);
      } else {
        sink = it->second.sink;
      }
    }
  }
  if (!sink) {
    // A reply nobody waits for any more (a closed receiver, a once port already used).
    log().debug("proc {}: dropping a message for closed port {}", id.addr, header.to.to_string());
    return;
  }
  sink(detail::PortDelivery{header.ok, std::move(msg), offset});
}

wire::Message Proc::Impl::reply_header(const PortId& to) {
  return detail::begin_envelope(detail::Kind::kPort, detail::PortHeader{to, true});
}

void Proc::Impl::send_to_port(const PortId& to, bool ok, wire::Message&& payload) {
  wire::Message msg = detail::begin_envelope(detail::Kind::kPort, detail::PortHeader{to, ok});
  // Headers hold no parts, so the payload's part indices stay valid after the header.
  msg.body.insert(msg.body.end(), payload.body.begin(), payload.body.end());
  msg.parts = std::move(payload.parts);
  route(to.proc, std::move(msg));
}

void Proc::Impl::fail_port(const PortId& to, Failure failure) {
  send_to_port(to, false, wire::encode(failure));
}

// --- channels to other procs ---------------------------------------------------------------------

std::shared_ptr<channel::Tx> Proc::Impl::tx_for(const ProcId& to, Error& error) {
  std::lock_guard lock(tx_mu_);
  auto it = txs_.find(to.addr);
  if (it != txs_.end()) {
    if (it->second->status().ok()) return it->second;
    txs_.erase(it);  // failed for good (delivery timeout): a fresh channel may get through
  }
  if (shut_down_) {
    error = Error(Code::kCancelled, "proc " + id.addr + " is shut down");
    return nullptr;
  }
  auto addr = channel::ChannelAddr::parse(to.addr);
  if (!addr) {
    error = std::move(addr).error();
    return nullptr;
  }
  auto tx = channel::dial(ctx, *addr, options.channel,
                          [this, to](std::vector<wire::Message> msgs, const Error& e) {
                            for (auto& m : msgs) undeliverable(std::move(m), e, to);
                          });
  if (!tx) {
    error = std::move(tx).error();
    return nullptr;
  }
  auto shared = std::shared_ptr<channel::Tx>(std::move(*tx));
  txs_.emplace(to.addr, shared);
  return shared;
}

void Proc::Impl::send_remote(const ProcId& to, wire::Message&& msg) {
  remote_sent.fetch_add(1, std::memory_order_relaxed);
  if (any_lost_.load(std::memory_order_acquire)) {
    std::optional<Error> why;
    {
      std::lock_guard lock(tx_mu_);
      if (auto it = lost_.find(to.addr); it != lost_.end()) why = it->second;
    }
    if (why) return fail_lost(std::move(msg), *why, to);
  }
  Error error;
  auto tx = tx_for(to, error);
  if (!tx) {
    undeliverable(std::move(msg), error.with_context("to proc " + to.addr), to);
    return;
  }
  Status sent = ctx.in_io_thread() ? tx->send(std::move(msg)) : tx->send(std::move(msg), options.send_wait);
  if (!sent.ok()) undeliverable(std::move(msg), Error(sent.error()).with_context("to proc " + to.addr), to);
}

void Proc::Impl::undeliverable(wire::Message&& msg, const Error& error, const ProcId& to) {
  auto parsed = detail::parse_envelope(msg);
  if (!parsed) return;  // we built it: cannot happen
  if (auto* call = std::get_if<detail::CallHeader>(&parsed->header)) {
    Error e(error.code() == Code::kCancelled ? Code::kCancelled : Code::kUnavailable,
            "call to '" + std::string(call->endpoint) + "' of " + call->to(to).to_string() + " undeliverable: " +
                error.to_string());
    call_failed(*call, to, Failure::call( std::move(e)));
  } else if (auto* spawn = std::get_if<detail::SpawnHeader>(&parsed->header)) {
    fail_port(spawn->reply, Failure::call(
                                                Error(Code::kUnavailable, "spawn of '" + spawn->name +
                                                                              "' undeliverable: " +
                                                                              error.to_string())));
  } else if (auto* port = std::get_if<detail::PortHeader>(&parsed->header)) {
    // At shutdown, close() hands back whatever is not yet acknowledged, which is mostly what
    // the peer did receive: not worth a warning.
    auto level = shut_down_ && error.code() == Code::kCancelled ? spdlog::level::debug : spdlog::level::warn;
    log().log(level, "proc {}: a message for port {} could not be delivered: {}", id.addr,
               port->to.to_string(), error.to_string());
  } else {
    log().warn("proc {}: an undeliverable notice could not be delivered: {}", id.addr, error.to_string());
  }
}

void Proc::Impl::report_undeliverable(const Undeliverable& what) {
  std::function<void(const Undeliverable&)> handler;
  {
    std::lock_guard lock(handlers_mu_);
    handler = on_undeliverable_;
  }
  if (handler) {
    handler(what);
  } else {
    log().error("proc {}: message to {} undeliverable: {}", id.addr, what.destination, what.error.to_string());
  }
}

void Proc::Impl::root_failed(const SupervisionEvent& event) {
  std::function<void(const SupervisionEvent&)> handler;
  {
    std::lock_guard lock(handlers_mu_);
    handler = on_supervision_;
  }
  if (handler) {
    handler(event);
  } else {
    log().error("proc {}: unhandled actor failure: {}", id.addr, event.to_string());
  }
}

}  // namespace sceptre

namespace sceptre {

// --- actors --------------------------------------------------------------------------------------

void Proc::Impl::deliver_spawn(const detail::SpawnHeader& header, wire::Message&& msg, std::size_t offset) {
  auto failed = [&](Code code, std::string text) {
    fail_port(header.reply, Failure::call(
                                                Error(code, "spawn of '" + header.name + "' in proc " +
                                                                id.addr + ": " + std::move(text))));
  };
  auto entry = detail::find_factory(header.key);
  if (!entry) {
    failed(Code::kNotFound, "actor type '" + header.key +
                                "' is not known to this binary (procs must run the same program)");
    return;
  }
  try {
    auto actor = entry->make(std::span(msg.body).subspan(offset), msg.parts);
    ActorId actor_id = adopt(std::move(actor), entry->table(), entry->own_thread, header.name, nullptr);
    send_to_port(header.reply, true, wire::encode(actor_id));
  } catch (const Exception& e) {
    failed(e.code(), e.error().message());
  } catch (const std::exception& e) {
    failed(Code::kAborted, "the constructor threw " + exception_type_name(e) + ": " + e.what());
  }
}

ActorId Proc::Impl::adopt(std::unique_ptr<Actor> actor, const detail::EndpointTable& table,
                          bool own_thread, std::string name, detail::ActorCell* parent) {
  if (auto ok = check_actor_name(name); !ok) throw CallError(std::move(ok).error());
  if (shut_down_) throw CallError(Error(Code::kFailedPrecondition, "proc " + id.addr + " is shut down"));
  std::shared_ptr<detail::ActorCell> parent_cell = parent ? parent->shared_from_this() : nullptr;
  std::shared_ptr<detail::ActorCell> cell;
  {
    std::lock_guard lock(actors_mu_);
    ActorId actor_id{id, std::move(name), next_actor_++};
    cell = std::make_shared<detail::ActorCell>(*this, actor_id, std::move(actor), table, own_thread, parent_cell);
    actors_.emplace(actor_id.index, cell);
  }
  if (parent_cell) parent_cell->add_child(cell);
  cell->enqueue(detail::StartItem{});
  return cell->id();
}

void Proc::Impl::shutdown() {
  if (shut_down_.exchange(true)) return;
  // Top-level actors first; each stops its children before itself.
  std::vector<std::shared_ptr<detail::ActorCell>> cells;
  {
    std::lock_guard lock(actors_mu_);
    for (auto& [_, cell] : actors_) cells.push_back(cell);
  }
  std::vector<Future<void>> stopped;
  for (auto& cell : cells) stopped.push_back(cell->request_stop());
  if (!wait_all(stopped, options.stop_timeout)) {
    for (auto& cell : cells) cell->force_stop();
  }
  // Flush what the actors said last, then close the channels.
  std::vector<std::shared_ptr<channel::Tx>> txs;
  {
    std::lock_guard lock(tx_mu_);
    for (auto& [_, tx] : txs_) txs.push_back(tx);
  }
  auto flush_until = std::chrono::steady_clock::now() + std::chrono::milliseconds(1000);
  for (auto& tx : txs) {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(flush_until - std::chrono::steady_clock::now());
    (void)tx->flush(std::max(left, std::chrono::milliseconds(0)));
  }
  rx_->close();
  for (auto& tx : txs) tx->close();
  // Whatever is still awaited from this proc will not come.
  std::unordered_map<std::uint64_t, Port> ports;
  {
    std::lock_guard lock(ports_mu_);
    ports.swap(ports_);
  }
  Failure closed = Failure::call( Error(Code::kCancelled, "proc " + id.addr + " shut down"));
  for (auto& [index, port] : ports) {
    if (port.once) port.sink(detail::PortDelivery{false, wire::encode(closed), 0});
  }
}

// --- Proc ------------------------------------------------------------------------------------------

Proc::Proc(ProcOptions options) : impl_(std::make_unique<Impl>(*this, std::move(options))) {
  impl_->start();
  Proc* expected = nullptr;
  g_default_proc.compare_exchange_strong(expected, this);
}

Proc::~Proc() {
  shutdown();
  Proc* expected = this;
  g_default_proc.compare_exchange_strong(expected, nullptr);
  {
    // Cells are destroyed here, before the I/O thread stops: their own threads join.
    std::lock_guard lock(impl_->actors_mu_);
    impl_->actors_.clear();
  }
}

const ProcId& Proc::id() const { return impl_->id; }

ProcStats Proc::stats() const {
  return ProcStats{impl_->remote_sent.load(std::memory_order_relaxed),
                   impl_->remote_received.load(std::memory_order_relaxed)};
}

Proc& Proc::current() {
  if (tl_proc) return *tl_proc;
  if (Proc* p = g_default_proc.load()) return *p;
  throw CallError(Error(Code::kFailedPrecondition,
                        "no sceptre::Proc in this process (create one before using actors)"));
}

bool Proc::stop(const ActorId& actor, std::chrono::milliseconds timeout) {
  auto cell = impl_->find_actor(actor);
  if (!cell) throw CallError(Error(Code::kNotFound, "no actor " + actor.to_string() + " in proc " + id().addr));
  Future<void> stopped = cell->request_stop();
  if (current_executor() == cell->executor()) return false;  // waiting here would block its own thread
  if (stopped.wait_for(timeout)) return true;
  cell->force_stop();
  return false;
}

void Proc::peer_lost(const ProcId& peer, const Error& why) { impl_->peer_lost(peer, why); }
void Proc::peer_back(const ProcId& peer) {
  std::lock_guard lock(impl_->tx_mu_);
  impl_->lost_.erase(peer.addr);
}

std::vector<BusyHandler> Proc::busy_handlers(std::chrono::nanoseconds longer_than) const {
  std::vector<std::shared_ptr<detail::ActorCell>> cells;
  {
    std::lock_guard lock(impl_->actors_mu_);
    cells.reserve(impl_->actors_.size());
    for (const auto& [index, cell] : impl_->actors_) cells.push_back(cell);
  }
  const auto now = std::chrono::steady_clock::now();
  std::vector<BusyHandler> busy;
  for (const auto& cell : cells) {
    auto running = cell->running();
    if (running && now - running->second > longer_than) {
      busy.push_back(BusyHandler{cell->id(), std::string(running->first), running->second});
    }
  }
  return busy;
}

std::optional<ActorStatus> Proc::status(const ActorId& actor) const {
  auto cell = impl_->find_actor(actor);
  if (!cell) return std::nullopt;
  return cell->status();
}

void Proc::on_supervision(std::function<void(const SupervisionEvent&)> handler) {
  std::lock_guard lock(impl_->handlers_mu_);
  impl_->on_supervision_ = std::move(handler);
}

void Proc::on_undeliverable(std::function<void(const Undeliverable&)> handler) {
  std::lock_guard lock(impl_->handlers_mu_);
  impl_->on_undeliverable_ = std::move(handler);
}

void Proc::shutdown() { impl_->shutdown(); }

ActorId Proc::adopt(std::unique_ptr<Actor> actor, const detail::EndpointTable& table, bool own_thread,
                    std::string name, detail::ActorCell* parent) {
  return impl_->adopt(std::move(actor), table, own_thread, std::move(name), parent);
}

PortId Proc::open_port_here(detail::PortSink sink, const ProcId& peer) {
  return impl_->open_port(std::move(sink), true, peer == impl_->id ? 0 : Impl::peer_key(peer));
}

wire::Message Proc::begin_spawn(const std::string& key, const std::string& name, const PortId& reply) {
  return detail::begin_envelope(detail::Kind::kSpawn, detail::SpawnHeader{key, name, reply});
}

void Proc::send_spawn(const ProcId& where, wire::Message&& msg) {
  impl_->route(where, std::move(msg));
}

ProcScope::ProcScope(Proc& proc) : previous_(tl_proc) { tl_proc = &proc; }
ProcScope::~ProcScope() { tl_proc = previous_; }

// --- what the header templates call -----------------------------------------------------------------

namespace detail {

PortId open_port(PortSink sink, bool once) { return Proc::current().impl().open_port(std::move(sink), once); }

PortId open_call_port(PortSink sink, const ProcId& peer) {
  auto& impl = Proc::current().impl();
  return impl.open_port(std::move(sink), true, peer == impl.id ? 0 : Proc::Impl::peer_key(peer));
}

void close_port(const PortId& port) {
  auto& impl = Proc::current().impl();
  if (port.proc == impl.id) impl.close_port(port.index);
}

wire::Message begin_call(const ActorId& to, std::string_view endpoint, const std::optional<PortId>& reply) {
  // The fields of a CallHeader, written from the caller's values without copying them.
  static const std::optional<ActorId> kNoSender;
  ActorCell* cell = current_cell();
  return encode_call_header(to, endpoint, reply, Proc::current().id(), cell ? cell->self() : kNoSender);
}

void send_call(const ActorId& to, wire::Message&& msg) { Proc::current().impl().route(to.proc, std::move(msg)); }

wire::Message begin_port_message(const PortId& to, bool ok) {
  return begin_envelope(Kind::kPort, PortHeader{to, ok});
}

void send_to_port(const PortId& to, wire::Message&& msg) { Proc::current().impl().route(to.proc, std::move(msg)); }

Failure delivery_failure(const PortDelivery& d) {
  auto failure = delivery_value<Failure>(d);
  if (!failure) return Failure::call(std::move(failure).error());
  return std::move(*failure);
}

[[noreturn]] void throw_timeout(std::chrono::nanoseconds timeout) {
  throw TimeoutError(Error(Code::kDeadlineExceeded,
                           "no reply within " +
                               std::to_string(std::chrono::duration_cast<std::chrono::milliseconds>(timeout).count()) +
                               " ms"));
}

}  // namespace detail
}  // namespace sceptre
