#include "channel/stream.h"

#include <fcntl.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

namespace sceptre::channel {

Result<Stream> adopt_stream(asio::io_context& io, int fd) {
  auto give_up = [fd](std::string why) {
    ::close(fd);
    return Error(Code::kInternal, std::move(why));
  };
  int domain = 0;
  socklen_t len = sizeof(domain);
  if (::getsockopt(fd, SOL_SOCKET, SO_DOMAIN, &domain, &len) != 0) return give_up("not a socket");
  if (domain == AF_UNIX) {
    // Unix sockets default to ~200 KiB of buffer: a 1 MiB message then takes five sleep/wake
    // hand-offs between writer and reader. TCP keeps its autotuning (setting a size disables it).
    int size = 2 << 20;
    ::setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &size, sizeof(size));
    ::setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &size, sizeof(size));
  }
  // Non-blocking: Connection writes with sendmsg() itself and must never block the I/O thread.
  int flags = ::fcntl(fd, F_GETFL);
  if (flags < 0 || ::fcntl(fd, F_SETFL, flags | O_NONBLOCK) < 0 ||
      ::fcntl(fd, F_SETFD, FD_CLOEXEC) != 0) {
    return give_up("cannot make the socket non-blocking");
  }
  asio::generic::stream_protocol protocol(domain, domain == AF_UNIX ? 0 : IPPROTO_TCP);
  Stream stream(io);
  asio::error_code ec;
  stream.assign(protocol, fd, ec);
  if (ec) return give_up("cannot adopt socket: " + ec.message());
  return stream;
}

}  // namespace sceptre::channel
