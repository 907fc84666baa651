// DynLib: a vendor library opened with dlopen, and its functions looked up by name.
//
// Every GPU backend reaches its vendor's stack through one of these, so one build runs on hosts
// with NVIDIA's driver, AMD's HIP runtime, both or neither. A library that is missing, or lacks a
// symbol the backend needs, is an Error that names it — the backend then reports "not viable".
//
// Threads: open() and bind() may be called from any thread; the handle stays open for the life of
// the process (vendor libraries do not support being unloaded, and a function pointer taken from
// one must stay valid), so a DynLib is a cheap value.
#pragma once

#include <string>
#include <vector>

#include "sceptre/core/result.h"

namespace sceptre::gpu {

class DynLib {
 public:
  // Opens the first of `names` that dlopen finds (a name with no '/' is searched for the way the
  // dynamic linker does: LD_LIBRARY_PATH, the cache, the default paths). kUnavailable with every
  // name's dlerror when none opens.
  static Result<DynLib> open(const std::vector<std::string>& names);

  // The path the library was loaded from (from dlinfo), for reports.
  const std::string& path() const { return path_; }

  // The address of `symbol`, or nullptr when the library does not export it.
  void* find(const char* symbol) const;

  // Sets `fn` to the function `symbol`; kUnavailable naming the symbol and the library when the
  // library does not export it.
  template <class F>
  Status bind(F*& fn, const char* symbol) const {
    void* p = find(symbol);
    if (!p) return missing(symbol);
    fn = reinterpret_cast<F*>(p);
    return ok_status();
  }
  // Like bind(), for a function the backend can do without: leaves `fn` null when it is missing.
  template <class F>
  void bind_optional(F*& fn, const char* symbol) const {
    fn = reinterpret_cast<F*>(find(symbol));
  }

 private:
  DynLib(void* handle, std::string path) : handle_(handle), path_(std::move(path)) {}
  Error missing(const char* symbol) const;
  void* handle_ = nullptr;  // never closed, see above
  std::string path_;
};

}  // namespace sceptre::gpu
