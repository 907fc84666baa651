// The part of NVML (nvml.h) the CUDA health monitor uses, declared here so that the build needs
// no NVIDIA headers (no nvml.h is installed on the build machines: its declarations are checked
// by the fake NVML, tests/gpu/fake/fake_nvml.cc, which is written against this list).
#pragma once

#include <type_traits>

namespace sceptre::gpu::nvml {

using nvmlReturn_t = int;
using nvmlDevice_t = struct nvmlDevice_st*;

inline constexpr nvmlReturn_t kSuccess = 0;
inline constexpr nvmlReturn_t kNotSupported = 3;   // NVML_ERROR_NOT_SUPPORTED
inline constexpr nvmlReturn_t kNotFound = 6;       // NVML_ERROR_NOT_FOUND
inline constexpr nvmlReturn_t kGpuIsLost = 15;     // NVML_ERROR_GPU_IS_LOST
inline constexpr int kUncorrected = 1;             // NVML_MEMORY_ERROR_TYPE_UNCORRECTED
inline constexpr int kVolatile = 0;                // NVML_VOLATILE_ECC: since the driver loaded
// nvmlClocksThrottleReasons: the hardware's own slowdowns (not the application's clock limits).
inline constexpr unsigned long long kHwSlowdown = 0x8, kHwThermal = 0x40, kHwPowerBrake = 0x80;

#define SCEPTRE_NVML_FUNCTIONS(X)                                                              \
  X(nvmlInit_v2, nvmlReturn_t())                                                                \
  X(nvmlErrorString, const char*(nvmlReturn_t))                                                 \
  X(nvmlDeviceGetHandleByPciBusId_v2, nvmlReturn_t(const char*, nvmlDevice_t*))                 \
  X(nvmlDeviceGetTotalEccErrors, nvmlReturn_t(nvmlDevice_t, int, int, unsigned long long*))     \
  X(nvmlDeviceGetRetiredPagesPendingStatus, nvmlReturn_t(nvmlDevice_t, int*))                   \
  X(nvmlDeviceGetCurrentClocksThrottleReasons, nvmlReturn_t(nvmlDevice_t, unsigned long long*))

struct Api {
#define SCEPTRE_NVML_MEMBER(name, type) std::add_pointer_t<type> name = nullptr;
  SCEPTRE_NVML_FUNCTIONS(SCEPTRE_NVML_MEMBER)
#undef SCEPTRE_NVML_MEMBER
};

}  // namespace sceptre::gpu::nvml
