// The exceptions a user of the actor API sees. Inside the runtime errors are `Error` values;
// they become these at the edge, in Future::get() and co_await.
//
//   RemoteError      an endpoint threw: the original exception's type and message, the actor
//                    and the endpoint. The actor survives (the caller was waiting).
//   CallError        the call could not be made: unknown actor or endpoint (kNotFound),
//                    arguments that do not decode as the endpoint's (kInvalidArgument), a
//                    message that could not be delivered (kUnavailable), a closed proc.
//   SupervisionError the actor failed or was stopped before it answered.
//   TimeoutError     get(timeout) ran out; the call itself may still complete later.
#pragma once

#include <stdexcept>
#include <string>

#include "sceptre/core/error.h"

namespace sceptre {

class Exception : public std::runtime_error {
 public:
  explicit Exception(Error error);
  const Error& error() const { return error_; }
  Code code() const { return error_.code(); }

 private:
  Error error_;
};

class RemoteError : public Exception {
 public:
  RemoteError(std::string exception_type, std::string message, std::string actor,
              std::string endpoint);
  // The demangled type of what the endpoint threw ("std::out_of_range", "my::BadBatch").
  const std::string& exception_type() const { return exception_type_; }
  // Its what().
  const std::string& message() const { return message_; }
  // The actor's id in text form, and the endpoint's name.
  const std::string& actor() const { return actor_; }
  const std::string& endpoint() const { return endpoint_; }

 private:
  std::string exception_type_, message_, actor_, endpoint_;
};

class CallError : public Exception {
 public:
  using Exception::Exception;
};

class SupervisionError : public Exception {
 public:
  using Exception::Exception;
};

class TimeoutError : public Exception {
 public:
  using Exception::Exception;
};

// Why a call or port failed, as data: it crosses threads and processes, and the thread that
// takes it from a Future makes the exception (raise()).
struct Failure {
  enum Kind : std::uint8_t { kRemote = 0, kCall = 1, kSupervision = 2 };
  std::uint8_t kind = kCall;
  Error error;
  // kRemote: the endpoint's exception, and where it was thrown.
  std::string exception_type, message, actor, endpoint;

  static Failure call(Error e) { return make(kCall, std::move(e)); }
  static Failure supervision(Error e) { return make(kSupervision, std::move(e)); }
  static Failure make(std::uint8_t kind, Error e) {
    Failure f;
    f.kind = kind;
    f.error = std::move(e);
    return f;
  }
  // Throws RemoteError, SupervisionError or CallError.
  [[noreturn]] void raise() const;

  template <class Archive>
  void serialize(Archive& ar) {
    ar(kind, error, exception_type, message, actor, endpoint);
  }
};

// The demangled dynamic type of an exception, for RemoteError and supervision events.
std::string exception_type_name(const std::exception& e);

}  // namespace sceptre
