#include "channel/socket.h"

#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <unistd.h>

#include <asio/co_spawn.hpp>
#include <asio/experimental/as_tuple.hpp>
#include <asio/connect.hpp>
#include <asio/detached.hpp>
#include <asio/ip/tcp.hpp>
#include <asio/local/stream_protocol.hpp>
#include <asio/post.hpp>
#include <asio/steady_timer.hpp>
#include <asio/use_awaitable.hpp>
#include <map>
#include <mutex>

#include "channel/stream.h"
#include "core/log.h"

namespace sceptre::channel {
namespace {

constexpr auto kNoThrow = asio::experimental::as_tuple(asio::use_awaitable);

Error unavailable(const ChannelAddr& addr, const std::string& why) {
  return Error(Code::kUnavailable, "cannot connect to " + addr.to_string() + ": " + why);
}

asio::local::stream_protocol::endpoint unix_endpoint(const std::string& location) {
  if (!location.empty() && location[0] == '@') {
    return asio::local::stream_protocol::endpoint(std::string(1, '\0') + location.substr(1));
  }
  return asio::local::stream_protocol::endpoint(location);
}

// --- local: a process-wide registry of listeners by name ----------------------------------

struct LocalRegistry {
  std::mutex mu;
  std::map<std::string, std::function<void(int)>> listeners;

  static LocalRegistry& get() {
    static LocalRegistry registry;
    return registry;
  }
};

class LocalListener final : public Listener {
 public:
  LocalListener(ChannelAddr addr) : addr_(std::move(addr)) {}
  ~LocalListener() override { close(); }
  const ChannelAddr& address() const override { return addr_; }
  void close() override {
    if (closed_) return;
    closed_ = true;
    auto& reg = LocalRegistry::get();
    std::lock_guard lock(reg.mu);
    reg.listeners.erase(addr_.location);
  }

 private:
  ChannelAddr addr_;
  bool closed_ = false;
};

}  // namespace

Result<int> connect_local(const ChannelAddr& addr) {
  auto& reg = LocalRegistry::get();
  std::lock_guard lock(reg.mu);
  auto it = reg.listeners.find(addr.location);
  if (it == reg.listeners.end()) return unavailable(addr, "no local channel by that name");
  int fds[2];
  if (::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, fds) != 0) {
    return unavailable(addr, std::string("socketpair: ") + std::strerror(errno));
  }
  it->second(fds[1]);
  return fds[0];
}

namespace {

// --- unix and tcp: asio acceptors ------------------------------------------------------------

template <class Acceptor>
class SocketListener final : public Listener {
 public:
  SocketListener(Acceptor acceptor, ChannelAddr addr, AcceptHandler on_accept)
      : acceptor_(std::move(acceptor)), addr_(std::move(addr)), on_accept_(std::move(on_accept)) {}
  ~SocketListener() override { close(); }

  const ChannelAddr& address() const override { return addr_; }

  void close() override {
    if (!acceptor_.is_open()) return;
    asio::error_code ignored;
    acceptor_.close(ignored);
    if (addr_.transport == Transport::kUnix && !addr_.location.empty() && addr_.location[0] != '@') {
      ::unlink(addr_.location.c_str());
    }
  }

  void accept_next() {
    acceptor_.async_accept([this](const asio::error_code& ec, auto socket) {
      if (ec == asio::error::operation_aborted || !acceptor_.is_open()) return;
      if (ec) {
        // EMFILE and friends: keep serving; the peer will retry.
        log().warn("accept on {} failed: {}", addr_.to_string(), ec.message());
      } else {
        on_accept_(socket.release());
      }
      accept_next();
    });
  }

 private:
  Acceptor acceptor_;
  ChannelAddr addr_;
  AcceptHandler on_accept_;
};

Result<std::unique_ptr<Listener>> listen_tcp(asio::io_context& io, ChannelAddr addr,
                                             AcceptHandler on_accept) {
  asio::error_code ec;
  asio::ip::tcp::resolver resolver(io);
  auto results = resolver.resolve(addr.location, std::to_string(addr.port),
                                  asio::ip::tcp::resolver::passive, ec);
  if (ec || results.empty()) {
    return Error(Code::kInvalidArgument, "cannot resolve " + addr.to_string() + ": " + ec.message());
  }
  asio::ip::tcp::endpoint endpoint = results.begin()->endpoint();
  asio::ip::tcp::acceptor acceptor(io);
  acceptor.open(endpoint.protocol(), ec);
  if (!ec) acceptor.set_option(asio::socket_base::reuse_address(true), ec);
  if (!ec) acceptor.bind(endpoint, ec);
  if (!ec) acceptor.listen(asio::socket_base::max_listen_connections, ec);
  if (ec) return Error(Code::kUnavailable, "cannot listen on " + addr.to_string() + ": " + ec.message());
  addr.port = acceptor.local_endpoint().port();
  auto listener = std::make_unique<SocketListener<asio::ip::tcp::acceptor>>(
      std::move(acceptor), addr, std::move(on_accept));
  listener->accept_next();
  return std::unique_ptr<Listener>(std::move(listener));
}

Result<std::unique_ptr<Listener>> listen_unix(asio::io_context& io, const ChannelAddr& addr,
                                              AcceptHandler on_accept) {
  asio::error_code ec;
  asio::local::stream_protocol::acceptor acceptor(io);
  acceptor.open(asio::local::stream_protocol(), ec);
  if (!ec) acceptor.bind(unix_endpoint(addr.location), ec);
  if (!ec) acceptor.listen(asio::socket_base::max_listen_connections, ec);
  if (ec) return Error(Code::kUnavailable, "cannot listen on " + addr.to_string() + ": " + ec.message());
  auto listener = std::make_unique<SocketListener<asio::local::stream_protocol::acceptor>>(
      std::move(acceptor), addr, std::move(on_accept));
  listener->accept_next();
  return std::unique_ptr<Listener>(std::move(listener));
}

template <class Socket, class Connect>
asio::awaitable<Result<int>> connect_with_timeout(asio::io_context& io, Socket& socket,
                                                  const ChannelAddr& addr,
                                                  std::chrono::milliseconds timeout,
                                                  Connect connect) {
  asio::steady_timer timer(io, timeout);
  bool timed_out = false;
  cancel_on_expiry(timer, socket, timed_out);
  asio::error_code ec = co_await connect();
  timer.cancel();
  if (timed_out) co_return unavailable(addr, "timed out after " + std::to_string(timeout.count()) + " ms");
  if (ec) co_return unavailable(addr, ec.message());
  co_return socket.release();
}

}  // namespace

asio::awaitable<Result<int>> connect_fd(asio::io_context& io, const ChannelAddr& addr,
                                        std::chrono::milliseconds timeout) {
  switch (addr.transport) {
    case Transport::kLocal:
      co_return connect_local(addr);
    case Transport::kUnix: {
      asio::local::stream_protocol::socket socket(io);
      co_return co_await connect_with_timeout(io, socket, addr, timeout, [&]() -> asio::awaitable<asio::error_code> {
        const auto endpoint = unix_endpoint(addr.location);
        auto [ec] = co_await socket.async_connect(endpoint, kNoThrow);
        co_return ec;
      });
    }
    case Transport::kTcp: {
      asio::ip::tcp::resolver resolver(io);
      const std::string port = std::to_string(addr.port);
      auto [rec, results] = co_await resolver.async_resolve(addr.location, port, kNoThrow);
      if (rec) co_return unavailable(addr, "cannot resolve host: " + rec.message());
      asio::ip::tcp::socket socket(io);
      auto fd = co_await connect_with_timeout(io, socket, addr, timeout, [&]() -> asio::awaitable<asio::error_code> {
        auto [ec, endpoint] = co_await asio::async_connect(socket, results, kNoThrow);
        if (!ec) socket.set_option(asio::ip::tcp::no_delay(true), ec);
        co_return ec;
      });
      co_return fd;
    }
  }
  co_return Error(Code::kInternal, "unknown transport");
}

Result<std::unique_ptr<Listener>> listen(asio::io_context& io, const ChannelAddr& addr,
                                         AcceptHandler on_accept) {
  switch (addr.transport) {
    case Transport::kLocal: {
      auto& reg = LocalRegistry::get();
      std::lock_guard lock(reg.mu);
      if (reg.listeners.count(addr.location)) {
        return Error(Code::kAlreadyExists, addr.to_string() + " is already being served");
      }
      reg.listeners[addr.location] = [&io, on_accept](int fd) {
        asio::post(io, [on_accept, fd] { on_accept(fd); });
      };
      return std::unique_ptr<Listener>(std::make_unique<LocalListener>(addr));
    }
    case Transport::kUnix:
      return listen_unix(io, addr, std::move(on_accept));
    case Transport::kTcp:
      return listen_tcp(io, addr, std::move(on_accept));
  }
  return Error(Code::kInternal, "unknown transport");
}

}  // namespace sceptre::channel
