#include "sceptre/core/ids.h"

#include <charconv>

namespace sceptre {
namespace {

Result<std::uint64_t> parse_index(std::string_view text, std::string_view whole) {
  std::uint64_t value = 0;
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (text.empty() || ec != std::errc() || end != text.data() + text.size()) {
    return Error(Code::kInvalidArgument, "bad index '" + std::string(text) + "' in id '" +
                                             std::string(whole) + "'");
  }
  return value;
}

}  // namespace

Status check_actor_name(std::string_view name) {
  if (name.empty()) return Error(Code::kInvalidArgument, "an actor name may not be empty");
  if (name.find_first_of("/[]#") != std::string_view::npos) {
    return Error(Code::kInvalidArgument,
                 "actor name '" + std::string(name) + "' contains one of / [ ] #");
  }
  return ok_status();
}

Result<ProcId> ProcId::parse(std::string_view text) {
  if (text.find(':') == std::string_view::npos) {
    return Error(Code::kInvalidArgument,
                 "proc id '" + std::string(text) + "' is not a channel address (transport:where)");
  }
  return ProcId{std::string(text)};
}

std::string ActorId::to_string() const {
  return proc.addr + "/" + name + "[" + std::to_string(index) + "]";
}

Result<ActorId> ActorId::parse(std::string_view text) {
  auto slash = text.rfind('/');
  auto open = text.rfind('[');
  if (slash == std::string_view::npos || open == std::string_view::npos || open < slash ||
      text.back() != ']') {
    return Error(Code::kInvalidArgument,
                 "actor id '" + std::string(text) + "' is not of the form <proc>/<name>[<index>]");
  }
  auto proc = ProcId::parse(text.substr(0, slash));
  if (!proc) return std::move(proc).error();
  std::string_view name = text.substr(slash + 1, open - slash - 1);
  SCEPTRE_RETURN_IF_ERROR(check_actor_name(name));
  auto index = parse_index(text.substr(open + 1, text.size() - open - 2), text);
  if (!index) return std::move(index).error();
  return ActorId{std::move(*proc), std::string(name), *index};
}

std::string PortId::to_string() const { return proc.addr + "#" + std::to_string(index); }

Result<PortId> PortId::parse(std::string_view text) {
  auto hash = text.rfind('#');
  if (hash == std::string_view::npos) {
    return Error(Code::kInvalidArgument,
                 "port id '" + std::string(text) + "' is not of the form <proc>#<index>");
  }
  auto proc = ProcId::parse(text.substr(0, hash));
  if (!proc) return std::move(proc).error();
  auto index = parse_index(text.substr(hash + 1), text);
  if (!index) return std::move(index).error();
  return PortId{std::move(*proc), *index};
}

}  // namespace sceptre
