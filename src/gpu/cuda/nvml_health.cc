// The CUDA health monitor: NVML, opened at run time (nvml_api.h lists what it uses).
#include <map>

#include "gpu/backends.h"
#include "gpu/cuda/nvml_api.h"
#include "gpu/dynlib.h"
#include "sceptre/gpu/health.h"

namespace sceptre::gpu {
namespace {

using namespace nvml;  // NOLINT: NVML's own names read best here

class NvmlHealth final : public HealthMonitor {
 public:
  NvmlHealth(Api api, std::string library, int throttle_polls)
      : api_(api), library_(std::move(library)), throttle_polls_(throttle_polls) {}
  const std::string& library() const override { return library_; }

  std::vector<Fault> poll(const std::vector<std::string>& bus_ids) override {
    std::vector<Fault> faults;
    for (const auto& bus : bus_ids) {
      std::string what = check(bus);
      if (!what.empty()) faults.push_back(Fault{bus, std::move(what)});
    }
    return faults;
  }

 private:
  // Why `bus` is unhealthy, or "".
  std::string check(const std::string& bus) {
    nvmlDevice_t dev = nullptr;
    nvmlReturn_t r = api_.nvmlDeviceGetHandleByPciBusId_v2(bus.c_str(), &dev);
    if (r != kSuccess) return r == kGpuIsLost ? "lost from the bus" : "not found by NVML: " + text(r);
    unsigned long long ecc = 0;
    r = api_.nvmlDeviceGetTotalEccErrors(dev, kUncorrected, kVolatile, &ecc);
    if (r == kGpuIsLost) return "lost from the bus";
    if (r == kSuccess && ecc > 0) return std::to_string(ecc) + " uncorrectable ECC error" + (ecc == 1 ? "" : "s");
    int pending = 0;
    r = api_.nvmlDeviceGetRetiredPagesPendingStatus(dev, &pending);
    if (r == kGpuIsLost) return "lost from the bus";
    if (r == kSuccess && pending) return "memory pages retired, pending a reset of the GPU";
    unsigned long long reasons = 0;
    r = api_.nvmlDeviceGetCurrentClocksThrottleReasons(dev, &reasons);
    if (r == kGpuIsLost) return "lost from the bus";
    const unsigned long long hw = r == kSuccess ? reasons & (kHwSlowdown | kHwThermal | kHwPowerBrake) : 0;
    int& seen = throttled_[bus];
    seen = hw ? seen + 1 : 0;
    if (seen >= throttle_polls_) {
      return std::string("throttled by the hardware (") + (hw & kHwThermal ? "thermal" : hw & kHwPowerBrake ? "power brake" : "slowdown") +
             ") on " + std::to_string(seen) + " polls in a row";
    }
    return "";
  }
  std::string text(nvmlReturn_t r) const {
    const char* s = api_.nvmlErrorString(r);
    return s ? s : "error " + std::to_string(r);
  }

  const Api api_;
  const std::string library_;
  const int throttle_polls_;
  std::map<std::string, int> throttled_;  // polls in a row with a hardware slowdown, by bus
};

}  // namespace

Result<std::unique_ptr<HealthMonitor>> make_nvml_health(int throttle_polls) {
  auto lib = DynLib::open(library_names("SCEPTRE_NVML_LIBRARY", "libnvidia-ml.so.1"));
  if (!lib) return Error(Code::kUnavailable, "nvml: " + lib.error().message());
  Api api;
#define SCEPTRE_NVML_BIND(name, type) \
  if (auto s = lib->bind(api.name, #name); !s.ok()) return Error(Code::kUnavailable, "nvml: " + s.error().message());
  SCEPTRE_NVML_FUNCTIONS(SCEPTRE_NVML_BIND)
#undef SCEPTRE_NVML_BIND
  if (nvmlReturn_t r = api.nvmlInit_v2(); r != kSuccess) {
    const char* s = api.nvmlErrorString(r);
    return Error(Code::kUnavailable, "nvml: nvmlInit_v2: " + std::string(s ? s : "error " + std::to_string(r)));
  }
  return std::unique_ptr<HealthMonitor>(std::make_unique<NvmlHealth>(api, lib->path(), throttle_polls));
}

}  // namespace sceptre::gpu
