#pragma once

#include <optional>
#include <string>

#include "sceptre/actor/endpoint.h"

namespace sceptre::detail {

// The factory registered under `key`, if this binary has one.
std::optional<FactoryEntry> find_factory(const std::string& key);

}  // namespace sceptre::detail
