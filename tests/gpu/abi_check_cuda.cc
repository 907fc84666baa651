// Compiles only if src/gpu/cuda/cuda_api.h declares every driver function as NVIDIA's cuda.h
// does (see abi_check.h). Built whenever cuda.h is found, in CI always.
// The backend's header first: cuda.h #defines the plain names to the _v2 ones, which would
// rename the backend's own members.
#include "gpu/cuda/cuda_api.h"
// (then NVIDIA's)
#include <cuda.h>

#include "gpu/abi_check.h"

namespace sceptre::gpu::cuda {  // here CUresult, CUdeviceptr, ... are the backend's own

#define SCEPTRE_CHECK_CUDA(name, type)                                                  \
  static_assert(abi::same_abi<std::remove_pointer_t<decltype(&::name)>, type>,          \
                #name ": the backend's declaration does not match cuda.h");
SCEPTRE_CUDA_FUNCTIONS(SCEPTRE_CHECK_CUDA)
SCEPTRE_CUDA_OPTIONAL_FUNCTIONS(SCEPTRE_CHECK_CUDA)

static_assert(kDmaBufFd == ::CU_MEM_RANGE_HANDLE_TYPE_DMA_BUF_FD);
static_assert(kSuccess == ::CUDA_SUCCESS);
static_assert(sizeof(CUdeviceptr) == sizeof(::CUdeviceptr));

}  // namespace sceptre::gpu::cuda
