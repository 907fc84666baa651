// The handshake against hand-made peers: replays, strangers, incompatible versions.
#include <gtest/gtest.h>

#include <sys/socket.h>

#include <mutex>
#include <thread>
#include <vector>

#include "channel/context_impl.h"
#include "channel/handshake.h"
#include "channel/test_util.h"

namespace sceptre::channel::testing {
namespace {

class Handshake : public ::testing::TestWithParam<Transport> {
 protected:
  // A hand-made server: accepts connections and runs `script` on each, on a thread of its own.
  // The threads are joined before the test ends, so nothing they allocated (OpenSSL's
  // per-thread state, for one) is still in flight when the process exits.
  template <class Script>
  void fake_server(const ChannelAddr& addr, Script script, std::unique_ptr<Listener>& keep) {
    ctx_.impl().run_sync([&] {
      auto l = listen(ctx_.impl().io, addr, [this, script](int fd) {
        std::lock_guard lock(mu_);
        fds_.push_back(fd);
        scripts_.emplace_back([fd, script] {
          int flags = ::fcntl(fd, F_GETFL);
          ::fcntl(fd, F_SETFL, flags & ~O_NONBLOCK);
          script(fd);
        });
      });
      ASSERT_TRUE(l.ok());
      keep = std::move(*l);
    });
  }

  void TearDown() override {
    std::vector<std::thread> scripts;
    std::vector<int> fds;
    {
      std::lock_guard lock(mu_);
      scripts.swap(scripts_);
      fds.swap(fds_);
    }
    for (int fd : fds) ::shutdown(fd, SHUT_RDWR);  // unblocks a script waiting in recv
    for (auto& t : scripts) t.join();
    for (int fd : fds) ::close(fd);
  }

  Context ctx_;
  std::mutex mu_;
  std::vector<int> fds_;
  std::vector<std::thread> scripts_;
};

bool send_frame(int fd, wire::FrameKind kind, const wire::Message& m) {
  return write_all(fd, wire::encode_frame(kind, 0, m));
}

TEST_P(Handshake, AReplayedAuthIsRejected) {
  auto rx = serve(ctx_, fresh_addr(GetParam()), fast_options());
  ASSERT_TRUE(rx.ok());
  Hello hello;
  random_bytes(hello.session);
  random_bytes(hello.nonce);

  // A legitimate client (it knows the secret) completes a handshake; we record its AUTH.
  int fd = raw_connect((*rx)->address());
  ASSERT_TRUE(send_frame(fd, wire::FrameKind::kHello, wire::encode(hello)));
  auto challenge_frame = read_frame_blocking(fd);
  ASSERT_TRUE(challenge_frame && challenge_frame->kind == wire::FrameKind::kChallenge);
  auto challenge = wire::decode<Challenge>(challenge_frame->msg);
  Auth auth{make_proof(kSecret, kClientLabel, hello.nonce, challenge->nonce, hello.session)};
  ASSERT_TRUE(send_frame(fd, wire::FrameKind::kAuth, wire::encode(auth)));
  auto welcome = read_frame_blocking(fd);
  ASSERT_TRUE(welcome);
  EXPECT_EQ(welcome->kind, wire::FrameKind::kWelcome);
  ::close(fd);

  // An eavesdropper replays the same HELLO and AUTH on a new connection: the server's fresh
  // nonce makes the recorded proof worthless.
  int replay = raw_connect((*rx)->address());
  ASSERT_TRUE(send_frame(replay, wire::FrameKind::kHello, wire::encode(hello)));
  ASSERT_TRUE(read_frame_blocking(replay));
  ASSERT_TRUE(send_frame(replay, wire::FrameKind::kAuth, wire::encode(auth)));
  auto answer = read_frame_blocking(replay);
  ASSERT_TRUE(answer);
  EXPECT_EQ(answer->kind, wire::FrameKind::kReject);
  auto reject = wire::decode<Reject>(answer->msg);
  EXPECT_EQ(reject->code, Code::kUnauthenticated);
  char b;
  EXPECT_LE(::recv(replay, &b, 1, 0), 0) << "the connection must be closed after a rejection";
  ::close(replay);
  EXPECT_TRUE(eventually([&] { return (*rx)->rejected_count() == 1; }));
}

TEST_P(Handshake, AnIncompatibleClientIsToldBothVersions) {
  auto rx = serve(ctx_, fresh_addr(GetParam()), fast_options());
  Hello hello;
  hello.protocol = 99;
  hello.build = "9.9.9";
  int fd = raw_connect((*rx)->address());
  ASSERT_TRUE(send_frame(fd, wire::FrameKind::kHello, wire::encode(hello)));
  auto answer = read_frame_blocking(fd);
  ASSERT_TRUE(answer);
  ASSERT_EQ(answer->kind, wire::FrameKind::kReject);
  auto reject = wire::decode<Reject>(answer->msg);
  EXPECT_EQ(reject->code, Code::kFailedPrecondition);
  EXPECT_NE(reject->reason.find("protocol 99 (build 9.9.9)"), std::string::npos) << reject->reason;
  EXPECT_NE(reject->reason.find("protocol " + std::to_string(kProtocolVersion)), std::string::npos);
  ::close(fd);
}

// Dials the fake server and returns the error the Tx fails with.
Error dial_and_fail(Context& ctx, std::unique_ptr<Listener>& listener) {
  auto tx = dial(ctx, listener->address(), fast_options());
  (void)(*tx)->send(numbered(0, 0));  // may already fail: dial connects at once
  EXPECT_TRUE(eventually([&] { return !(*tx)->status().ok(); }));
  Error e = (*tx)->status().ok() ? Error() : (*tx)->status().error();
  ctx.impl().run_sync([&] { listener->close(); });
  return e;
}

TEST_P(Handshake, AClientRefusesAnIncompatibleServerNamingBothVersions) {
  std::unique_ptr<Listener> listener;
  fake_server(fresh_addr(GetParam()), [](int fd) {
    auto hello = read_frame_blocking(fd);
    Challenge c;
    c.protocol = 42;
    c.build = "0.42.0";
    send_frame(fd, wire::FrameKind::kChallenge, wire::encode(c));
    char b;
    ::recv(fd, &b, 1, 0);
  }, listener);
  Error e = dial_and_fail(ctx_, listener);
  EXPECT_EQ(e.code(), Code::kFailedPrecondition);
  EXPECT_NE(e.message().find("protocol 42 (build 0.42.0)"), std::string::npos) << e.message();
  EXPECT_NE(e.message().find("protocol " + std::to_string(kProtocolVersion)), std::string::npos);
}

TEST_P(Handshake, AClientRefusesAnImpostorServer) {
  std::unique_ptr<Listener> listener;
  fake_server(fresh_addr(GetParam()), [](int fd) {
    auto hello = read_frame_blocking(fd);
    Challenge c;  // a valid-looking challenge with a proof made without the secret
    random_bytes(c.nonce);
    random_bytes(c.proof);
    send_frame(fd, wire::FrameKind::kChallenge, wire::encode(c));
    char b;
    ::recv(fd, &b, 1, 0);
  }, listener);
  EXPECT_EQ(dial_and_fail(ctx_, listener).code(), Code::kUnauthenticated);
}

TEST_P(Handshake, AServerThatIsNotSceptreIsAPermanentError) {
  std::unique_ptr<Listener> listener;
  fake_server(fresh_addr(GetParam()), [](int fd) {
    const char http[] = "HTTP/1.1 400 Bad Request\r\n\r\n";
    ::send(fd, http, sizeof(http) - 1, MSG_NOSIGNAL);
    char b;
    ::recv(fd, &b, 1, 0);
  }, listener);
  EXPECT_NE(dial_and_fail(ctx_, listener).message().find("does not speak the sceptre protocol"),
            std::string::npos);
}

TEST_P(Handshake, ASilentPeerTimesOutTheHandshakeAndIsCounted) {
  ChannelOptions o = fast_options();
  o.handshake_timeout = 200ms;
  auto rx = serve(ctx_, fresh_addr(GetParam()), o);
  int fd = raw_connect((*rx)->address());
  ASSERT_GE(fd, 0);
  char b;
  EXPECT_LE(::recv(fd, &b, 1, 0), 0) << "a connection that never says hello must be closed";
  ::close(fd);
  EXPECT_TRUE(eventually([&] { return (*rx)->rejected_count() == 1; }));
}

INSTANTIATE_TEST_SUITE_P(Transports, Handshake,
                         ::testing::Values(Transport::kLocal, Transport::kUnix, Transport::kTcp),
                         [](const auto& info) { return std::string(transport_name(info.param)); });

}  // namespace
}  // namespace sceptre::channel::testing
