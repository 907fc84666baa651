// Ids of the things messages are addressed to, with a text form that logs, configuration and
// the command line can carry:
//   ProcId   the channel address its proc serves on       unix:@sceptre-4711-0
//   ActorId  proc, then "/name[index]"                     unix:@sceptre-4711-0/trainer[3]
//   PortId   proc, then "#index"                           tcp:10.0.0.7:5000#12
// An index is unique inside its proc for the proc's lifetime, so an id is never reused for a
// different actor or port. Actor names may not contain '/', '[', ']' or '#'.
#pragma once

#include <compare>
#include <cstdint>
#include <functional>
#include <string>
#include <string_view>

#include "sceptre/core/result.h"

namespace sceptre {

struct ProcId {
  std::string addr;

  std::string to_string() const { return addr; }
  static Result<ProcId> parse(std::string_view text);
  auto operator<=>(const ProcId&) const = default;
  template <class Archive>
  void serialize(Archive& ar) { ar(addr); }
};

struct ActorId {
  ProcId proc;
  std::string name;
  std::uint64_t index = 0;

  std::string to_string() const;
  static Result<ActorId> parse(std::string_view text);
  auto operator<=>(const ActorId&) const = default;
  template <class Archive>
  void serialize(Archive& ar) { ar(proc, name, index); }
};

struct PortId {
  ProcId proc;
  std::uint64_t index = 0;

  std::string to_string() const;
  static Result<PortId> parse(std::string_view text);
  auto operator<=>(const PortId&) const = default;
  template <class Archive>
  void serialize(Archive& ar) { ar(proc, index); }
};

// kInvalidArgument unless `name` can be an actor name (non-empty, none of "/[]#").
Status check_actor_name(std::string_view name);

}  // namespace sceptre
