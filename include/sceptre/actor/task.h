// Task<T>: the return type of an endpoint written as a coroutine, and of coroutines it calls.
//
//   sceptre::Task<int> Trainer::step(int64_t n) {
//     auto w = co_await peer_.call<&Peer::weights>();   // awaits another actor's reply
//     co_return compute(w);
//   }
//
// A Task starts when it is awaited (or, for an endpoint, when the runtime runs it) and runs
// on its actor's executor throughout. The actor handles no other message until the endpoint's
// Task finishes: one message at a time holds for coroutine endpoints too, so the actor's state
// needs no locks. (An actor that awaits a call back into itself therefore waits for ever:
// don't.) An exception thrown inside the Task reaches whoever awaits it.
//
// GCC 12 note: GCC 12 may destroy a non-trivial temporary inside a co_await expression twice
// (a compiler bug), so build non-trivial arguments in named locals first:
//   Ball ball{n, part};  auto back = co_await peer.call<&Peer::ping>(ball);   // fine
//   auto back = co_await peer.call<&Peer::ping>(Ball{n, part});               // may corrupt memory
#pragma once

#include <coroutine>
#include <exception>
#include <functional>
#include <optional>
#include <type_traits>
#include <utility>

#include "sceptre/core/result.h"

namespace sceptre {

template <class T = void>
class Task;

namespace detail {

struct TaskPromiseBase {
  std::coroutine_handle<> continuation;
  // Set instead of a continuation for a Task the runtime runs detached.
  std::function<void()> on_done;
  std::exception_ptr error;

  std::suspend_always initial_suspend() noexcept { return {}; }
  struct FinalAwaiter {
    bool await_ready() noexcept { return false; }
    template <class P>
    std::coroutine_handle<> await_suspend(std::coroutine_handle<P> h) noexcept {
      auto& p = h.promise();
      if (p.continuation) return p.continuation;
      if (p.on_done) {
        auto done = std::move(p.on_done);
        done();  // may destroy this coroutine's frame: touch nothing after it
      }
      return std::noop_coroutine();
    }
    void await_resume() noexcept {}
  };
  FinalAwaiter final_suspend() noexcept { return {}; }
  void unhandled_exception() { error = std::current_exception(); }
};

template <class T>
struct TaskPromise : TaskPromiseBase {
  std::optional<T> value;
  Task<T> get_return_object();
  template <class V>
  void return_value(V&& v) { value.emplace(std::forward<V>(v)); }
  T take() {
    if (error) std::rethrow_exception(error);
    return std::move(*value);
  }
};

template <>
struct TaskPromise<void> : TaskPromiseBase {
  Task<void> get_return_object();
  void return_void() {}
  void take() {
    if (error) std::rethrow_exception(error);
  }
};

}  // namespace detail

template <class T>
class [[nodiscard]] Task {
 public:
  using promise_type = detail::TaskPromise<T>;
  using Handle = std::coroutine_handle<promise_type>;
  using value_type = T;

  Task() = default;
  explicit Task(Handle h) : h_(h) {}
  Task(Task&& other) noexcept : h_(std::exchange(other.h_, {})) {}
  Task& operator=(Task&& other) noexcept {
    if (this != &other) {
      reset();
      h_ = std::exchange(other.h_, {});
    }
    return *this;
  }
  ~Task() { reset(); }

  bool await_ready() const noexcept { return false; }
  std::coroutine_handle<> await_suspend(std::coroutine_handle<> awaiting) noexcept {
    h_.promise().continuation = awaiting;
    return h_;
  }
  T await_resume() { return h_.promise().take(); }

  // Runtime: starts the Task without an awaiting coroutine; `done` gets its outcome (a
  // function that returns the value or throws) when it finishes, and the frame is freed after.
  void start_detached(std::function<void(std::function<T()>)> done) && {
    Handle h = std::exchange(h_, {});
    h.promise().on_done = [h, done = std::move(done)]() mutable {
      done([h]() -> T { return h.promise().take(); });
      h.destroy();
    };
    h.resume();
  }

 private:
  void reset() {
    if (h_) h_.destroy();
    h_ = {};
  }
  Handle h_;
};

template <class T>
Task<T> detail::TaskPromise<T>::get_return_object() {
  return Task<T>(std::coroutine_handle<TaskPromise<T>>::from_promise(*this));
}

inline Task<void> detail::TaskPromise<void>::get_return_object() {
  return Task<void>(std::coroutine_handle<TaskPromise<void>>::from_promise(*this));
}

}  // namespace sceptre
