// A single controller driving a mesh of procs on this host: the README's main job.
//
// The controller spawns a mesh of procs ({gpus=4} by default, one process each, the way a job
// gets one per GPU), two Worker actors in each ({gpus=4, shard=2}), and then, printing what it
// does:
//   - call:   every worker reports where it runs (its proc's RANK, its pid, its point);
//   - sum:    every worker computes a partial result, summed inside the cast tree;
//   - slice:  one GPU's workers only, then every other GPU's;
//   - stream: replies as they arrive;
//   - logs:   the workers print, and identical lines from many ranks come out folded;
//   - failure: one proc is killed; the call waiting on it fails at once, the mesh's failure
//              handler respawns the rank, and the whole mesh answers again.
//
//   mesh_demo [--gpus N] [--shards M]
//
// Construct the Runtime first thing in main: the procs are this binary again, and in them the
// Runtime's constructor becomes the proc and never returns.
#include <signal.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <cstdio>
#include <cstdlib>
#include <future>

#include "sceptre/sceptre.h"

namespace {

using namespace sceptre;
using namespace std::chrono_literals;

struct Where {
  std::string rank;  // the proc's RANK
  std::int64_t pid = 0;
  std::string point;  // where the cast put this worker
  SCEPTRE_FIELDS(rank, pid, point)
};

class Worker : public Actor {
 public:
  explicit Worker(std::int64_t seed) : seed_(seed) {}

  Where where() {
    const char* rank = std::getenv("RANK");
    return Where{rank ? rank : "?", ::getpid(), cast_point() ? cast_point()->to_string() : "-"};
  }
  // A stand-in for work: the sum of the squares of a range that depends on the worker's rank.
  std::int64_t partial(std::int64_t n) {
    std::int64_t r = static_cast<std::int64_t>(cast_point()->rank()), total = 0;
    for (std::int64_t i = 0; i < n; ++i) total += (seed_ + r + i) * (seed_ + r + i) % 1000;
    return total;
  }
  std::int64_t rank() { return static_cast<std::int64_t>(cast_point()->rank()); }
  void announce(std::string what) { std::printf("%s\n", what.c_str()); }

 private:
  std::int64_t seed_;
};
SCEPTRE_ACTOR(Worker, where, partial, rank, announce);

}  // namespace

int main(int argc, char** argv) {
  Runtime runtime(argc, argv);  // in a proc, this never returns

  CLI::App app{"sceptre: a single controller driving a mesh of procs on this host"};
  std::size_t gpus = 4, shards = 2;
  app.add_option("--gpus", gpus, "procs in the mesh")->check(CLI::Range(1, 64));
  app.add_option("--shards", shards, "workers per proc")->check(CLI::Range(1, 64));
  CLI11_PARSE(app, argc, argv);

  auto started = std::chrono::steady_clock::now();
  ProcMesh procs = this_host().spawn_procs({{"gpus", gpus}}, "procs");
  ActorMesh<Worker> workers = procs.spawn_many<Worker>("worker", Extent{{"shard", shards}}, std::int64_t{7});
  auto ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - started).count();
  std::printf("spawned %zu procs and %zu workers %s in %.1f ms (cast fan-out %zu)\n", procs.size(), workers.size(),
              workers.extent().to_string().c_str(), ms, runtime.config().cast_fanout);

  std::printf("\ncall: where does every worker run?\n");
  ValueMesh<Where> where = workers.call<&Worker::where>().get(30s);
  for (auto [point, w] : where) {
    std::printf("  %-20s RANK=%s pid %lld\n", point.to_string().c_str(), w.rank.c_str(),
                static_cast<long long>(w.pid));
  }

  std::printf("\nsum: partial results, summed inside the tree\n");
  std::int64_t total = workers.sum<&Worker::partial>(std::int64_t{100000}).get(30s);
  ValueMesh<std::int64_t> parts = workers.call<&Worker::partial>(std::int64_t{100000}).get(30s);
  std::int64_t check = 0;
  for (auto v : parts.values()) check += v;
  std::printf("  sum = %lld (the same values added up here: %lld)\n", static_cast<long long>(total),
              static_cast<long long>(check));
  std::printf("  min rank = %lld, max rank = %lld\n", static_cast<long long>(workers.min<&Worker::rank>().get(30s)),
              static_cast<long long>(workers.max<&Worker::rank>().get(30s)));

  std::printf("\nslice: the workers of gpus=0, and of every other gpu\n");
  auto first = workers.slice("gpus", 0);
  for (auto [point, w] : first.call<&Worker::where>().get(30s)) {
    std::printf("  gpus=0 %-12s is RANK=%s\n", point.to_string().c_str(), w.rank.c_str());
  }
  auto every_other = workers.slice("gpus", Range{0, gpus, 2});
  std::printf("  gpus=0:%zu:2 has extent %s; its ranks sum to %lld\n", gpus, every_other.extent().to_string().c_str(),
              static_cast<long long>(every_other.sum<&Worker::rank>().get(30s)));

  std::printf("\nstream: replies as they arrive\n  ");
  auto stream = workers.stream<&Worker::rank>();
  while (auto r = stream.next(30s)) std::printf("%lld ", static_cast<long long>(r->second));
  std::printf("\n\nlogs: every worker prints the same line, then the shard-0 workers say goodbye\n");
  std::fflush(stdout);
  workers.call<&Worker::announce>(std::string("hello from a worker")).get(30s);
  workers.slice("shard", 0).broadcast<&Worker::announce>(std::string("goodbye"));
  workers.call<&Worker::rank>().get(30s);  // after the broadcast, in order: it has been printed
  std::this_thread::sleep_for(runtime.config().log_fold_window * 2);  // let the folded lines out

  std::printf("\nfailure: kill -9 the proc of gpus=%zu while every worker is busy\n", gpus - 1);
  std::promise<void> respawned;
  procs.on_failure([&](const MeshFailure& f) {  // the mesh by reference: a copy would keep it alive
    std::printf("  supervisor: %s\n", f.summary().c_str());
    procs.respawn({f.rank});
    std::printf("  supervisor: respawned rank %zu (pid %d now)\n", f.rank, procs.pid(f.rank));
    respawned.set_value();
    return Supervise::kHandled;
  });
  auto busy = workers.call<&Worker::partial>(std::int64_t{100'000'000});
  std::this_thread::sleep_for(100ms);
  const auto killed_at = std::chrono::steady_clock::now();
  ::kill(procs.pid(gpus - 1), SIGKILL);
  try {
    busy.get(60s);
  } catch (const SupervisionError& e) {
    std::printf("  the call failed after %.1f ms: %s\n",
                std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - killed_at).count(),
                e.what());
  }
  respawned.get_future().wait();
  std::printf("  every worker answers again; their ranks sum to %lld\n",
              static_cast<long long>(workers.sum<&Worker::rank>().get(60s)));

  procs.stop();
  std::printf("\nstopped the mesh; done\n");
  return 0;
}
