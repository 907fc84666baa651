// The part of NVIDIA's driver API (cuda.h) the CUDA backend uses, declared here so that the
// build needs no CUDA headers: the types as the driver's ABI has them, and one list of the
// functions with their signatures. tests/gpu/abi_check_cuda.cc checks the list against the real
// cuda.h whenever one is installed, so a mistake here fails the build rather than a GPU job.
#pragma once

#include <cstddef>
#include <type_traits>

namespace sceptre::gpu::cuda {

using CUresult = int;  // an enum of int size in cuda.h
using CUdevice = int;
using CUdeviceptr = unsigned long long;
using CUcontext = struct CUctx_st*;
using CUstream = struct CUstream_st*;
using CUevent = struct CUevent_st*;
using CUmemRangeHandleType = int;

inline constexpr CUresult kSuccess = 0;
inline constexpr CUresult kNotReady = 600;  // CUDA_ERROR_NOT_READY
inline constexpr CUmemRangeHandleType kDmaBufFd = 1;  // CU_MEM_RANGE_HANDLE_TYPE_DMA_BUF_FD

// X(name, type): every function the backend needs, by the name libcuda.so.1 exports it under
// (cuda.h maps the plain names to these _v2 ones).
#define SCEPTRE_CUDA_FUNCTIONS(X)                                                      \
  X(cuInit, CUresult(unsigned int))                                                     \
  X(cuDriverGetVersion, CUresult(int*))                                                 \
  X(cuGetErrorName, CUresult(CUresult, const char**))                                   \
  X(cuGetErrorString, CUresult(CUresult, const char**))                                 \
  X(cuDeviceGetCount, CUresult(int*))                                                   \
  X(cuDeviceGet, CUresult(CUdevice*, int))                                              \
  X(cuDeviceGetName, CUresult(char*, int, CUdevice))                                    \
  X(cuDeviceTotalMem_v2, CUresult(std::size_t*, CUdevice))                              \
  X(cuDeviceGetPCIBusId, CUresult(char*, int, CUdevice))                                \
  X(cuDevicePrimaryCtxRetain, CUresult(CUcontext*, CUdevice))                           \
  X(cuDevicePrimaryCtxRelease_v2, CUresult(CUdevice))                                   \
  X(cuCtxSetCurrent, CUresult(CUcontext))                                               \
  X(cuCtxGetCurrent, CUresult(CUcontext*))                                              \
  X(cuMemAlloc_v2, CUresult(CUdeviceptr*, std::size_t))                                 \
  X(cuMemFree_v2, CUresult(CUdeviceptr))                                                \
  X(cuMemcpyHtoDAsync_v2, CUresult(CUdeviceptr, const void*, std::size_t, CUstream))    \
  X(cuMemcpyDtoHAsync_v2, CUresult(void*, CUdeviceptr, std::size_t, CUstream))          \
  X(cuMemcpyDtoDAsync_v2, CUresult(CUdeviceptr, CUdeviceptr, std::size_t, CUstream))    \
  X(cuStreamCreate, CUresult(CUstream*, unsigned int))                                  \
  X(cuStreamDestroy_v2, CUresult(CUstream))                                             \
  X(cuStreamSynchronize, CUresult(CUstream))                                            \
  X(cuEventCreate, CUresult(CUevent*, unsigned int))                                    \
  X(cuEventRecord, CUresult(CUevent, CUstream))                                         \
  X(cuEventSynchronize, CUresult(CUevent))                                              \
  X(cuEventQuery, CUresult(CUevent))                                                    \
  X(cuEventDestroy_v2, CUresult(CUevent))                                               \
  X(cuEventElapsedTime, CUresult(float*, CUevent, CUevent))

// Functions the backend can do without (older drivers lack them).
#define SCEPTRE_CUDA_OPTIONAL_FUNCTIONS(X)                                                              \
  X(cuEventElapsedTime_v2, CUresult(float*, CUevent, CUevent))                                          \
  X(cuMemGetHandleForAddressRange, CUresult(void*, CUdeviceptr, std::size_t, CUmemRangeHandleType,     \
                                            unsigned long long))

struct Api {
#define SCEPTRE_CUDA_MEMBER(name, type) std::add_pointer_t<type> name = nullptr;
  SCEPTRE_CUDA_FUNCTIONS(SCEPTRE_CUDA_MEMBER)
  SCEPTRE_CUDA_OPTIONAL_FUNCTIONS(SCEPTRE_CUDA_MEMBER)
#undef SCEPTRE_CUDA_MEMBER
};

}  // namespace sceptre::gpu::cuda
