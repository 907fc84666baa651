// Endpoint registration: one line after an actor class names the type and its endpoints.
//
//   class Counter : public sceptre::Actor {
//    public:
//     int add(int n);                        // an ordinary member function
//     sceptre::Task<int> fetch(std::string key);  // or a coroutine
//   };
//   SCEPTRE_ACTOR(Counter, add, fetch);
//
// Write it in the namespace of the class (it defines a function found by argument-dependent
// lookup). Endpoints must be public, non-overloaded, and take their parameters by value or by
// const reference; their parameter and return types must be encodable by the wire layer.
// Registration gives each proc a table from endpoint name to a function that decodes the
// arguments, calls the member and encodes the result; ActorRef uses the same list at compile
// time to check that a call names a registered endpoint with the right argument types.
#pragma once

#include <cstddef>
#include <memory>
#include <span>
#include <string>
#include <tuple>
#include <typeinfo>
#include <unordered_map>
#include <utility>
#include <variant>

#include "sceptre/actor/actor.h"
#include "sceptre/actor/errors.h"
#include "sceptre/actor/task.h"
#include "sceptre/wire/codec.h"

namespace sceptre::detail {

template <class M>
struct MemberTraits;
#define SCEPTRE_DETAIL_MEMBER_TRAITS(QUALIFIERS)                     \
  template <class C, class R, class... A>                             \
  struct MemberTraits<R (C::*)(A...) QUALIFIERS> {                    \
    using Class = C;                                                  \
    using Return = R;                                                 \
    using Args = std::tuple<std::decay_t<A>...>;                      \
  };
SCEPTRE_DETAIL_MEMBER_TRAITS()
SCEPTRE_DETAIL_MEMBER_TRAITS(const)
SCEPTRE_DETAIL_MEMBER_TRAITS(noexcept)
SCEPTRE_DETAIL_MEMBER_TRAITS(const noexcept)
#undef SCEPTRE_DETAIL_MEMBER_TRAITS

// What a caller receives: R, or T for an endpoint returning Task<T>.
template <class R>
struct ReplyOf {
  using type = R;
  static constexpr bool kTask = false;
};
template <class R>
struct ReplyOf<Task<R>> {
  using type = R;
  static constexpr bool kTask = true;
};

template <class P>
struct EndpointDef {
  const char* name;
  P ptr;
};
template <class Tuple>
struct ActorInfo {
  const char* name;
  Tuple endpoints;
};

template <class A>
constexpr auto actor_info() {
  return sceptre_actor_info(static_cast<const A*>(nullptr));
}
template <class A>
concept RegisteredActor = std::is_base_of_v<Actor, A> && requires {
  sceptre_actor_info(static_cast<const A*>(nullptr));
};

// Whether M is the I-th registered endpoint of A. Compared as template arguments, not with ==
// on member pointers: GCC does not constant-fold that comparison under UBSan.
template <auto>
struct EndpointTag {};
template <class A, auto M, std::size_t I>
constexpr bool is_endpoint() {
  return std::is_same_v<EndpointTag<M>, EndpointTag<std::get<I>(actor_info<A>().endpoints).ptr>>;
}

// The registered name of endpoint M of A, or nullptr when M is not registered.
template <class A, auto M>
consteval const char* endpoint_name() {
  const char* found = nullptr;
  [&]<std::size_t... I>(std::index_sequence<I...>) {
    ((found = (!found && is_endpoint<A, M, I>()) ? std::get<I>(actor_info<A>().endpoints).name : found),
     ...);
  }(std::make_index_sequence<std::tuple_size_v<decltype(actor_info<A>().endpoints)>>{});
  return found;
}

// Arguments that do not decode as the endpoint's parameters: the caller's error, not the actor's.
class BadArguments : public CallError {
 public:
  using CallError::CallError;
};

// What running an endpoint gives: the encoded reply now, or a Task that will give it. A
// synchronous endpoint appends its result to `reply` (which may already hold the reply's
// envelope header) and returns it; a Task's result is encoded on its own.
using Invocation = std::variant<wire::Message, Task<wire::Message>>;
using Invoker = Invocation (*)(Actor&, std::span<const std::byte>, std::span<const wire::Part>,
                               wire::Message&& reply);

struct EndpointTable {
  std::string type_name;
  std::unordered_map<std::string, Invoker> endpoints;
};

template <class A, auto M>
Task<wire::Message> run_endpoint_task(A& self, typename MemberTraits<decltype(M)>::Args args) {
  using R = typename ReplyOf<typename MemberTraits<decltype(M)>::Return>::type;
  auto call = [&](auto&... a) { return (self.*M)(std::move(a)...); };
  if constexpr (std::is_void_v<R>) {
    co_await std::apply(call, args);
    co_return wire::Message{};
  } else {
    R result = co_await std::apply(call, args);
    co_return wire::encode(result);
  }
}

template <class Args>
Args decode_arguments(std::span<const std::byte> body, std::span<const wire::Part> parts,
                      const char* what) {
  auto args = wire::decode<Args>(body, parts);
  if (!args) {
    Error e = std::move(args).error();
    throw BadArguments(Error(Code::kInvalidArgument,
                             std::string("arguments do not match ") + what + ": " + e.message()));
  }
  return std::move(*args);
}

template <class A, auto M>
Invocation invoke(Actor& base, std::span<const std::byte> body, std::span<const wire::Part> parts,
                  wire::Message&& reply) {
  using Traits = MemberTraits<decltype(M)>;
  using R = typename Traits::Return;
  auto args = decode_arguments<typename Traits::Args>(body, parts, endpoint_name<A, M>());
  A& self = static_cast<A&>(base);
  if constexpr (ReplyOf<R>::kTask) {
    return run_endpoint_task<A, M>(self, std::move(args));
  } else {
    auto call = [&](auto&... a) -> R { return (self.*M)(std::move(a)...); };
    if constexpr (std::is_void_v<R>) {
      std::apply(call, args);
    } else {
      wire::encode_into(reply, std::apply(call, args));
    }
    return std::move(reply);
  }
}

// Never destroyed: threads that outlive static destruction (a proc's watchdog, when user code
// calls exit() in a handler) may still read an endpoint's name from it.
template <class A>
const EndpointTable& endpoint_table() {
  static const EndpointTable& table = *new EndpointTable([] {
    EndpointTable t;
    t.type_name = actor_info<A>().name;
    [&]<std::size_t... I>(std::index_sequence<I...>) {
      (t.endpoints.emplace(std::get<I>(actor_info<A>().endpoints).name,
                           &invoke<A, std::get<I>(actor_info<A>().endpoints).ptr>),
       ...);
    }(std::make_index_sequence<std::tuple_size_v<decltype(actor_info<A>().endpoints)>>{});
    return t;
  }());
  return table;
}

// How a proc creates an actor named in a spawn message: constructor arguments decoded from
// the message. One factory per (actor type, constructor argument types) that some spawn_on()
// in the program names; the same binary in every proc means every proc knows them all.
using Factory = std::unique_ptr<Actor> (*)(std::span<const std::byte>, std::span<const wire::Part>);
struct FactoryEntry {
  Factory make;
  const EndpointTable& (*table)();
  bool own_thread;
};
bool register_factory(const std::string& key, FactoryEntry entry);

template <class A, class... Args>
struct FactoryRegistration {
  static std::unique_ptr<Actor> make(std::span<const std::byte> body, std::span<const wire::Part> parts) {
    auto args = decode_arguments<std::tuple<Args...>>(body, parts, actor_info<A>().name);
    return std::apply([](auto&... a) { return std::make_unique<A>(std::move(a)...); }, args);
  }
  static const std::string& key() {
    static const std::string k =
        std::string(actor_info<A>().name) + "/" + typeid(std::tuple<Args...>).name();
    return k;
  }
  static inline const bool registered =
      register_factory(key(), FactoryEntry{&make, &endpoint_table<A>, A::kOwnThread});
};

}  // namespace sceptre::detail

// --- SCEPTRE_ACTOR(Type, endpoint...) -----------------------------------------------------------
#define SCEPTRE_DETAIL_PARENS ()
#define SCEPTRE_DETAIL_EXPAND(...) SCEPTRE_DETAIL_EXPAND3(SCEPTRE_DETAIL_EXPAND3(SCEPTRE_DETAIL_EXPAND3(__VA_ARGS__)))
#define SCEPTRE_DETAIL_EXPAND3(...) SCEPTRE_DETAIL_EXPAND2(SCEPTRE_DETAIL_EXPAND2(SCEPTRE_DETAIL_EXPAND2(__VA_ARGS__)))
#define SCEPTRE_DETAIL_EXPAND2(...) SCEPTRE_DETAIL_EXPAND1(SCEPTRE_DETAIL_EXPAND1(SCEPTRE_DETAIL_EXPAND1(__VA_ARGS__)))
#define SCEPTRE_DETAIL_EXPAND1(...) __VA_ARGS__
#define SCEPTRE_DETAIL_FOR_EACH(macro, type, ...) \
  __VA_OPT__(SCEPTRE_DETAIL_EXPAND(SCEPTRE_DETAIL_FOR_EACH_STEP(macro, type, __VA_ARGS__)))
#define SCEPTRE_DETAIL_FOR_EACH_STEP(macro, type, first, ...) \
  macro(type, first) __VA_OPT__(, SCEPTRE_DETAIL_FOR_EACH_AGAIN SCEPTRE_DETAIL_PARENS(macro, type, __VA_ARGS__))
#define SCEPTRE_DETAIL_FOR_EACH_AGAIN() SCEPTRE_DETAIL_FOR_EACH_STEP
#define SCEPTRE_DETAIL_ENDPOINT(type, member) ::sceptre::detail::EndpointDef{#member, &type::member}

#define SCEPTRE_ACTOR(Type, ...)                                                         \
  [[maybe_unused]] constexpr auto sceptre_actor_info(const Type*) {                      \
    return ::sceptre::detail::ActorInfo{                                                 \
        #Type, std::make_tuple(SCEPTRE_DETAIL_FOR_EACH(SCEPTRE_DETAIL_ENDPOINT, Type, __VA_ARGS__))}; \
  }                                                                                      \
  static_assert(true, "SCEPTRE_ACTOR ends with a semicolon")
