// ChannelAddr: where a channel listens or dials, written as text so logs, configuration and
// the command line can carry it:
//   local:<name>          in this process
//   unix:/path/to/socket  unix domain socket on a path
//   unix:@name            unix domain socket in the abstract namespace (Linux)
//   tcp:<host>:<port>     TCP; host is a name, an IPv4 address or [IPv6]; port 0 = any (serve)
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "sceptre/core/result.h"

namespace sceptre::channel {

enum class Transport : std::uint8_t { kLocal, kUnix, kTcp };

std::string_view transport_name(Transport t);

struct ChannelAddr {
  Transport transport = Transport::kLocal;
  std::string location;  // local: name; unix: path or @abstract; tcp: host
  std::uint16_t port = 0;  // tcp only

  // Parses the text form; kInvalidArgument naming what is wrong.
  static Result<ChannelAddr> parse(std::string_view text);
  std::string to_string() const;

  bool operator==(const ChannelAddr&) const = default;
};

}  // namespace sceptre::channel
