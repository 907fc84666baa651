#include "sceptre/wire/codec.h"

namespace sceptre::wire::detail {

Error decode_error(const char* type_name, const std::string& what) {
  return Error(Code::kDataLoss, std::string("cannot decode ") + type_name + ": " + what);
}

}  // namespace sceptre::wire::detail
