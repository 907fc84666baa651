// ActorMesh<A>: many actors of one type, spawned over a ProcMesh, addressed as one
// n-dimensional mesh, and talked to with adverbs:
//
//   auto workers = procs.spawn<Worker>("worker", 0.1f);       // one per proc: extent {gpus=4}
//   ValueMesh<float> losses = workers.call<&Worker::step>(batch).get();
//   float total = workers.sum<&Worker::step>(batch).get();      // reduced inside the tree
//   workers.slice("gpus", 0).broadcast<&Worker::reset>();       // fire and forget
//   float one = workers.choose<&Worker::step>(batch).get();     // the least busy member
//   auto s = workers.stream<&Worker::step>(batch);              // replies as they come
//   while (auto r = s.next(10s)) use(r->first, r->second);
//
// Every adverb is a cast (see detail/cast.h): the message goes down a tree of fan-out
// Config::cast_fanout through the procs, so the sender sends O(fan-out) messages whatever the
// size of the mesh, and replies (or their reduction) come back up the same tree. Messages from
// one sender to one member keep their order across every adverb and every view of the mesh;
// a direct ActorRef call to a member travels another path and is not ordered with casts.
//
// A member that fails a call (its endpoint throws, or it cannot be reached) fails the whole
// call's Future with that member's error (the lowest failing rank); a stream throws it when its
// turn comes. A member whose proc fails (see supervision.h) fails every call in flight to it at
// once with SupervisionError, and later calls to views that include it. Inside a handler,
// cast_point() tells a member where the caller's view put it.
#pragma once

#include <chrono>
#include <deque>
#include <mutex>
#include <condition_variable>
#include <optional>
#include <utility>

#include "sceptre/actor/actor_ref.h"
#include "sceptre/actor/future.h"
#include "sceptre/mesh/detail/cast.h"
#include "sceptre/mesh/extent.h"
#include "sceptre/mesh/view.h"

namespace sceptre {

// Where the cast being handled on this thread put the receiving actor: its point in the view
// the sender cast to. nullopt for a direct call (or outside a handler).
std::optional<Point> cast_point();

// The values of a call, one per member, indexed by point or rank.
template <class R>
class ValueMesh {
 public:
  ValueMesh() = default;
  ValueMesh(Extent extent, std::vector<R> values) : extent_(std::move(extent)), values_(std::move(values)) {}

  const Extent& extent() const { return extent_; }
  std::size_t size() const { return values_.size(); }
  const R& at(std::size_t rank) const { return values_.at(rank); }
  const R& operator[](const Point& p) const { return values_.at(p.rank()); }
  const std::vector<R>& values() const { return values_; }

  // Iterates (point, value) pairs in rank order.
  class iterator {
   public:
    iterator(const ValueMesh* m, std::size_t i) : m_(m), i_(i) {}
    std::pair<Point, const R&> operator*() const { return {m_->extent_.point(i_), m_->values_[i_]}; }
    iterator& operator++() { return ++i_, *this; }
    bool operator==(const iterator& o) const { return i_ == o.i_; }
   private:
    const ValueMesh* m_;
    std::size_t i_;
  };
  iterator begin() const { return iterator(this, 0); }
  iterator end() const { return iterator(this, values_.size()); }

 private:
  Extent extent_;
  std::vector<R> values_;
};

// Replies in the order they arrive. next() may be called from one thread at a time.
template <class R>
class Stream {
  struct Shared {
    std::mutex mu;
    std::condition_variable cv;
    std::deque<detail::CastItem> items;
  };

 public:
  // The next reply as (point, value); nullopt once every member has answered. TimeoutError
  // when none came within `timeout`; a member that failed throws its error in its turn.
  std::optional<std::pair<Point, R>> next(std::chrono::nanoseconds timeout) {
    std::unique_lock lock(shared_->mu);
    if (remaining_ == 0) return std::nullopt;
    if (!shared_->cv.wait_for(lock, timeout, [&] { return !shared_->items.empty(); })) {
      detail::throw_timeout(timeout);
    }
    detail::CastItem item = std::move(shared_->items.front());
    shared_->items.pop_front();
    lock.unlock();
    --remaining_;
    if (item.failure) item.failure->raise();
    auto value = detail::decode_item<R>(item);
    if (!value) throw CallError(std::move(value).error());
    return std::pair<Point, R>{extent_.point(item.rank), std::move(*value)};
  }
  std::size_t remaining() const { return remaining_; }

 private:
  template <class>
  friend class ActorMesh;
  Stream(Extent extent, std::size_t n) : extent_(std::move(extent)), remaining_(n) {}
  std::shared_ptr<Shared> shared_ = std::make_shared<Shared>();
  Extent extent_;
  std::size_t remaining_;
  Future<detail::CastReply> done_;
};

namespace detail {

// Stops the members of `view` (see ActorMesh::stop).
void stop_members(const MeshView& view);

// The lowest-ranked failure of a reply, if any.
const CastItem* first_failure(const CastReply& reply);

// Completes `out` from `in` through `fn(CastReply&&)`, which returns the value or throws.
template <class T, class Fn>
Future<T> then_reply(Future<CastReply> in, Fn fn) {
  auto out = std::make_shared<FutureState<T>>();
  auto src = in.state();
  auto finish = [out, src, fn = std::move(fn)]() mutable {
    try {
      CastReply r = src->take();
      if (const CastItem* f = first_failure(r)) return (void)out->set_failure(*f->failure);
      out->set_value(fn(std::move(r)));
    } catch (...) {
      out->set_exception(std::current_exception());
    }
  };
  if (!src->on_complete(finish)) finish();
  return Future<T>(std::move(out));
}

struct MinOp {
  template <class T>
  T operator()(T a, T b) const { return b < a ? b : a; }
};
struct MaxOp {
  template <class T>
  T operator()(T a, T b) const { return a < b ? b : a; }
};

}  // namespace detail

template <class A>
class ActorMesh {
  template <auto M>
  using Reply = typename detail::ReplyOf<typename detail::MemberTraits<decltype(M)>::Return>::type;
  template <auto M>
  using Value = std::conditional_t<std::is_void_v<Reply<M>>, Unit, Reply<M>>;

 public:
  ActorMesh() = default;
  explicit ActorMesh(detail::MeshView view) : view_(std::move(view)) {}

  const std::string& name() const { return view_.name(); }
  const Extent& extent() const { return view_.extent(); }
  std::size_t size() const { return view_.size(); }
  ActorRef<A> at(std::size_t rank) const { return ActorRef<A>(view_.actor(rank)); }
  ActorRef<A> at(const Point& p) const { return at(p.rank()); }

  ActorMesh slice(std::string_view dim, std::size_t index) const { return ActorMesh(view_.slice(dim, index)); }
  ActorMesh slice(std::string_view dim, Range range) const { return ActorMesh(view_.slice(dim, range)); }
  ActorMesh select(std::string_view selection, std::uint64_t seed = 0) const {
    return ActorMesh(view_.select(selection, seed));
  }

  // Every member's reply.
  template <auto M, class... Args>
  Future<ValueMesh<Value<M>>> call(Args&&... args) const {
    Extent extent = view_.extent();
    return detail::then_reply<ValueMesh<Value<M>>>(
        start<M>(detail::CastMode::kCollect, {}, std::forward<Args>(args)...),
        [extent = std::move(extent)](detail::CastReply&& r) {
          std::vector<Value<M>> values(extent.num_ranks());
          for (const auto& item : r.items) {
            auto v = detail::decode_item<Value<M>>(item);
            if (!v) throw CallError(std::move(v).error());
            values.at(item.rank) = std::move(*v);
          }
          return ValueMesh<Value<M>>(extent, std::move(values));
        });
  }

  // The reply of the only member (CallError kFailedPrecondition when the view has another size).
  template <auto M, class... Args>
  Future<Value<M>> call_one(Args&&... args) const {
    if (size() != 1) {
      throw CallError(Error(Code::kFailedPrecondition, "call_one on a view of " + std::to_string(size()) +
                                                           " members of '" + name() + "'"));
    }
    return first_value<M>(start<M>(detail::CastMode::kCollect, {}, std::forward<Args>(args)...));
  }

  // One member: the one with the fewest requests outstanding from choose().
  template <auto M, class... Args>
  Future<Value<M>> choose(Args&&... args) const {
    std::size_t rank = view_.least_loaded();
    std::function<void()> release = view_.hold(rank);
    Future<detail::CastReply> reply;
    try {
      reply = start_on<M>(view_.only(rank), detail::CastMode::kCollect, {}, std::forward<Args>(args)...);
    } catch (...) {
      release();
      throw;
    }
    if (!reply.state()->on_complete(release)) release();
    return first_value<M>(std::move(reply));
  }

  // Replies as they arrive.
  template <auto M, class... Args>
  Stream<Value<M>> stream(Args&&... args) const {
    Stream<Value<M>> s(view_.extent(), size());
    auto shared = s.shared_;
    s.done_ = view_.cast(
        detail::endpoint_name<A, M>(), encode<M>(std::forward<Args>(args)...), detail::CastMode::kStream, {},
        [shared](detail::CastReply&& r) {
          {
            std::lock_guard lock(shared->mu);
            for (auto& i : r.items) shared->items.push_back(std::move(i));
            for (auto& f : r.failures) shared->items.push_back(std::move(f));
          }
          shared->cv.notify_one();
        });
    return s;
  }

  // Fire and forget: an endpoint that throws fails its actor (see Actor).
  template <auto M, class... Args>
  void broadcast(Args&&... args) const {
    (void)start<M>(detail::CastMode::kBroadcast, {}, std::forward<Args>(args)...);
  }

  // Reductions inside the tree: the caller receives one value. `Op` is a default-constructible
  // binary function object R(R, R), associative and commutative (members answer in any order).
  template <auto M, class Op, class... Args>
  Future<Value<M>> reduce(Args&&... args) const {
    using Registration = detail::ReducerRegistration<Value<M>, Op>;
    (void)Registration::registered;
    if (size() == 0) {
      throw CallError(Error(Code::kFailedPrecondition, "a reduction over an empty view of '" + name() + "'"));
    }
    return detail::then_reply<Value<M>>(
        start<M>(detail::CastMode::kReduce, Registration::key(), std::forward<Args>(args)...),
        [](detail::CastReply&& r) {
          if (!r.reduced) throw CallError(Error(Code::kInternal, "a reduction came back without a value"));
          auto v = detail::decode_item<Value<M>>(*r.reduced);
          if (!v) throw CallError(std::move(v).error());
          return std::move(*v);
        });
  }
  template <auto M, class... Args>
  Future<Value<M>> sum(Args&&... args) const {
    return reduce<M, std::plus<>>(std::forward<Args>(args)...);
  }
  template <auto M, class... Args>
  Future<Value<M>> min(Args&&... args) const {
    return reduce<M, detail::MinOp>(std::forward<Args>(args)...);
  }
  template <auto M, class... Args>
  Future<Value<M>> max(Args&&... args) const {
    return reduce<M, detail::MaxOp>(std::forward<Args>(args)...);
  }

  // Stops the members of this view (a slice stops only its own): each handles what it was sent
  // before, runs its cleanup and is gone; their procs keep running. Returns once all have
  // stopped, gracefully or — after Config::stop_timeout — by force. Later calls to them fail.
  void stop() const { detail::stop_members(view_); }

  const detail::MeshView& view() const { return view_; }

 private:
  template <auto M, class... Vs>
  static wire::Message encode(Vs&&... args) {
    return wire::encode(detail::endpoint_args<A, M>(std::forward<Vs>(args)...));
  }
  template <auto M, class... Vs>
  Future<detail::CastReply> start(detail::CastMode mode, std::string reducer, Vs&&... args) const {
    return start_on<M>(view_, mode, std::move(reducer), std::forward<Vs>(args)...);
  }
  template <auto M, class... Vs>
  static Future<detail::CastReply> start_on(const detail::MeshView& v, detail::CastMode mode, std::string reducer,
                                            Vs&&... args) {
    return v.cast(detail::endpoint_name<A, M>(), encode<M>(std::forward<Vs>(args)...), mode, std::move(reducer));
  }
  template <auto M>
  static Future<Value<M>> first_value(Future<detail::CastReply> reply) {
    return detail::then_reply<Value<M>>(std::move(reply), [](detail::CastReply&& r) {
      if (r.items.empty()) throw CallError(Error(Code::kInternal, "a call came back without a reply"));
      auto v = detail::decode_item<Value<M>>(r.items.front());
      if (!v) throw CallError(std::move(v).error());
      return std::move(*v);
    });
  }

  detail::MeshView view_;
};

}  // namespace sceptre
