// The NCCL communicator: NCCL on NVIDIA, RCCL on AMD (the same API), opened at run time like the
// GPU runtime it works with (nccl_api.h lists what it uses).
//
// The communicator is non-blocking (ncclConfig_t::blocking = 0): no NCCL call waits for a peer,
// so every wait here is one poll() of ncclCommGetAsyncError (and of an event after the collective),
// which ends at the deadline, at abort(), or at an error NCCL reports (a peer that aborted) —
// and then ncclCommAbort frees whatever NCCL was still waiting on.
#include <algorithm>
#include <atomic>
#include <cstdio>
#include <mutex>
#include <optional>
#include <thread>

#include "collective/nccl/nccl_api.h"
#include "gpu/dynlib.h"
#include "sceptre/collective/communicator.h"
#include "sceptre/gpu/runtime.h"

namespace sceptre::collective {
namespace {

using namespace nccl;  // NOLINT: NCCL's own names read best here
using Clock = std::chrono::steady_clock;

std::string text(const Api& api, ncclResult_t r) {
  const char* s = api.ncclGetErrorString ? api.ncclGetErrorString(r) : nullptr;
  return s ? s : "error " + std::to_string(r);
}

std::string hex(const ncclUniqueId& id) {
  std::string out;
  char b[3];
  for (unsigned char c : id.internal) {
    std::snprintf(b, sizeof b, "%02x", c);
    out += b;
  }
  return out;
}

Result<ncclUniqueId> unhex(const std::string& s) {
  ncclUniqueId id{};
  if (s.size() != 2 * sizeof id.internal) return Error(Code::kDataLoss, "a malformed NCCL unique id in the store");
  for (std::size_t i = 0; i < sizeof id.internal; ++i) {
    unsigned v = 0;
    if (std::sscanf(s.c_str() + 2 * i, "%2x", &v) != 1) return Error(Code::kDataLoss, "a malformed NCCL unique id in the store");
    id.internal[i] = static_cast<char>(v);
  }
  return id;
}

// NCCL's error as an Error: a peer's (a remote error: it left, aborted or lost its network) is
// kUnavailable, as the Gloo communicator says of a peer gone; any other is kInternal.
Error nccl_error(const Api& api, ncclResult_t r, const std::string& what) {
  return Error(r == kRemoteError ? Code::kUnavailable : Code::kInternal, what + ": " + text(api, r));
}

// Polls until NCCL no longer reports `comm` in progress and `done()` (what else is awaited: an
// event; Result<bool>) says so: ok, NCCL's or done()'s error, the deadline, or `stop` saying the
// wait is abandoned (abort).
template <class Stop, class Done>
Status poll(const Api& api, ncclComm_t comm, Clock::time_point deadline, const Stop& stop, const std::string& what,
            const Done& done) {
  auto nap = std::chrono::microseconds(20);
  for (;;) {
    ncclResult_t state = kInProgress;
    if (ncclResult_t r = api.ncclCommGetAsyncError(comm, &state); r != kSuccess) state = r;
    if (state != kSuccess && state != kInProgress) return nccl_error(api, state, what);
    if (state == kSuccess) {
      Result<bool> finished = done();
      if (!finished) return std::move(finished).error();
      if (*finished) return ok_status();
    }
    if (auto why = stop()) return Error(Code::kAborted, what + ": aborted: " + *why);
    if (Clock::now() >= deadline) return Error(Code::kDeadlineExceeded, what + ": not done by its deadline");
    std::this_thread::sleep_for(nap);
    nap = std::min<std::chrono::microseconds>(nap * 2, std::chrono::milliseconds(1));
  }
}
Result<bool> nothing_else() { return true; }

class NcclCommunicator final : public Communicator {
 public:
  NcclCommunicator(Api api, std::string backend, ncclComm_t comm, gpu::Runtime& gpu, int device,
                   gpu::Runtime::Handle stream, gpu::Runtime::Handle event, std::size_t rank, std::size_t size,
                   std::chrono::milliseconds timeout)
      : api_(api), backend_(std::move(backend)), comm_(comm), gpu_(gpu), device_(device), stream_(stream),
        event_(event), rank_(rank), size_(size), timeout_(timeout) {}
  ~NcclCommunicator() override {
    {
      std::lock_guard lock(mu_);
      if (!comm_aborted_) api_.ncclCommDestroy(comm_);
    }
    (void)gpu_.destroy_event(event_);
    (void)gpu_.destroy_stream(stream_);
  }

  std::size_t rank() const override { return rank_; }
  std::size_t size() const override { return size_; }
  std::string_view backend() const override { return backend_; }

  Result<void> allreduce_sum(std::span<float> data) override {
    std::lock_guard op(op_mu_);  // one collective at a time, in order
    if (auto why = stopped()) return Error(Code::kAborted, backend_ + " communicator aborted: " + *why);
    {
      std::lock_guard lock(mu_);
      in_flight_ = true;
    }
    Status s = run_allreduce(data);
    std::lock_guard lock(mu_);
    in_flight_ = false;
    if (!s.ok()) {
      if (!why_) why_ = s.error().message();
      abort_comm();  // unusable now: NCCL frees what it still waits on
    } else if (why_) {
      abort_comm();  // abort() came while this one ran and finished anyway
    }
    return s;
  }

  void abort(const std::string& why) override {
    std::lock_guard lock(mu_);
    if (!why_) why_ = why;
    if (!in_flight_) abort_comm();  // else the collective's own thread does, at once
  }

 private:
  Status run_allreduce(std::span<float> data) {
    const std::string what = backend_ + " allreduce of " + std::to_string(data.size()) + " floats";
    const auto deadline = Clock::now() + timeout_;
    auto stop = [this] { return stopped(); };
    SCEPTRE_RETURN_IF_ERROR(gpu_.set_device(device_));
    const ncclResult_t r = api_.ncclAllReduce(data.data(), data.data(), data.size(), kFloat32, kSum, comm_,
                                             static_cast<cudaStream_t>(stream_));
    if (r != kSuccess && r != kInProgress) return nccl_error(api_, r, what + ": ncclAllReduce");
    SCEPTRE_RETURN_IF_ERROR(poll(api_, comm_, deadline, stop, what, nothing_else));  // enqueued
    SCEPTRE_RETURN_IF_ERROR(gpu_.record(event_, stream_));
    return poll(api_, comm_, deadline, stop, what, [this] { return gpu_.query(event_); });  // run on the device
  }
  std::optional<std::string> stopped() {
    std::lock_guard lock(mu_);
    return why_;
  }
  void abort_comm() {  // mu_ held
    if (comm_aborted_) return;
    comm_aborted_ = true;
    api_.ncclCommAbort(comm_);
  }

  const Api api_;
  const std::string backend_;
  const ncclComm_t comm_;
  gpu::Runtime& gpu_;  // the process's, which outlives every communicator
  const int device_;
  const gpu::Runtime::Handle stream_, event_;
  const std::size_t rank_, size_;
  const std::chrono::milliseconds timeout_;
  std::mutex op_mu_;  // allreduce_sum
  std::mutex mu_;     // what follows
  std::optional<std::string> why_;  // aborted (or failed), and why
  bool in_flight_ = false;
  bool comm_aborted_ = false;
};

}  // namespace

Result<std::unique_ptr<Communicator>> connect_nccl(KeyValue& store, std::size_t rank, std::size_t size,
                                                   const CommOptions& options, gpu::Runtime& gpu, int device) {
  const bool amd = gpu.vendor() == gpu::Vendor::kHip;
  if (gpu.vendor() == gpu::Vendor::kNone) {
    return Error(Code::kFailedPrecondition, "an NCCL communicator needs a GPU runtime; this process has none");
  }
  const std::string backend = amd ? "rccl" : "nccl";
  const char* var = amd ? "SCEPTRE_RCCL_LIBRARY" : "SCEPTRE_NCCL_LIBRARY";
  const char* v = std::getenv(var);
  auto lib = gpu::DynLib::open({v && *v ? v : amd ? "librccl.so.1" : "libnccl.so.2"});
  if (!lib) return Error(Code::kUnavailable, backend + ": " + lib.error().message());
  Api api;
#define SCEPTRE_NCCL_BIND(name, type) \
  if (auto s = lib->bind(api.name, #name); !s.ok()) return Error(Code::kUnavailable, backend + ": " + s.error().message());
  SCEPTRE_NCCL_FUNCTIONS(SCEPTRE_NCCL_BIND)
#undef SCEPTRE_NCCL_BIND
  SCEPTRE_RETURN_IF_ERROR(gpu.set_device(device));

  // The unique id: rank 0 makes it, the others read it from the store.
  const auto rendezvous = options.rendezvous_timeout.count() > 0 ? options.rendezvous_timeout : options.timeout;
  const std::string key = options.prefix + "/nccl-unique-id";
  ncclUniqueId id{};
  if (rank == 0) {
    if (ncclResult_t r = api.ncclGetUniqueId(&id); r != kSuccess) {
      return Error(Code::kInternal, backend + ": ncclGetUniqueId: " + text(api, r));
    }
    SCEPTRE_RETURN_IF_ERROR(store.set(key, hex(id)));
  } else {
    auto got = store.get(key, rendezvous);
    if (!got) return std::move(got).error();
    auto parsed = unhex(*got);
    if (!parsed) return std::move(parsed).error();
    id = *parsed;
  }

  ncclConfig_t config;
  config.blocking = 0;  // every wait is ours to bound
  ncclComm_t comm = nullptr;
  const std::string what = backend + " communicator rank " + std::to_string(rank) + " of " + std::to_string(size);
  ncclResult_t r = api.ncclCommInitRankConfig(&comm, static_cast<int>(size), id, static_cast<int>(rank), &config);
  if (r != kSuccess && r != kInProgress) return nccl_error(api, r, what + ": ncclCommInitRankConfig");
  Status joined = poll(api, comm, Clock::now() + rendezvous, [] { return std::optional<std::string>(); }, what,
                       nothing_else);
  if (!joined.ok()) {
    api.ncclCommAbort(comm);
    return std::move(joined).error();
  }
  auto stream = gpu.create_stream();
  auto event = stream ? gpu.create_event() : Result<gpu::Runtime::Handle>(stream.error());
  if (!stream || !event) {
    api.ncclCommAbort(comm);
    if (stream) (void)gpu.destroy_stream(*stream);
    return !stream ? stream.error() : event.error();
  }
  return std::unique_ptr<Communicator>(std::make_unique<NcclCommunicator>(api, backend, comm, gpu, device, *stream, *event,
                                                                          rank, size, options.timeout));
}

}  // namespace sceptre::collective
