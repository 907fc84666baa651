// Compiles only if src/collective/nccl/nccl_api.h declares every NCCL function as NVIDIA's
// nccl.h does (see abi_check.h), and lays out the part of ncclConfig_t it fills as nccl.h does.
// Built whenever nccl.h is found (/usr/local/cuda in CI). RCCL's header is NCCL's API.
#include "collective/nccl/nccl_api.h"
// (then NVIDIA's)
#include <nccl.h>

#include <cstddef>

#include "gpu/abi_check.h"

namespace sceptre::collective::nccl {  // here ncclResult_t, ncclComm_t, ... are the backend's own

#define SCEPTRE_CHECK_NCCL(name, type)                                                  \
  static_assert(gpu::abi::same_abi<std::remove_pointer_t<decltype(&::name)>, type>,     \
                #name ": the backend's declaration does not match nccl.h");
SCEPTRE_NCCL_FUNCTIONS(SCEPTRE_CHECK_NCCL)

static_assert(sizeof(ncclUniqueId) == sizeof(::ncclUniqueId));
static_assert(offsetof(ncclConfig_t, magic) == offsetof(::ncclConfig_t, magic) &&
              offsetof(ncclConfig_t, version) == offsetof(::ncclConfig_t, version) &&
              offsetof(ncclConfig_t, blocking) == offsetof(::ncclConfig_t, blocking) &&
              offsetof(ncclConfig_t, maxCTAs) == offsetof(::ncclConfig_t, maxCTAs) &&
              offsetof(ncclConfig_t, netName) == offsetof(::ncclConfig_t, netName));
static_assert(ncclConfig_t::kUndefined == NCCL_CONFIG_UNDEF_INT);
static_assert(kSuccess == ::ncclSuccess && kInvalidArgument == ::ncclInvalidArgument &&
              kRemoteError == ::ncclRemoteError && kInProgress == ::ncclInProgress);
static_assert(kFloat32 == ::ncclFloat32 && kSum == ::ncclSum);

}  // namespace sceptre::collective::nccl
