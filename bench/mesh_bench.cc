// mesh_bench: what the single controller costs (issue 4), in one run.
//
//   1. Spawning: time for spawn_procs of N = 1, 4, 16 procs and for N×M actors in them, beside
//      the floor: posix_spawn of this same binary N times plus one round trip with each child
//      over a socketpair (what any launcher pays to start N processes and hear from them).
//   2. call + sum to 1, 16, 64, 256, 1024 actors (16 procs × up to 64 actors): p50/p99 latency,
//      the messages the controller sent and received per call (actor messages to and from other
//      procs, not the channels' acknowledgements) and the controller's CPU time per call; with
//      the cast tree (fan-out Config::cast_fanout) and flat (the controller calls every actor
//      itself and adds the replies up), side by side.
//   3. Reference: Open MPI's broadcast + reduce of 64 B over TCP with 2, 4 and 16 processes.
//
// Placement: the controller runs on CPU 0, every proc (and every floor child) on CPU 1, so the
// controller's CPU time is its own. On this 2-core VM a blocking wake-up across the cores costs
// ~30 µs; both sides of every comparison pay it alike.
//
//   mesh_bench [--iterations N] [--flat-iterations N] [--reps N] [--mpi-iterations N] [--no-mpi]
#include <spawn.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/wait.h>

#include <CLI/CLI.hpp>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "bench_util.h"
#include "sceptre/sceptre.h"

extern char** environ;

namespace {

using namespace sceptre;
using namespace std::chrono_literals;

class Leaf : public Actor {
 public:
  std::int64_t one() { return 1; }
};
SCEPTRE_ACTOR(Leaf, one);

// --- the spawn floor -------------------------------------------------------------------------------

// A floor child: answer the one ping, exit.
[[noreturn]] void floor_child(int fd) {
  char c;
  if (bench::read_full(fd, &c, 1)) bench::write_full(fd, &c, 1);
  ::_exit(0);
}

// posix_spawn of this binary n times, then one round trip with each; microseconds.
double floor_us(std::size_t n) {
  auto t = bench::Clock::now();
  std::vector<pid_t> pids(n);
  std::vector<int> socks(n);
  for (std::size_t i = 0; i < n; ++i) {
    int sv[2];
    if (::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) != 0) std::abort();
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_adddup2(&fa, sv[1], 3);
    std::vector<std::string> env{"MESH_BENCH_FLOOR_FD=3"};
    for (char** e = environ; *e; ++e) env.emplace_back(*e);
    std::vector<char*> envp, argv{const_cast<char*>("/proc/self/exe"), nullptr};
    for (auto& s : env) envp.push_back(s.data());
    envp.push_back(nullptr);
    if (::posix_spawn(&pids[i], "/proc/self/exe", &fa, nullptr, argv.data(), envp.data()) != 0) std::abort();
    posix_spawn_file_actions_destroy(&fa);
    ::close(sv[1]);
    socks[i] = sv[0];
  }
  char c = 'p';
  for (int s : socks) bench::write_full(s, &c, 1);
  for (int s : socks) bench::read_full(s, &c, 1);
  double us = bench::us_since(t);
  for (std::size_t i = 0; i < n; ++i) {
    ::close(socks[i]);
    ::waitpid(pids[i], nullptr, 0);
  }
  return us;
}

// --- measuring calls --------------------------------------------------------------------------------

double cpu_us() {
  rusage u{};
  ::getrusage(RUSAGE_SELF, &u);
  return static_cast<double>(u.ru_utime.tv_sec + u.ru_stime.tv_sec) * 1e6 +
         static_cast<double>(u.ru_utime.tv_usec + u.ru_stime.tv_usec);
}

struct Series {
  double p50_us = 0, p99_us = 0;
  double sent = 0, received = 0;  // per call
  double cpu_us = 0;              // per call
};

// Runs `call` (which returns the sum it got) `iterations` times after a warm-up.
template <class F>
Series measure(int iterations, std::int64_t expect, F&& call) {
  for (int i = 0; i < bench::warmup(iterations); ++i) call();
  Proc& proc = Proc::current();
  ProcStats s0 = proc.stats();
  double c0 = cpu_us();
  std::vector<double> us;
  us.reserve(static_cast<std::size_t>(iterations));
  for (int i = 0; i < iterations; ++i) {
    auto t = bench::Clock::now();
    std::int64_t got = call();
    us.push_back(bench::us_since(t));
    if (got != expect) {
      std::fprintf(stderr, "mesh_bench: a sum of %lld, not %lld\n", static_cast<long long>(got),
                   static_cast<long long>(expect));
      std::exit(1);
    }
  }
  Series r;
  r.cpu_us = (cpu_us() - c0) / iterations;
  ProcStats s1 = proc.stats();
  r.sent = static_cast<double>(s1.messages_sent - s0.messages_sent) / iterations;
  r.received = static_cast<double>(s1.messages_received - s0.messages_received) / iterations;
  std::tie(r.p50_us, r.p99_us) = bench::percentiles(std::move(us));
  return r;
}


#ifdef SCEPTRE_MPIRUN
std::string mpi_line(int np, int iterations) {
  auto [ok, out] = bench::run_mpi(SCEPTRE_MPIRUN, SCEPTRE_MPI_BENCH, np, std::to_string(iterations));
  auto lines = bench::lines_starting(out, "mpi np=");
  return !ok ? out : lines.empty() ? "no result: " + out : lines[0];
}
#endif

}  // namespace

int main(int argc, char** argv) {
  if (const char* fd = std::getenv("MESH_BENCH_FLOOR_FD")) {
    bench::pin(1);
    floor_child(std::atoi(fd));
  }
  const char* role = std::getenv("SCEPTRE_ROLE");
  if (role && std::strcmp(role, "proc") == 0) {
    bench::pin(1);
  } else {
    bench::pin(0);
  }
  Runtime runtime(argc, argv);  // in a proc, this never returns

  CLI::App app{"mesh_bench: spawn and call+sum costs of the single controller"};
  int iterations = 300, flat_iterations = 60, reps = 5, mpi_iterations = 2000;
  bool no_mpi = false, no_spawn = false;
  std::vector<std::size_t> only;
  app.add_option("--iterations", iterations, "calls per tree series");
  app.add_option("--flat-iterations", flat_iterations, "calls per flat series");
  app.add_option("--reps", reps, "repetitions of each spawn measurement (the median is reported)");
  app.add_option("--mpi-iterations", mpi_iterations, "iterations of the Open MPI reference");
  app.add_flag("--no-mpi", no_mpi, "skip the Open MPI reference");
  app.add_flag("--no-spawn", no_spawn, "skip the spawn measurements");
  app.add_option("--actors", only, "measure calls to these numbers of actors only (1, 16, 64, 256, 1024)");
  CLI11_PARSE(app, argc, argv);

  std::printf("mesh_bench: controller on CPU 0, procs on CPU 1; cast fan-out %zu; medians of %d spawns\n\n",
              runtime.config().cast_fanout, reps);
  std::printf("%-6s %12s %14s %8s %16s %16s\n", "procs", "floor ms", "spawn_procs ms", "x floor", "N×1 actors ms",
              "N×64 actors ms");
  for (std::size_t n : {1, 4, 16}) {
    if (no_spawn) break;
    std::vector<double> floor, procs_ms, actors1, actors64;
    for (int r = 0; r < reps; ++r) {
      floor.push_back(floor_us(n) / 1000);
      auto t = bench::Clock::now();
      ProcMesh procs = this_host().spawn_procs({{"gpus", n}});
      procs_ms.push_back(bench::us_since(t) / 1000);
      t = bench::Clock::now();
      auto one = procs.spawn<Leaf>("one");
      actors1.push_back(bench::us_since(t) / 1000);
      t = bench::Clock::now();
      auto many = procs.spawn_many<Leaf>("many", Extent{{"local", 64}});
      actors64.push_back(bench::us_since(t) / 1000);
      procs.stop();
    }
    double f = bench::median(floor), p = bench::median(procs_ms);
    std::printf("%-6zu %12.2f %14.2f %8.2f %16.2f %16.2f\n", n, f, p, p / f, bench::median(actors1),
                bench::median(actors64));
  }

  std::printf("\ncall + sum: latency, and per call the controller's messages (sent/received) and CPU\n");
  std::printf("%-7s %-5s %10s %10s %8s %8s %10s\n", "actors", "mode", "p50 us", "p99 us", "sent", "recv", "CPU us");
  ProcMesh procs = this_host().spawn_procs({{"gpus", 16}});
  struct Size {
    std::size_t actors;
    ProcMesh where;
    std::size_t per_proc;
  };
  std::vector<Size> sizes{{1, procs.slice("gpus", Range{0, 1}), 1},
                          {16, procs, 1},
                          {64, procs, 4},
                          {256, procs, 16},
                          {1024, procs, 64}};
  for (auto& s : sizes) {
    if (!only.empty() && std::find(only.begin(), only.end(), s.actors) == only.end()) continue;
    ActorMesh<Leaf> leaves = s.where.spawn_many<Leaf>("leaf" + std::to_string(s.actors), Extent{{"local", s.per_proc}});
    const auto n = static_cast<std::int64_t>(leaves.size());
    Series tree = measure(iterations, n, [&] { return leaves.sum<&Leaf::one>().get(60s); });
    std::vector<ActorRef<Leaf>> refs;
    for (std::size_t r = 0; r < leaves.size(); ++r) refs.push_back(leaves.at(r));
    std::vector<Future<std::int64_t>> futures(refs.size());
    Series flat = measure(flat_iterations, n, [&] {
      for (std::size_t r = 0; r < refs.size(); ++r) futures[r] = refs[r].call<&Leaf::one>();
      std::int64_t sum = 0;
      for (auto& f : futures) sum += f.get(60s);
      return sum;
    });
    for (auto [mode, r] : {std::pair{"tree", tree}, std::pair{"flat", flat}}) {
      std::printf("%-7zu %-5s %10.1f %10.1f %8.1f %8.1f %10.1f\n", s.actors, mode, r.p50_us, r.p99_us, r.sent,
                  r.received, r.cpu_us);
    }
    std::fflush(stdout);
  }
  procs.stop();

#if defined(SCEPTRE_MPIRUN) && defined(SCEPTRE_MPI_BENCH)
  if (!no_mpi) {
    std::printf("\nreference: Open MPI bcast + reduce of 64 B over TCP (busy-polling; not a target)\n");
    for (int np : {2, 4, 16}) {
      std::printf("  %s\n", mpi_line(np, np > 2 ? mpi_iterations / 10 : mpi_iterations).c_str());
      std::fflush(stdout);
    }
  }
#else
  if (!no_mpi) std::printf("\nreference: Open MPI was not found at build time\n");
#endif
  return 0;
}
