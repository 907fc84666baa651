// Lifecycle inside a proc: statuses, supervision chains, graceful and forced stop, cleanup.
#include <gtest/gtest.h>

#include <future>

#include "actor/test_actors.h"

namespace sceptre::testing {
namespace {

class SupervisionTest : public ::testing::Test {
 protected:
  SupervisionTest() {
    proc.on_supervision([this](const SupervisionEvent& e) {
      std::lock_guard lock(mu);
      roots.push_back(e);
    });
  }
  std::vector<SupervisionEvent> root_events() {
    std::lock_guard lock(mu);
    return roots;
  }
  // Waits until `pred` holds (generous bound: this is about behaviour, not speed).
  template <class Pred>
  bool eventually(Pred pred) {
    for (int i = 0; i < 1000; ++i) {
      if (pred()) return true;
      std::this_thread::sleep_for(10ms);
    }
    return false;
  }
  std::string unique(const std::string& base) { return base + std::to_string(counter++); }

  // Declared before the proc: its shutdown may still report to them.
  std::mutex mu;
  std::vector<SupervisionEvent> roots;
  Proc proc{test_options()};
  ProcScope scope{proc};
  static inline std::atomic<int> counter{0};
};

TEST_F(SupervisionTest, FireAndForgetExceptionFailsTheActor) {
  auto c = proc.spawn<Counter>(unique("c"));
  EXPECT_EQ(c.call<&Counter::get>().get(5s), 0);  // on_start has run
  EXPECT_EQ(proc.status(c.id()), ActorStatus::kRunning);
  c.send<&Counter::boom_async>(std::string("bad batch"));
  ASSERT_TRUE(eventually([&] { return proc.status(c.id()) == ActorStatus::kFailed; }));
  ASSERT_TRUE(eventually([&] { return root_events().size() == 1; }));
  auto e = root_events()[0];
  EXPECT_EQ(e.actor, c.id());
  EXPECT_EQ(e.endpoint, "boom_async");
  EXPECT_EQ(e.exception_type, "std::logic_error");
  EXPECT_EQ(e.message, "bad batch");
  EXPECT_TRUE(Journal::get().has("cleanup " + c.id().name));
  // Later calls get a precise error.
  try {
    c.call<&Counter::get>().get(5s);
    FAIL();
  } catch (const SupervisionError& err) {
    EXPECT_EQ(err.code(), Code::kAborted);
    EXPECT_NE(std::string(err.what()).find("failed"), std::string::npos) << err.what();
    EXPECT_NE(std::string(err.what()).find("bad batch"), std::string::npos) << err.what();
  }
}

TEST_F(SupervisionTest, CallsQueuedBehindAFailureFailToo) {
  auto c = proc.spawn<Counter>(unique("c"));
  c.send<&Counter::sleep_ms>(100);
  c.send<&Counter::boom_async>(std::string("x"));
  auto queued = c.call<&Counter::get>();
  EXPECT_THROW(queued.get(5s), SupervisionError);
}

TEST_F(SupervisionTest, ParentHandlesChildFailure) {
  auto parent = proc.spawn<Node>(unique("parent"), true);
  auto child = parent.call<&Node::child>(unique("child"), false).get(5s);
  child.send<&Node::crash>(std::string("gpu fell off"));
  ASSERT_TRUE(eventually([&] { return parent.call<&Node::handled>().get(5s) == 1; }));
  EXPECT_EQ(proc.status(child.id()), ActorStatus::kFailed);
  EXPECT_EQ(proc.status(parent.id()), ActorStatus::kRunning);
  EXPECT_TRUE(Journal::get().has(parent.id().name + " saw " + child.id().name + ": gpu fell off"));
  EXPECT_TRUE(root_events().empty());
}

TEST_F(SupervisionTest, UnhandledFailureTravelsUpTheChain) {
  auto top = proc.spawn<Node>(unique("top"), false);
  auto mid = top.call<&Node::child>(unique("mid"), false).get(5s);
  auto leaf = mid.call<&Node::child>(unique("leaf"), false).get(5s);
  auto sibling = top.call<&Node::child>(unique("sibling"), true).get(5s);
  leaf.send<&Node::crash>(std::string("nan in loss"));
  ASSERT_TRUE(eventually([&] { return root_events().size() == 1; }));
  auto e = root_events()[0];
  EXPECT_EQ(e.actor, leaf.id());  // the root cause is named, not the last to fail
  EXPECT_EQ(e.endpoint, "crash");
  EXPECT_EQ(e.message, "nan in loss");
  ASSERT_EQ(e.via.size(), 2u);
  EXPECT_EQ(e.via[0], mid.id());
  EXPECT_EQ(e.via[1], top.id());
  EXPECT_EQ(proc.status(mid.id()), ActorStatus::kFailed);
  EXPECT_EQ(proc.status(top.id()), ActorStatus::kFailed);
  // The failed top stops its other children.
  ASSERT_TRUE(eventually([&] { return proc.status(sibling.id()) == ActorStatus::kStopped; }));
  EXPECT_TRUE(Journal::get().has("cleanup " + sibling.id().name));
}

TEST_F(SupervisionTest, CallerOfAThrowingEndpointGetsItAndNothingFails) {
  auto parent = proc.spawn<Node>(unique("parent"), false);
  auto child = parent.call<&Node::child>(unique("child"), false).get(5s);
  EXPECT_THROW(child.call<&Node::crash_with_reply>(std::string("x")).get(5s), RemoteError);
  EXPECT_EQ(proc.status(child.id()), ActorStatus::kRunning);
  EXPECT_EQ(proc.status(parent.id()), ActorStatus::kRunning);
}

TEST_F(SupervisionTest, GracefulStopHandlesQueuedMessagesStopsChildrenAndCleansUp) {
  auto parent = proc.spawn<Node>(unique("parent"), false);
  auto child = parent.call<&Node::child>(unique("child"), false).get(5s);
  auto grandchild = child.call<&Node::child>(unique("grandchild"), false).get(5s);
  parent.send<&Node::slow>(50);
  auto queued = parent.call<&Node::handled>();
  EXPECT_TRUE(proc.stop(parent, 5s));
  EXPECT_EQ(queued.get(5s), 0);  // queued before the stop: handled
  EXPECT_EQ(proc.status(parent.id()), ActorStatus::kStopped);
  EXPECT_EQ(proc.status(child.id()), ActorStatus::kStopped);
  EXPECT_EQ(proc.status(grandchild.id()), ActorStatus::kStopped);
  // Children clean up before their parent.
  auto lines = Journal::get().lines();
  auto at = [&](const std::string& l) { return std::find(lines.begin(), lines.end(), l) - lines.begin(); };
  EXPECT_LT(at("cleanup " + grandchild.id().name), at("cleanup " + child.id().name));
  EXPECT_LT(at("cleanup " + child.id().name), at("cleanup " + parent.id().name));
  EXPECT_LT(at("cleanup " + parent.id().name), static_cast<long>(lines.size()));
  EXPECT_THROW(parent.call<&Node::handled>().get(5s), SupervisionError);
  EXPECT_TRUE(root_events().empty());
}

TEST_F(SupervisionTest, StopSelf) {
  auto n = proc.spawn<Node>(unique("n"), false);
  n.send<&Node::stop_me>();
  ASSERT_TRUE(eventually([&] { return proc.status(n.id()) == ActorStatus::kStopped; }));
  EXPECT_TRUE(Journal::get().has("cleanup " + n.id().name));
}

TEST_F(SupervisionTest, StopIsForcedAfterItsTimeout) {
  auto w = proc.spawn<Counter>(unique("stuck"));
  w.send<&Counter::sleep_ms>(1500);  // a handler that does not finish in time
  auto queued = w.call<&Counter::get>();
  std::this_thread::sleep_for(50ms);
  auto t0 = std::chrono::steady_clock::now();
  EXPECT_FALSE(proc.stop(w, 200ms));
  EXPECT_LT(std::chrono::steady_clock::now() - t0, 5s);  // did not wait for the handler
  EXPECT_EQ(proc.status(w.id()), ActorStatus::kStopped);
  EXPECT_THROW(queued.get(5s), SupervisionError);
  // cleanup runs once the stuck handler returns.
  ASSERT_TRUE(eventually([&] { return Journal::get().has("cleanup " + w.id().name); }));
}

TEST_F(SupervisionTest, StopUnknownActorIsAnError) {
  ActorId ghost{proc.id(), "ghost", 99999};
  EXPECT_THROW(proc.stop(ghost, 1s), CallError);
  EXPECT_FALSE(proc.status(ghost).has_value());
}

}  // namespace
}  // namespace sceptre::testing
