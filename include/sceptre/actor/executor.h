// Executor: where an actor's code runs. Either the proc's I/O thread (the default: no thread
// hop between the socket and the handler) or a thread of the actor's own (compute-heavy actors).
//
// current_executor() is the executor of the actor whose code runs on this thread, or null on
// a thread that runs no actor (the controller's main thread). A coroutine awaiting a Future
// resumes on the executor it suspended on, so an actor's state is only ever touched from its
// own executor.
#pragma once

#include <functional>

namespace sceptre {

class Executor {
 public:
  virtual ~Executor() = default;
  // Runs `fn` later on this executor's thread, never inline. Any thread.
  virtual void post(std::function<void()> fn) = 0;
};

Executor* current_executor();

namespace detail {
// Sets current_executor() for the scope of a handler; restores the previous value.
class ExecutorScope {
 public:
  explicit ExecutorScope(Executor* executor);
  ~ExecutorScope();
  ExecutorScope(const ExecutorScope&) = delete;
  ExecutorScope& operator=(const ExecutorScope&) = delete;

 private:
  Executor* previous_;
};
}  // namespace detail

}  // namespace sceptre
