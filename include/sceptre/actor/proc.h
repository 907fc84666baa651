// Proc: the actor runtime of one OS process. It owns the actors spawned in it, serves one
// channel address (its ProcId) and routes every message by id: to a local mailbox directly,
// or over a channel to the proc the id names (channels are dialled on first use, reused, and
// authenticated with the job secret).
//
// Threads: the proc's I/O thread runs its channels and, by default, its actors' handlers
// (no thread hop between a socket and a handler); actors with kOwnThread get a thread each.
//
// Proc::current() is the proc of the actor running on this thread, else the process's default
// proc (the first Proc created that still exists), else — set for a scope — ProcScope's.
// ActorRef, PortRef and the open_port functions act through it.
//
// Failure: a Proc that cannot serve its address throws Exception from its constructor.
// Destroying a Proc stops all its actors (gracefully, up to ProcOptions::stop_timeout, then
// forced) and fails every reply still awaited from it with kCancelled. A forced stop does not
// interrupt a handler: destruction waits for a kOwnThread handler that is still running (and
// logs every 5 s while it does); a handler stuck on the shared I/O thread blocks the whole
// proc, which the supervision layer's watchdog is there to report.
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "sceptre/actor/actor.h"
#include "sceptre/actor/actor_ref.h"
#include "sceptre/actor/endpoint.h"
#include "sceptre/actor/future.h"
#include "sceptre/channel/context.h"
#include "sceptre/channel/options.h"
#include "sceptre/core/ids.h"

namespace sceptre {

struct ProcOptions {
  // The channel address to serve; empty means a fresh abstract unix socket
  // ("unix:@sceptre-<pid>-<n>"). "tcp:0.0.0.0:0" serves TCP on any free port.
  std::string listen;
  // Secret (empty: SCEPTRE_SECRET), limits, timeouts of every channel the proc opens.
  channel::ChannelOptions channel;
  // The proc's I/O thread: how long it polls before it sleeps (see channel/context.h).
  channel::ContextOptions io;
  // How long a send from a non-I/O thread waits for room in a full channel queue.
  std::chrono::milliseconds send_wait{30'000};
  // Graceful stop before it is forced, for each actor at shutdown.
  std::chrono::milliseconds stop_timeout{5'000};
};

// What a proc has exchanged with other procs, counted since it started.
struct ProcStats {
  std::uint64_t messages_sent = 0;      // handed to a channel (or failed as undeliverable)
  std::uint64_t messages_received = 0;  // from a channel
};

// A handler that has been running for a while: what a watchdog reports.
struct BusyHandler {
  ActorId actor;
  std::string endpoint;
  std::chrono::steady_clock::time_point since;  // when the handler started
};

class Proc {
 public:
  explicit Proc(ProcOptions options = {});
  ~Proc();
  Proc(const Proc&) = delete;
  Proc& operator=(const Proc&) = delete;

  const ProcId& id() const;

  // The current proc (see above); throws CallError (kFailedPrecondition) when there is none.
  static Proc& current();

  // Creates an actor in this proc and returns once it is registered (its on_start() runs next,
  // on its executor, before any message). The constructor runs on the calling thread; its
  // exceptions propagate. A bad name throws CallError (kInvalidArgument).
  template <class A, class... Args>
  ActorRef<A> spawn(std::string name, Args&&... args) {
    static_assert(detail::RegisteredActor<A>, "the actor type has no SCEPTRE_ACTOR(...) line");
    auto actor = std::make_unique<A>(std::forward<Args>(args)...);
    return ActorRef<A>(adopt(std::move(actor), detail::endpoint_table<A>(), A::kOwnThread,
                             std::move(name), nullptr));
  }

  // Creates an actor in the proc `where` (this one or another), built there from a message: the
  // constructor arguments travel encoded. The Future fails with CallError when the name is bad,
  // the arguments do not decode, or the constructor throws (its type and message included).
  template <class A, class... Args>
  Future<ActorRef<A>> spawn_on(const ProcId& where, std::string name, Args&&... args) {
    using Registration = detail::FactoryRegistration<A, std::decay_t<Args>...>;
    (void)Registration::registered;
    auto state = std::make_shared<detail::FutureState<ActorRef<A>>>();
    PortId reply = open_port_here([state](detail::PortDelivery&& d) {
      if (!d.ok) return (void)state->set_failure(detail::delivery_failure(d));
      auto id = detail::delivery_value<ActorId>(d);
      if (!id) return (void)state->set_failure(Failure::call(std::move(id).error()));
      state->set_value(ActorRef<A>(std::move(*id)));
    }, where);
    wire::Message msg = begin_spawn(Registration::key(), name, reply);
    wire::encode_into(msg, std::tuple<std::decay_t<Args>...>(std::forward<Args>(args)...));
    send_spawn(where, std::move(msg));
    return Future<ActorRef<A>>(std::move(state));
  }

  // Stops a local actor and its children: messages queued before the stop are handled, then
  // cleanup() runs. Waits up to `timeout`, then forces it (queued messages fail, the actor
  // takes no more; a handler still running is not interrupted). True when graceful; CallError
  // (kNotFound) when `actor` is not one of this proc's. Called on the actor's own executor (from
  // another actor on the same I/O thread) it only asks for the stop and returns false: waiting
  // there would block the thread that has to do the stopping.
  bool stop(const ActorId& actor, std::chrono::milliseconds timeout);
  template <class A>
  bool stop(const ActorRef<A>& actor, std::chrono::milliseconds timeout) {
    return stop(actor.id(), timeout);
  }

  ProcStats stats() const;

  // Tells this proc that `peer` is gone for good (its supervisor said so, see
  // sceptre/mesh/supervision.h): every call of this proc still waiting for a reply from it fails
  // now with SupervisionError carrying `why`, and every later message to it fails at once the
  // same way instead of waiting for a channel to give up.
  void peer_lost(const ProcId& peer, const Error& why);
  // A new proc serves at the address of one that was lost (TCP ports are reused): messages to it
  // go through again.
  void peer_back(const ProcId& peer);

  // The handlers of this proc's actors that have been running for longer than `longer_than`
  // (only a handler's synchronous run counts, not a coroutine's wait). Any thread.
  std::vector<BusyHandler> busy_handlers(std::chrono::nanoseconds longer_than) const;

  // The status of a local actor; nullopt when this proc never had it.
  std::optional<ActorStatus> status(const ActorId& actor) const;

  // Receives failures of top-level actors (those spawned by spawn(), not by an actor), on the
  // failing actor's thread. Default: logged as an error.
  void on_supervision(std::function<void(const SupervisionEvent&)> handler);
  // Receives undeliverable messages sent from outside any actor. Default: logged as an error.
  void on_undeliverable(std::function<void(const Undeliverable&)> handler);

  // Stops every actor (as stop(), with ProcOptions::stop_timeout) and closes the channels.
  // Idempotent; the destructor calls it.
  void shutdown();

  struct Impl;
  Impl& impl() { return *impl_; }

 private:
  friend class Actor;
  ActorId adopt(std::unique_ptr<Actor> actor, const detail::EndpointTable& table, bool own_thread,
                std::string name, detail::ActorCell* parent);
  PortId open_port_here(detail::PortSink sink, const ProcId& peer);
  wire::Message begin_spawn(const std::string& key, const std::string& name, const PortId& reply);
  void send_spawn(const ProcId& where, wire::Message&& msg);

  std::unique_ptr<Impl> impl_;
};

// Makes `proc` the current proc of this thread for the scope (tests with several procs in one
// process; threads outside actors).
class ProcScope {
 public:
  explicit ProcScope(Proc& proc);
  ~ProcScope();
  ProcScope(const ProcScope&) = delete;
  ProcScope& operator=(const ProcScope&) = delete;

 private:
  Proc* previous_;
};

template <class C, class... Args>
ActorRef<C> Actor::spawn(std::string name, Args&&... args) {
  static_assert(detail::RegisteredActor<C>, "the actor type has no SCEPTRE_ACTOR(...) line");
  auto child = std::make_unique<C>(std::forward<Args>(args)...);
  return ActorRef<C>(proc().adopt(std::move(child), detail::endpoint_table<C>(), C::kOwnThread,
                                  std::move(name), cell_));
}

}  // namespace sceptre
