// Result<T>: a value or an Error. The runtime returns it instead of throwing; the user-facing
// API turns an Error into an exception at the edge. Project-owned rather than std::expected so
// that code reached by the clang-built fuzzers compiles (libstdc++ 12 hides std::expected from
// clang 14).
//
// Reading the value of a Result that holds an error is a bug and aborts loudly with the error.
#pragma once

#include <cstdio>
#include <cstdlib>
#include <optional>
#include <type_traits>
#include <utility>
#include <variant>

#include "sceptre/core/error.h"

namespace sceptre {

namespace detail {
[[noreturn]] void die_on_error(const Error& error, const char* what);
}  // namespace detail

template <class T>
class [[nodiscard]] Result {
  static_assert(!std::is_same_v<std::decay_t<T>, Error>, "Result<Error> is ambiguous");

 public:
  Result(T value) : v_(std::in_place_index<0>, std::move(value)) {}  // NOLINT: implicit by design
  Result(Error error) : v_(std::in_place_index<1>, std::move(error)) {}  // NOLINT

  bool ok() const { return v_.index() == 0; }
  explicit operator bool() const { return ok(); }

  T& value() & { check(); return std::get<0>(v_); }
  const T& value() const& { check(); return std::get<0>(v_); }
  T&& value() && { check(); return std::get<0>(std::move(v_)); }
  T* operator->() { return &value(); }
  const T* operator->() const { return &value(); }
  T& operator*() & { return value(); }
  T&& operator*() && { return std::move(*this).value(); }

  const Error& error() const& { return std::get<1>(v_); }
  Error&& error() && { return std::get<1>(std::move(v_)); }

 private:
  void check() const {
    if (!ok()) detail::die_on_error(std::get<1>(v_), "value() of a Result holding an error");
  }
  std::variant<T, Error> v_;
};

// Result<void>: success or an Error. `Status` reads better at call sites.
template <>
class [[nodiscard]] Result<void> {
 public:
  Result() = default;
  Result(Error error) : error_(std::move(error)) {}  // NOLINT: implicit by design

  bool ok() const { return !error_.has_value(); }
  explicit operator bool() const { return ok(); }
  const Error& error() const& { return *error_; }
  Error&& error() && { return std::move(*error_); }
  // Aborts with the error if there is one: for calls whose failure is a bug.
  void check() const {
    if (error_) detail::die_on_error(*error_, "unexpected error");
  }

 private:
  std::optional<Error> error_;
};

using Status = Result<void>;

inline Status ok_status() { return Status(); }

}  // namespace sceptre

// Returns the error of `expr` (a Result) from the enclosing function, else yields nothing.
#define SCEPTRE_RETURN_IF_ERROR(expr)              \
  do {                                             \
    auto sceptre_status_ = (expr);                 \
    if (!sceptre_status_.ok()) return std::move(sceptre_status_).error(); \
  } while (0)

// Aborts with file:line and a message when an invariant does not hold.
#define SCEPTRE_CHECK(cond)                                                                   \
  do {                                                                                        \
    if (!(cond)) {                                                                            \
      std::fprintf(stderr, "%s:%d: invariant violated: %s\n", __FILE__, __LINE__, #cond);     \
      std::abort();                                                                           \
    }                                                                                         \
  } while (0)
