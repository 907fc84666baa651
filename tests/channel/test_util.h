// Helpers shared by the channel tests: addresses per transport, fast options, raw sockets.
#pragma once

#include <sys/socket.h>
#include <sys/un.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <arpa/inet.h>
#include <unistd.h>
#include <fcntl.h>
#include <thread>
#include <optional>

#include <atomic>
#include <chrono>
#include <string>

#include "channel/socket.h"
#include "sceptre/channel/rx.h"
#include "sceptre/channel/tx.h"
#include "sceptre/wire/codec.h"

namespace sceptre::channel::testing {

using namespace std::chrono_literals;

inline const std::string kSecret = "test-job-secret";

inline ChannelOptions fast_options() {
  ChannelOptions o;
  o.secret = kSecret;
  o.delivery_timeout = 20s;
  o.reconnect_min = 1ms;
  o.reconnect_max = 50ms;
  return o;
}

// A fresh address of the given transport (tcp: port 0, resolved by serve()).
inline ChannelAddr fresh_addr(Transport t) {
  static std::atomic<int> counter{0};
  std::string name = "sceptre-test-" + std::to_string(::getpid()) + "-" + std::to_string(counter++);
  switch (t) {
    case Transport::kLocal: return ChannelAddr{t, name, 0};
    case Transport::kUnix: return ChannelAddr{t, "/tmp/" + name + ".sock", 0};
    case Transport::kTcp: return ChannelAddr{t, "127.0.0.1", 0};
  }
  return {};
}

// A plain blocking connection to a served address, bypassing the channel protocol.
inline int raw_connect(const ChannelAddr& addr) {
  if (addr.transport == Transport::kLocal) {
    auto fd = connect_local(addr);
    return fd ? *fd : -1;
  }
  if (addr.transport == Transport::kUnix) {
    int fd = ::socket(AF_UNIX, SOCK_STREAM, 0);
    sockaddr_un sa{};
    sa.sun_family = AF_UNIX;
    std::snprintf(sa.sun_path, sizeof(sa.sun_path), "%s", addr.location.c_str());
    if (::connect(fd, reinterpret_cast<sockaddr*>(&sa), sizeof(sa)) != 0) return -1;
    return fd;
  }
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in sa{};
  sa.sin_family = AF_INET;
  sa.sin_port = htons(addr.port);
  ::inet_pton(AF_INET, addr.location.c_str(), &sa.sin_addr);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&sa), sizeof(sa)) != 0) return -1;
  return fd;
}

inline bool write_all(int fd, const std::vector<std::byte>& bytes) {
  std::size_t at = 0;
  while (at < bytes.size()) {
    ssize_t n = ::send(fd, bytes.data() + at, bytes.size() - at, MSG_NOSIGNAL);
    if (n <= 0) return false;
    at += static_cast<std::size_t>(n);
  }
  return true;
}

// Reads one whole frame with blocking reads (tests only); nullopt on EOF or error.
inline std::optional<wire::Frame> read_frame_blocking(int fd) {
  wire::FrameDecoder decoder;
  std::vector<wire::Frame> out;
  std::byte b;
  while (out.empty()) {
    if (::recv(fd, &b, 1, 0) != 1) return std::nullopt;
    if (!decoder.feed(std::span(&b, 1), out).ok()) return std::nullopt;
  }
  return std::move(out.front());
}

// Waits until `pred` holds or `limit` passes; returns whether it held.
template <class Pred>
bool eventually(Pred pred, std::chrono::milliseconds limit = 20s) {
  auto end = std::chrono::steady_clock::now() + limit;
  while (std::chrono::steady_clock::now() < end) {
    if (pred()) return true;
    std::this_thread::sleep_for(2ms);
  }
  return pred();
}

// A numbered test message: sender id and index in the body, plus an optional part.
struct Numbered {
  std::uint32_t sender = 0;
  std::uint64_t index = 0;
  wire::Part payload;
  SCEPTRE_FIELDS(sender, index, payload)
};

inline wire::Message numbered(std::uint32_t sender, std::uint64_t index, std::size_t payload = 0) {
  Numbered n{sender, index, {}};
  if (payload) n.payload = wire::Part::copy_of(std::string(payload, static_cast<char>('a' + index % 26)));
  return wire::encode(n);
}

}  // namespace sceptre::channel::testing
