// Stream: a connected socket of any family (unix, tcp, a local socketpair) as one asio type,
// so the handshake and Connection are a single code path for every transport. A socket type
// (rather than a plain descriptor) lets asio remember that a short read drained the socket and
// skip the next speculative read.
#pragma once

#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <asio/generic/stream_protocol.hpp>
#include <asio/io_context.hpp>
#include <asio/steady_timer.hpp>

#include "sceptre/core/result.h"

namespace sceptre::channel {

using Stream = asio::generic::stream_protocol::socket;

// Takes ownership of a connected, non-blocking socket; closes it on failure.
inline Result<Stream> adopt_stream(asio::io_context& io, int fd) {
  int domain = 0;
  socklen_t len = sizeof(domain);
  if (::getsockopt(fd, SOL_SOCKET, SO_DOMAIN, &domain, &len) != 0) {
    ::close(fd);
    return Error(Code::kInternal, "not a socket");
  }
  asio::generic::stream_protocol protocol(domain, domain == AF_UNIX ? 0 : IPPROTO_TCP);
  Stream stream(io);
  asio::error_code ec;
  stream.assign(protocol, fd, ec);
  if (ec) {
    ::close(fd);
    return Error(Code::kInternal, "cannot adopt socket: " + ec.message());
  }
  return stream;
}

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
