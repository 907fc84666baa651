// Compiles only if src/gpu/hip/rocm_smi_api.h declares every ROCm SMI function as AMD's
// rocm_smi/rocm_smi.h does (see abi_check.h). Built whenever that header is found (Debian's
// librocm-smi-dev), in CI always.
#include <rocm_smi/rocm_smi.h>

#include "gpu/abi_check.h"
#include "gpu/hip/rocm_smi_api.h"

namespace sceptre::gpu::rocm_smi {  // here rsmi_status_t, ... are the backend's own

#define SCEPTRE_CHECK_ROCM_SMI(name, type)                                              \
  static_assert(abi::same_abi<std::remove_pointer_t<decltype(&::name)>, type>,          \
                #name ": the backend's declaration does not match rocm_smi.h");
SCEPTRE_ROCM_SMI_FUNCTIONS(SCEPTRE_CHECK_ROCM_SMI)

static_assert(sizeof(rsmi_gpu_block_t) == sizeof(::rsmi_gpu_block_t));
static_assert(sizeof(rsmi_error_count_t) == sizeof(::rsmi_error_count_t) &&
              offsetof(rsmi_error_count_t, uncorrectable_err) == offsetof(::rsmi_error_count_t, uncorrectable_err));
static_assert(kSuccess == ::RSMI_STATUS_SUCCESS && kNotSupported == ::RSMI_STATUS_NOT_SUPPORTED);
static_assert(kUmc == ::RSMI_GPU_BLOCK_UMC);

}  // namespace sceptre::gpu::rocm_smi
