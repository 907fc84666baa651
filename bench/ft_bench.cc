// ft_bench: fault-tolerant training (issue 6), measured in one run.
//
//   allreduce  bus bandwidth of the Communicator beside plain Gloo (the same library, called
//              directly, with no sceptre code around it), 4 MiB and 64 MiB float32, 2 and 4 ranks
//              (threads of this process, on loopback TCP)
//   faults     the same model and step time trained without failures and then with a SIGKILL of
//              a random replica on a seeded schedule (on average every --fault-every steps):
//              time from each fault to the survivors' next commit, attempts and work lost per
//              failure, step efficiency, healing bandwidth, and sample goodput (committed samples
//              ÷ what the failure-free run commits in the same wall time)
//
//   ft_bench [--parts allreduce,faults] [--steps 200] [--fault-every 5.5] [--hidden 512]
#include <gloo/allreduce.h>
#include <gloo/math.h>
#include <gloo/rendezvous/context.h>
#include <gloo/rendezvous/hash_store.h>
#include <gloo/transport/tcp/device.h>
#include <signal.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <cstdio>
#include <future>
#include <mutex>
#include <random>
#include <thread>

#include "bench_util.h"
#include "sceptre/collective/communicator.h"
#include "sceptre/sceptre.h"
#include "sceptre/train/ft_ddp.h"

namespace {

using namespace sceptre;
using bench::Clock;
using namespace std::chrono_literals;

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}

// Seconds per allreduce (median of `iters`) of every rank running `op(rank)` at once.
double time_ranks(std::size_t n, int iters, const std::function<void(std::size_t)>& op) {
  std::vector<double> times;
  for (int it = -2; it < iters; ++it) {
    std::vector<std::thread> threads;
    auto t0 = Clock::now();
    for (std::size_t r = 0; r < n; ++r) threads.emplace_back([&, r] { op(r); });
    for (auto& t : threads) t.join();
    if (it >= 0) times.push_back(std::chrono::duration<double>(Clock::now() - t0).count());
  }
  return median(times);
}

void allreduce_part(int iters) {
  std::printf("allreduce bus bandwidth, GB/s (2(n-1)/n x bytes / time; median of %d)\n", iters);
  std::printf("%-6s %-8s %12s %12s %8s\n", "ranks", "size", "plain gloo", "sceptre", "ratio");
  for (std::size_t n : {2u, 4u}) {
    for (std::size_t mib : {4u, 64u}) {
      std::size_t len = mib * (1u << 20) / sizeof(float);
      std::vector<std::vector<float>> data(n, std::vector<float>(len, 1.0f));
      // Plain Gloo: a rendezvous context over a HashStore, gloo::allreduce (ring).
      gloo::rendezvous::HashStore hash;
      std::vector<std::shared_ptr<gloo::rendezvous::Context>> plain(n);
      {
        std::vector<std::thread> t;
        for (std::size_t r = 0; r < n; ++r) {
          t.emplace_back([&, r] {
            gloo::transport::tcp::attr attr;
            attr.hostname = "127.0.0.1";
            auto ctx = std::make_shared<gloo::rendezvous::Context>(static_cast<int>(r), static_cast<int>(n));
            auto device = gloo::transport::tcp::CreateDevice(attr);
            ctx->connectFullMesh(hash, device);
            plain[r] = ctx;
          });
        }
        for (auto& x : t) x.join();
      }
      collective::MemoryStore store;
      std::vector<std::unique_ptr<collective::Communicator>> comms(n);
      {
        std::vector<std::thread> t;
        for (std::size_t r = 0; r < n; ++r) {
          t.emplace_back([&, r] {
            comms[r] = collective::connect_gloo(store, r, n, {.prefix = "b", .timeout = 30s}).value();
          });
        }
        for (auto& x : t) x.join();
      }
      auto plain_op = [&](std::size_t r) {
        gloo::AllreduceOptions opts(plain[r]);
        opts.setInput(data[r].data(), len);
        opts.setOutput(data[r].data(), len);
        opts.setAlgorithm(gloo::AllreduceOptions::Algorithm::RING);
        opts.setReduceFunction(static_cast<void (*)(void*, const void*, const void*, std::size_t)>(&gloo::sum<float>));
        gloo::allreduce(opts);
      };
      auto ours_op = [&](std::size_t r) { comms[r]->allreduce_sum(std::span(data[r])).check(); };
      // Interleaved, one repetition of each at a time, so drift on this VM hits both alike.
      std::vector<double> tp, to;
      for (int k = 0; k < iters; ++k) {
        tp.push_back(time_ranks(n, 1, plain_op));
        to.push_back(time_ranks(n, 1, ours_op));
      }
      double t_plain = median(tp), t_ours = median(to);
      double bytes = 2.0 * (n - 1) / n * len * sizeof(float);
      std::printf("%-6zu %4zu MiB %12.3f %12.3f %8.3f\n", n, mib, bytes / t_plain / 1e9, bytes / t_ours / 1e9,
                  t_plain / t_ours);
      std::fflush(stdout);
    }
  }
}

struct Run {
  train::Summary summary;
  std::vector<double> recovery_ms;  // fault -> next commit
  std::size_t kills = 0;
};

Run train_run(ProcMesh& procs, const train::TrainOptions& o, double fault_every, std::uint64_t seed) {
  Run run;
  train::FtDdp ddp(procs, o);
  std::mt19937_64 rng(seed);
  std::bernoulli_distribution fault(fault_every > 0 ? 1.0 / fault_every : 0.0);
  // Kill times not yet followed by a commit (written by the killer threads).
  auto mu = std::make_shared<std::mutex>();
  auto pending = std::make_shared<std::vector<Clock::time_point>>();
  ddp.on_step([&](const train::StepRecord& r, std::size_t live) {
    auto now = Clock::now();
    {
      std::lock_guard lock(*mu);
      for (auto t : *pending) run.recovery_ms.push_back(std::chrono::duration<double, std::milli>(now - t).count());
      pending->clear();
    }
    if (fault_every > 0 && fault(rng) && r.members.size() > 1) {
      auto victim = r.members[rng() % r.members.size()];
      int pid = procs.pid(victim);
      if (pid > 0) {
        // Mid-step: the next attempt is under way when the replica dies.
        std::thread([pid, mu, pending, delay = std::uniform_int_distribution<int>(1, 20)(rng)] {
          std::this_thread::sleep_for(std::chrono::milliseconds(delay));
          std::lock_guard lock(*mu);
          ::kill(pid, SIGKILL);
          pending->push_back(Clock::now());
        }).detach();
        ++run.kills;
      }
    }
  });
  run.summary = ddp.run();
  return run;
}

void faults_part(std::size_t replicas, train::TrainOptions o, double fault_every, std::uint64_t seed) {
  auto procs = this_host().spawn_procs({{"replicas", replicas}}, "bench");
  std::printf("\nfaults: %zu replicas, %llu steps, batch %llu, MLP hidden %lld (%zu parameters)\n", replicas,
              static_cast<unsigned long long>(o.steps), static_cast<unsigned long long>(o.batch),
              static_cast<long long>(o.model.hidden), train::ReplicaCore(o.model).parameter_count());
  Run clean = train_run(procs, o, 0, seed);
  auto& c = clean.summary;
  std::vector<double> step_ms;
  for (std::size_t i = 1; i < c.steps.size(); ++i) step_ms.push_back(1e3 * (c.steps[i].seconds - c.steps[i - 1].seconds));
  double rate = c.samples / c.seconds;
  std::printf("  failure-free: %llu steps in %.2f s, step %.1f ms (median), %.0f samples/s\n",
              static_cast<unsigned long long>(c.committed), c.seconds, median(step_ms), rate);

  Run f = train_run(procs, o, fault_every, seed);
  auto& s = f.summary;
  double bytes = 0, secs = 0;
  for (auto& e : s.events)
    if (e.kind == train::Event::Kind::kJoined) bytes += e.bytes, secs += e.seconds;
  auto [p50, p99] = bench::percentiles(f.recovery_ms);
  std::size_t failures = std::max<std::size_t>(1, s.failures);
  std::printf("  with faults (a SIGKILL every %.1f steps on average): %zu kills, %zu failures, %zu heals in %.2f s\n",
              fault_every, f.kills, s.failures, s.heals, s.seconds);
  std::printf("    fault -> next committed step: p50 %.1f ms, p99 %.1f ms (step %.1f ms)\n", p50, p99, median(step_ms));
  std::printf("    attempts: %llu for %llu committed steps (%.2f discarded per failure; committed steps lost: 0)\n",
              static_cast<unsigned long long>(s.attempted), static_cast<unsigned long long>(s.committed),
              double(s.attempted - s.committed) / failures);
  std::printf("    step efficiency (replica-steps committed / computed): %.1f%%  (committed / attempted steps: %.1f%%)\n",
              100.0 * s.gradients_committed / std::max<std::uint64_t>(1, s.gradients_computed),
              100.0 * s.committed / std::max<std::uint64_t>(1, s.attempted));
  std::printf("    sample goodput: %.1f%% (%llu samples in %.2f s; failure-free rate %.0f/s)\n",
              100.0 * s.samples / (rate * s.seconds), static_cast<unsigned long long>(s.samples), s.seconds, rate);
  std::printf("    healing: %.1f MB fetched in %.3f s (%.2f GB/s)\n", bytes / 1e6, secs, secs > 0 ? bytes / secs / 1e9 : 0);
  std::uint64_t d0 = s.digests.empty() ? 0 : s.digests.begin()->second;
  bool same = std::all_of(s.digests.begin(), s.digests.end(), [&](auto& d) { return d.second == d0; });
  std::printf("    %zu live replicas at the end, %s\n", s.digests.size(), same ? "bitwise identical" : "DIFFERENT");
}

}  // namespace

int main(int argc, char** argv) {
  auto loaded = Config::load();
  if (!loaded) return 2;
  Config config = *loaded;
  config.log_level = "error";
  Runtime runtime(argc, argv, config);

  CLI::App app("ft_bench: fault-tolerant training (issue 6)");
  std::string parts = "allreduce,faults";
  std::size_t replicas = 4;
  train::TrainOptions o;
  o.steps = 200;
  o.model.hidden = 512;
  o.end_with_all_replicas = true;
  double fault_every = 5.5;
  std::uint64_t seed = 6;
  int iters = 21;
  app.add_option("--parts", parts, "allreduce,faults");
  app.add_option("--replicas", replicas);
  app.add_option("--steps", o.steps);
  app.add_option("--batch", o.batch);
  app.add_option("--hidden", o.model.hidden);
  app.add_option("--fault-every", fault_every, "mean steps between faults");
  app.add_option("--seed", seed);
  app.add_option("--iters", iters, "allreduce repetitions");
  CLI11_PARSE(app, argc, argv);
  if (parts.find("allreduce") != std::string::npos) allreduce_part(iters);
  if (parts.find("faults") != std::string::npos) faults_part(replicas, o, fault_every, seed);
  return 0;
}
