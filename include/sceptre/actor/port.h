// Ports: typed mailboxes that are not actors — where replies, streams of values and
// notifications go.
//
//   auto [ref, rx] = sceptre::open_port<int>();     // ref: PortRef<int>, sendable anywhere
//   worker.send<&Worker::report_to>(ref);            // ...someone sends values to it...
//   int v = rx.recv(5s);                             // ...and they arrive here, in order
//
//   auto [once, future] = sceptre::open_once_port<Weights>();   // exactly one value
//
// A PortRef may be copied and sent inside messages to any proc; send() works from any thread
// of any proc. Values from one sender arrive in order. A PortReceiver closes its port when
// destroyed; values sent to a closed port are dropped with a log line at the receiving proc.
// A call's reply is just a once port whose receiver is the call's Future.
#pragma once

#include <chrono>
#include <condition_variable>
#include <deque>
#include <exception>
#include <memory>
#include <mutex>
#include <optional>
#include <utility>

#include "sceptre/actor/detail/runtime.h"
#include "sceptre/actor/future.h"

namespace sceptre {

template <class T>
class PortRef {
 public:
  PortRef() = default;
  explicit PortRef(PortId id) : id_(std::move(id)) {}
  const PortId& id() const { return id_; }

  void send(const T& value) const {
    wire::Message msg = detail::begin_port_message(id_, true);
    wire::encode_into(msg, value);
    detail::send_to_port(id_, std::move(msg));
  }

  bool operator==(const PortRef&) const = default;
  template <class Archive>
  void serialize(Archive& ar) { ar(id_); }

 private:
  PortId id_;
};

// A port that takes exactly one value: a second send is dropped at the receiving proc.
template <class T>
class OncePortRef : public PortRef<T> {
 public:
  using PortRef<T>::PortRef;
};

// The receiving end of open_port(): values in arrival order. Move-only; closes the port when
// destroyed. recv() may be called from any one thread at a time.
template <class T>
class PortReceiver {
  struct Queue {
    std::mutex mu;
    std::condition_variable cv;
    std::deque<detail::PortDelivery> items;
  };

 public:
  PortReceiver(PortId id, std::shared_ptr<Queue> queue) : id_(std::move(id)), queue_(std::move(queue)) {}
  PortReceiver(PortReceiver&&) noexcept = default;
  PortReceiver& operator=(PortReceiver&&) noexcept = default;
  ~PortReceiver() {
    if (queue_) detail::close_port(id_);
  }

  const PortId& id() const { return id_; }

  // The next value; TimeoutError when none came within `timeout`; a value of the wrong type or
  // a failure sent to the port is thrown as CallError.
  T recv(std::chrono::nanoseconds timeout) {
    std::unique_lock lock(queue_->mu);
    if (!queue_->cv.wait_for(lock, timeout, [&] { return !queue_->items.empty(); })) {
      detail::throw_timeout(timeout);
    }
    return pop(lock);
  }
  std::optional<T> try_recv() {
    std::unique_lock lock(queue_->mu);
    if (queue_->items.empty()) return std::nullopt;
    return pop(lock);
  }

  // Used by open_port().
  static std::pair<PortRef<T>, PortReceiver<T>> open() {
    auto queue = std::make_shared<Queue>();
    PortId id = detail::open_port(
        [queue](detail::PortDelivery&& d) {
          {
            std::lock_guard lock(queue->mu);
            queue->items.push_back(std::move(d));
          }
          queue->cv.notify_one();
        },
        false);
    return {PortRef<T>(id), PortReceiver<T>(id, std::move(queue))};
  }

 private:
  T pop(std::unique_lock<std::mutex>& lock) {
    detail::PortDelivery d = std::move(queue_->items.front());
    queue_->items.pop_front();
    lock.unlock();
    if (!d.ok) detail::delivery_failure(d).raise();
    auto value = detail::delivery_value<T>(d);
    if (!value) throw CallError(std::move(value).error());
    return std::move(*value);
  }

  PortId id_;
  std::shared_ptr<Queue> queue_;  // shared with the port's sink, which fills it
};

template <class T>
std::pair<PortRef<T>, PortReceiver<T>> open_port() {
  return PortReceiver<T>::open();
}

template <class T>
std::pair<OncePortRef<T>, Future<T>> open_once_port() {
  auto state = std::make_shared<detail::FutureState<T>>();
  PortId id = detail::open_port(
      [state](detail::PortDelivery&& d) { detail::complete_from(*state, std::move(d)); }, true);
  return {OncePortRef<T>(id), Future<T>(std::move(state))};
}

}  // namespace sceptre
