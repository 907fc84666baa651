// The channel conformance suite: one set of behaviours, run against every transport.
#include <gtest/gtest.h>

#include <mutex>
#include <thread>
#include <tuple>

#include "channel/test_util.h"
#include "sceptre/core/config.h"

namespace sceptre::channel::testing {
namespace {

// Each transport runs with I/O threads that poll before they sleep (the default) and with
// threads that sleep at once: the two ways an event reaches a handler.
enum class Waiting { kPolls, kSleeps };

class Conformance : public ::testing::TestWithParam<std::tuple<Transport, Waiting>> {
 protected:
  ChannelAddr addr() { return fresh_addr(std::get<0>(GetParam())); }
  static ContextOptions io_options() {
    if (std::get<1>(GetParam()) == Waiting::kSleeps) {
      return ContextOptions{std::chrono::microseconds(0)};
    }
    return ContextOptions{std::chrono::microseconds(Config().io_poll_us)};
  }
  Context ctx_{io_options()};
};

// Collects messages delivered to a handler, thread-safely.
struct Collector {
  std::mutex mu;
  std::vector<Numbered> got;
  MessageHandler handler() {
    return [this](wire::Message m) {
      auto n = wire::decode<Numbered>(m);
      ASSERT_TRUE(n.ok()) << n.error().to_string();
      std::lock_guard lock(mu);
      got.push_back(std::move(*n));
    };
  }
  std::size_t size() {
    std::lock_guard lock(mu);
    return got.size();
  }
};

// Each sender's messages arrive exactly once, in order (indices 0..count-1).
void expect_exactly_once_in_order(const std::vector<Numbered>& got, std::uint32_t senders,
                                  std::uint64_t count) {
  std::vector<std::uint64_t> next(senders, 0);
  for (const Numbered& n : got) {
    ASSERT_LT(n.sender, senders);
    ASSERT_EQ(n.index, next[n.sender]) << "sender " << n.sender << ": lost, duplicated or reordered";
    ++next[n.sender];
  }
  for (std::uint32_t s = 0; s < senders; ++s) EXPECT_EQ(next[s], count) << "sender " << s;
}

TEST_P(Conformance, DeliversInOrderExactlyOnceWithRecv) {
  auto rx = serve(ctx_, addr(), fast_options());
  ASSERT_TRUE(rx.ok()) << rx.error().to_string();
  auto tx = dial(ctx_, (*rx)->address(), fast_options());
  ASSERT_TRUE(tx.ok());
  constexpr int kCount = 5000;
  for (int i = 0; i < kCount; ++i) ASSERT_TRUE((*tx)->send(numbered(0, i)).ok());
  std::vector<Numbered> got;
  for (int i = 0; i < kCount; ++i) {
    auto m = (*rx)->recv(20s);
    ASSERT_TRUE(m.ok()) << m.error().to_string();
    got.push_back(*wire::decode<Numbered>(*m));
  }
  expect_exactly_once_in_order(got, 1, kCount);
  EXPECT_TRUE((*tx)->flush(20s).ok());
  EXPECT_EQ((*rx)->recv(10ms).error().code(), Code::kDeadlineExceeded);
}

TEST_P(Conformance, LargePartsArriveIntact) {
  auto rx = serve(ctx_, addr(), fast_options());
  ASSERT_TRUE(rx.ok());
  auto tx = dial(ctx_, (*rx)->address(), fast_options());
  for (std::size_t size : {std::size_t{1}, std::size_t{16 << 10}, std::size_t{3 << 20}}) {
    ASSERT_TRUE((*tx)->send(numbered(0, size, size)).ok());
    auto m = (*rx)->recv(20s);
    ASSERT_TRUE(m.ok());
    auto n = wire::decode<Numbered>(*m);
    ASSERT_TRUE(n.ok());
    EXPECT_EQ(n->payload.size(), size);
    EXPECT_EQ(n->payload.text(), std::string(size, static_cast<char>('a' + size % 26)));
  }
}

TEST_P(Conformance, ManySendersKeepTheirOwnOrderThroughAHandler) {
  Collector c;
  auto rx = serve(ctx_, addr(), fast_options(), c.handler());
  ASSERT_TRUE(rx.ok());
  constexpr std::uint32_t kSenders = 4;
  constexpr std::uint64_t kCount = 3000;
  std::vector<std::thread> threads;
  for (std::uint32_t s = 0; s < kSenders; ++s) {
    threads.emplace_back([&, s] {
      Context own(io_options());  // senders on their own I/O threads too
      auto tx = dial(s % 2 ? own : ctx_, (*rx)->address(), fast_options());
      ASSERT_TRUE(tx.ok());
      for (std::uint64_t i = 0; i < kCount; ++i) {
        ASSERT_TRUE((*tx)->send(numbered(s, i, i % 100 == 0 ? 20000 : 0), 20s).ok());
      }
      EXPECT_TRUE((*tx)->flush(30s).ok());
    });
  }
  for (auto& t : threads) t.join();
  ASSERT_TRUE(eventually([&] { return c.size() == kSenders * kCount; }));
  expect_exactly_once_in_order(c.got, kSenders, kCount);
}

TEST_P(Conformance, BrokenConnectionsLoseAndDuplicateNothing) {
  Collector c;
  auto rx = serve(ctx_, addr(), fast_options(), c.handler());
  ASSERT_TRUE(rx.ok());
  auto tx = dial(ctx_, (*rx)->address(), fast_options());
  constexpr std::uint64_t kCount = 20000;
  for (std::uint64_t i = 0; i < kCount; ++i) {
    ASSERT_TRUE((*tx)->send(numbered(0, i, i % 997 == 0 ? 50000 : 8), 20s).ok());
    if (i % 2000 == 1000) {
      // Break an established connection (wait for the reconnect if one is under way).
      ASSERT_TRUE(eventually([&] { return (*tx)->break_connection_for_testing(); }));
    }
  }
  ASSERT_TRUE((*tx)->flush(30s).ok());
  ASSERT_TRUE(eventually([&] { return c.size() >= kCount; }));
  expect_exactly_once_in_order(c.got, 1, kCount);
  EXPECT_GE((*tx)->connection_count(), 11u) << "every break must have led to a reconnect";
}

TEST_P(Conformance, FullQueueRefusesThenRecovers) {
  ChannelOptions rx_options = fast_options();
  rx_options.max_rx_queue = 16;  // the receiver stops reading after 16 unread messages
  auto rx = serve(ctx_, addr(), rx_options);
  ASSERT_TRUE(rx.ok());
  ChannelOptions tx_options = fast_options();
  tx_options.max_queued_messages = 64;
  auto tx = dial(ctx_, (*rx)->address(), tx_options);
  std::uint64_t sent = 0;
  Status refused;
  // Large messages fill the socket buffers quickly; then the send queue fills.
  for (; sent < 100000; ++sent) {
    refused = (*tx)->send(numbered(0, sent, 64 << 10));
    if (!refused.ok()) break;
  }
  ASSERT_FALSE(refused.ok()) << "the send queue never filled";
  EXPECT_EQ(refused.error().code(), Code::kResourceExhausted);
  // Acknowledgements of what reached the receiver before it paused may still free some room;
  // once they are in, the queue stays full because nobody reads.
  std::this_thread::sleep_for(500ms);
  while ((*tx)->send(numbered(0, sent, 64 << 10)).ok()) ++sent;
  // A waiting send times out while nobody reads...
  auto waited = (*tx)->send(numbered(0, sent, 8), 50ms);
  ASSERT_FALSE(waited.ok());
  EXPECT_EQ(waited.error().code(), Code::kResourceExhausted);
  // ...and succeeds once the receiver reads.
  std::thread reader([&] {
    for (std::uint64_t i = 0; i <= sent; ++i) {
      auto m = (*rx)->recv(20s);
      ASSERT_TRUE(m.ok()) << m.error().to_string();
      EXPECT_EQ(wire::decode<Numbered>(*m)->index, i);
    }
  });
  EXPECT_TRUE((*tx)->send(numbered(0, sent, 8), 20s).ok());
  reader.join();
}

TEST_P(Conformance, UndeliverableMessagesAreReturnedInOrderAfterTheTimeout) {
  std::mutex mu;
  std::vector<std::uint64_t> returned;
  std::optional<Error> why;
  ChannelOptions o = fast_options();
  o.delivery_timeout = 300ms;
  // Nobody serves this address.
  auto tx = dial(ctx_, addr().transport == Transport::kTcp ? ChannelAddr{Transport::kTcp, "127.0.0.1", 1}
                                                          : addr(),
                 o, [&](std::vector<wire::Message> msgs, const Error& e) {
                   std::lock_guard lock(mu);
                   for (auto& m : msgs) returned.push_back(wire::decode<Numbered>(m)->index);
                   why = e;
                 });
  ASSERT_TRUE(tx.ok());
  for (int i = 0; i < 10; ++i) ASSERT_TRUE((*tx)->send(numbered(0, i)).ok());
  ASSERT_TRUE(eventually([&] { std::lock_guard lock(mu); return why.has_value(); }));
  std::lock_guard lock(mu);
  EXPECT_EQ(why->code(), Code::kDeadlineExceeded);
  EXPECT_NE(why->message().find("cannot connect"), std::string::npos) << why->to_string();
  EXPECT_EQ(returned, (std::vector<std::uint64_t>{0, 1, 2, 3, 4, 5, 6, 7, 8, 9}));
  EXPECT_EQ((*tx)->status().error().code(), Code::kDeadlineExceeded) << "failure is sticky";
  EXPECT_FALSE((*tx)->send(numbered(0, 10)).ok());
}

TEST_P(Conformance, CloseReturnsWhatWasNotAcknowledged) {
  ChannelOptions rx_options = fast_options();
  rx_options.max_rx_queue = 1;
  auto rx = serve(ctx_, addr(), rx_options);
  std::vector<wire::Message> returned;
  Code code = Code::kOk;
  auto tx = dial(ctx_, (*rx)->address(), fast_options(),
                 [&](std::vector<wire::Message> msgs, const Error& e) {
                   returned = std::move(msgs);
                   code = e.code();
                 });
  constexpr int kCount = 200;
  for (int i = 0; i < kCount; ++i) ASSERT_TRUE((*tx)->send(numbered(0, i, 64 << 10)).ok());
  (*tx)->close();  // the handler has run when close() returns
  EXPECT_EQ(code, Code::kCancelled);
  EXPECT_GT(returned.size(), 0u);
  // What was returned is a suffix of what was sent.
  for (std::size_t k = 0; k < returned.size(); ++k) {
    EXPECT_EQ(wire::decode<Numbered>(returned[k])->index, kCount - returned.size() + k);
  }
}

TEST_P(Conformance, WrongSecretIsRejectedAndOthersAreStillServed) {
  Collector c;
  auto rx = serve(ctx_, addr(), fast_options(), c.handler());
  ASSERT_TRUE(rx.ok());
  ChannelOptions wrong = fast_options();
  wrong.secret = "another-job";
  std::optional<Error> why;
  std::mutex mu;
  auto stranger = dial(ctx_, (*rx)->address(), wrong, [&](std::vector<wire::Message>, const Error& e) {
    std::lock_guard lock(mu);
    why = e;
  });
  (void)(*stranger)->send(numbered(9, 0));  // may already fail: dial connects at once
  ASSERT_TRUE(eventually([&] { return !(*stranger)->status().ok(); }));
  EXPECT_EQ((*stranger)->status().error().code(), Code::kUnauthenticated)
      << (*stranger)->status().error().to_string();
  EXPECT_TRUE(eventually([&] { return (*rx)->rejected_count() >= 1; }));

  auto friend_tx = dial(ctx_, (*rx)->address(), fast_options());
  ASSERT_TRUE((*friend_tx)->send(numbered(0, 0)).ok());
  ASSERT_TRUE((*friend_tx)->flush(20s).ok());
  ASSERT_TRUE(eventually([&] { return c.size() == 1; }));
  EXPECT_EQ(c.got[0].sender, 0u) << "nothing from the stranger may be delivered";
}

TEST_P(Conformance, GarbageFromAPeerDropsOnlyThatLink) {
  Collector c;
  auto rx = serve(ctx_, addr(), fast_options(), c.handler());
  auto good = dial(ctx_, (*rx)->address(), fast_options());
  ASSERT_TRUE((*good)->send(numbered(0, 0)).ok());
  ASSERT_TRUE((*good)->flush(20s).ok());

  int fd = raw_connect((*rx)->address());
  ASSERT_GE(fd, 0);
  std::vector<std::byte> junk(4096, std::byte{0x5a});
  write_all(fd, junk);
  char b;
  EXPECT_LE(::recv(fd, &b, 1, 0), 0) << "the server must close a connection that sends garbage";
  ::close(fd);

  ASSERT_TRUE((*good)->send(numbered(0, 1)).ok());
  ASSERT_TRUE((*good)->flush(20s).ok());
  ASSERT_TRUE(eventually([&] { return c.size() == 2; }));
  EXPECT_EQ((*good)->connection_count(), 1u) << "the good link must not have been disturbed";
}

TEST_P(Conformance, MessagesOverTheFrameLimitAreRefusedAtSend) {
  ChannelOptions o = fast_options();
  o.limits.max_frame_bytes = 1 << 16;
  auto rx = serve(ctx_, addr(), o);
  auto tx = dial(ctx_, (*rx)->address(), o);
  auto s = (*tx)->send(numbered(0, 0, 1 << 17));
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.error().code(), Code::kInvalidArgument);
  EXPECT_TRUE((*tx)->status().ok()) << "a refused message does not break the channel";
}

TEST_P(Conformance, MissingSecretIsAClearError) {
  ChannelOptions o;
  ::unsetenv("SCEPTRE_SECRET");
  auto rx = serve(ctx_, addr(), o);
  ASSERT_FALSE(rx.ok());
  EXPECT_NE(rx.error().message().find("SCEPTRE_SECRET"), std::string::npos);
}

INSTANTIATE_TEST_SUITE_P(
    Transports, Conformance,
    ::testing::Combine(::testing::Values(Transport::kLocal, Transport::kUnix, Transport::kTcp),
                       ::testing::Values(Waiting::kPolls, Waiting::kSleeps)),
    [](const auto& info) {
      return std::string(transport_name(std::get<0>(info.param))) +
             (std::get<1>(info.param) == Waiting::kPolls ? "_polls" : "_sleeps");
    });

}  // namespace
}  // namespace sceptre::channel::testing
