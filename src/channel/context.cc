#include "sceptre/channel/context.h"

#include <sched.h>

#include "channel/context_impl.h"
#include "core/log.h"
#include "sceptre/core/config.h"

namespace sceptre::channel {

namespace {

std::chrono::microseconds resolve_poll(const ContextOptions& options) {
  if (options.poll_before_sleep) return std::max(*options.poll_before_sleep, {});
  auto config = Config::load();
  if (!config.ok()) {
    log().warn("channel I/O thread: {}; polling {} us", config.error().to_string(), Config().io_poll_us);
    return std::chrono::microseconds(Config().io_poll_us);
  }
  return std::chrono::microseconds(config->io_poll_us);
}

}  // namespace

Context::Impl::Impl(std::chrono::microseconds poll) : poll(poll) {
  thread = std::thread([this] {
    for (;;) {
      try {
        run();
        return;
      } catch (const std::exception& e) {
        // A handler threw: a bug in the runtime or in a user handler. Log it and keep the
        // thread alive so the other channels keep working.
        log().error("exception escaped a channel handler: {}", e.what());
      }
    }
  });
}

// Polls adaptively, as KVM polls before it halts a vCPU: each time polling ends without an
// event the thread sleeps, and how long it slept decides the next window. A sleep longer than
// the largest window means polling would not have helped: the window halves (to zero below
// grow_start). A shorter sleep means a longer window would have caught the event: the window
// doubles (from grow_start), up to `poll`. A message stream or a ping-pong keeps its window;
// a thread whose events are rare (a trainer's, between steps) stops polling and so does not
// take CPU time from the work beside it.
void Context::Impl::run() {
  using Clock = std::chrono::steady_clock;
  if (poll.count() == 0) {
    io.run();
    return;
  }
  const std::chrono::microseconds grow_start = std::max(poll / 8, std::chrono::microseconds(1));
  std::chrono::microseconds window = poll;
  while (!io.stopped()) {
    // Sleeps until something is ready and handles it (returns 0 only once stopped).
    Clock::time_point slept_from = Clock::now();
    if (io.run_one() == 0) return;
    Clock::time_point now = Clock::now();
    if (now - slept_from > poll) {
      window /= 2;
      if (window < grow_start) window = {};
    } else {
      window = std::min(poll, std::max(grow_start, window * 2));
    }
    if (window.count() == 0) continue;
    Clock::time_point until = now + window;
    while (!io.stopped()) {
      if (io.poll() > 0) {
        until = Clock::now() + window;
      } else if (Clock::now() >= until) {
        break;
      } else {
        ::sched_yield();  // whatever else wants this core runs first
      }
    }
  }
}

Context::Impl::~Impl() {
  work.reset();
  io.stop();
  if (thread.joinable()) thread.join();
}

Context::Context(ContextOptions options)
    : impl_(std::make_unique<Impl>(resolve_poll(options))) {}
Context::~Context() = default;

bool Context::in_io_thread() const { return impl_->io.get_executor().running_in_this_thread(); }

std::chrono::microseconds Context::poll_before_sleep() const { return impl_->poll; }

}  // namespace sceptre::channel
