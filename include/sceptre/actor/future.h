// Future<T>: the reply to a call (or the next value of a once port), completed by the runtime
// on whatever thread the reply arrives on.
//
//   get()          waits and returns the value, or throws what the call failed with
//                  (RemoteError, CallError, SupervisionError)
//   get(timeout)   the same, but throws TimeoutError when the reply has not come in time
//   co_await f     inside an actor's coroutine endpoint: suspends without blocking the thread
//                  and resumes on the actor's executor
//   wait_all / wait_any   several futures at once, each with a timeout
//
// A Future is move-only and its value is taken once: a second get() throws CallError
// (kFailedPrecondition). Blocking get() inside an actor's handler blocks that actor's thread
// (and, on the shared I/O thread, every actor on it): inside actors, co_await instead.
#pragma once

#include <chrono>
#include <condition_variable>
#include <coroutine>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <type_traits>
#include <vector>

#include "sceptre/actor/errors.h"
#include "sceptre/actor/executor.h"

namespace sceptre {

// The stand-in for `void` where a value is needed (Future<void> holds one).
struct Unit {
  template <class Archive>
  void serialize(Archive&) {}
  bool operator==(const Unit&) const = default;
};

namespace detail {

// What every future's state shares: completion, waiting and callbacks; thread-safe.
class FutureStateBase {
 public:
  bool ready() const {
    std::lock_guard lock(mu_);
    return done_;
  }
  // Waits until completion or `timeout`; true when complete.
  bool wait_for(std::chrono::nanoseconds timeout) const {
    std::unique_lock lock(mu_);
    return cv_.wait_for(lock, timeout, [&] { return done_; });
  }
  void wait() const {
    std::unique_lock lock(mu_);
    cv_.wait(lock, [&] { return done_; });
  }
  // Runs `fn` once complete: false (and `fn` not kept) when already complete.
  bool on_complete(std::function<void()> fn) {
    std::lock_guard lock(mu_);
    if (done_) return false;
    callbacks_.push_back(std::move(fn));
    return true;
  }

 protected:
  // Completes under the lock with `store`, then wakes waiters and runs callbacks outside it.
  // A second completion is ignored (false): the first answer wins.
  template <class Store>
  bool complete(Store&& store) {
    std::vector<std::function<void()>> callbacks;
    {
      std::lock_guard lock(mu_);
      if (done_) return false;
      store();
      done_ = true;
      callbacks.swap(callbacks_);
    }
    cv_.notify_all();
    for (auto& fn : callbacks) fn();
    return true;
  }
  mutable std::mutex mu_;
  mutable std::condition_variable cv_;
  bool done_ = false;
  std::vector<std::function<void()>> callbacks_;
};

template <class T>
class FutureState : public FutureStateBase {
 public:
  using Stored = std::conditional_t<std::is_void_v<T>, Unit, T>;
  bool set_value(Stored value) {
    return complete([&] { value_.emplace(std::move(value)); });
  }
  bool set_exception(std::exception_ptr e) {
    return complete([&] { error_ = std::move(e); });
  }
  // Failures from the runtime travel as data, so no exception object is shared across threads.
  bool set_failure(Failure f) {
    return complete([&] { failure_ = std::move(f); });
  }
  // The value (moved out) or the exception, once complete.
  Stored take() {
    std::lock_guard lock(mu_);
    if (failure_) failure_->raise();
    if (error_) std::rethrow_exception(error_);
    if (!value_) throw CallError(Error(Code::kFailedPrecondition, "the future's value was already taken"));
    Stored v = std::move(*value_);
    value_.reset();
    return v;
  }

 private:
  std::optional<Stored> value_;
  std::optional<Failure> failure_;
  std::exception_ptr error_;
};

[[noreturn]] void throw_timeout(std::chrono::nanoseconds timeout);

}  // namespace detail

template <class T>
class Promise;

template <class T>
class Future {
 public:
  using State = detail::FutureState<T>;

  Future() = default;
  explicit Future(std::shared_ptr<State> state) : state_(std::move(state)) {}

  bool valid() const { return state_ != nullptr; }
  bool ready() const { return state_->ready(); }
  bool wait_for(std::chrono::nanoseconds timeout) const { return state_->wait_for(timeout); }

  T get() {
    state_->wait();
    return result();
  }
  T get(std::chrono::nanoseconds timeout) {
    if (!state_->wait_for(timeout)) detail::throw_timeout(timeout);
    return result();
  }

  struct Awaiter {
    std::shared_ptr<State> state;
    std::coroutine_handle<> handle;
    Executor* executor = nullptr;
    void* actor = nullptr;

    explicit Awaiter(std::shared_ptr<State> s) : state(std::move(s)) {}
    bool await_ready() const { return state->ready(); }
    bool await_suspend(std::coroutine_handle<> h) {
      handle = h;
      executor = current_executor();
      actor = detail::current_actor_context();
      // The awaiter lives in the suspended coroutine's frame until it resumes, so the callback
      // needs only its address (small enough for std::function to keep without allocating).
      return state->on_complete([self = this] { self->resume_from_completion(); });
    }
    void resume_from_completion() {
      // Already on the awaiting actor's executor, outside any handler (a reply read from a
      // socket): resume now rather than queue a hop through the executor.
      if (executor && (executor != current_executor() || detail::inside_actor_handler())) {
        executor->post([h = handle, a = actor] {
          detail::ActorContextScope scope(a);
          h.resume();
        });
      } else {
        detail::ActorContextScope scope(actor);
        handle.resume();
      }
    }
    T await_resume() {
      if constexpr (std::is_void_v<T>) {
        state->take();
      } else {
        return state->take();
      }
    }
  };
  Awaiter operator co_await() && { return Awaiter(state_); }
  Awaiter operator co_await() & { return Awaiter(state_); }

  // Runtime and tests: the shared state, for completion callbacks.
  const std::shared_ptr<State>& state() const { return state_; }

 private:
  T result() {
    if constexpr (std::is_void_v<T>) {
      state_->take();
    } else {
      return state_->take();
    }
  }
  std::shared_ptr<State> state_;
};

// The completing side of a Future. Completing twice is ignored; the first answer wins.
template <class T>
class Promise {
 public:
  Promise() : state_(std::make_shared<detail::FutureState<T>>()) {}
  Future<T> future() const { return Future<T>(state_); }
  template <class... V>
  void set_value(V&&... v) {
    state_->set_value(typename detail::FutureState<T>::Stored{std::forward<V>(v)...});
  }
  void set_exception(std::exception_ptr e) { state_->set_exception(std::move(e)); }

 private:
  std::shared_ptr<detail::FutureState<T>> state_;
};

// Waits until every future in `futures` is complete, or `timeout`: true when all are.
template <class T>
bool wait_all(const std::vector<Future<T>>& futures, std::chrono::nanoseconds timeout) {
  auto deadline = std::chrono::steady_clock::now() + timeout;
  for (const auto& f : futures) {
    auto left = deadline - std::chrono::steady_clock::now();
    if (!f.wait_for(std::max<std::chrono::nanoseconds>(left, std::chrono::nanoseconds(0)))) return false;
  }
  return true;
}

// Waits until one of `futures` is complete, or `timeout`: its index, or nullopt on timeout.
template <class T>
std::optional<std::size_t> wait_any(const std::vector<Future<T>>& futures,
                                    std::chrono::nanoseconds timeout) {
  struct Signal {
    std::mutex mu;
    std::condition_variable cv;
    bool fired = false;
  };
  auto signal = std::make_shared<Signal>();
  auto first_ready = [&]() -> std::optional<std::size_t> {
    for (std::size_t i = 0; i < futures.size(); ++i) {
      if (futures[i].ready()) return i;
    }
    return std::nullopt;
  };
  for (const auto& f : futures) {
    bool pending = f.state()->on_complete([signal] {
      std::lock_guard lock(signal->mu);
      signal->fired = true;
      signal->cv.notify_all();
    });
    if (!pending) return first_ready();
  }
  std::unique_lock lock(signal->mu);
  signal->cv.wait_for(lock, timeout, [&] { return signal->fired; });
  return first_ready();
}

}  // namespace sceptre
