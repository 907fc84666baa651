#include "sceptre/channel/addr.h"

#include <charconv>

namespace sceptre::channel {

std::string_view transport_name(Transport t) {
  switch (t) {
    case Transport::kLocal: return "local";
    case Transport::kUnix: return "unix";
    case Transport::kTcp: return "tcp";
  }
  return "?";
}

namespace {

Error bad(std::string_view text, std::string why) {
  return Error(Code::kInvalidArgument,
               "bad channel address '" + std::string(text) + "': " + std::move(why));
}

Result<ChannelAddr> parse_tcp(std::string_view text, std::string_view rest) {
  std::string_view host;
  std::string_view port;
  if (!rest.empty() && rest.front() == '[') {
    auto close = rest.find(']');
    if (close == std::string_view::npos || close + 1 >= rest.size() || rest[close + 1] != ':') {
      return bad(text, "expected tcp:[ipv6]:port");
    }
    host = rest.substr(1, close - 1);
    port = rest.substr(close + 2);
  } else {
    auto colon = rest.rfind(':');
    if (colon == std::string_view::npos) return bad(text, "expected tcp:host:port");
    host = rest.substr(0, colon);
    port = rest.substr(colon + 1);
  }
  if (host.empty()) return bad(text, "empty host");
  unsigned value = 0;
  auto [end, ec] = std::from_chars(port.data(), port.data() + port.size(), value);
  if (port.empty() || ec != std::errc() || end != port.data() + port.size() || value > 65535) {
    return bad(text, "port must be a number from 0 to 65535");
  }
  return ChannelAddr{Transport::kTcp, std::string(host), static_cast<std::uint16_t>(value)};
}

}  // namespace

Result<ChannelAddr> ChannelAddr::parse(std::string_view text) {
  auto colon = text.find(':');
  if (colon == std::string_view::npos) {
    return bad(text, "expected <transport>:<location>, transport one of local, unix, tcp");
  }
  std::string_view scheme = text.substr(0, colon);
  std::string_view rest = text.substr(colon + 1);
  if (scheme == "tcp") return parse_tcp(text, rest);
  if (rest.empty()) return bad(text, "empty location");
  if (rest.find('\0') != std::string_view::npos) return bad(text, "NUL byte in location");
  if (scheme == "local") return ChannelAddr{Transport::kLocal, std::string(rest), 0};
  if (scheme == "unix") {
    // sun_path holds 108 bytes including the terminator (or the leading NUL when abstract).
    if (rest.size() > 107) return bad(text, "unix socket path longer than 107 bytes");
    return ChannelAddr{Transport::kUnix, std::string(rest), 0};
  }
  return bad(text, "unknown transport '" + std::string(scheme) + "' (local, unix, tcp)");
}

std::string ChannelAddr::to_string() const {
  std::string out(transport_name(transport));
  out += ':';
  if (transport == Transport::kTcp) {
    bool v6 = location.find(':') != std::string::npos;
    out += v6 ? "[" + location + "]" : location;
    out += ':';
    out += std::to_string(port);
  } else {
    out += location;
  }
  return out;
}

}  // namespace sceptre::channel
