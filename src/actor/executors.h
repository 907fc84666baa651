// The two executors actors run on: the proc's I/O thread (shared by default) and a thread of an
// actor's own (kOwnThread). Both set current_executor() and the current proc for their thread
// once, so a coroutine resumed there — outside any handler — still finds both.
#pragma once

#include <asio/executor_work_guard.hpp>
#include <asio/io_context.hpp>
#include <asio/post.hpp>
#include <memory>
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

class ThreadExecutor final : public Executor {
 public:
  ThreadExecutor(Proc* proc, std::string name);
  // Joins the thread once its queue is empty; from the thread itself (the last reference to
  // its actor dropped there) it detaches instead.
  ~ThreadExecutor() override;
  void post(std::function<void()> fn) override { asio::post(state_->io, std::move(fn)); }

 private:
  struct State {
    asio::io_context io{1};
    asio::executor_work_guard<asio::io_context::executor_type> work{io.get_executor()};
  };
  // Shared with the thread, which may outlive this object when it detaches.
  std::shared_ptr<State> state_ = std::make_shared<State>();
  std::thread thread_;
};

}  // namespace detail
}  // namespace sceptre
