// The GPU backends, one folder each (cuda/, hip/), each exposing one factory, and what they
// share. A backend that is compiled in (they all are: none includes a vendor header) says at run
// time whether it is viable here: its factory returns kUnavailable with the reason when not.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "sceptre/gpu/health.h"
#include "sceptre/gpu/runtime.h"

namespace sceptre::gpu {

// NVIDIA, through the driver API of libcuda.so.1 (SCEPTRE_CUDA_LIBRARY names another file).
Result<std::unique_ptr<Runtime>> make_cuda_runtime();
// AMD, through the HIP runtime libamdhip64.so (SCEPTRE_HIP_LIBRARY names another file).
Result<std::unique_ptr<Runtime>> make_hip_runtime();
// The health monitors: NVML (libnvidia-ml.so.1, SCEPTRE_NVML_LIBRARY) and ROCm SMI
// (librocm_smi64.so.1, SCEPTRE_ROCM_SMI_LIBRARY).
Result<std::unique_ptr<HealthMonitor>> make_nvml_health(int throttle_polls);
Result<std::unique_ptr<HealthMonitor>> make_rocm_smi_health();
// No GPU: no devices; every device call fails with kFailedPrecondition saying why.
std::unique_ptr<Runtime> make_none_runtime(std::string why);

// HIP numbers its errors as CUDA does (hipErrorOutOfMemory = CUDA_ERROR_OUT_OF_MEMORY = 2, ...),
// so one mapping serves both: the canonical code of a vendor error code.
Code code_of_vendor_error(int code);
// "fn: NAME: text", with the canonical code of `code`.
Error vendor_error(const char* fn, int code, const char* name, const char* text);

// The entries of the device list in environment variable `var` ("0,2" → {"0", "2"}), up to the
// first empty entry; nullopt when `var` is unset.
std::optional<std::vector<std::string>> visible_list(const char* var);
// The bus id as the vendors write it ("0000:1B:00.0"), in DeviceInfo's lower case.
std::string lower_case(std::string bus_id);
// kInvalidArgument unless `index` names one of the `count` devices the process sees.
Status check_device_index(std::string_view vendor, int index, int count);

// The library a backend opens: the file `override_var` names when set, else `default_name`.
std::vector<std::string> library_names(const char* override_var, const char* default_name);

}  // namespace sceptre::gpu
