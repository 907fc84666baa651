// Context: the I/O thread that runs channels. Every Tx and Rx belongs to one Context, and
// their handlers (message handler, undelivered handler) run on its thread, one at a time.
//
// Waiting: after it has handled anything, the thread keeps polling its sockets for a while
// (at most ContextOptions::poll_before_sleep) before it sleeps in epoll_wait, yielding the CPU
// between polls (sched_yield) so that a peer or a worker on the same core runs first. A
// message that arrives meanwhile is picked up without a wake-up: on a VM a wake-up across
// cores costs tens of microseconds. The window adapts to the traffic: it shrinks to nothing
// while events are further apart than the largest window (polling would not catch them) and
// grows back while they come closer. The cost is CPU time: a thread that handles a message at
// least every window never sleeps. An idle Context does not poll.
//
// A Context must outlive the Tx and Rx made with it. Destroying it stops its thread.
#pragma once

#include <chrono>
#include <memory>
#include <optional>

namespace sceptre::channel {

struct ContextOptions {
  // The longest the I/O thread polls after an event before it sleeps; zero sleeps at once.
  // Unset: Config::load()'s io_poll_us (SCEPTRE_IO_POLL_US, or SCEPTRE_CONFIG as a controller
  // hands it to its procs), or Config's default if the configuration is bad.
  std::optional<std::chrono::microseconds> poll_before_sleep;
};

class Context {
 public:
  explicit Context(ContextOptions options = {});
  ~Context();
  Context(const Context&) = delete;
  Context& operator=(const Context&) = delete;

  // True when called from this Context's I/O thread.
  bool in_io_thread() const;
  // The polling window this Context resolved from its options and the configuration.
  std::chrono::microseconds poll_before_sleep() const;

  struct Impl;
  Impl& impl() { return *impl_; }

 private:
  std::unique_ptr<Impl> impl_;
};

}  // namespace sceptre::channel
