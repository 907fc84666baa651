// Errors of every kind reach the sender precisely, and the receiver survives them.
#include <gtest/gtest.h>

#include <future>

#include "actor/test_actors.h"

namespace sceptre::testing {
namespace {

class ErrorsTest : public ::testing::Test {
 protected:
  Proc proc{test_options("", 3s)};  // undeliverable calls fail after 3 s
  ProcScope scope{proc};
};

TEST_F(ErrorsTest, EndpointExceptionReachesTheCallerAndTheActorSurvives) {
  auto c = proc.spawn<Counter>("c", 1);
  try {
    c.call<&Counter::boom>(std::string("index 7")).get(5s);
    FAIL() << "no exception";
  } catch (const RemoteError& e) {
    EXPECT_EQ(e.exception_type(), "std::out_of_range");
    EXPECT_EQ(e.message(), "index 7");
    EXPECT_EQ(e.actor(), c.id().to_string());
    EXPECT_EQ(e.endpoint(), "boom");
  }
  EXPECT_EQ(c.call<&Counter::add>(1).get(5s), 2);
  EXPECT_EQ(proc.status(c.id()), ActorStatus::kRunning);
}

TEST_F(ErrorsTest, ExceptionAfterAnAwaitReachesTheCaller) {
  auto a = proc.spawn<Counter>("a");
  auto b = proc.spawn<Counter>("b");
  EXPECT_THROW(a.call<&Counter::throw_after_await>(b).get(5s), RemoteError);
  EXPECT_EQ(a.call<&Counter::get>().get(5s), 0);
}

TEST_F(ErrorsTest, UnknownActor) {
  auto c = proc.spawn<Counter>("c");
  ActorId ghost = c.id();
  ghost.index += 1000;
  try {
    ActorRef<Counter>(ghost).call<&Counter::get>().get(5s);
    FAIL();
  } catch (const CallError& e) {
    EXPECT_EQ(e.code(), Code::kNotFound);
    EXPECT_NE(std::string(e.what()).find(ghost.to_string()), std::string::npos) << e.what();
  }
  ActorId renamed = c.id();
  renamed.name = "someone-else";
  EXPECT_THROW(ActorRef<Counter>(renamed).call<&Counter::get>().get(5s), CallError);
}

TEST_F(ErrorsTest, UnknownEndpoint) {
  auto c = proc.spawn<Counter>("c");
  try {
    ActorRef<Other>(c.id()).call<&Other::only_here>().get(5s);
    FAIL();
  } catch (const CallError& e) {
    EXPECT_EQ(e.code(), Code::kNotFound);
    EXPECT_NE(std::string(e.what()).find("no endpoint 'only_here'"), std::string::npos) << e.what();
  }
  EXPECT_EQ(c.call<&Counter::add>(1).get(5s), 1);  // unharmed
}

TEST_F(ErrorsTest, WrongArgumentTypes) {
  auto c = proc.spawn<Counter>("c");
  try {
    // Counter::add takes an int; Other::add a string.
    ActorRef<Other>(c.id()).call<&Other::add>(std::string("abc")).get(5s);
    FAIL();
  } catch (const CallError& e) {
    EXPECT_EQ(e.code(), Code::kInvalidArgument);
    EXPECT_NE(std::string(e.what()).find("arguments do not match add"), std::string::npos) << e.what();
  }
  EXPECT_EQ(c.call<&Counter::add>(1).get(5s), 1);
}

TEST_F(ErrorsTest, UndeliverableCallFailsItsFuture) {
  ActorId nowhere{ProcId{"unix:@sceptre-nobody-listens-here"}, "x", 0};
  try {
    ActorRef<Counter>(nowhere).call<&Counter::get>().get(30s);  // the delivery timeout is 3 s
    FAIL();
  } catch (const CallError& e) {
    EXPECT_EQ(e.code(), Code::kUnavailable);
    EXPECT_NE(std::string(e.what()).find("undeliverable"), std::string::npos) << e.what();
  }
  ActorId bad_addr{ProcId{"bogus:address"}, "x", 0};
  EXPECT_THROW(ActorRef<Counter>(bad_addr).call<&Counter::get>().get(5s), CallError);
}

TEST_F(ErrorsTest, UndeliverableSendReachesTheSendersHandler) {
  std::promise<Undeliverable> got;
  proc.on_undeliverable([&](const Undeliverable& u) { got.set_value(u); });
  auto c = proc.spawn<Counter>("c");
  ActorId ghost = c.id();
  ghost.index += 1000;
  ActorRef<Counter>(ghost).send<&Counter::add>(1);
  auto f = got.get_future();
  ASSERT_EQ(f.wait_for(5s), std::future_status::ready);
  Undeliverable u = f.get();
  EXPECT_EQ(u.destination, ghost.to_string());
  EXPECT_EQ(u.endpoint, "add");
  EXPECT_EQ(u.error.code(), Code::kNotFound);
}

TEST_F(ErrorsTest, SpawnOnReportsBadConstructorsAndUnknownProcs) {
  auto ok = proc.spawn_on<Counter>(proc.id(), "made", 3).get(5s);
  EXPECT_EQ(ok.call<&Counter::get>().get(5s), 3);
  EXPECT_THROW(proc.spawn_on<Counter>(proc.id(), "bad/name", 3).get(5s), CallError);
  ProcId nowhere{"unix:@sceptre-nobody-spawns-here"};
  EXPECT_THROW(proc.spawn_on<Counter>(nowhere, "x", 1).get(30s), CallError);
}

}  // namespace
}  // namespace sceptre::testing
