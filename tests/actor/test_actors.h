// Actor types shared by the actor tests, in-process and in the re-executed peer process (the
// test binary is its own proc image, as a user's program is).
#pragma once

#include <atomic>
#include <chrono>
#include <map>
#include <mutex>
#include <sstream>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>
#include <unistd.h>

#include "sceptre/sceptre.h"

namespace sceptre::testing {

using namespace std::chrono_literals;

inline const std::string kSecret = "actor-test-secret";

// `delivery_timeout` bounds how long an undeliverable call takes to fail: short for the tests
// of that, generous otherwise (a flood of messages under a sanitizer may take many seconds).
inline ProcOptions test_options(std::string listen = "", std::chrono::milliseconds delivery_timeout = 60s) {
  ProcOptions o;
  o.listen = std::move(listen);
  o.channel.secret = kSecret;
  o.channel.delivery_timeout = delivery_timeout;
  o.channel.reconnect_min = 1ms;
  o.channel.reconnect_max = 50ms;
  o.stop_timeout = 2s;
  return o;
}

// What actors did where the test can see it (same process only): cleanups, supervision.
class Journal {
 public:
  static Journal& get() {
    static Journal j;
    return j;
  }
  void add(std::string line) {
    std::lock_guard lock(mu_);
    lines_.push_back(std::move(line));
  }
  std::vector<std::string> lines() {
    std::lock_guard lock(mu_);
    return lines_;
  }
  bool has(const std::string& line) {
    std::lock_guard lock(mu_);
    for (auto& l : lines_) {
      if (l == line) return true;
    }
    return false;
  }

 private:
  std::mutex mu_;
  std::vector<std::string> lines_;
};

inline std::string this_thread_text() {
  std::ostringstream s;
  s << std::this_thread::get_id();
  return s.str();
}

struct Blob {
  wire::Part data;
  std::string note;
  SCEPTRE_FIELDS(data, note)
};

class Counter : public Actor {
 public:
  explicit Counter(int start = 0) : value_(start) {}

  int add(int n) { return value_ += n; }
  int get() const { return value_; }
  // Checks per-sender order: each sender numbers its messages 0, 1, 2, ...
  void record(int sender, int seq) {
    int& last = last_[sender];
    if (seq != last) ++violations_;
    last = seq + 1;
    ++recorded_;
  }
  std::pair<int, int> order_stats() const { return {recorded_, violations_}; }
  int boom(std::string what) { throw std::out_of_range(what); }
  void boom_async(std::string what) { throw std::logic_error(what); }
  std::string echo(const std::string& s) { return s; }
  Blob echo_blob(Blob b) { return b; }
  // Coroutine endpoint awaiting another actor.
  Task<int> add_via(ActorRef<Counter> other, int n) {
    int r = co_await other.call<&Counter::add>(n);
    value_ += 1;
    co_return r * 10;
  }
  Task<void> touch_via(ActorRef<Counter> other) {
    co_await other.call<&Counter::add>(0);
  }
  Task<int> throw_after_await(ActorRef<Counter> other) {
    co_await other.call<&Counter::add>(0);
    throw std::runtime_error("after await");
  }
  std::string where() const { return this_thread_text(); }
  std::string proc_id() const { return proc().id().to_string(); }
  void sleep_ms(int ms) { std::this_thread::sleep_for(std::chrono::milliseconds(ms)); }
  void report_to(PortRef<int> port, int n) {
    for (int i = 0; i < n; ++i) port.send(value_ + i);
  }
  void reply_once(OncePortRef<std::string> port) { port.send(id().to_string()); }
  int pid() const { return static_cast<int>(::getpid()); }

 protected:
  void cleanup() override { Journal::get().add("cleanup " + id().name); }

 private:
  int value_;
  std::map<int, int> last_;
  int recorded_ = 0, violations_ = 0;
};
SCEPTRE_ACTOR(Counter, add, get, record, order_stats, boom, boom_async, echo, echo_blob, add_via,
              touch_via, throw_after_await, where, proc_id, sleep_ms, report_to, reply_once, pid);

// Another type with an endpoint named like one of Counter's but with other parameter types,
// and one Counter does not have: for "wrong type" and "unknown endpoint" errors.
class Other : public Actor {
 public:
  int add(std::string text) { return static_cast<int>(text.size()); }
  int only_here() { return 1; }
};
SCEPTRE_ACTOR(Other, add, only_here);

class Worker : public Actor {
 public:
  static constexpr bool kOwnThread = true;
  std::string where() const { return this_thread_text(); }
  int crunch(int n) {
    long s = 0;
    for (int i = 0; i < n; ++i) s += i % 7;
    return static_cast<int>(s % 1000);
  }
  Task<int> ask(ActorRef<Counter> other) {
    std::string before = this_thread_text();
    int v = co_await other.call<&Counter::get>();
    if (this_thread_text() != before) throw std::runtime_error("resumed on another thread");
    co_return v;
  }
};
SCEPTRE_ACTOR(Worker, where, crunch, ask);

// A node in a supervision tree: spawns children, may crash, handles (or not) child failures.
class Node : public Actor {
 public:
  explicit Node(bool handles) : handles_(handles) {}
  ActorRef<Node> child(std::string name, bool handles) { return spawn<Node>(std::move(name), handles); }
  void crash(std::string why) { throw std::runtime_error(why); }
  int crash_with_reply(std::string why) { throw std::runtime_error(why); }
  int handled() const { return handled_; }
  std::string status_of_self() const { return std::string(status_name(status())); }
  void stop_me() { stop_self(); }
  void slow(int ms) { std::this_thread::sleep_for(std::chrono::milliseconds(ms)); }

 protected:
  bool supervise(const SupervisionEvent& event) override {
    Journal::get().add(id().name + " saw " + event.actor.name + ": " + event.message);
    if (handles_) ++handled_;
    return handles_;
  }
  void cleanup() override { Journal::get().add("cleanup " + id().name); }

 private:
  bool handles_;
  int handled_ = 0;
};
SCEPTRE_ACTOR(Node, child, crash, crash_with_reply, handled, status_of_self, stop_me, slow);

}  // namespace sceptre::testing
