// The part of NCCL's API (nccl.h) the NCCL communicator uses, declared here so that the build
// needs no NCCL header. RCCL (librccl.so.1, AMD) implements the same API. tests/collective/
// abi_check_nccl.cc checks the list against nccl.h whenever one is found (/usr/local/cuda in CI).
#pragma once

#include <cstddef>
#include <type_traits>

namespace sceptre::collective::nccl {

using ncclResult_t = int;
using ncclComm_t = struct ncclComm*;
using ncclDataType_t = int;
using ncclRedOp_t = int;
using cudaStream_t = struct ncclStream_st*;  // the GPU runtime's stream (CUDA's, or HIP's for RCCL)
struct ncclUniqueId {
  char internal[128];  // NCCL_UNIQUE_ID_BYTES
};
// ncclConfig_t as NCCL 2.14 laid it out: NCCL reads a config by its `size` and `version`, so a
// newer NCCL takes this prefix and leaves the rest at its defaults.
struct ncclConfig_t {
  std::size_t size = sizeof(ncclConfig_t);
  unsigned int magic = 0xcafebeef;
  unsigned int version = 21400;  // NCCL_VERSION(2, 14, 0)
  int blocking = kUndefined;
  int cgaClusterSize = kUndefined;
  int minCTAs = kUndefined;
  int maxCTAs = kUndefined;
  const char* netName = nullptr;
  static constexpr int kUndefined = -2147483647 - 1;  // NCCL_CONFIG_UNDEF_INT (INT_MIN)
};

inline constexpr ncclResult_t kSuccess = 0, kInvalidArgument = 4, kRemoteError = 6, kInProgress = 7;
inline constexpr ncclDataType_t kFloat32 = 7;
inline constexpr ncclRedOp_t kSum = 0;

#define SCEPTRE_NCCL_FUNCTIONS(X)                                                                      \
  X(ncclGetVersion, ncclResult_t(int*))                                                                 \
  X(ncclGetErrorString, const char*(ncclResult_t))                                                      \
  X(ncclGetUniqueId, ncclResult_t(ncclUniqueId*))                                                       \
  X(ncclCommInitRankConfig, ncclResult_t(ncclComm_t*, int, ncclUniqueId, int, ncclConfig_t*))           \
  X(ncclCommGetAsyncError, ncclResult_t(ncclComm_t, ncclResult_t*))                                     \
  X(ncclAllReduce, ncclResult_t(const void*, void*, std::size_t, ncclDataType_t, ncclRedOp_t, ncclComm_t, \
                                cudaStream_t))                                                                 \
  X(ncclCommAbort, ncclResult_t(ncclComm_t))                                                            \
  X(ncclCommDestroy, ncclResult_t(ncclComm_t))

struct Api {
#define SCEPTRE_NCCL_MEMBER(name, type) std::add_pointer_t<type> name = nullptr;
  SCEPTRE_NCCL_FUNCTIONS(SCEPTRE_NCCL_MEMBER)
#undef SCEPTRE_NCCL_MEMBER
};

}  // namespace sceptre::collective::nccl
