// The runtime's logger (spdlog): one logger named "sceptre" writing to stderr. The level comes
// from SCEPTRE_LOG (trace, debug, info, warn, error, off; default info). Private to the
// implementation: public headers do not include spdlog.
#pragma once

#include <spdlog/spdlog.h>

namespace sceptre {

spdlog::logger& log();

}  // namespace sceptre
