// Context: how it resolves its polling window, and that an idle I/O thread sleeps.
#include <pthread.h>
#include <time.h>

#include <gtest/gtest.h>

#include <cstdlib>
#include <future>
#include <thread>

#include "channel/context_impl.h"
#include "sceptre/channel/context.h"
#include "sceptre/core/config.h"

namespace sceptre::channel {
namespace {

using namespace std::chrono_literals;

const std::chrono::microseconds kConfigDefault(Config().io_poll_us);

// Sets (or unsets, for nullptr) an environment variable for one scope.
class ScopedEnv {
 public:
  ScopedEnv(const char* name, const char* value) : name_(name) {
    if (const char* old = std::getenv(name)) old_ = old;
    if (value) {
      ::setenv(name, value, 1);
    } else {
      ::unsetenv(name);
    }
  }
  ~ScopedEnv() {
    if (old_) {
      ::setenv(name_, old_->c_str(), 1);
    } else {
      ::unsetenv(name_);
    }
  }

 private:
  const char* name_;
  std::optional<std::string> old_;
};

TEST(Context, ThePollingWindowComesFromOptionsThenEnvironmentThenDefault) {
  {
    ScopedEnv env("SCEPTRE_IO_POLL_US", "123");
    EXPECT_EQ(Context(ContextOptions{0us}).poll_before_sleep(), 0us);
    EXPECT_EQ(Context(ContextOptions{7us}).poll_before_sleep(), 7us);
    EXPECT_EQ(Context().poll_before_sleep(), 123us);
  }
  {
    ScopedEnv env("SCEPTRE_IO_POLL_US", nullptr);
    EXPECT_EQ(Context().poll_before_sleep(), kConfigDefault);
    ScopedEnv config("SCEPTRE_CONFIG", R"({"io_poll_us": 9})");  // as a controller hands it on
    EXPECT_EQ(Context().poll_before_sleep(), 9us);
  }
  for (const char* bad : {"fast", "-5", "12us"}) {
    ScopedEnv env("SCEPTRE_IO_POLL_US", bad);
    EXPECT_EQ(Context().poll_before_sleep(), kConfigDefault) << bad;
  }
  EXPECT_EQ(Context(ContextOptions{-3us}).poll_before_sleep(), 0us);
}

// CPU time the Context's I/O thread has used so far.
std::chrono::nanoseconds io_thread_cpu(Context& ctx) {
  clockid_t clock{};
  ctx.impl().run_sync([&] { pthread_getcpuclockid(pthread_self(), &clock); });
  timespec ts{};
  clock_gettime(clock, &ts);
  return std::chrono::seconds(ts.tv_sec) + std::chrono::nanoseconds(ts.tv_nsec);
}

TEST(Context, AnIdleIoThreadSleepsAfterItsPollingWindow) {
  // A window of 20 ms, so that a thread that never stopped polling would stand out clearly.
  for (auto window : {0us, 20'000us}) {
    Context ctx(ContextOptions{window});
    for (int i = 0; i < 10; ++i) {  // some activity, then idleness
      std::promise<void> ran;
      asio::post(ctx.impl().io, [&] { ran.set_value(); });
      ran.get_future().wait();
    }
    auto before = io_thread_cpu(ctx);
    std::this_thread::sleep_for(1s);
    auto used = io_thread_cpu(ctx) - before;
    // Polling costs at most about one window (plus the reading itself); a thread that kept
    // polling would use most of the second, even sharing its core.
    EXPECT_LT(used, 150ms) << "window " << window.count() << " us";
  }
}

TEST(Context, RareEventsStopThePolling) {
  // Events every 20 ms and a 5 ms window: polling after each would use a quarter of the
  // thread's second; each sleep (about 15 ms, far above the window even on a loaded machine)
  // halves the window, so the thread soon stops polling.
  Context ctx(ContextOptions{5'000us});
  auto before = io_thread_cpu(ctx);
  for (int i = 0; i < 50; ++i) {
    std::this_thread::sleep_for(20ms);
    asio::post(ctx.impl().io, [] {});
  }
  auto used = io_thread_cpu(ctx) - before;
  EXPECT_LT(used, 100ms);
}

}  // namespace
}  // namespace sceptre::channel
