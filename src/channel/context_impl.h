// Context::Impl: one asio::io_context run by one thread. Private to the channel layer.
#pragma once

#include <asio/executor_work_guard.hpp>
#include <asio/io_context.hpp>
#include <chrono>
#include <thread>

#include "sceptre/channel/context.h"

namespace sceptre::channel {

struct Context::Impl {
  explicit Impl(std::chrono::microseconds poll);
  ~Impl();

  // Runs `fn` on the I/O thread and waits for it; runs it inline when already there.
  template <class Fn>
  void run_sync(Fn&& fn);

  // The thread's loop: handle what is ready, poll for `poll`, then sleep until an event.
  void run();

  const std::chrono::microseconds poll;
  asio::io_context io{1};
  asio::executor_work_guard<asio::io_context::executor_type> work{io.get_executor()};
  std::thread thread;
};

}  // namespace sceptre::channel

#include <asio/post.hpp>
#include <future>

template <class Fn>
void sceptre::channel::Context::Impl::run_sync(Fn&& fn) {
  if (io.get_executor().running_in_this_thread()) {
    fn();
    return;
  }
  std::promise<void> done;
  asio::post(io, [&] {
    fn();
    done.set_value();
  });
  done.get_future().wait();
}
