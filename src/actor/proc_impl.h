// Proc::Impl: routing, ports, channels and the table of actors of one proc.
//
// Every actor-layer message, local or remote, goes through on_message(): local sends call it
// directly on the sender's thread, the proc's Rx calls it on the I/O thread. Sends to other
// procs go through one channel Tx per destination proc, dialled on first use.
#pragma once

#include <atomic>
#include <functional>
#include <memory>
#include <mutex>
#include <unordered_map>

#include "actor/envelope.h"
#include "actor/executors.h"
#include "channel/context_impl.h"
#include "sceptre/actor/proc.h"
#include "sceptre/channel/rx.h"
#include "sceptre/channel/tx.h"

namespace sceptre {

namespace detail {
class ActorCell;
}

struct Proc::Impl {
  Impl(Proc& self, ProcOptions options);
  // Binds the I/O thread and starts serving; throws Exception when the address cannot be served.
  void start();

  // Routes `msg` (an envelope) to the proc `to`; failures reach the sender, never silence.
  void route(const ProcId& to, wire::Message&& msg);
  // A message for this proc: parse the envelope and deliver it. Any thread.
  void on_message(wire::Message&& msg);

  // A call (begun by begin_call, arguments appended) for an actor of this proc, handed to it with
  // `context` (see CallItem). Failures go where a routed call's would. Any thread.
  void deliver_local_call(wire::Message&& msg, std::shared_ptr<const void> context);

  // A value (ok) or a Failure, already encoded in `payload`, to a port anywhere.
  void send_to_port(const PortId& to, bool ok, wire::Message&& payload);
  void fail_port(const PortId& to, Failure failure);
  // The envelope of a value for port `to`, to which the value is then appended.
  wire::Message reply_header(const PortId& to);
  // A call that cannot be handled: fails its reply port, or hands it back to its sender.
  // `at`: the proc the call was addressed to.
  void call_failed(const detail::CallHeader& call, const ProcId& at, Failure failure);

  // `peer`: the proc whose reply the port waits for (peer_key of its id), 0 for none.
  PortId open_port(detail::PortSink sink, bool once, std::uint64_t peer = 0);
  static std::uint64_t peer_key(const ProcId& peer);
  // See Proc::peer_lost.
  void peer_lost(const ProcId& peer, const Error& why);
  void close_port(std::uint64_t index);

  // A top-level actor failed: the proc's supervision handler.
  void root_failed(const SupervisionEvent& event);
  std::shared_ptr<detail::ActorCell> find_actor(const ActorId& id) const;
  std::shared_ptr<detail::ActorCell> find_local(std::string_view name, std::uint64_t index) const;

  ActorId adopt(std::unique_ptr<Actor> actor, const detail::EndpointTable& table, bool own_thread,
                std::string name, detail::ActorCell* parent);
  void shutdown();

  Proc& self;
  const ProcOptions options;
  channel::Context ctx;  // the I/O thread; declared first so that it is destroyed last
  detail::IoExecutor io_executor{ctx.impl().io};
  ProcId id;
  // Messages this proc sent to other procs and received from them (ProcStats).
  std::atomic<std::uint64_t> remote_sent{0};
  std::atomic<std::uint64_t> remote_received{0};

 private:
  void deliver_call(detail::CallHeader&& header, wire::Message&& msg, std::size_t offset,
                    std::shared_ptr<const void> context = nullptr);
  void deliver_port(const detail::PortHeader& header, wire::Message&& msg, std::size_t offset);
  void deliver_spawn(const detail::SpawnHeader& header, wire::Message&& msg, std::size_t offset);
  void deliver_bounce(detail::BounceHeader&& header);
  void send_remote(const ProcId& to, wire::Message&& msg);
  std::shared_ptr<channel::Tx> tx_for(const ProcId& to, Error& error);
  // A message this proc could not send: fail what waits for it, tell who sent it.
  void undeliverable(wire::Message&& msg, const Error& error, const ProcId& to);
  void report_undeliverable(const Undeliverable& what);

  std::unique_ptr<channel::Rx> rx_;

  mutable std::mutex actors_mu_;
  std::unordered_map<std::uint64_t, std::shared_ptr<detail::ActorCell>> actors_;
  std::uint64_t next_actor_ = 0;

  struct Port {
    detail::PortSink sink;
    bool once = false;
    std::uint64_t peer = 0;
  };
  std::mutex ports_mu_;
  std::unordered_map<std::uint64_t, Port> ports_;
  std::uint64_t next_port_ = 0;

  std::mutex tx_mu_;
  std::unordered_map<std::string, std::shared_ptr<channel::Tx>> txs_;
  std::unordered_map<std::string, Error> lost_;  // procs lost for good, and why
  std::atomic<bool> any_lost_{false};
  // A message for a lost proc: what waits for it fails now.
  void fail_lost(wire::Message&& msg, const Error& why, const ProcId& to);

  std::mutex handlers_mu_;
  std::function<void(const SupervisionEvent&)> on_supervision_;
  std::function<void(const Undeliverable&)> on_undeliverable_;
  friend class Proc;

  std::atomic<bool> shut_down_{false};
};

}  // namespace sceptre
