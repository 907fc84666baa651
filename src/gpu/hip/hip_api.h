// The part of AMD's HIP runtime API (hip/hip_runtime_api.h) the HIP backend uses, declared here so
// that the build needs no ROCm headers. tests/gpu/abi_check_hip.cc checks the list against the
// real header whenever one is installed (Debian's libamdhip64-dev in CI).
#pragma once

#include <cstddef>
#include <type_traits>

namespace sceptre::gpu::hip {

using hipError_t = int;  // an enum of int size in the header
using hipDevice_t = int;
using hipStream_t = struct ihipStream_t*;
using hipEvent_t = struct ihipEvent_t*;
using hipMemcpyKind = int;
using hipMemRangeHandleType = int;

inline constexpr hipError_t kSuccess = 0;
inline constexpr hipError_t kNotReady = 600;  // hipErrorNotReady
inline constexpr hipMemcpyKind kHostToDevice = 1, kDeviceToHost = 2, kDeviceToDevice = 3;
inline constexpr hipMemRangeHandleType kDmaBufFd = 1;  // hipMemRangeHandleTypeDmaBufFd

// X(name, type): every function the backend needs, as libamdhip64.so exports it.
#define SCEPTRE_HIP_FUNCTIONS(X)                                                               \
  X(hipInit, hipError_t(unsigned int))                                                          \
  X(hipDriverGetVersion, hipError_t(int*))                                                      \
  X(hipRuntimeGetVersion, hipError_t(int*))                                                     \
  X(hipGetErrorName, const char*(hipError_t))                                                   \
  X(hipGetErrorString, const char*(hipError_t))                                                 \
  X(hipGetDeviceCount, hipError_t(int*))                                                        \
  X(hipDeviceGet, hipError_t(hipDevice_t*, int))                                                \
  X(hipDeviceGetName, hipError_t(char*, int, hipDevice_t))                                      \
  X(hipDeviceTotalMem, hipError_t(std::size_t*, hipDevice_t))                                   \
  X(hipDeviceGetPCIBusId, hipError_t(char*, int, int))                                          \
  X(hipSetDevice, hipError_t(int))                                                              \
  X(hipMalloc, hipError_t(void**, std::size_t))                                                 \
  X(hipFree, hipError_t(void*))                                                                 \
  X(hipMemcpyAsync, hipError_t(void*, const void*, std::size_t, hipMemcpyKind, hipStream_t))    \
  X(hipStreamCreate, hipError_t(hipStream_t*))                                                  \
  X(hipStreamDestroy, hipError_t(hipStream_t))                                                  \
  X(hipStreamSynchronize, hipError_t(hipStream_t))                                              \
  X(hipEventCreate, hipError_t(hipEvent_t*))                                                    \
  X(hipEventRecord, hipError_t(hipEvent_t, hipStream_t))                                        \
  X(hipEventSynchronize, hipError_t(hipEvent_t))                                                \
  X(hipEventQuery, hipError_t(hipEvent_t))                                                      \
  X(hipEventDestroy, hipError_t(hipEvent_t))                                                    \
  X(hipEventElapsedTime, hipError_t(float*, hipEvent_t, hipEvent_t))

// Functions the backend can do without: ROCm before 6 has no dmabuf export.
#define SCEPTRE_HIP_OPTIONAL_FUNCTIONS(X) \
  X(hipMemGetHandleForAddressRange,       \
    hipError_t(void*, void*, std::size_t, hipMemRangeHandleType, unsigned long long))

struct Api {
#define SCEPTRE_HIP_MEMBER(name, type) std::add_pointer_t<type> name = nullptr;
  SCEPTRE_HIP_FUNCTIONS(SCEPTRE_HIP_MEMBER)
  SCEPTRE_HIP_OPTIONAL_FUNCTIONS(SCEPTRE_HIP_MEMBER)
#undef SCEPTRE_HIP_MEMBER
};

}  // namespace sceptre::gpu::hip
