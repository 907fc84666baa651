#include "sceptre/core/error.h"

#include <array>

namespace sceptre {

std::string_view code_name(Code code) {
  static constexpr std::array<std::string_view, 17> kNames = {
      "OK",        "CANCELLED",          "UNKNOWN",   "INVALID_ARGUMENT", "DEADLINE_EXCEEDED",
      "NOT_FOUND", "ALREADY_EXISTS",     "PERMISSION_DENIED", "RESOURCE_EXHAUSTED",
      "FAILED_PRECONDITION", "ABORTED",  "OUT_OF_RANGE", "UNIMPLEMENTED", "INTERNAL",
      "UNAVAILABLE", "DATA_LOSS",        "UNAUTHENTICATED"};
  auto index = static_cast<std::size_t>(code);
  if (index < kNames.size()) return kNames[index];
  return "CODE(?)";
}

Error& Error::with_context(std::string what) & {
  context_.insert(context_.begin(), std::move(what));
  return *this;
}

Error&& Error::with_context(std::string what) && {
  context_.insert(context_.begin(), std::move(what));
  return std::move(*this);
}

std::string Error::to_string() const {
  std::string out(code_name(code_));
  out += ": ";
  out += message_;
  if (!context_.empty()) {
    out += " [";
    for (std::size_t i = 0; i < context_.size(); ++i) {
      if (i) out += "; ";
      out += context_[i];
    }
    out += "]";
  }
  return out;
}

}  // namespace sceptre
