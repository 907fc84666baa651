#include "actor/envelope.h"

#include <cstring>

namespace sceptre::detail {
namespace {

// The call header's layout, little-endian: u8 kind | str to_name | u64 to_index | str endpoint
// | str from | u8 flags (1: reply, 2: sender) | [str proc | u64 index] | [str proc | str name |
// u64 index], where str = u32 length + bytes.
constexpr std::uint8_t kHasReply = 1, kHasSender = 2;

void put(std::vector<std::byte>& out, const void* p, std::size_t n) {
  const auto* bytes = static_cast<const std::byte*>(p);
  out.insert(out.end(), bytes, bytes + n);
}
void put_u64(std::vector<std::byte>& out, std::uint64_t v) { put(out, &v, sizeof v); }
void put_str(std::vector<std::byte>& out, std::string_view s) {
  auto n = static_cast<std::uint32_t>(s.size());
  put(out, &n, sizeof n);
  put(out, s.data(), s.size());
}

// Bounds-checked reads over a body; the first failure sticks.
struct Reader {
  std::span<const std::byte> bytes;
  std::size_t pos = 0;
  bool ok = true;

  const std::byte* take(std::size_t n) {
    if (!ok || n > bytes.size() - pos) {
      ok = false;
      return nullptr;
    }
    const std::byte* p = bytes.data() + pos;
    pos += n;
    return p;
  }
  std::uint8_t u8() {
    const std::byte* p = take(1);
    return p ? static_cast<std::uint8_t>(*p) : 0;
  }
  std::uint64_t u64() {
    std::uint64_t v = 0;
    if (const std::byte* p = take(sizeof v)) std::memcpy(&v, p, sizeof v);
    return v;
  }
  std::string_view str() {
    std::uint32_t n = 0;
    if (const std::byte* p = take(sizeof n)) std::memcpy(&n, p, sizeof n);
    const std::byte* p = take(n);
    return p ? std::string_view(reinterpret_cast<const char*>(p), n) : std::string_view();
  }
};

Result<Parsed> parse_call(const wire::Message& msg) {
  Reader r{msg.body};
  r.u8();  // the kind
  CallHeader h;
  h.to_name = r.str();
  h.to_index = r.u64();
  h.endpoint = r.str();
  h.from = r.str();
  std::uint8_t flags = r.u8();
  if (flags & kHasReply) {
    std::string_view proc = r.str();
    h.reply = PortId{ProcId{std::string(proc)}, r.u64()};
  }
  if (flags & kHasSender) {
    std::string_view proc = r.str(), name = r.str();
    h.sender = ActorId{ProcId{std::string(proc)}, std::string(name), r.u64()};
  }
  if (!r.ok || flags > (kHasReply | kHasSender)) {
    return Error(Code::kDataLoss, "bad call header at offset " + std::to_string(r.pos));
  }
  return Parsed{std::move(h), r.pos};
}

}  // namespace

wire::Message encode_call_header(const ActorId& to, std::string_view endpoint,
                                 const std::optional<PortId>& reply, const ProcId& from,
                                 const std::optional<ActorId>& sender) {
  wire::Message msg;
  auto& b = msg.body;
  b.reserve(wire::OutputArchive::kInitialBody);
  b.push_back(static_cast<std::byte>(Kind::kCall));
  put_str(b, to.name);
  put_u64(b, to.index);
  put_str(b, endpoint);
  put_str(b, from.addr);
  b.push_back(static_cast<std::byte>((reply ? kHasReply : 0) | (sender ? kHasSender : 0)));
  if (reply) {
    put_str(b, reply->proc.addr);
    put_u64(b, reply->index);
  }
  if (sender) {
    put_str(b, sender->proc.addr);
    put_str(b, sender->name);
    put_u64(b, sender->index);
  }
  return msg;
}

Result<Parsed> parse_envelope(const wire::Message& msg) {
  if (!msg.body.empty() && msg.body[0] == static_cast<std::byte>(Kind::kCall)) return parse_call(msg);
  try {
    wire::InputArchive ar(msg.body, msg.parts);
    Kind kind{};
    ar(kind);
    Parsed parsed;
    switch (kind) {
      case Kind::kPort: parsed.header.emplace<PortHeader>(); ar(std::get<PortHeader>(parsed.header)); break;
      case Kind::kSpawn: parsed.header.emplace<SpawnHeader>(); ar(std::get<SpawnHeader>(parsed.header)); break;
      case Kind::kBounce: parsed.header.emplace<BounceHeader>(); ar(std::get<BounceHeader>(parsed.header)); break;
      default:
        return Error(Code::kDataLoss, "unknown envelope kind " + std::to_string(static_cast<int>(kind)));
    }
    parsed.offset = msg.body.size() - ar.remaining();
    return parsed;
  } catch (const std::exception& e) {
    return Error(Code::kDataLoss, std::string("bad envelope header: ") + e.what());
  }
}

}  // namespace sceptre::detail
