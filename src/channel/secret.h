// The per-job secret: ChannelOptions::secret, else SCEPTRE_SECRET; an error when neither is set.
#pragma once

#include <cstdlib>
#include <string>

#include "sceptre/channel/options.h"
#include "sceptre/core/result.h"

namespace sceptre::channel {

inline Result<std::string> resolve_secret(const ChannelOptions& options) {
  if (!options.secret.empty()) return options.secret;
  if (const char* env = std::getenv("SCEPTRE_SECRET"); env && *env) return std::string(env);
  return Error(Code::kFailedPrecondition,
               "no job secret: set ChannelOptions::secret or the SCEPTRE_SECRET variable");
}

}  // namespace sceptre::channel
