// ActorRef<A>: a typed, copyable reference to an actor anywhere — in this proc or another.
// It is only an id, so it can travel inside messages to any proc and be used there.
//
//   Future<int> f = counter.call<&Counter::add>(5);   // typed: a wrong argument does not compile
//   counter.send<&Counter::add>(1);                   // fire and forget
//
// call() returns at once; the Future completes with the reply, or fails with RemoteError (the
// endpoint threw), CallError (no such actor or endpoint, arguments of the wrong type,
// undeliverable) or SupervisionError (the actor failed or stopped first). send() has no
// reply: if the endpoint throws, the actor fails (see Actor); if the message cannot be
// delivered, the sending actor's undeliverable() hook (or, outside actors, the proc's
// undeliverable handler) is told.
//
// Both act through the current proc (Proc::current()). Any thread.
#pragma once

#include <optional>
#include <tuple>
#include <utility>

#include "sceptre/actor/detail/runtime.h"
#include "sceptre/actor/endpoint.h"
#include "sceptre/actor/future.h"

namespace sceptre {

namespace detail {
// The argument tuple of endpoint M of actor A, built from `args`, with the checks that make a
// wrong endpoint or argument list a compile error that says what is wrong.
template <class A, auto M, class... Vs>
typename MemberTraits<decltype(M)>::Args endpoint_args(Vs&&... args) {
  using Traits = MemberTraits<decltype(M)>;
  static_assert(RegisteredActor<A>, "the actor type has no SCEPTRE_ACTOR(...) line");
  static_assert(std::is_base_of_v<typename Traits::Class, A>, "the endpoint is not a member of this actor");
  static_assert(endpoint_name<A, M>() != nullptr, "the endpoint is not listed in the actor's SCEPTRE_ACTOR(...) line");
  using Params = typename Traits::Args;
  static_assert(std::tuple_size_v<Params> == sizeof...(Vs), "wrong number of arguments for this endpoint");
  return Params(std::forward<Vs>(args)...);
}
}  // namespace detail

template <class A>
class ActorRef {
 public:
  ActorRef() = default;
  explicit ActorRef(ActorId id) : id_(std::move(id)) {}

  const ActorId& id() const { return id_; }

  template <auto M, class... Args>
  auto call(Args&&... args) const {
    using Reply = typename detail::ReplyOf<typename detail::MemberTraits<decltype(M)>::Return>::type;
    auto state = std::make_shared<detail::FutureState<Reply>>();
    PortId port = detail::open_call_port(
        [state](detail::PortDelivery&& d) { detail::complete_from(*state, std::move(d)); }, id_.proc);
    dispatch<M>(std::optional<PortId>(std::move(port)), std::forward<Args>(args)...);
    return Future<Reply>(std::move(state));
  }

  template <auto M, class... Args>
  void send(Args&&... args) const {
    dispatch<M>(std::nullopt, std::forward<Args>(args)...);
  }

  bool operator==(const ActorRef&) const = default;
  template <class Archive>
  void serialize(Archive& ar) { ar(id_); }

 private:
  template <auto M, class... Vs>
  void dispatch(const std::optional<PortId>& reply, Vs&&... args) const {
    auto values = detail::endpoint_args<A, M>(std::forward<Vs>(args)...);
    wire::Message msg = detail::begin_call(id_, detail::endpoint_name<A, M>(), reply);
    wire::encode_into(msg, values);
    detail::send_call(id_, std::move(msg));
  }

  ActorId id_;
};

}  // namespace sceptre
