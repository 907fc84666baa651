// The actor runtime inside one proc: calls, order, coroutines, ports, errors, own threads.
#include <gtest/gtest.h>

#include "actor/test_actors.h"

namespace sceptre::testing {
namespace {

class ActorTest : public ::testing::Test {
 protected:
  Proc proc{test_options()};
  ProcScope scope{proc};
};

TEST_F(ActorTest, CallReturnsTheEndpointsValue) {
  auto c = proc.spawn<Counter>("counter", 5);
  EXPECT_EQ(c.call<&Counter::add>(3).get(5s), 8);
  EXPECT_EQ(c.call<&Counter::get>().get(5s), 8);
  EXPECT_EQ(c.call<&Counter::echo>(std::string("hi")).get(5s), "hi");
  EXPECT_EQ(c.id().proc, proc.id());
  EXPECT_EQ(c.id().name, "counter");
}

TEST_F(ActorTest, SendIsFireAndForgetInOrder) {
  auto c = proc.spawn<Counter>("counter");
  for (int i = 0; i < 1000; ++i) c.send<&Counter::add>(1);
  EXPECT_EQ(c.call<&Counter::get>().get(5s), 1000);
}

TEST_F(ActorTest, PerSenderOrderHoldsWithManySenders) {
  auto c = proc.spawn<Counter>("counter");
  constexpr int kSenders = 8, kEach = 5000;
  std::vector<std::thread> senders;
  for (int s = 0; s < kSenders; ++s) {
    senders.emplace_back([&, s] {
      ProcScope in(proc);
      for (int i = 0; i < kEach; ++i) c.send<&Counter::record>(s, i);
    });
  }
  for (auto& t : senders) t.join();
  auto [recorded, violations] = c.call<&Counter::order_stats>().get(30s);
  EXPECT_EQ(recorded, kSenders * kEach);
  EXPECT_EQ(violations, 0);
}

TEST_F(ActorTest, OneMessageAtATimeWithoutLocks) {
  // Many threads add concurrently; unsynchronised state would lose updates.
  auto c = proc.spawn<Counter>("counter");
  std::vector<std::thread> threads;
  std::vector<Future<int>> replies[4];
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      ProcScope in(proc);
      for (int i = 0; i < 2000; ++i) replies[t].push_back(c.call<&Counter::add>(1));
    });
  }
  for (auto& t : threads) t.join();
  for (auto& r : replies) ASSERT_TRUE(wait_all(r, 30s));
  EXPECT_EQ(c.call<&Counter::get>().get(5s), 8000);
}

TEST_F(ActorTest, CoroutineEndpointAwaitsAnotherActor) {
  auto a = proc.spawn<Counter>("a", 0);
  auto b = proc.spawn<Counter>("b", 100);
  EXPECT_EQ(a.call<&Counter::add_via>(b, 5).get(5s), 1050);
  EXPECT_EQ(a.call<&Counter::get>().get(5s), 1);
  EXPECT_EQ(b.call<&Counter::get>().get(5s), 105);
  a.call<&Counter::touch_via>(b).get(5s);  // Task<void>
}

TEST_F(ActorTest, ActorHandlesNothingElseWhileItsCoroutineWaits) {
  auto a = proc.spawn<Counter>("a", 0);
  auto b = proc.spawn<Counter>("b", 0);
  b.send<&Counter::sleep_ms>(200);  // b is busy: a's add_via waits for it
  auto via = a.call<&Counter::add_via>(b, 1);
  auto get = a.call<&Counter::get>();  // queued behind add_via
  EXPECT_EQ(get.get(5s), 1);           // so it sees add_via's increment
  EXPECT_EQ(via.get(5s), 10);
}

TEST_F(ActorTest, RefsTravelInsideMessages) {
  auto a = proc.spawn<Counter>("a", 0);
  auto b = proc.spawn<Counter>("b", 7);
  auto r = wire::decode<ActorRef<Counter>>(wire::encode(b));
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->id(), b.id());
  EXPECT_EQ(a.call<&Counter::add_via>(*r, 1).get(5s), 80);
}

TEST_F(ActorTest, PartsAreNotCopied) {
  auto c = proc.spawn<Counter>("c");
  Blob blob{wire::Part::copy_of(std::string(1 << 20, 'z')), "note"};
  Blob back = c.call<&Counter::echo_blob>(blob).get(5s);
  EXPECT_EQ(back.note, "note");
  EXPECT_EQ(back.data.data(), blob.data.data());  // same bytes, in this proc
  EXPECT_EQ(back.data.size(), std::size_t{1} << 20);
}

TEST_F(ActorTest, PortsCarryStreamsOfValues) {
  auto c = proc.spawn<Counter>("c", 10);
  auto [ref, rx] = open_port<int>();
  c.send<&Counter::report_to>(ref, 5);
  for (int i = 0; i < 5; ++i) EXPECT_EQ(rx.recv(5s), 10 + i);
  EXPECT_FALSE(rx.try_recv().has_value());
  EXPECT_THROW(rx.recv(50ms), TimeoutError);
}

TEST_F(ActorTest, OncePortTakesOneValue) {
  auto c = proc.spawn<Counter>("c");
  auto [once, future] = open_once_port<std::string>();
  c.send<&Counter::reply_once>(once);
  EXPECT_EQ(future.get(5s), c.id().to_string());
  EXPECT_THROW(future.get(), CallError);  // taken already
}

TEST_F(ActorTest, OwnThreadActorsRunOffTheIoThread) {
  auto io = proc.spawn<Counter>("io", 3);
  auto w = proc.spawn<Worker>("worker");
  auto w2 = proc.spawn<Worker>("worker2");
  std::string io_thread = io.call<&Counter::where>().get(5s);
  std::string w_thread = w.call<&Worker::where>().get(5s);
  EXPECT_NE(io_thread, w_thread);
  EXPECT_NE(w_thread, w2.call<&Worker::where>().get(5s));
  EXPECT_EQ(w_thread, w.call<&Worker::where>().get(5s));
  EXPECT_EQ(w.call<&Worker::ask>(io).get(5s), 3);  // resumes on its own thread
  // While the worker crunches, the I/O thread's actors still answer.
  auto busy = w.call<&Worker::crunch>(200'000'000);
  EXPECT_EQ(io.call<&Counter::get>().get(5s), 3);
  busy.get(60s);
}

TEST_F(ActorTest, GetWithTimeoutAndWaitAny) {
  auto c = proc.spawn<Counter>("c");
  c.send<&Counter::sleep_ms>(1000);
  auto slow = c.call<&Counter::get>();
  EXPECT_THROW(slow.get(20ms), TimeoutError);
  std::vector<Future<int>> fs;
  fs.push_back(c.call<&Counter::add>(1));
  fs.push_back(c.call<&Counter::add>(2));
  auto first = wait_any(fs, 5s);
  ASSERT_TRUE(first.has_value());
  EXPECT_TRUE(wait_all(fs, 5s));
  EXPECT_EQ(fs[0].get(), 1);
  EXPECT_EQ(fs[1].get(), 3);
  EXPECT_EQ(slow.get(5s), 0);
}

TEST(ProcTest, IdsHaveTextForms) {
  Proc proc(test_options());
  ProcScope scope(proc);
  auto c = proc.spawn<Counter>("counter");
  auto parsed = ActorId::parse(c.id().to_string());
  ASSERT_TRUE(parsed.ok()) << parsed.error().to_string();
  EXPECT_EQ(*parsed, c.id());
  auto [port, rx] = open_port<int>();
  auto p = PortId::parse(port.id().to_string());
  ASSERT_TRUE(p.ok());
  EXPECT_EQ(*p, port.id());
  EXPECT_FALSE(ActorId::parse("nonsense").ok());
  EXPECT_FALSE(ActorId::parse("unix:@x/a[b]").ok());
  EXPECT_FALSE(PortId::parse("unix:@x#").ok());
  EXPECT_THROW(proc.spawn<Counter>("bad/name"), CallError);
}

TEST(ProcTest, TwoProcsTalkOverEveryTransport) {
  const std::vector<std::string> listens = {
      "", "unix:/tmp/sceptre-actor-test-" + std::to_string(::getpid()) + ".sock", "tcp:127.0.0.1:0"};
  for (const std::string& listen : listens) {
    Proc a(test_options());
    Proc b(test_options(listen));
    ActorRef<Counter> remote;
    {
      ProcScope in(b);
      remote = b.spawn<Counter>("remote", 1);
    }
    ProcScope in(a);
    auto local = a.spawn<Counter>("local", 0);
    EXPECT_EQ(remote.call<&Counter::add>(1).get(10s), 2) << listen;
    EXPECT_EQ(remote.call<&Counter::proc_id>().get(10s), b.id().to_string());
    EXPECT_EQ(local.call<&Counter::add_via>(remote, 2).get(10s), 40);
    // Spawning in the other proc from a message.
    auto spawned = a.spawn_on<Counter>(b.id(), "spawned", 41).get(10s);
    EXPECT_EQ(spawned.id().proc, b.id());
    EXPECT_EQ(spawned.call<&Counter::add>(1).get(10s), 42);
    Blob blob{wire::Part::copy_of(std::string(3 << 20, 'q')), "big"};
    Blob back = remote.call<&Counter::echo_blob>(blob).get(10s);
    EXPECT_EQ(back.data, blob.data);
  }
}

}  // namespace
}  // namespace sceptre::testing
