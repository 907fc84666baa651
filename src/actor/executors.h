// The two executors actors run on: the proc's I/O thread (shared by default) and a thread of an
// actor's own (kOwnThread). Both set current_executor() and the current proc for their thread
// once, so a coroutine resumed there — outside any handler — still finds both.
#pragma once

#include <asio/executor_work_guard.hpp>
#include <asio/io_context.hpp>
#include <asio/post.hpp>
#include <chrono>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include "sceptre/actor/executor.h"

namespace sceptre {
class Proc;

namespace detail {

// Marks the calling thread as running `executor` for `proc`, for the thread's lifetime.
void bind_thread(Executor* executor, Proc* proc);

class IoExecutor final : public Executor {
 public:
  explicit IoExecutor(asio::io_context& io) : io_(io) {}
  void post(std::function<void()> fn) override { asio::post(io_, std::move(fn)); }

 private:
  asio::io_context& io_;
};

// A thread of an actor's own, and the executor that runs on it.
class ThreadExecutor {
 public:
  ThreadExecutor(Proc* proc, std::string name);
  // Joins the thread once its queue is empty, logging every kJoinTimeout while a handler that
  // does not return holds it; from the thread itself (the last reference to its actor dropped
  // there) it detaches at once.
  ~ThreadExecutor();
  ThreadExecutor(const ThreadExecutor&) = delete;
  ThreadExecutor& operator=(const ThreadExecutor&) = delete;
  Executor* executor() const { return state_.get(); }

 private:
  static constexpr std::chrono::seconds kJoinTimeout{5};
  // The executor the thread binds to: it lives as long as the thread, even a detached one.
  struct State final : Executor {
    void post(std::function<void()> fn) override { asio::post(io, std::move(fn)); }
    asio::io_context io{1};
    asio::executor_work_guard<asio::io_context::executor_type> work{io.get_executor()};
    std::mutex mu;
    std::condition_variable cv;
    bool finished = false;  // the thread has left run()
  };
  // Shared with the thread, which may outlive this object when it detaches.
  std::shared_ptr<State> state_ = std::make_shared<State>();
  std::thread thread_;
};

}  // namespace detail
}  // namespace sceptre
