#include "sceptre/actor/errors.h"

#include <cxxabi.h>

#include <cstdlib>
#include <memory>
#include <typeinfo>

namespace sceptre {

Exception::Exception(Error error) : std::runtime_error(error.to_string()), error_(std::move(error)) {}

RemoteError::RemoteError(std::string exception_type, std::string message, std::string actor,
                         std::string endpoint)
    : Exception(Error(Code::kUnknown, "endpoint '" + endpoint + "' of " + actor + " threw " +
                                          exception_type + ": " + message)),
      exception_type_(std::move(exception_type)),
      message_(std::move(message)),
      actor_(std::move(actor)),
      endpoint_(std::move(endpoint)) {}

void Failure::raise() const {
  switch (kind) {
    case kRemote: throw RemoteError(exception_type, message, actor, endpoint);
    case kSupervision: throw SupervisionError(error);
    default: throw CallError(error);
  }
}

std::string exception_type_name(const std::exception& e) {
  const char* mangled = typeid(e).name();
  int status = 0;
  std::unique_ptr<char, void (*)(void*)> name(abi::__cxa_demangle(mangled, nullptr, nullptr, &status),
                                              std::free);
  return status == 0 && name ? std::string(name.get()) : std::string(mangled);
}

}  // namespace sceptre
