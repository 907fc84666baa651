// The few non-template entry points that the actor layer's header templates (ActorRef, ports,
// spawn) call into; implemented by the Proc in src/actor. Not for users.
//
// Each acts on the *current* proc: the one whose actor is running on this thread, else the
// process's default Proc (see Proc::current()).
#pragma once

#include <cstddef>
#include <exception>
#include <functional>
#include <optional>
#include <string_view>

#include "sceptre/actor/errors.h"
#include "sceptre/core/ids.h"
#include "sceptre/wire/codec.h"

namespace sceptre::detail {

// A message that reached a port: a value (ok) or a failure, encoded at `offset` in the body.
struct PortDelivery {
  bool ok = false;
  wire::Message msg;
  std::size_t offset = 0;

  std::span<const std::byte> payload() const { return std::span(msg.body).subspan(offset); }
};
// Runs on whatever thread the message arrives on (an I/O thread, or the sender's thread for a
// port in the same proc). It must not block.
using PortSink = std::function<void(PortDelivery&&)>;

// Opens a port on the current proc. A `once` port closes itself after its first delivery.
PortId open_port(PortSink sink, bool once);
// A once port for the reply of a call to an actor of `peer`: it fails at once if the proc learns
// that `peer` was lost (Proc::peer_lost).
PortId open_call_port(PortSink sink, const ProcId& peer);
void close_port(const PortId& port);

// A call to `endpoint` of `to`, replying (if `reply`) to a port: the header, to which the
// caller appends the encoded arguments before send_call().
wire::Message begin_call(const ActorId& to, std::string_view endpoint,
                         const std::optional<PortId>& reply);
// Routes a message begun by begin_call. Failures to deliver fail the reply port (or go to the
// sender as undeliverable); they are never silent.
void send_call(const ActorId& to, wire::Message&& msg);

// A value (ok) or failure for a port: the header, to which the caller appends the value.
wire::Message begin_port_message(const PortId& to, bool ok);
void send_to_port(const PortId& to, wire::Message&& msg);

// What a failed delivery says (a failure that does not decode is a CallError of its own).
Failure delivery_failure(const PortDelivery& delivery);

// Decodes the value of a delivery as T, or returns why not.
template <class T>
Result<T> delivery_value(const PortDelivery& d) {
  return wire::decode<T>(d.payload(), d.msg.parts);
}

// Completes `state` from a delivery: the value, or the exception the failure stands for (a
// value that does not decode as T is a CallError naming T).
template <class State>
void complete_from(State& state, PortDelivery&& d) {
  using Stored = typename State::Stored;
  if (!d.ok) {
    state.set_failure(delivery_failure(d));
    return;
  }
  auto value = delivery_value<Stored>(d);
  if (!value) {
    state.set_failure(Failure::call(std::move(value).error()));
    return;
  }
  state.set_value(std::move(*value));
}

}  // namespace sceptre::detail
