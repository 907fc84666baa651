// Choosing the health monitor of a vendor's GPUs.
#include "sceptre/gpu/health.h"

#include "gpu/backends.h"

namespace sceptre::gpu {

Result<std::unique_ptr<HealthMonitor>> load_health(Vendor vendor, int throttle_polls) {
  switch (vendor) {
    case Vendor::kCuda: return make_nvml_health(throttle_polls);
    case Vendor::kHip: return make_rocm_smi_health();
    case Vendor::kNone: break;
  }
  return Error(Code::kInvalidArgument, "no GPU runtime: no GPU health to monitor");
}

}  // namespace sceptre::gpu
