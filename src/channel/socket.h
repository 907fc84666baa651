// Byte-stream endpoints for the three transports, reduced to a connected non-blocking file
// descriptor so that everything above (handshake, Connection) is one code path:
//   tcp   asio's resolver + connect/accept, TCP_NODELAY;
//   unix  asio's local stream sockets (path or abstract);
//   local a socketpair handed to the Listener registered under the name in this process.
#pragma once

#include <asio/awaitable.hpp>
#include <asio/io_context.hpp>
#include <chrono>
#include <functional>
#include <memory>

#include "sceptre/channel/addr.h"
#include "sceptre/core/result.h"

namespace sceptre::channel {

// Connects to `addr` within `timeout`. kUnavailable (retryable) when the peer is not there.
asio::awaitable<Result<int>> connect_fd(asio::io_context& io, const ChannelAddr& addr,
                                        std::chrono::milliseconds timeout);

// Accepts connections on an address and hands each connected fd to `on_accept` on `io`'s
// thread. Destroying the listener (on the I/O thread) stops accepting.
class Listener {
 public:
  virtual ~Listener() = default;
  virtual const ChannelAddr& address() const = 0;
  virtual void close() = 0;  // I/O thread only
};

using AcceptHandler = std::function<void(int fd)>;

Result<std::unique_ptr<Listener>> listen(asio::io_context& io, const ChannelAddr& addr,
                                         AcceptHandler on_accept);

// Connects to a local: listener in this process (synchronous: it only makes a socketpair).
Result<int> connect_local(const ChannelAddr& addr);


}  // namespace sceptre::channel
