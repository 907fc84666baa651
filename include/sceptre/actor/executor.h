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
// True while an actor's handler runs on this thread. Completions arriving outside any handler
// (on an executor's own loop, e.g. from a socket) may run actor code inline instead of
// posting it; inside a handler they never do, so one actor's code never nests in another's.
bool inside_actor_handler();

// The actor whose handler runs on this thread (opaque), and a scope that makes a coroutine
// resumed later count as that actor's handler again.
void* current_actor_context();
class ActorContextScope {
 public:
  explicit ActorContextScope(void* context);
  ~ActorContextScope();
  ActorContextScope(const ActorContextScope&) = delete;
  ActorContextScope& operator=(const ActorContextScope&) = delete;

 private:
  void* previous_;
};

}  // namespace detail

}  // namespace sceptre
