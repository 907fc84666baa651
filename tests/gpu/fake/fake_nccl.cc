// A fake libnccl.so.2 (and, built again, librccl.so.1): the NCCL functions the NCCL communicator
// binds (src/collective/nccl/nccl_api.h), for members that are procs of one host or threads of
// one process, over the fake devices' memory (host memory).
//
// A communicator is a folder under SCEPTRE_FAKE_NCCL_DIR (default: $TMPDIR or /tmp) named by its
// unique id: each member writes "joined-<rank>" when it joins and "op-<k>-<rank>" (its buffer)
// at its k-th allreduce; a member's allreduce is done once every member's file of it is there
// (each sums them in rank order, so all end with the same bits). Communicators are non-blocking,
// as the communicator asks: calls return ncclInProgress and ncclCommGetAsyncError says when the
// group has joined or the collective is done; a blocking communicator (ncclCommInitRank, or a
// config with blocking=1: how a direct NCCL user works) waits in those calls instead.
// ncclCommAbort writes "broken": the others' calls
// then fail with ncclRemoteError. SCEPTRE_FAKE_NCCL_HANG_RANK=r makes rank r's collectives
// never arrive, as a member stuck on a dead GPU would. The folders are the test's to remove.
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "collective/nccl/nccl_api.h"

using namespace sceptre::collective::nccl;

struct sceptre::collective::nccl::ncclComm {
  std::string dir;
  int rank = 0, size = 0;
  bool joined = false;
  long next = 0;      // the sequence number of its next collective
  long pending = -1;  // the one in flight (-1: none)
  bool done = true;
  bool blocking = false;
  float* buffer = nullptr;
  std::size_t count = 0;
};

namespace {

std::atomic<long> ids{0};

bool exists(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0;
}
// Written whole or not at all: a temporary file, then a rename.
bool write_file(const std::string& path, const void* data, std::size_t bytes) {
  const std::string tmp = path + ".tmp";
  {
    std::ofstream out(tmp, std::ios::binary);
    out.write(static_cast<const char*>(data), static_cast<std::streamsize>(bytes));
    if (!out) return false;
  }
  return std::rename(tmp.c_str(), path.c_str()) == 0;
}
std::string op_file(const ncclComm& c, long seq, int rank) {
  return c.dir + "/op-" + std::to_string(seq) + "-" + std::to_string(rank);
}
int hang_rank() {
  const char* v = std::getenv("SCEPTRE_FAKE_NCCL_HANG_RANK");
  return v && *v ? std::atoi(v) : -1;
}
// Completes the pending allreduce if every member's contribution is there.
void try_finish(ncclComm& c) {
  for (int r = 0; r < c.size; ++r) {
    if (!exists(op_file(c, c.pending, r))) return;
  }
  std::vector<float> sum(c.count, 0.0f), part(c.count);
  for (int r = 0; r < c.size; ++r) {
    std::ifstream in(op_file(c, c.pending, r), std::ios::binary);
    in.read(reinterpret_cast<char*>(part.data()), static_cast<std::streamsize>(c.count * sizeof(float)));
    if (!in) return;  // not whole yet (cannot happen with the rename; be safe)
    for (std::size_t i = 0; i < c.count; ++i) sum[i] += part[i];
  }
  std::memcpy(c.buffer, sum.data(), c.count * sizeof(float));
  c.done = true;
}

}  // namespace

extern "C" ncclResult_t ncclCommGetAsyncError(ncclComm_t c, ncclResult_t* state);

namespace {
// A blocking communicator's wait: what GetAsyncError reports once it is no longer in progress.
ncclResult_t block(ncclComm_t c) {
  for (;;) {
    ncclResult_t state = kInProgress;
    ncclCommGetAsyncError(c, &state);
    if (state != kInProgress) return state;
    ::usleep(50);
  }
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
  std::memset(id->internal, 0, sizeof id->internal);
  std::snprintf(id->internal, sizeof id->internal, "fake-nccl-%d-%ld-%u", static_cast<int>(::getpid()), ++ids,
                static_cast<unsigned>(std::random_device{}()));
  return kSuccess;
}
ncclResult_t ncclCommInitRankConfig(ncclComm_t* comm, int size, ncclUniqueId id, int rank, ncclConfig_t* config) {
  if (size <= 0 || rank < 0 || rank >= size || !config) return kInvalidArgument;
  const char* root = std::getenv("SCEPTRE_FAKE_NCCL_DIR");
  if (!root || !*root) root = std::getenv("TMPDIR");
  auto c = std::make_unique<ncclComm>();
  c->dir = std::string(root && *root ? root : "/tmp") + "/" +
           std::string(id.internal, strnlen(id.internal, sizeof id.internal));
  c->rank = rank;
  c->size = size;
  ::mkdir(c->dir.c_str(), 0755);
  const char one = 1;
  if (!write_file(c->dir + "/joined-" + std::to_string(rank), &one, 1)) return 2;  // ncclSystemError
  c->blocking = config->blocking != 0;  // NCCL's default (undefined) is blocking too
  *comm = c.release();
  return (*comm)->blocking ? block(*comm) : kInProgress;
}
ncclResult_t ncclCommInitRank(ncclComm_t* comm, int size, ncclUniqueId id, int rank) {
  ncclConfig_t config;
  config.blocking = 1;
  return ncclCommInitRankConfig(comm, size, id, rank, &config);
}
ncclResult_t ncclCommGetAsyncError(ncclComm_t c, ncclResult_t* state) {
  if (exists(c->dir + "/broken")) {
    *state = kRemoteError;
    return kSuccess;
  }
  if (!c->joined) {
    c->joined = true;
    for (int r = 0; r < c->size && c->joined; ++r) c->joined = exists(c->dir + "/joined-" + std::to_string(r));
  }
  if (c->joined && !c->done && c->rank != hang_rank()) try_finish(*c);
  *state = c->joined && c->done ? kSuccess : kInProgress;
  return kSuccess;
}
ncclResult_t ncclAllReduce(const void* send, void* recv, std::size_t count, ncclDataType_t type, ncclRedOp_t op,
                           ncclComm_t c, cudaStream_t) {
  if (type != kFloat32 || op != kSum || send != recv || !c->done) return kInvalidArgument;  // all the communicator does
  if (exists(c->dir + "/broken")) return kRemoteError;
  c->pending = c->next++;
  c->done = false;
  c->buffer = static_cast<float*>(recv);
  c->count = count;
  if (c->rank == hang_rank()) return kInProgress;  // never arrives
  if (!write_file(op_file(*c, c->pending, c->rank), recv, count * sizeof(float))) return 2;
  return c->blocking ? block(c) : kInProgress;
}
ncclResult_t ncclCommAbort(ncclComm_t c) {
  const char one = 1;
  write_file(c->dir + "/broken", &one, 1);
  std::unique_ptr<ncclComm> gone(c);
  return kSuccess;
}
ncclResult_t ncclCommDestroy(ncclComm_t c) {
  std::unique_ptr<ncclComm> gone(c);
  return kSuccess;
}

}  // extern "C"
