// Faults with real processes and real sockets: a sender killed mid-stream, a receiver killed
// mid-stream, and a TCP connection cut and restored by a proxy between the two ends.
#include <gtest/gtest.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>

#include <mutex>
#include <thread>

#include "channel/test_util.h"

extern char** environ;

namespace sceptre::channel::testing {
namespace {

// A child process running channel_peer, with its stdout readable line by line.
class Peer {
 public:
  explicit Peer(std::vector<std::string> args) {
    int out[2];
    SCEPTRE_CHECK(::pipe(out) == 0);
    posix_spawn_file_actions_t actions;
    posix_spawn_file_actions_init(&actions);
    posix_spawn_file_actions_adddup2(&actions, out[1], 1);
    posix_spawn_file_actions_addclose(&actions, out[0]);
    args.insert(args.begin(), SCEPTRE_CHANNEL_PEER);
    std::vector<char*> argv;
    for (auto& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    ::setenv("SCEPTRE_SECRET", kSecret.c_str(), 1);
    SCEPTRE_CHECK(posix_spawn(&pid_, argv[0], &actions, nullptr, argv.data(), environ) == 0);
    posix_spawn_file_actions_destroy(&actions);
    ::close(out[1]);
    out_ = ::fdopen(out[0], "r");
  }
  ~Peer() {
    kill();
    std::fclose(out_);
  }
  // Next line of output without the newline; nullopt at EOF.
  std::optional<std::string> line() {
    char buf[256];
    if (!std::fgets(buf, sizeof(buf), out_)) return std::nullopt;
    std::string s(buf);
    if (!s.empty() && s.back() == '\n') s.pop_back();
    return s;
  }
  void kill() {
    if (pid_ <= 0) return;
    ::kill(pid_, SIGKILL);
    ::waitpid(pid_, nullptr, 0);
    pid_ = -1;
  }
  int wait() {
    int status = 0;
    ::waitpid(pid_, &status, 0);
    pid_ = -1;
    return status;
  }

 private:
  pid_t pid_ = -1;
  FILE* out_ = nullptr;
};

class Processes : public ::testing::TestWithParam<Transport> {
 protected:
  Context ctx_;
};

TEST_P(Processes, ASenderKilledMidStreamLeavesAGapFreePrefixAndOthersUnharmed) {
  std::mutex mu;
  std::vector<std::vector<std::uint64_t>> got(2);
  auto rx = serve(ctx_, fresh_addr(GetParam()), fast_options(), [&](wire::Message m) {
    auto n = wire::decode<Numbered>(m);
    std::lock_guard lock(mu);
    got.at(n->sender).push_back(n->index);
  });
  ASSERT_TRUE(rx.ok());
  std::string addr = (*rx)->address().to_string();
  Peer victim({"send", "--addr", addr, "--sender", "0", "--count", "100000000", "--interval-us", "20"});
  Peer survivor({"send", "--addr", addr, "--sender", "1", "--count", "30000"});
  ASSERT_TRUE(eventually([&] { std::lock_guard lock(mu); return got[0].size() > 2000; }));
  victim.kill();
  EXPECT_EQ(survivor.wait(), 0);
  // Not under `mu`: the receiver may still be delivering what the victim wrote before it died,
  // and its handler takes `mu`, so holding it here would keep the dead connection open.
  EXPECT_TRUE(eventually([&] { return (*rx)->connection_count() == 0; }));
  std::lock_guard lock(mu);
  for (int s = 0; s < 2; ++s) {
    for (std::size_t i = 0; i < got[s].size(); ++i) {
      ASSERT_EQ(got[s][i], i) << "sender " << s << ": lost, duplicated or reordered";
    }
  }
  EXPECT_EQ(got[1].size(), 30000u);
}

TEST_P(Processes, AReceiverKilledMidStreamReturnsExactlyWhatWasNotAcknowledged) {
  ChannelAddr where = fresh_addr(GetParam());
  if (where.transport == Transport::kTcp) where.port = 0;
  Peer receiver({"recv", "--addr", where.to_string()});
  auto ready = receiver.line();
  ASSERT_TRUE(ready && ready->rfind("ready ", 0) == 0) << ready.value_or("(eof)");
  auto addr = ChannelAddr::parse(ready->substr(6));

  std::vector<std::uint64_t> printed;
  std::thread reader([&] {
    while (auto l = receiver.line()) printed.push_back(std::stoull(l->substr(l->find(' ') + 1)));
  });
  std::mutex mu;
  std::vector<std::uint64_t> returned;
  ChannelOptions o = fast_options();
  o.delivery_timeout = 1s;
  auto tx = dial(ctx_, *addr, o, [&](std::vector<wire::Message> msgs, const Error&) {
    std::lock_guard lock(mu);
    for (auto& m : msgs) returned.push_back(wire::decode<Numbered>(m)->index);
  });
  std::uint64_t sent = 0;
  for (; sent < 10'000'000; ++sent) {
    if (sent == 20000) receiver.kill();
    if (!(*tx)->send(numbered(0, sent), 10s).ok()) break;
  }
  reader.join();
  ASSERT_TRUE(eventually([&] { std::lock_guard lock(mu); return !returned.empty(); }));
  std::lock_guard lock(mu);
  for (std::size_t i = 0; i < printed.size(); ++i) ASSERT_EQ(printed[i], i) << "receiver saw a gap or duplicate";
  for (std::size_t i = 0; i < returned.size(); ++i) {
    ASSERT_EQ(returned[i], returned[0] + i) << "returned messages are not a contiguous suffix";
  }
  EXPECT_EQ(returned.back() + 1, sent) << "every accepted message is either acknowledged or returned";
  EXPECT_LE(returned.front(), printed.size()) << "an acknowledged message never reached the receiver";
}

// Forwards TCP connections from its own port to a target port; cut() drops every connection
// and refuses new ones until restore().
class TcpProxy {
 public:
  explicit TcpProxy(std::uint16_t target) : target_(target) { listen_on(0); }
  ~TcpProxy() {
    cut();
    stop_ = true;
    if (acceptor_.joinable()) acceptor_.join();
  }
  std::uint16_t port() const { return port_; }

  void cut() {
    std::lock_guard lock(mu_);
    down_ = true;
    for (int fd : fds_) ::shutdown(fd, SHUT_RDWR);
    fds_.clear();
  }
  void restore() {
    std::lock_guard lock(mu_);
    down_ = false;
  }

 private:
  void listen_on(std::uint16_t port) {
    listen_fd_ = ::socket(AF_INET, SOCK_STREAM, 0);
    int one = 1;
    ::setsockopt(listen_fd_, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    sockaddr_in sa{};
    sa.sin_family = AF_INET;
    sa.sin_port = htons(port);
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    SCEPTRE_CHECK(::bind(listen_fd_, reinterpret_cast<sockaddr*>(&sa), sizeof(sa)) == 0);
    socklen_t len = sizeof(sa);
    ::getsockname(listen_fd_, reinterpret_cast<sockaddr*>(&sa), &len);
    port_ = ntohs(sa.sin_port);
    SCEPTRE_CHECK(::listen(listen_fd_, 16) == 0);
    acceptor_ = std::thread([this] { accept_loop(); });
  }

  void accept_loop() {
    while (!stop_) {
      pollfd p{listen_fd_, POLLIN, 0};
      if (::poll(&p, 1, 20) <= 0) continue;
      int client = ::accept(listen_fd_, nullptr, nullptr);
      if (client < 0) continue;
      std::unique_lock lock(mu_);
      if (down_) {  // the "network" is down: the connection dies at once
        ::close(client);
        continue;
      }
      int server = raw_connect(ChannelAddr{Transport::kTcp, "127.0.0.1", target_});
      fds_.push_back(client);
      fds_.push_back(server);
      lock.unlock();
      std::thread(pump, client, server).detach();
      std::thread(pump, server, client).detach();
    }
    ::close(listen_fd_);
  }

  static void pump(int from, int to) {
    char buf[65536];
    for (;;) {
      ssize_t n = ::recv(from, buf, sizeof(buf), 0);
      if (n <= 0 || !write_all(to, std::vector<std::byte>(reinterpret_cast<std::byte*>(buf),
                                                          reinterpret_cast<std::byte*>(buf) + n))) {
        break;
      }
    }
    ::shutdown(to, SHUT_RDWR);
    ::shutdown(from, SHUT_RDWR);
  }

  std::uint16_t target_;
  std::uint16_t port_ = 0;
  int listen_fd_ = -1;
  std::atomic<bool> stop_{false};
  std::mutex mu_;
  bool down_ = false;
  std::vector<int> fds_;
  std::thread acceptor_;
};

TEST(TcpCut, ACutAndRestoredConnectionLosesAndDuplicatesNothing) {
  Context ctx;
  std::mutex mu;
  std::vector<std::uint64_t> got;
  auto rx = serve(ctx, fresh_addr(Transport::kTcp), fast_options(), [&](wire::Message m) {
    std::lock_guard lock(mu);
    got.push_back(wire::decode<Numbered>(m)->index);
  });
  TcpProxy proxy((*rx)->address().port);
  auto tx = dial(ctx, ChannelAddr{Transport::kTcp, "127.0.0.1", proxy.port()}, fast_options());
  constexpr std::uint64_t kCount = 60000;
  for (std::uint64_t i = 0; i < kCount; ++i) {
    ASSERT_TRUE((*tx)->send(numbered(0, i, i % 1000 == 0 ? 100000 : 16), 20s).ok());
    if (i == 15000 || i == 40000) {
      std::size_t cuts = i == 15000 ? 0 : 1;
      // Cut a connection that exists (the previous reconnect may still be under way).
      ASSERT_TRUE(eventually([&] { return (*tx)->connection_count() > cuts; }));
      proxy.cut();
      std::this_thread::sleep_for(200ms);  // an outage: reconnects fail meanwhile
      proxy.restore();
    }
  }
  ASSERT_TRUE((*tx)->flush(30s).ok());
  std::lock_guard lock(mu);
  ASSERT_EQ(got.size(), kCount);
  for (std::size_t i = 0; i < got.size(); ++i) ASSERT_EQ(got[i], i);
  EXPECT_GE((*tx)->connection_count(), 3u);
}

// local: is in-process by definition, so only unix and tcp can have a peer process.
INSTANTIATE_TEST_SUITE_P(Transports, Processes,
                         ::testing::Values(Transport::kUnix, Transport::kTcp),
                         [](const auto& info) { return std::string(transport_name(info.param)); });

}  // namespace
}  // namespace sceptre::channel::testing
