// A fake libnccl.so.2 (and, built again, librccl.so.1): the NCCL functions the NCCL communicator
// binds (src/collective/nccl/nccl_api.h), for members that are threads of one process, over the
// fake devices' memory (host memory). Communicators are non-blocking as the communicator asks:
// init and allreduce return ncclInProgress, and ncclCommGetAsyncError says when the group has
// joined, or the reduction is done (the last member to arrive sums every member's buffer into
// all of them). ncclCommAbort breaks the group: the others' calls then fail with
// ncclRemoteError. SCEPTRE_FAKE_NCCL_HANG_RANK=r makes rank r's collectives never arrive, as a
// member stuck on a dead GPU would.
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "collective/nccl/nccl_api.h"

using namespace sceptre::collective::nccl;

struct sceptre::collective::nccl::ncclComm {
  std::string group;
  int rank = 0;
  long next = 0;      // the sequence number of its next collective
  long pending = -1;  // the one in flight (-1: none)
};

namespace {

struct Op {
  std::vector<float*> buffers;
  std::size_t count = 0;
  int arrived = 0;
  bool done = false;
};
struct Group {
  int size = 0;
  int joined = 0;
  bool broken = false;
  std::map<long, Op> ops;
};

std::mutex mu;
std::map<std::string, Group> groups;
long ids = 0;

int hang_rank() {
  const char* v = std::getenv("SCEPTRE_FAKE_NCCL_HANG_RANK");
  return v && *v ? std::atoi(v) : -1;
}

}  // namespace

extern "C" {

ncclResult_t ncclGetVersion(int* v) {
  *v = 22800;
  return kSuccess;
}
const char* ncclGetErrorString(ncclResult_t r) {
  switch (r) {
    case kSuccess: return "no error";
    case kInvalidArgument: return "invalid argument (run with NCCL_DEBUG=WARN for details)";
    case kRemoteError: return "remote process exited or there was a network error";
    case kInProgress: return "NCCL operation in progress";
    default: return "internal error";
  }
}
ncclResult_t ncclGetUniqueId(ncclUniqueId* id) {
  std::lock_guard lock(mu);
  std::memset(id->internal, 0, sizeof id->internal);
  std::snprintf(id->internal, sizeof id->internal, "fake-nccl-%ld", ++ids);
  return kSuccess;
}
ncclResult_t ncclCommInitRankConfig(ncclComm_t* comm, int size, ncclUniqueId id, int rank, ncclConfig_t* config) {
  if (size <= 0 || rank < 0 || rank >= size || !config || config->blocking != 0) return kInvalidArgument;
  std::lock_guard lock(mu);
  const std::string key(id.internal, strnlen(id.internal, sizeof id.internal));
  Group& g = groups[key];
  if (g.size == 0) g.size = size;
  if (g.size != size) return kInvalidArgument;
  ++g.joined;
  *comm = std::make_unique<ncclComm>(ncclComm{key, rank}).release();
  return kInProgress;
}
ncclResult_t ncclCommGetAsyncError(ncclComm_t comm, ncclResult_t* state) {
  std::lock_guard lock(mu);
  Group& g = groups[comm->group];
  if (g.broken) *state = kRemoteError;
  else if (g.joined < g.size) *state = kInProgress;
  else if (comm->pending >= 0 && !g.ops[comm->pending].done) *state = kInProgress;
  else *state = kSuccess;
  return kSuccess;
}
ncclResult_t ncclAllReduce(const void* send, void* recv, std::size_t count, ncclDataType_t type, ncclRedOp_t op,
                           ncclComm_t comm, cudaStream_t) {
  if (type != kFloat32 || op != kSum || send != recv) return kInvalidArgument;  // all the communicator does
  std::lock_guard lock(mu);
  Group& g = groups[comm->group];
  if (g.broken) return kRemoteError;
  const long seq = comm->next++;
  comm->pending = seq;
  Op& o = g.ops[seq];
  if (comm->rank == hang_rank()) return kInProgress;  // never arrives
  if (o.buffers.empty()) {
    o.buffers.assign(g.size, nullptr);
    o.count = count;
  }
  if (o.count != count) return kInvalidArgument;
  o.buffers[comm->rank] = static_cast<float*>(recv);
  if (++o.arrived == g.size) {
    std::vector<float> sum(count, 0.0f);
    for (float* b : o.buffers) {
      for (std::size_t i = 0; i < count; ++i) sum[i] += b[i];
    }
    for (float* b : o.buffers) std::memcpy(b, sum.data(), count * sizeof(float));
    o.done = true;
  }
  return kInProgress;
}
ncclResult_t ncclCommAbort(ncclComm_t comm) {
  {
    std::lock_guard lock(mu);
    groups[comm->group].broken = true;
  }
  std::unique_ptr<ncclComm> gone(comm);
  return kSuccess;
}
ncclResult_t ncclCommDestroy(ncclComm_t comm) {
  std::unique_ptr<ncclComm> gone(comm);
  return kSuccess;
}

}  // extern "C"
