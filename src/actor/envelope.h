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

// The destination proc is not on the wire (the message reached it); begin_call() writes these
// fields straight from the caller's values, without building a CallHeader.
struct CallHeader {
  std::string to_name;
  std::uint64_t to_index = 0;
  std::string endpoint;
  std::optional<PortId> reply;
  ProcId from;                    // the sending proc, and in it
  std::optional<ActorId> sender;  // the sending actor: told when the call cannot be handled
  SCEPTRE_FIELDS(to_name, to_index, endpoint, reply, from, sender)

  ActorId to(const ProcId& proc) const { return ActorId{proc, to_name, to_index}; }
};

struct PortHeader {
  PortId to;
  bool ok = false;  // a value follows; else a CallFailure
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

// Why a reply is not a value: see Failure.
using CallFailure = ::sceptre::Failure;

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
