// The factories spawn_on() registers (one per actor type and constructor signature), looked up
// by key when a spawn message arrives.
#include <mutex>
#include <unordered_map>

#include "actor/registry.h"

namespace sceptre::detail {
namespace {

struct Registry {
  std::mutex mu;
  std::unordered_map<std::string, FactoryEntry> entries;
};

Registry& registry() {
  static Registry r;  // built on first use: registrations run during static initialisation
  return r;
}

}  // namespace

bool register_factory(const std::string& key, FactoryEntry entry) {
  auto& r = registry();
  std::lock_guard lock(r.mu);
  r.entries.emplace(key, entry);
  return true;
}

std::optional<FactoryEntry> find_factory(const std::string& key) {
  auto& r = registry();
  std::lock_guard lock(r.mu);
  auto it = r.entries.find(key);
  if (it == r.entries.end()) return std::nullopt;
  return it->second;
}

}  // namespace sceptre::detail
