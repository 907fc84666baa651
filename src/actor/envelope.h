// Envelope: how actor-layer messages look inside a channel message's body. The body starts with
// a Kind byte and the kind's header; the payload (a call's arguments, a port's value, a
// spawn's constructor arguments) follows in the same body, its parts among the message's parts.
#pragma once

#include <optional>
#include <string>
#include <variant>

#include "sceptre/actor/actor.h"
#include "sceptre/actor/errors.h"
#include "sceptre/core/ids.h"
#include "sceptre/wire/codec.h"

namespace sceptre::detail {

enum class Kind : std::uint8_t { kCall = 1, kPort = 2, kSpawn = 3, kBounce = 4 };

// A call's header. It is on the path of every message, so it has a layout of its own rather
// than cereal's (encode_call_header / parse_envelope), and its text fields are views into the
// message body: valid while the message lives (the CallItem holds both). The destination
// proc is not on the wire: the message reached it.
struct CallHeader {
  std::string_view to_name;
  std::uint64_t to_index = 0;
  std::string_view endpoint;
  std::string_view from;          // the sending proc's id
  std::optional<PortId> reply;
  std::optional<ActorId> sender;  // the sending actor: told when the call cannot be handled

  ActorId to(const ProcId& proc) const { return ActorId{proc, std::string(to_name), to_index}; }
  ProcId from_proc() const { return ProcId{std::string(from)}; }
};

wire::Message encode_call_header(const ActorId& to, std::string_view endpoint,
                                 const std::optional<PortId>& reply, const ProcId& from,
                                 const std::optional<ActorId>& sender);

struct PortHeader {
  PortId to;
  bool ok = false;  // a value follows; else a Failure
  SCEPTRE_FIELDS(to, ok)
};

struct SpawnHeader {
  std::string key;  // FactoryRegistration key: actor type and constructor argument types
  std::string name;
  PortId reply;
  SCEPTRE_FIELDS(key, name, reply)
};

// An undeliverable message handed back to the proc (and actor, if one) that sent it.
struct BounceHeader {
  std::optional<ActorId> to;
  Undeliverable what;
  SCEPTRE_FIELDS(to, what)
};

using Header = std::variant<CallHeader, PortHeader, SpawnHeader, BounceHeader>;

struct Parsed {
  Header header;
  std::size_t offset = 0;  // where the payload starts in the body
};

// Reads the kind and header; kDataLoss when the body does not start with a valid one.
Result<Parsed> parse_envelope(const wire::Message& msg);

template <class H>
wire::Message begin_envelope(Kind kind, const H& header) {
  return wire::encode(kind, header);
}

}  // namespace sceptre::detail
