// Error: the one error type of sceptre. It can cross a process boundary (the wire layer knows
// how to encode it), so it carries a canonical code and text, never an errno or a pointer.
//
// Codes follow Abseil's canonical set; the ones the runtime uses most:
//   kUnavailable        peer down or link broken; retrying later may work
//   kDeadlineExceeded   a wait or a delivery ran past its limit
//   kAborted / kCancelled   work stopped by a failure elsewhere / by the caller
//   kInvalidArgument    bad input from the caller (a malformed address, say)
//   kFailedPrecondition the system is not in a state that allows the call
//   kDataLoss           bytes that do not decode (a corrupt or hostile frame)
//   kUnauthenticated    a peer that could not prove it knows the job secret
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace sceptre {

enum class Code : std::uint8_t {
  kOk = 0,
  kCancelled = 1,
  kUnknown = 2,
  kInvalidArgument = 3,
  kDeadlineExceeded = 4,
  kNotFound = 5,
  kAlreadyExists = 6,
  kPermissionDenied = 7,
  kResourceExhausted = 8,
  kFailedPrecondition = 9,
  kAborted = 10,
  kOutOfRange = 11,
  kUnimplemented = 12,
  kInternal = 13,
  kUnavailable = 14,
  kDataLoss = 15,
  kUnauthenticated = 16,
};

// The canonical name of a code ("UNAVAILABLE"); "CODE(n)" for values outside the set.
std::string_view code_name(Code code);

class Error {
 public:
  Error() = default;
  Error(Code code, std::string message) : code_(code), message_(std::move(message)) {}

  Code code() const { return code_; }
  const std::string& message() const { return message_; }
  // Outermost first: where the error passed through on its way up ("dial tcp:h:1").
  const std::vector<std::string>& context() const { return context_; }

  // Adds a line of context; returns *this so it reads `return std::move(e).with_context(...)`.
  Error& with_context(std::string what) &;
  Error&& with_context(std::string what) &&;

  // "UNAVAILABLE: connection refused [dial tcp:127.0.0.1:9]" — for logs and exceptions.
  std::string to_string() const;

  bool operator==(const Error&) const = default;

  // Used by the wire layer to encode an Error; fields are in declaration order.
  template <class Archive>
  void serialize(Archive& ar) {
    ar(code_, message_, context_);
  }

 private:
  Code code_ = Code::kUnknown;
  std::string message_;
  std::vector<std::string> context_;
};

}  // namespace sceptre
