#include "core/log.h"

#include <spdlog/sinks/stdout_color_sinks.h>

#include <cstdlib>

namespace sceptre {

spdlog::logger& log() {
  static std::shared_ptr<spdlog::logger> logger = [] {
    auto l = spdlog::stderr_color_mt("sceptre");
    const char* level = std::getenv("SCEPTRE_LOG");
    l->set_level(level ? spdlog::level::from_str(level) : spdlog::level::info);
    l->set_pattern("[%Y-%m-%d %H:%M:%S.%e] [%n] [%l] [pid %P] %v");
    return l;
  }();
  return *logger;
}

}  // namespace sceptre
