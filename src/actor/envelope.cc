#include "actor/envelope.h"

namespace sceptre::detail {

Result<Parsed> parse_envelope(const wire::Message& msg) {
  try {
    wire::InputArchive ar(msg.body, msg.parts);
    Kind kind{};
    ar(kind);
    Parsed parsed;
    switch (kind) {
      case Kind::kCall: parsed.header.emplace<CallHeader>(); ar(std::get<CallHeader>(parsed.header)); break;
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
