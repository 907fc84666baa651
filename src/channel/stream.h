// Stream: a connected socket of any family (unix, tcp, a local socketpair) as one asio type,
// so the handshake and Connection are a single code path for every transport.
#pragma once

#include <asio/generic/stream_protocol.hpp>
#include <asio/io_context.hpp>
#include <asio/steady_timer.hpp>

#include "sceptre/core/result.h"

namespace sceptre::channel {

using Stream = asio::generic::stream_protocol::socket;

// Takes ownership of a connected socket and prepares it for the channel: non-blocking,
// close-on-exec, and on unix sockets 2 MiB buffers. Closes it on failure.
Result<Stream> adopt_stream(asio::io_context& io, int fd);

// Bounds an exchange on `socket`: when `timer` expires first, the socket's pending operations
// are cancelled (they complete with operation_aborted) and `expired` is set, so the caller
// reports a timeout rather than a cancellation. The caller cancels the timer when done.
template <class Socket>
void cancel_on_expiry(asio::steady_timer& timer, Socket& socket, bool& expired) {
  timer.async_wait([&socket, &expired](const asio::error_code& ec) {
    if (ec) return;
    expired = true;
    asio::error_code ignored;
    socket.cancel(ignored);
  });
}

}  // namespace sceptre::channel
