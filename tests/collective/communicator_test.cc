// The Gloo communicator among threads of this process, on real TCP sockets: sums, rendezvous
// that cannot complete, a member that stops taking part, and abort from another thread.
#include <gtest/gtest.h>

#include <cstring>
#include <future>
#include <thread>
#include <vector>

#include "sceptre/collective/communicator.h"

namespace sceptre::collective {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

std::vector<std::unique_ptr<Communicator>> connect_all(KeyValue& store, std::size_t n, CommOptions o) {
  std::vector<std::future<Result<std::unique_ptr<Communicator>>>> pending;
  for (std::size_t r = 0; r < n; ++r) {
    pending.push_back(std::async(std::launch::async, [&, r] { return connect_gloo(store, r, n, o); }));
  }
  std::vector<std::unique_ptr<Communicator>> comms;
  for (auto& p : pending) {
    auto c = p.get();
    EXPECT_TRUE(c.ok()) << c.error().to_string();
    if (c.ok()) comms.push_back(std::move(c).value());
  }
  return comms;
}

TEST(Gloo, AllreduceSumsAndEveryMemberGetsTheSameBits) {
  MemoryStore store;
  for (std::size_t n : {1u, 2u, 4u}) {
    auto comms = connect_all(store, n, {.prefix = "sum-" + std::to_string(n)});
    ASSERT_EQ(comms.size(), n);
    const std::size_t len = 100'003;  // not a multiple of anything
    std::vector<std::vector<float>> data(n, std::vector<float>(len));
    for (std::size_t r = 0; r < n; ++r)
      for (std::size_t i = 0; i < len; ++i) data[r][i] = 0.1f * static_cast<float>(r + 1) + 1e-3f * (i % 97);
    std::vector<std::thread> threads;
    std::vector<Result<void>> results(n);
    for (std::size_t r = 0; r < n; ++r)
      threads.emplace_back([&, r] { results[r] = comms[r]->allreduce_sum(std::span(data[r])); });
    for (auto& t : threads) t.join();
    for (std::size_t r = 0; r < n; ++r) ASSERT_TRUE(results[r].ok()) << results[r].error().to_string();
    for (std::size_t r = 1; r < n; ++r) EXPECT_EQ(0, std::memcmp(data[0].data(), data[r].data(), len * 4));
    float expect = 0;
    for (std::size_t r = 0; r < n; ++r) expect += 0.1f * static_cast<float>(r + 1) + 1e-3f * 5;
    EXPECT_NEAR(data[0][5], expect, 1e-4);
    EXPECT_EQ(comms[0]->size(), n);
    EXPECT_EQ(comms[0]->backend(), "gloo");
  }
}

TEST(Gloo, ARendezvousAMemberNeverJoinsFailsAtItsDeadline) {
  MemoryStore store;
  auto start = Clock::now();
  auto c = connect_gloo(store, 0, 2, {.prefix = "alone", .timeout = 500ms});
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.error().code(), Code::kUnavailable);
  EXPECT_NE(c.error().message().find("alone"), std::string::npos) << c.error().message();
  EXPECT_LT(Clock::now() - start, 10s);
  EXPECT_FALSE(connect_gloo(store, 2, 2, {}).ok());  // a rank outside the communicator
}

TEST(Gloo, AMemberThatStopsTakingPartFailsTheOthersAtTheDeadline) {
  MemoryStore store;
  auto comms = connect_all(store, 3, {.prefix = "deadline", .timeout = 700ms});
  ASSERT_EQ(comms.size(), 3u);
  std::vector<float> a(1000, 1.f), b(1000, 1.f);
  auto start = Clock::now();
  auto fa = std::async(std::launch::async, [&] { return comms[0]->allreduce_sum(std::span(a)); });
  auto fb = std::async(std::launch::async, [&] { return comms[1]->allreduce_sum(std::span(b)); });
  // rank 2 never calls
  ASSERT_EQ(fa.wait_for(30s), std::future_status::ready);
  ASSERT_EQ(fb.wait_for(30s), std::future_status::ready);
  EXPECT_FALSE(fa.get().ok());
  EXPECT_FALSE(fb.get().ok());
  EXPECT_LT(Clock::now() - start, 10s);
}

TEST(Gloo, AnAbortedMemberFailsItsPeersAtOnceAndRefusesLaterCollectives) {
  MemoryStore store;
  auto comms = connect_all(store, 2, {.prefix = "abort", .timeout = 60s});
  ASSERT_EQ(comms.size(), 2u);
  std::vector<float> a(1000, 1.f);
  auto start = Clock::now();
  auto fb = std::async(std::launch::async, [&] { return comms[1]->allreduce_sum(std::span(a)); });
  std::this_thread::sleep_for(200ms);
  comms[0]->abort("rank 0 leaves the quorum");
  ASSERT_EQ(fb.wait_for(30s), std::future_status::ready);
  EXPECT_FALSE(fb.get().ok());
  EXPECT_LT(Clock::now() - start, 20s);  // not the 60 s deadline
  auto r = comms[0]->allreduce_sum(std::span(a));
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().code(), Code::kAborted);
  EXPECT_NE(r.error().message().find("leaves the quorum"), std::string::npos) << r.error().to_string();
}

// A member dies in a ring of 4, and the controller's abort reaches a member that is not next to
// it before that member hears of the failure from its neighbours: it must still hear of it and
// fail at once, as the neighbours do, not wait out its deadline deaf to them.
TEST(Gloo, AnAbortThatOvertakesAPeersFailureStillEndsTheCollectiveAtOnce) {
  MemoryStore store;
  const std::size_t n = 4;
  auto comms = connect_all(store, n, {.prefix = "ring", .timeout = 30s});
  ASSERT_EQ(comms.size(), n);
  std::vector<std::vector<float>> data(n, std::vector<float>(77'000, 1.f));
  std::vector<std::future<Result<void>>> done;
  for (std::size_t r = 0; r < n; ++r) {
    if (r == 2) continue;  // rank 2 is about to die
    done.push_back(std::async(std::launch::async, [&, r] {
      auto res = comms[r]->allreduce_sum(std::span(data[r]));
      if (!res.ok()) comms[r]->abort(res.error().message());  // as a replica does
      return res;
    }));
  }
  std::this_thread::sleep_for(200ms);
  auto start = Clock::now();
  comms[0]->abort("the controller saw rank 2 die");  // first
  std::this_thread::sleep_for(50ms);
  comms[2]->abort("rank 2 dies");  // its connections close, as its proc's would
  for (auto& f : done) {
    ASSERT_EQ(f.wait_for(60s), std::future_status::ready);
    auto res = f.get();
    EXPECT_FALSE(res.ok());
  }
  EXPECT_LT(Clock::now() - start, 10s);  // not the 30 s deadline
  auto later = comms[0]->allreduce_sum(std::span(data[0]));
  ASSERT_FALSE(later.ok());
  EXPECT_EQ(later.error().code(), Code::kAborted);
}

}  // namespace
}  // namespace sceptre::collective
