#include "sceptre/core/result.h"

namespace sceptre::detail {

void die_on_error(const Error& error, const char* what) {
  std::fprintf(stderr, "sceptre: %s: %s\n", what, error.to_string().c_str());
  std::abort();
}

}  // namespace sceptre::detail
