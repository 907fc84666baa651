// A fake libnvidia-ml.so.1: the NVML functions the CUDA health monitor binds
// (src/gpu/cuda/nvml_api.h), over the host devices of fake_gpus.h and the faults
// SCEPTRE_FAKE_GPU_FAULTS injects. Like NVML, it sees every device of the host, whatever
// CUDA_VISIBLE_DEVICES says.
#include <cstdint>

#include "gpu/cuda/nvml_api.h"
#include "gpu/fake/fake_gpus.h"

using namespace sceptre::gpu::nvml;
namespace fake = sceptre::gpu::fake;

namespace {
bool ready = false;
// A handle is the host device number + 1, as a pointer (never dereferenced).
nvmlDevice_t handle_of(int d) { return reinterpret_cast<nvmlDevice_t>(static_cast<std::intptr_t>(d + 1)); }
int device_of(nvmlDevice_t h) { return static_cast<int>(reinterpret_cast<std::intptr_t>(h)) - 1; }
constexpr nvmlReturn_t kUninitialized = 1, kInvalidArgument = 2;
}  // namespace

extern "C" {

nvmlReturn_t nvmlInit_v2() {
  ready = fake::host_count() > 0;
  return ready ? kSuccess : 9;  // NVML_ERROR_DRIVER_NOT_LOADED
}
const char* nvmlErrorString(nvmlReturn_t r) {
  switch (r) {
    case kSuccess: return "Success";
    case kUninitialized: return "Uninitialized";
    case kInvalidArgument: return "Invalid Argument";
    case kNotFound: return "Not Found";
    case kGpuIsLost: return "GPU is lost";
    case 9: return "Driver Not Loaded";
    default: return "Unknown Error";
  }
}
nvmlReturn_t nvmlDeviceGetHandleByPciBusId_v2(const char* bus, nvmlDevice_t* dev) {
  if (!ready) return kUninitialized;
  const int d = fake::host_device_of(bus);
  if (d < 0) return kNotFound;
  if (fake::faults_of(d).lost) return kGpuIsLost;
  *dev = handle_of(d);
  return kSuccess;
}
nvmlReturn_t nvmlDeviceGetTotalEccErrors(nvmlDevice_t dev, int type, int counter, unsigned long long* count) {
  if (!ready) return kUninitialized;
  if (type != kUncorrected || counter != kVolatile) return kNotSupported;
  const auto f = fake::faults_of(device_of(dev));
  if (f.lost) return kGpuIsLost;
  *count = f.ecc;
  return kSuccess;
}
nvmlReturn_t nvmlDeviceGetRetiredPagesPendingStatus(nvmlDevice_t dev, int* pending) {
  if (!ready) return kUninitialized;
  const auto f = fake::faults_of(device_of(dev));
  if (f.lost) return kGpuIsLost;
  *pending = f.pending ? 1 : 0;
  return kSuccess;
}
nvmlReturn_t nvmlDeviceGetCurrentClocksThrottleReasons(nvmlDevice_t dev, unsigned long long* reasons) {
  if (!ready) return kUninitialized;
  const auto f = fake::faults_of(device_of(dev));
  if (f.lost) return kGpuIsLost;
  *reasons = f.throttle ? kHwThermal : 0;
  return kSuccess;
}

}  // extern "C"
