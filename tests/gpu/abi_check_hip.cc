// Compiles only if src/gpu/hip/hip_api.h declares every HIP function as AMD's
// hip/hip_runtime_api.h does (see abi_check.h). Built whenever that header is found (Debian's
// libamdhip64-dev), in CI always. ROCm 5's header lacks the optional dmabuf export: checked when
// the header has it.
// Without the header's C++ template overloads (hipMalloc(T**, ...)): the C functions are what
// libamdhip64.so exports and the backend binds.
#define __HIP_DISABLE_CPP_FUNCTIONS__
#include <hip/hip_runtime_api.h>

#include "gpu/abi_check.h"
#include "gpu/hip/hip_api.h"

namespace sceptre::gpu::hip {  // here hipError_t, hipStream_t, ... are the backend's own

#define SCEPTRE_CHECK_HIP(name, type)                                                   \
  static_assert(abi::same_abi<std::remove_pointer_t<decltype(&::name)>, type>,          \
                #name ": the backend's declaration does not match hip_runtime_api.h");
SCEPTRE_HIP_FUNCTIONS(SCEPTRE_CHECK_HIP)
#if HIP_VERSION_MAJOR >= 6
SCEPTRE_HIP_OPTIONAL_FUNCTIONS(SCEPTRE_CHECK_HIP)
static_assert(kDmaBufFd == ::hipMemRangeHandleTypeDmaBufFd);
#endif

static_assert(kSuccess == ::hipSuccess);
static_assert(kHostToDevice == ::hipMemcpyHostToDevice && kDeviceToHost == ::hipMemcpyDeviceToHost &&
              kDeviceToDevice == ::hipMemcpyDeviceToDevice);

}  // namespace sceptre::gpu::hip
