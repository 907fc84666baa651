#include "gpu/fake/fake_gpus.h"

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <map>
#include <mutex>

namespace sceptre::gpu::fake {
namespace {

std::mutex mu;  // the allocations; init replaces the devices only between tests
struct Allocation {
  int device;
  std::size_t bytes;
};
std::map<const char*, Allocation> allocations;
std::map<int, std::size_t> used;  // by host device

long env_number(const char* var, long fallback) {
  const char* v = std::getenv(var);
  if (!v || !*v) return fallback;
  return std::strtol(v, nullptr, 10);
}

}  // namespace

std::vector<int> filter(const char* var, const std::vector<int>& from) {
  const char* v = std::getenv(var);
  if (!v) return from;
  std::vector<int> out;
  std::string s(v);
  std::size_t pos = 0;
  while (pos <= s.size()) {
    const std::size_t comma = s.find(',', pos);
    const std::string entry = s.substr(pos, comma == std::string::npos ? std::string::npos : comma - pos);
    char* end = nullptr;
    const long k = std::strtol(entry.c_str(), &end, 10);
    if (entry.empty() || *end || k < 0 || k >= static_cast<long>(from.size())) break;
    out.push_back(from[k]);
    if (comma == std::string::npos) break;
    pos = comma + 1;
  }
  return out;
}

int host_count() { return static_cast<int>(env_number("SCEPTRE_FAKE_GPU_COUNT", 8)); }

int host_device_of(const char* bus_id) {
  unsigned domain = 0, bus = 0, dev = 0, fn = 0;
  if (std::sscanf(bus_id, "%x:%x:%x.%x", &domain, &bus, &dev, &fn) != 4 || domain || dev || fn) return -1;
  const int d = static_cast<int>(bus) - 0x10;
  return d >= 0 && d < host_count() ? d : -1;
}

Faults faults_of(int d) {
  Faults f;
  const char* path = std::getenv("SCEPTRE_FAKE_GPU_FAULTS");
  if (!path) return f;
  std::ifstream in(path);
  int device = -1;
  std::string kind;
  while (in >> device >> kind) {
    unsigned long long n = 0;
    if (kind == "ecc") in >> n;
    if (device != d) continue;
    if (kind == "ecc") f.ecc += n;
    if (kind == "pending") f.pending = true;
    if (kind == "lost") f.lost = true;
    if (kind == "throttle") f.throttle = true;
  }
  return f;
}

int Devices::init(std::vector<int> (*visible)(int host_count)) {
  std::lock_guard lock(mu);
  ready_ = false;
  if (long code = env_number("SCEPTRE_FAKE_GPU_INIT", 0)) return static_cast<int>(code);
  const long n = env_number("SCEPTRE_FAKE_GPU_COUNT", 8);
  if (n <= 0) return kNoDevice;
  memory_ = static_cast<std::size_t>(env_number("SCEPTRE_FAKE_GPU_MEMORY", 80L << 30));
  visible_ = visible(static_cast<int>(n));
  ready_ = true;
  return kOk;
}

std::string Devices::name(int index) const { return "Fake GPU " + std::to_string(visible_[index]); }

std::string Devices::bus_id(int index) const {
  char b[32];
  std::snprintf(b, sizeof b, "0000:%02X:00.0", 0x10 + visible_[index]);
  return b;
}

int Devices::allocate(int index, std::size_t bytes, void** out) {
  if (!valid(index)) return kInvalidDevice;
  std::lock_guard lock(mu);
  const int host = visible_[index];
  if (bytes == 0 || used[host] + bytes > memory_) return kOutOfMemory;
  char* p = static_cast<char*>(std::malloc(bytes));
  if (!p) return kOutOfMemory;
  allocations[p] = Allocation{host, bytes};
  used[host] += bytes;
  *out = p;
  return kOk;
}

int Devices::free(void* p) {
  std::lock_guard lock(mu);
  auto it = allocations.find(static_cast<const char*>(p));
  if (it == allocations.end()) return kInvalidValue;
  used[it->second.device] -= it->second.bytes;
  std::free(p);
  allocations.erase(it);
  return kOk;
}

int Devices::check_range(const void* p, std::size_t bytes) const {
  if (bytes == 0) return kOk;
  std::lock_guard lock(mu);
  const char* c = static_cast<const char*>(p);
  auto it = allocations.upper_bound(c);
  if (it == allocations.begin()) return kInvalidValue;
  --it;
  return c + bytes <= it->first + it->second.bytes ? kOk : kInvalidValue;
}

std::int64_t Devices::now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

const char* Devices::error_name(int code, bool hip) {
  switch (code) {
    case kInvalidValue: return hip ? "hipErrorInvalidValue" : "CUDA_ERROR_INVALID_VALUE";
    case kOutOfMemory: return hip ? "hipErrorOutOfMemory" : "CUDA_ERROR_OUT_OF_MEMORY";
    case kNotInitialized: return hip ? "hipErrorNotInitialized" : "CUDA_ERROR_NOT_INITIALIZED";
    case kNoDevice: return hip ? "hipErrorNoDevice" : "CUDA_ERROR_NO_DEVICE";
    case kInvalidDevice: return hip ? "hipErrorInvalidDevice" : "CUDA_ERROR_INVALID_DEVICE";
    default: return nullptr;
  }
}

const char* Devices::error_text(int code) {
  switch (code) {
    case kInvalidValue: return "invalid argument";
    case kOutOfMemory: return "out of memory";
    case kNotInitialized: return "initialization error";
    case kNoDevice: return "no CUDA-capable device is detected";
    case kInvalidDevice: return "invalid device ordinal";
    default: return nullptr;
  }
}

Devices& devices() {
  static Devices d;
  return d;
}

}  // namespace sceptre::gpu::fake
