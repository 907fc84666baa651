// The part of ROCm SMI (rocm_smi/rocm_smi.h) the HIP health monitor uses, declared here so that
// the build needs no ROCm headers. tests/gpu/abi_check_hip.cc checks it against Debian's
// librocm-smi-dev when installed (CI).
#pragma once

#include <cstdint>
#include <type_traits>

namespace sceptre::gpu::rocm_smi {

using rsmi_status_t = int;
using rsmi_gpu_block_t = std::uint64_t;  // an enum with a 64-bit value in the header
struct rsmi_error_count_t {
  std::uint64_t correctable_err;
  std::uint64_t uncorrectable_err;
};

inline constexpr rsmi_status_t kSuccess = 0;
inline constexpr rsmi_status_t kNotSupported = 2;  // RSMI_STATUS_NOT_SUPPORTED
inline constexpr rsmi_gpu_block_t kUmc = 1;        // RSMI_GPU_BLOCK_UMC: the memory controller

#define SCEPTRE_ROCM_SMI_FUNCTIONS(X)                                                                   \
  X(rsmi_init, rsmi_status_t(std::uint64_t))                                                             \
  X(rsmi_status_string, rsmi_status_t(rsmi_status_t, const char**))                                      \
  X(rsmi_num_monitor_devices, rsmi_status_t(std::uint32_t*))                                             \
  X(rsmi_dev_pci_id_get, rsmi_status_t(std::uint32_t, std::uint64_t*))                                   \
  X(rsmi_dev_ecc_count_get, rsmi_status_t(std::uint32_t, rsmi_gpu_block_t, rsmi_error_count_t*))

struct Api {
#define SCEPTRE_ROCM_SMI_MEMBER(name, type) std::add_pointer_t<type> name = nullptr;
  SCEPTRE_ROCM_SMI_FUNCTIONS(SCEPTRE_ROCM_SMI_MEMBER)
#undef SCEPTRE_ROCM_SMI_MEMBER
};

}  // namespace sceptre::gpu::rocm_smi
