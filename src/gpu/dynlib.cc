#include "gpu/dynlib.h"

#include <dlfcn.h>
#include <link.h>

#include <mutex>

namespace sceptre::gpu {

Result<DynLib> DynLib::open(const std::vector<std::string>& names) {
  // One open at a time: the loader orders concurrent dlopens with a lock of its own, which
  // ThreadSanitizer does not see, and the link map read below is written by the loading one.
  static std::mutex mu;
  std::lock_guard lock(mu);
  std::string tried;
  for (const auto& name : names) {
    // RTLD_LOCAL: the vendor's symbols must not resolve anybody else's (a fake and a real
    // library, or libtorch's own CUDA runtime, could otherwise meet).
    void* h = ::dlopen(name.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (!h) {
      const char* why = ::dlerror();
      tried += (tried.empty() ? "" : "; ") + std::string(why ? why : name + ": not found");
      continue;
    }
    std::string path = name;
    link_map* map = nullptr;
    if (::dlinfo(h, RTLD_DI_LINKMAP, &map) == 0 && map && map->l_name && *map->l_name) path = map->l_name;
    return DynLib(h, std::move(path));
  }
  return Error(Code::kUnavailable, tried);
}

void* DynLib::find(const char* symbol) const { return ::dlsym(handle_, symbol); }

Error DynLib::missing(const char* symbol) const {
  return Error(Code::kUnavailable, path_ + " does not export " + symbol);
}

}  // namespace sceptre::gpu
