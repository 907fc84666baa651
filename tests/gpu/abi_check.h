// same_abi<F, G>: whether function types F and G can be called through each other on this ABI —
// as many parameters, and each parameter (and the result) alike in size, pointer-ness,
// floating-point-ness and, behind a pointer, const-ness. The backends' own declarations of the
// vendor functions (src/gpu/*/..._api.h) are checked with it against the vendor's headers, which
// name the types differently (an enum for an int, a typedef'd struct pointer for ours).
#pragma once

#include <cstddef>
#include <type_traits>

namespace sceptre::gpu::abi {

template <class A, class B>
constexpr bool alike() {
  if constexpr (std::is_void_v<A> || std::is_void_v<B>) {
    return std::is_void_v<A> == std::is_void_v<B>;
  } else if constexpr (std::is_pointer_v<A> != std::is_pointer_v<B>) {
    return false;
  } else if constexpr (std::is_pointer_v<A>) {
    using PA = std::remove_pointer_t<A>;
    using PB = std::remove_pointer_t<B>;
    return std::is_const_v<PA> == std::is_const_v<PB> && std::is_pointer_v<PA> == std::is_pointer_v<PB> &&
           std::is_void_v<PA> == std::is_void_v<PB>;
  } else {
    return sizeof(A) == sizeof(B) && std::is_floating_point_v<A> == std::is_floating_point_v<B>;
  }
}

template <class F, class G>
struct same : std::false_type {};
template <class R, class... A, class S, class... B>
  requires(sizeof...(A) == sizeof...(B))
struct same<R(A...), S(B...)> : std::bool_constant<alike<R, S>() && (alike<A, B>() && ...)> {};

template <class F, class G>
inline constexpr bool same_abi = same<F, G>::value;

}  // namespace sceptre::gpu::abi
