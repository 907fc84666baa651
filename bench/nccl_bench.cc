// nccl_bench: allreduce bandwidth through sceptre's NCCL Communicator beside direct NCCL calls,
// in the same run, on the GPUs of this host (issue 7's target: the Communicator at >= 95 % of
// direct). One thread per GPU; the same buffers, sizes and iterations for both:
//   direct        a blocking NCCL communicator: ncclAllReduce, then the stream synchronised —
//                 what a plain NCCL user writes;
//   communicator  collective::connect_nccl: a non-blocking communicator whose every collective
//                 is polled, so that it can end at its deadline or at abort().
// Reported per size: the slowest rank's mean time per allreduce, algorithm bandwidth
// (bytes / time) and bus bandwidth (algbw * 2(n-1)/n, nccl-tests' convention; 0 for one GPU).
// On a host without a GPU it fails, unless pointed at the fake libraries (LD_LIBRARY_PATH), whose
// figures measure nothing but the code path.
//
//   nccl_bench [--ranks N] [--sizes 1048576,67108864] [--iters 20] [--warmup 5]
#include <barrier>
#include <chrono>
#include <cstdio>
#include <thread>
#include <vector>

#include <CLI/CLI.hpp>

#include "collective/nccl/nccl_api.h"
#include "gpu/dynlib.h"
#include "sceptre/collective/communicator.h"
#include "sceptre/gpu/runtime.h"

namespace {

using namespace sceptre;
using Clock = std::chrono::steady_clock;
namespace nc = collective::nccl;

// The direct path's NCCL: the communicator's list and the blocking init.
struct Direct {
  nc::Api api;
  nc::ncclResult_t (*init_rank)(nc::ncclComm_t*, int, nc::ncclUniqueId, int) = nullptr;
};

Result<Direct> load_direct(gpu::Vendor vendor) {
  const bool amd = vendor == gpu::Vendor::kHip;
  auto lib = gpu::DynLib::open({amd ? "librccl.so.1" : "libnccl.so.2"});
  if (!lib) return std::move(lib).error();
  Direct d;
#define SCEPTRE_BENCH_BIND(name, type) SCEPTRE_RETURN_IF_ERROR(lib->bind(d.api.name, #name));
  SCEPTRE_NCCL_FUNCTIONS(SCEPTRE_BENCH_BIND)
#undef SCEPTRE_BENCH_BIND
  SCEPTRE_RETURN_IF_ERROR(lib->bind(d.init_rank, "ncclCommInitRank"));
  return d;
}

struct Timing {
  double seconds = 0;  // the slowest rank's mean per allreduce
  std::string error;
};

// Runs `body(rank, iteration)` `warmup + iters` times on each rank's thread, the timed ones
// between two barriers; the slowest rank's mean.
template <class Body>
Timing timed(int ranks, int warmup, int iters, const Body& body) {
  std::barrier sync(ranks);
  std::vector<double> took(ranks, 0);
  std::vector<std::string> errors(ranks);
  std::vector<std::thread> threads;
  for (int r = 0; r < ranks; ++r) {
    threads.emplace_back([&, r] {
      for (int i = 0; i < warmup && errors[r].empty(); ++i) errors[r] = body(r);
      sync.arrive_and_wait();
      const auto t0 = Clock::now();
      for (int i = 0; i < iters && errors[r].empty(); ++i) errors[r] = body(r);
      took[r] = std::chrono::duration<double>(Clock::now() - t0).count() / iters;
      sync.arrive_and_wait();
    });
  }
  for (auto& t : threads) t.join();
  Timing out;
  for (int r = 0; r < ranks; ++r) {
    out.seconds = std::max(out.seconds, took[r]);
    if (out.error.empty() && !errors[r].empty()) out.error = "rank " + std::to_string(r) + ": " + errors[r];
  }
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"allreduce bandwidth: sceptre's NCCL Communicator beside direct NCCL"};
  int ranks = 0, iters = 20, warmup = 5;
  std::vector<std::size_t> sizes{1 << 20, 16 << 20, 64 << 20, 256 << 20};
  app.add_option("--ranks", ranks, "GPUs, one thread each (default: every GPU of the host)");
  app.add_option("--sizes", sizes, "bytes per allreduce")->delimiter(',');
  app.add_option("--iters", iters, "timed allreduces per size")->check(CLI::PositiveNumber);
  app.add_option("--warmup", warmup, "untimed allreduces first");
  CLI11_PARSE(app, argc, argv);

  gpu::Runtime& gpu = gpu::runtime();
  if (gpu.device_count() == 0) {
    std::fprintf(stderr, "nccl_bench: no GPU here: %s\n", gpu::why_none().c_str());
    return 2;
  }
  if (ranks <= 0 || ranks > gpu.device_count()) ranks = gpu.device_count();
  auto direct = load_direct(gpu.vendor());
  if (!direct) {
    std::fprintf(stderr, "nccl_bench: %s\n", direct.error().to_string().c_str());
    return 2;
  }
  int version = 0;
  direct->api.ncclGetVersion(&version);
  std::printf("%s %s (%s), %d GPU%s (%s), NCCL version code %d, %d iterations after %d\n",
              std::string(gpu::vendor_name(gpu.vendor())).c_str(), gpu.origin().version.c_str(),
              gpu.origin().library.c_str(), ranks, ranks == 1 ? "" : "s", gpu.device(0)->name.c_str(), version, iters,
              warmup);

  // The direct communicators (blocking), one per rank, and the Communicators.
  nc::ncclUniqueId id{};
  direct->api.ncclGetUniqueId(&id);
  std::vector<nc::ncclComm_t> comms(ranks, nullptr);
  std::vector<gpu::Runtime::Handle> streams(ranks, nullptr);
  std::vector<std::unique_ptr<collective::Communicator>> ours(ranks);
  collective::MemoryStore store;
  collective::CommOptions o;
  o.prefix = "bench";
  o.timeout = std::chrono::seconds(120);
  Timing setup = timed(ranks, 0, 1, [&](int r) -> std::string {
    if (auto s = gpu.set_device(r); !s.ok()) return s.error().to_string();
    auto st = gpu.create_stream();
    if (!st) return st.error().to_string();
    streams[r] = *st;
    if (auto x = direct->init_rank(&comms[r], ranks, id, r); x != nc::kSuccess) return "ncclCommInitRank: " + std::to_string(x);
    auto c = collective::connect_nccl(store, r, ranks, o, gpu, r);
    if (!c) return c.error().to_string();
    ours[r] = std::move(*c);
    return "";
  });
  if (!setup.error.empty()) {
    std::fprintf(stderr, "nccl_bench: setting up: %s\n", setup.error.c_str());
    return 1;
  }

  std::printf("%12s %12s %12s %12s %12s %12s %12s %9s\n", "bytes", "direct us", "algbw GB/s", "busbw GB/s",
              "comm us", "algbw GB/s", "busbw GB/s", "comm/dir");
  const double bus = ranks > 1 ? 2.0 * (ranks - 1) / ranks : 0.0;
  int rc = 0;
  for (std::size_t bytes : sizes) {
    const std::size_t count = bytes / sizeof(float);
    std::vector<float*> bufs(ranks, nullptr);
    for (int r = 0; r < ranks; ++r) {
      (void)gpu.set_device(r);
      auto p = gpu.allocate(count * sizeof(float));
      if (!p) {
        std::fprintf(stderr, "nccl_bench: %s\n", p.error().to_string().c_str());
        return 1;
      }
      bufs[r] = static_cast<float*>(*p);
      std::vector<float> zeros(count, 0.0f);  // sums of zeros stay finite however many rounds
      (void)gpu.copy_to_device(bufs[r], zeros.data(), count * sizeof(float), nullptr);
      (void)gpu.synchronize(nullptr);
    }
    Timing d = timed(ranks, warmup, iters, [&](int r) -> std::string {
      (void)gpu.set_device(r);
      auto x = direct->api.ncclAllReduce(bufs[r], bufs[r], count, nc::kFloat32, nc::kSum, comms[r],
                                         static_cast<nc::cudaStream_t>(streams[r]));
      if (x != nc::kSuccess) return "ncclAllReduce: " + std::to_string(x);
      auto s = gpu.synchronize(streams[r]);
      return s.ok() ? "" : s.error().to_string();
    });
    Timing c = timed(ranks, warmup, iters, [&](int r) -> std::string {
      auto s = ours[r]->allreduce_sum(std::span(bufs[r], count));
      return s.ok() ? "" : s.error().to_string();
    });
    if (!d.error.empty() || !c.error.empty()) {
      std::fprintf(stderr, "nccl_bench: %zu bytes: %s%s\n", bytes, d.error.c_str(), c.error.c_str());
      rc = 1;
      break;
    }
    const double da = bytes / d.seconds / 1e9, ca = bytes / c.seconds / 1e9;
    std::printf("%12zu %12.1f %12.2f %12.2f %12.1f %12.2f %12.2f %8.1f%%\n", bytes, d.seconds * 1e6, da, da * bus,
                c.seconds * 1e6, ca, ca * bus, 100.0 * ca / da);
    for (int r = 0; r < ranks; ++r) (void)gpu.free(bufs[r]);
  }
  ours.clear();
  for (int r = 0; r < ranks; ++r) {
    direct->api.ncclCommDestroy(comms[r]);
    (void)gpu.destroy_stream(streams[r]);
  }
  return rc;
}
