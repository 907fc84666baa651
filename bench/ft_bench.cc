// ft_bench: fault-tolerant training (issue 6), measured in one run.
//
//   allreduce  bus bandwidth of the Communicator beside plain Gloo (the same library, called
//              directly, with no sceptre code around it), 4 MiB and 64 MiB float32, 2 and 4 ranks
//              (threads of this process, on loopback TCP), and beside Open MPI's MPI_Allreduce
//              over TCP (bench/mpi_allreduce, ranks as processes under mpirun)
//   faults     the same model and step time trained without failures and then with a SIGKILL of
//              a random replica on a seeded schedule (on average every --fault-every steps, at a
//              uniformly random time in the step, or within --kill-within ms of its start):
//              time from each fault to the survivors' next commit, attempts and work lost per
//              failure, step efficiency, healing bandwidth, and sample goodput (committed samples
//              ÷ what the failure-free run commits in the same wall time)
//   heal       one replica of a large state (--heal-hidden; 1 GB by default) SIGKILLed, and its
//              replacement healed from a live peer: the transfer's bandwidth with the survivor
//              waiting (2 replicas, at least 2 needed) and with the survivor training on (at
//              least 1), and its step time during the heal beside 1 replica without faults
//              (--heal-trace prints each run's commits and events with their times)
//   checkpoint the same training without checkpoints and with one every --ckpt-every steps of a
//              larger state (--ckpt-hidden): the stall of each (the in-memory copy) as a share
//              of the step time, the steps' time while a checkpoint persists, and the persist
//              bandwidth (capture to manifest) beside fio writing the same files (a job each),
//              buffered + fsync, in the same directory, before and after, and while the same
//              training runs without checkpoints (at the steps a checkpoint would begin)
//
//   ft_bench [--parts allreduce,faults,heal,checkpoint] [--steps 200] [--fault-every 5.5] [--kill-within 0] [--hidden 512]
//            [--heal-hidden 9100] [--heal-kill-at 20] [--heal-steps 6] [--heal-trace]
//            [--ckpt-hidden 2048] [--ckpt-every 10] [--ckpt-dir ft_bench.ckpt]
#include <gloo/allreduce.h>
#include <gloo/math.h>
#include <gloo/rendezvous/context.h>
#include <gloo/rendezvous/hash_store.h>
#include <gloo/transport/tcp/device.h>
#include <signal.h>
#include <sys/wait.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <numeric>
#include <cstdio>
#include <filesystem>
#include <future>
#include <map>
#include <mutex>
#include <nlohmann/json.hpp>
#include <random>
#include <sstream>
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
  std::printf("%-6s %-8s %12s %12s %8s %12s\n", "ranks", "size", "plain gloo", "sceptre", "ratio", "open mpi");
  for (std::size_t n : {2u, 4u}) {
    // Open MPI over TCP (mpirun, its ranks as processes), both sizes in one launch, before Gloo's.
    std::map<std::size_t, double> mpi_seconds;
    std::string mpi_error = "not built";
#if defined(SCEPTRE_MPIRUN) && defined(SCEPTRE_MPI_ALLREDUCE)
    auto [ok, out] = bench::run_mpi(SCEPTRE_MPIRUN, SCEPTRE_MPI_ALLREDUCE, static_cast<int>(n),
                                    std::to_string(iters) + " 4 64");
    mpi_error = ok ? "no result" : out;
    for (auto& line : bench::lines_starting(out, "mpi np=")) {
      int np = 0, mib = 0;
      double sec = 0;
      if (std::sscanf(line.c_str(), "mpi np=%d mib=%d seconds=%lf", &np, &mib, &sec) == 3) mpi_seconds[mib] = sec;
    }
#endif
    if (mpi_seconds.empty()) std::printf("open mpi, %zu ranks: %s\n", n, mpi_error.c_str());
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
      double mpi = mpi_seconds.count(mib) ? bytes / mpi_seconds[mib] / 1e9 : 0;
      std::printf("%-6zu %4zu MiB %12.3f %12.3f %8.3f %12.3f\n", n, mib, bytes / t_plain / 1e9, bytes / t_ours / 1e9,
                  t_plain / t_ours, mpi);
      std::fflush(stdout);
    }
  }
}

// SIGKILLs `pid` after `delay_ms` (mid-step: the next attempt is under way when it dies) and
// records the time in `pending`, the kills not yet followed by a commit; not once `*over` (the
// run's last step is committed: its procs must be whole for the next run).
void kill_soon(int pid, int delay_ms, std::shared_ptr<std::mutex> mu,
               std::shared_ptr<std::vector<Clock::time_point>> pending, std::shared_ptr<bool> over = {}) {
  std::thread([=] {
    std::this_thread::sleep_for(std::chrono::milliseconds(delay_ms));
    std::lock_guard lock(*mu);
    if (over && *over) return;
    ::kill(pid, SIGKILL);
    pending->push_back(Clock::now());
  }).detach();
}

struct Run {
  train::Summary summary;
  std::vector<double> recovery_ms;  // fault -> next commit
  std::size_t kills = 0;
  // For --events-out: each commit (step, members, attempts) and each kill, as the bench saw them.
  std::vector<std::pair<Clock::time_point, std::string>> marks;
};

std::string per_member(const train::StepRecord& r) {  // " r:compute/reduce" for each member
  std::string out;
  char buf[64];
  for (std::size_t i = 0; i < r.members.size() && i < r.compute_ms.size(); ++i) {
    std::snprintf(buf, sizeof buf, " %zu:%.1f/%.1f", r.members[i], r.compute_ms[i], r.reduce_ms[i]);
    out += buf;
  }
  return out;
}

// From the start of a run to its last commit (a run with faults then waits for every replica).
double committed_seconds(const train::Summary& s) { return s.steps.empty() ? s.seconds : s.steps.back().seconds; }

// A fault after a commit, with probability 1/fault_every, lands 1 to `within_ms` ms into the next step.
Run train_run(ProcMesh& procs, const train::TrainOptions& o, double fault_every, int within_ms, std::uint64_t seed) {
  Run run;
  auto with = o;
  with.end_with_all_replicas = true;  // every replica killed is back for the next run
  train::FtDdp ddp(procs, with);
  auto over = std::make_shared<bool>(false);
  std::mt19937_64 rng(seed);
  std::bernoulli_distribution fault(fault_every > 0 ? 1.0 / fault_every : 0.0);
  // Kill times not yet followed by a commit (written by the killer threads).
  auto mu = std::make_shared<std::mutex>();
  auto pending = std::make_shared<std::vector<Clock::time_point>>();
  ddp.on_step([&](const train::StepRecord& r, std::size_t live) {
    auto now = Clock::now();
    {
      std::lock_guard lock(*mu);
      for (auto t : *pending) {
        run.recovery_ms.push_back(std::chrono::duration<double, std::milli>(now - t).count());
        run.marks.emplace_back(t, "kill");
      }
      pending->clear();
      if (r.step + 1 >= o.steps) *over = true;
    }
    run.marks.emplace_back(now, "commit " + std::to_string(r.step) + ": " + std::to_string(r.members.size()) +
                                    " members, " + std::to_string(r.attempts) + " attempts, " + std::to_string(live) +
                                    " live; compute/reduce ms" + per_member(r));
    if (fault_every > 0 && fault(rng) && r.members.size() > 1) {
      auto victim = r.members[rng() % r.members.size()];
      int pid = procs.pid(victim);
      if (pid > 0) {
        kill_soon(pid, std::uniform_int_distribution<int>(1, std::max(1, within_ms))(rng), mu, pending, over);
      }
    }
  });
  run.summary = ddp.run();
  std::lock_guard lock(*mu);
  run.kills = run.recovery_ms.size() + pending->size();  // (those that fired)
  return run;
}

// The baseline: the same model, batch, steps and seeded fault schedule under torchrun's launcher
// with restarts and torch.save checkpoints (bench/torch_elastic_train.py, Debian's python3-torch).
struct Baseline {
  bool ok = false;
  std::string why;
  std::uint64_t committed = 0, computed = 0;  // the last step reached; steps rank 0 finished
  double seconds = 0;                         // launch to the last step
  std::size_t kills = 0, restarts = 0;
  std::vector<double> recovery_ms, lost;      // per fault: to the next step, committed steps redone
};

Baseline baseline_run(std::size_t workers, const train::TrainOptions& o, double fault_every, int within_ms, std::uint64_t seed,
                      std::uint64_t ckpt_every, std::chrono::seconds cap) {
  Baseline b;
  char dir_template[] = "/tmp/sceptre-ft-baseline-XXXXXX";
  if (!::mkdtemp(dir_template)) return b;
  const std::string dir = dir_template;
  auto [launcher, out] = bench::spawn_group(
      {"/usr/bin/python3", std::string(SCEPTRE_SOURCE_DIR) + "/bench/torch_elastic_train.py", dir, "--workers",
       std::to_string(workers), "--steps", std::to_string(o.steps), "--batch", std::to_string(o.batch), "--hidden",
       std::to_string(o.model.hidden), "--inputs", std::to_string(o.model.inputs), "--classes",
       std::to_string(o.model.classes), "--seed", std::to_string(o.model.seed), "--ckpt-every",
       std::to_string(ckpt_every), "--max-restarts", "1000"});
  if (!out) {
    b.why = "could not start python3";
    return b;
  }
  auto t0 = Clock::now();
  std::thread([pid = launcher, cap] {  // the cap on the whole run: the group is killed after it
    std::this_thread::sleep_for(cap);
    ::kill(-pid, SIGKILL);
  }).detach();
  std::mt19937_64 rng(seed);
  std::bernoulli_distribution fault(fault_every > 0 ? 1.0 / fault_every : 0.0);
  std::map<int, int> pids;  // rank -> pid, of the workers now running
  auto mu = std::make_shared<std::mutex>();
  auto pending = std::make_shared<std::vector<Clock::time_point>>();  // kills not yet followed by a step
  std::uint64_t before_kill = 0;  // the last step reached before the pending kills
  bool resumed = false;
  char line[512];
  while (std::fgets(line, sizeof line, out)) {
    std::istringstream in(line);
    std::string word;
    in >> word;
    if (word == "PID") {
      int rank = 0, pid = 0;
      in >> rank >> pid;
      pids[rank] = pid;
    } else if (word == "RESUME") {
      std::uint64_t at = 0;
      in >> at;
      ++b.restarts;
      resumed = true;
      std::lock_guard lock(*mu);
      b.lost.push_back(double(before_kill > at ? before_kill - at : 0));
      b.committed = at;
    } else if (word == "STEP") {
      std::uint64_t step = 0;
      in >> step;
      auto now = Clock::now();
      ++b.computed;
      {
        std::lock_guard lock(*mu);
        for (auto t : *pending) b.recovery_ms.push_back(std::chrono::duration<double, std::milli>(now - t).count());
        if (!pending->empty() && !resumed) b.lost.push_back(double(before_kill));  // restarted from step 0
        pending->clear();
        resumed = false;
      }
      b.committed = step;
      b.seconds = std::chrono::duration<double>(now - t0).count();
      if (fault_every > 0 && fault(rng) && pids.size() == workers) {
        int pid = pids[static_cast<int>(rng() % workers)];
        pids.clear();  // the launcher restarts them all
        std::lock_guard lock(*mu);
        before_kill = step;
        kill_soon(pid, std::uniform_int_distribution<int>(1, std::max(1, within_ms))(rng), mu, pending);
        ++b.kills;
      }
    } else if (word == "END") {
      b.ok = b.committed == o.steps;
    } else if (word == "FAILED") {
      b.why = std::string("the launcher gave up: ") + line;
    }
  }
  ::kill(-launcher, SIGKILL);
  std::fclose(out);
  ::waitpid(launcher, nullptr, 0);
  if (!b.ok && b.why.empty()) b.why = "stopped at the cap of " + std::to_string(cap.count()) + " s";
  std::filesystem::remove_all(dir);
  return b;
}

void baseline_part(std::size_t workers, const train::TrainOptions& o, double fault_every, int within_ms, std::uint64_t seed,
                   std::uint64_t ckpt_every, std::chrono::seconds cap) {
  std::printf("  torchrun-style baseline (torch.distributed.elastic launcher, DDP over Gloo, torch.save every %llu "
              "steps, monitor interval 5 s):\n",
              static_cast<unsigned long long>(ckpt_every));
  auto clean = baseline_run(workers, o, 0, within_ms, seed, ckpt_every, cap);
  if (!clean.ok) {
    std::printf("    failure-free run failed: %s\n", clean.why.c_str());
    return;
  }
  double rate = double(clean.committed) * o.batch * workers / clean.seconds;
  std::printf("    failure-free: %llu steps in %.2f s from launch, %.0f samples/s\n",
              static_cast<unsigned long long>(clean.committed), clean.seconds, rate);
  auto f = baseline_run(workers, o, fault_every, within_ms, seed, ckpt_every, cap);
  auto [p50, p99] = bench::percentiles(f.recovery_ms);
  std::printf("    with faults: %zu kills, %zu restarts of all %zu workers, %llu of %llu steps in %.2f s%s%s\n", f.kills,
              f.restarts, workers, static_cast<unsigned long long>(f.committed),
              static_cast<unsigned long long>(o.steps), f.seconds, f.ok ? "" : " -- ", f.ok ? "" : f.why.c_str());
  std::printf("    fault -> next committed step: p50 %.1f ms, p99 %.1f ms\n", p50, p99);
  std::printf("    committed steps lost per failure: %.1f mean (redone after restoring the last checkpoint)\n",
              f.lost.empty() ? 0.0 : std::accumulate(f.lost.begin(), f.lost.end(), 0.0) / f.lost.size());
  std::printf("    step efficiency (committed / computed steps): %.1f%%\n",
              100.0 * f.committed / std::max<std::uint64_t>(1, f.computed + f.kills));
  std::printf("    sample goodput: %.1f%% (failure-free rate %.0f/s)\n",
              100.0 * f.committed * o.batch * workers / (rate * std::max(1e-9, f.seconds)), rate);
}

void faults_part(std::size_t replicas, train::TrainOptions o, double fault_every, int within_ms, std::uint64_t seed,
                 std::uint64_t baseline_ckpt_every, std::chrono::seconds baseline_cap, const std::string& events_out) {
  auto procs = this_host().spawn_procs({{"replicas", replicas}}, "bench");
  std::printf("\nfaults: %zu replicas, %llu steps, batch %llu, MLP hidden %lld (%zu parameters)\n", replicas,
              static_cast<unsigned long long>(o.steps), static_cast<unsigned long long>(o.batch),
              static_cast<long long>(o.model.hidden), train::ReplicaCore(o.model).parameter_count());
  // Failure-free runs before and after the one with faults (the first on procs just started):
  // goodput is measured against their mean rate.
  std::vector<double> step_ms;
  double rate = 0;
  auto clean_run = [&](const char* when) {
    Run clean = train_run(procs, o, 0, 0, seed);
    auto& c = clean.summary;
    for (std::size_t i = 1; i < c.steps.size(); ++i) step_ms.push_back(1e3 * (c.steps[i].seconds - c.steps[i - 1].seconds));
    rate += c.samples / committed_seconds(c) / 2;
    std::printf("  failure-free, %s: %llu steps in %.2f s, %.0f samples/s\n", when,
                static_cast<unsigned long long>(c.committed), c.seconds, c.samples / c.seconds);
  };
  clean_run("before");
  if (within_ms <= 0) within_ms = std::max(1, static_cast<int>(median(step_ms)));  // anywhere in a step
  Run f = train_run(procs, o, fault_every, within_ms, seed);
  clean_run("after");
  std::printf("  failure-free: step %.1f ms (median of both runs), %.0f samples/s (mean)\n", median(step_ms), rate);
  auto& s = f.summary;
  if (!events_out.empty()) {  // the run with faults, a line each: seconds, kind (or "-"), step, replica, what
    if (FILE* out = std::fopen(events_out.c_str(), "w")) {
      std::vector<std::pair<Clock::time_point, std::string>> lines = f.marks;
      for (auto& e : s.events) {
        lines.emplace_back(e.when, std::to_string(static_cast<int>(e.kind)) + "\t" + std::to_string(e.step) + "\t" +
                                       std::to_string(e.replica) + "\t" + e.what);
      }
      std::stable_sort(lines.begin(), lines.end(), [](auto& a, auto& b) { return a.first < b.first; });
      auto t0 = lines.empty() ? Clock::now() : lines.front().first;
      for (auto& [when, what] : lines) {
        std::fprintf(out, "%8.3f\t%s\n", std::chrono::duration<double>(when - t0).count(), what.c_str());
      }
      std::fclose(out);
    }
  }
  double bytes = 0, secs = 0;
  for (auto& e : s.events)
    if (e.kind == train::Event::Kind::kJoined) bytes += e.bytes, secs += e.seconds;
  auto [p50, p99] = bench::percentiles(f.recovery_ms);
  std::size_t failures = std::max<std::size_t>(1, s.failures);
  std::printf("  with faults (a SIGKILL every %.1f steps on average, 1-%d ms into a step): %zu kills, %zu failures, %zu "
              "heals in %.2f s\n",
              fault_every, within_ms, f.kills, s.failures, s.heals, s.seconds);
  std::printf("    fault -> next committed step: p50 %.1f ms, p99 %.1f ms (step %.1f ms)\n", p50, p99, median(step_ms));
  std::printf("    attempts: %llu for %llu committed steps (%.2f lost per failure); %zu "
              "quorums re-formed during a step\n",
              static_cast<unsigned long long>(s.attempted), static_cast<unsigned long long>(s.committed),
              double(s.attempted - s.committed) / failures, s.regroups);
  std::printf("    step efficiency (replica-steps committed / computed): %.1f%%  (committed / attempted steps: %.1f%%)\n",
              100.0 * s.gradients_committed / std::max<std::uint64_t>(1, s.gradients_computed),
              100.0 * s.committed / std::max<std::uint64_t>(1, s.attempted));
  std::printf("    sample goodput: %.1f%% (%llu samples in %.2f s; failure-free rate %.0f/s)\n",
              100.0 * s.samples / (rate * committed_seconds(s)), static_cast<unsigned long long>(s.samples),
              committed_seconds(s), rate);
  std::printf("    healing: %.1f MB fetched in %.3f s (%.2f GB/s)\n", bytes / 1e6, secs, secs > 0 ? bytes / secs / 1e9 : 0);
  std::uint64_t d0 = s.digests.empty() ? 0 : s.digests.begin()->second;
  bool same = std::all_of(s.digests.begin(), s.digests.end(), [&](auto& d) { return d.second == d0; });
  std::printf("    %zu live replicas at the end, %s\n", s.digests.size(), same ? "bitwise identical" : "DIFFERENT");
  if (baseline_cap.count() > 0) baseline_part(replicas, o, fault_every, within_ms, seed, baseline_ckpt_every, baseline_cap);
}

// One replica SIGKILLed at the first step boundary `kill_at` into the run (0: none), once the
// replicas are past their start (their buffers warmed); the replacement heals from a live peer,
// and the run ends `after` steps after it joined (or after `after` steps when nobody is killed).
// Returns the run's summary and the commit times of every step (this process's clock).
bool heal_trace = false;  // --heal-trace: each heal run's commits and events, timed

struct HealRun {
  train::Summary summary;
  std::vector<Clock::time_point> commits;
  Clock::time_point killed;  // when the replica was killed (none: the epoch)
};

HealRun heal_run(ProcMesh& procs, train::TrainOptions o, std::chrono::milliseconds kill_at, std::uint64_t after) {
  HealRun run;
  o.steps = kill_at.count() > 0 ? 1000000 : after;
  train::FtDdp ddp(procs, o);
  auto start = Clock::now();
  bool killed = false;
  std::optional<std::uint64_t> joined;
  ddp.on_event([&](const train::Event& e) {
    if (e.kind == train::Event::Kind::kJoined) joined = e.step;
  });
  ddp.on_step([&](const train::StepRecord& r, std::size_t) {
    run.commits.push_back(Clock::now());
    if (heal_trace) {
      std::printf("    %8.3f s  commit %llu: %zu members, compute/reduce/commit ms", std::chrono::duration<double>(Clock::now() - start).count(),
                  static_cast<unsigned long long>(r.step), r.members.size());
      for (std::size_t i = 0; i < r.members.size() && i < r.commit_ms.size(); ++i)
        std::printf(" %zu:%.0f/%.0f/%.0f", r.members[i], r.compute_ms[i], r.reduce_ms[i], r.commit_ms[i]);
      std::printf("\n");
    }
    if (!killed && kill_at.count() > 0 && Clock::now() - start >= kill_at && r.members.size() > 1) {
      if (int pid = procs.pid(r.members.back()); pid > 0) ::kill(pid, SIGKILL);
      killed = true;
      run.killed = Clock::now();
    }
    if (joined && r.step >= *joined + after) ddp.cancel();
  });
  run.summary = ddp.run();
  if (heal_trace)
    for (auto& e : run.summary.events)
      std::printf("    %8.3f s  event at step %llu, replica %zu: %s\n", std::chrono::duration<double>(e.when - start).count(),
                  static_cast<unsigned long long>(e.step), e.replica, e.what.c_str());
  return run;
}

void heal_part(train::TrainOptions o, std::chrono::milliseconds kill_at, std::uint64_t steps) {
  o.end_with_all_replicas = true;
  o.collective_timeout = 30s;
  o.step_timeout = 120s;
  std::printf("\nheal: MLP hidden %lld, state %.1f MB with Adam's, batch %llu, chunks of %.0f MiB, %zu in flight, a kill %.0f s in\n",
              static_cast<long long>(o.model.hidden), train::ReplicaCore(o.model).state_bytes() / 1e6, static_cast<unsigned long long>(o.batch),
              o.chunk_bytes / 1048576.0, o.chunks_in_flight, kill_at.count() / 1e3);
  auto joined = [](const train::Summary& s, const char* label) {
    const train::Event* started = nullptr;
    for (auto& e : s.events) {
      if (e.kind == train::Event::Kind::kHealing) started = &e;
      if (e.kind == train::Event::Kind::kJoined && started) {
        double wall = std::chrono::duration<double>(e.when - started->when).count();
        std::printf("  %s: %.1f MB fetched in %.3f s = %.2f GB/s; healing began -> joined %.3f s\n", label,
                    e.bytes / 1e6, e.seconds, e.bytes / e.seconds / 1e9, wall);
        return std::make_pair(started->when, e.when);
      }
    }
    std::printf("  %s: no heal happened\n", label);
    return std::make_pair(Clock::time_point{}, Clock::time_point{});
  };
  auto durations = [](const HealRun& r, Clock::time_point from, Clock::time_point to) {
    // Steps begun in [from, to) (the one at whose boundary the replacement joined included).
    std::vector<double> ms;
    for (std::size_t i = 1; i < r.commits.size(); ++i)
      if (r.commits[i - 1] >= from && r.commits[i - 1] < to)
        ms.push_back(std::chrono::duration<double, std::milli>(r.commits[i] - r.commits[i - 1]).count());
    return ms;
  };
  {
    // Idle: 2 replicas, at least 2 needed, so the survivor waits while its peer heals.
    auto procs = this_host().spawn_procs({{"replicas", 2}}, "heal-idle");
    auto idle = o;
    idle.min_replicas = 2;
    auto r = heal_run(procs, idle, kill_at, steps);
    joined(r.summary, "survivor paused (min 2 of 2)");
  }
  // Under training: 2 replicas, the survivor trains on while the other heals, beside 1 replica
  // that loses nobody. One survivor, not two: this machine has 2 cores, and 3 single-threaded
  // replicas on them would slow each other with or without a heal.
  std::vector<double> base;
  {
    auto one = this_host().spawn_procs({{"replicas", 1}}, "heal-base");
    auto alone = o;
    alone.min_replicas = 1;
    auto b = heal_run(one, alone, 0ms, steps);  // nobody killed
    base = durations(b, b.commits.front(), b.commits.back());
  }
  auto procs = this_host().spawn_procs({{"replicas", 2}}, "heal");
  auto busy = o;
  busy.min_replicas = 1;
  auto r = heal_run(procs, busy, kill_at, steps);
  auto [from, to] = joined(r.summary, "survivor training (1 of 2)");
  // The heal's window for the survivor: from its first commit after the kill (the failed step's
  // retry, whose cost is the fault's) to the join. Its steps begun in it, each; and its time lost,
  // the window less that many steps of the baseline (the wait at the join counts).
  auto first = std::find_if(r.commits.begin(), r.commits.end(), [&](auto t) { return t > r.killed; });
  auto during = first == r.commits.end() ? std::vector<double>{} : durations(r, *first, to);
  if (during.empty() || *first >= to) {
    std::printf("  survivor's step: no step overlapped the heal (more --heal-steps)\n");
    return;
  }
  std::printf("  survivor's step: %.0f ms (median of %zu begun during the heal) vs %.0f ms for 1 replica without "
              "faults -> %+.1f%%\n",
              median(during), during.size(), median(base), 100.0 * (median(during) / median(base) - 1));
  auto n = std::count_if(first + 1, r.commits.end(), [&](auto t) { return t <= to; });
  double window = std::chrono::duration<double, std::milli>(to - *first).count();
  double lost = window - static_cast<double>(n) * median(base);
  std::printf("  survivor's time lost: %.0f ms in %.0f ms (%zu steps committed, the wait at the join included) -> "
              "%+.1f%% of the window\n",
              lost, window, static_cast<std::size_t>(n), 100.0 * lost / (window - lost));
}

// fio writing files of the sizes in `files` (one job each, at once) in `dir`, buffered, 1 MiB
// writes, fsync of each file at the end: GB/s of all of them, as the persist's is counted (all
// bytes ÷ the slowest job's time). fio's own time of a job includes its end_fsync (1 GiB here:
// 0.2 s without, 0.6 s with), and leaves out its start-up (0.15-0.3 s, most of the wall time
// of a run of 50 MB). The median of `reps` runs.
double fio_gbps(const std::string& dir, const std::vector<std::uint64_t>& files, int reps) {
  std::string cmd = "fio --directory=" + dir + " --rw=write --ioengine=psync --end_fsync=1 --fallocate=none" +
                    " --output-format=json";
  for (std::size_t k = 0; k < files.size(); ++k) {
    std::uint64_t size = std::max<std::uint64_t>(4096, files[k]);
    cmd += " --name=ckpt." + std::to_string(k) + " --bs=" + (size < (1u << 20) ? "4k" : "1M") +
           " --size=" + std::to_string(size);
  }
  cmd += " 2>/dev/null";
  std::vector<double> gbps;
  for (int i = 0; i < reps; ++i) {
    FILE* p = ::popen(cmd.c_str(), "r");
    if (!p) continue;
    std::string out;
    char buf[4096];
    while (std::size_t n = std::fread(buf, 1, sizeof buf, p)) out.append(buf, n);
    ::pclose(p);
    for (auto& e : std::filesystem::directory_iterator(dir))
      if (e.path().filename().string().rfind("ckpt.", 0) == 0) std::filesystem::remove(e.path());
    auto j = nlohmann::json::parse(out, nullptr, false);
    if (j.is_discarded() || !j.contains("jobs")) continue;
    double bytes = 0, ms = 0;
    for (auto& job : j["jobs"]) {
      bytes += job["write"]["io_bytes"].get<double>();
      ms = std::max(ms, job["write"]["runtime"].get<double>());
    }
    if (ms > 0) gbps.push_back(bytes / (ms / 1e3) / 1e9);
  }
  return median(gbps);
}

void checkpoint_part(std::size_t replicas, train::TrainOptions o, std::uint64_t every, const std::string& dir) {
  auto procs = this_host().spawn_procs({{"replicas", replicas}}, "ckpt");
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  // The shards as the checkpoints write them (whole tensors, largest first to the lightest
  // shard), which fio writes too.
  std::uint64_t state = 0;
  std::vector<std::uint64_t> shards;
  {
    train::ReplicaCore core(o.model);
    for (std::size_t k = 0; k < replicas; ++k) {
      shards.push_back(0);
      for (auto& t : core.tensors(k, replicas)) shards.back() += t.data.size();
      state += shards.back();
    }
  }
  // (ReplicaCore::tensors() lists Adam's moments too, even before the first step: from 5ff1673
  // to 3816b96 this took 3 x their bytes, and fio wrote 3 x a checkpoint's.)
  std::string mb;
  for (auto b : shards) mb += (mb.empty() ? "" : " + ") + std::to_string(static_cast<int>(b / 1e6 + 0.5));
  std::printf("\ncheckpoint: %zu replicas, %llu steps, MLP hidden %lld, state %.1f MB with Adam (shards of %s MB), every "
              "%llu steps, in %s\n",
              replicas, static_cast<unsigned long long>(o.steps), static_cast<long long>(o.model.hidden), state / 1e6,
              mb.c_str(), static_cast<unsigned long long>(every), dir.c_str());
  auto step_times = [](const train::Summary& s) {
    std::vector<double> v;
    for (std::size_t i = 1; i < s.steps.size(); ++i) v.push_back(1e3 * (s.steps[i].seconds - s.steps[i - 1].seconds));
    return v;
  };
  train::Summary plain;
  {
    train::FtDdp ddp(procs, o);
    plain = ddp.run();
  }
  double fio_before = fio_gbps(dir, shards, 3);
  auto with = o;
  with.checkpoint.dir = dir + "/run";
  with.checkpoint.every = every;
  with.checkpoint.keep = 2;
  train::Summary ck;
  {
    train::FtDdp ddp(procs, with);
    ck = ddp.run();
  }
  double fio_after = fio_gbps(dir, shards, 3);
  // fio under the persists' conditions: the same training without checkpoints, and fio writing
  // the same bytes at the steps a checkpoint would begin (skipped while the last is running, as
  // a checkpoint is), so that it shares the CPU with 4 training replicas as the writers do.
  std::vector<double> fio_loaded;
  train::Summary loaded;
  {
    train::FtDdp ddp(procs, o);
    std::future<double> fio_run;
    auto collect = [&](bool wait) {
      if (fio_run.valid() && (wait || fio_run.wait_for(0s) == std::future_status::ready)) fio_loaded.push_back(fio_run.get());
    };
    ddp.on_step([&](const train::StepRecord& r, std::size_t) {
      collect(false);
      if ((r.step + 1) % every == 0 && r.step + 1 < o.steps && !fio_run.valid())
        fio_run = std::async(std::launch::async, fio_gbps, dir, shards, 1);
    });
    loaded = ddp.run();
    collect(true);
  }
  // The persists while the replicas train, and the final checkpoint's, written once they stop
  // (what the disk takes when the writers have the CPU, as fio does).
  std::vector<double> stall, persist_gbps, persist_s;
  double idle_gbps = 0, ck_bytes = 0;
  for (auto& e : ck.events) {
    if (e.kind == train::Event::Kind::kCheckpointing) stall.push_back(e.stall_ms);
    if (e.kind == train::Event::Kind::kCheckpointed) ck_bytes = e.bytes;
    if (e.kind == train::Event::Kind::kCheckpointed && e.step == with.steps) idle_gbps = e.bytes / e.seconds / 1e9;
    if (e.kind == train::Event::Kind::kCheckpointed && e.step < with.steps) {
      persist_gbps.push_back(e.bytes / e.seconds / 1e9);
      persist_s.push_back(e.seconds);
    }
  }
  double fio = std::max(1e-9, (fio_before + fio_after) / 2);
  double step_plain = median(step_times(plain)), step_ck = median(step_times(ck));
  double stall_ms = median(stall);
  std::printf("  step time: %.1f ms without checkpoints, %.1f ms with (median); run %.2f s vs %.2f s\n", step_plain,
              step_ck, plain.seconds, ck.seconds);
  std::printf("  stall (in-memory copy): %.2f ms median per checkpoint = %.2f%% of a step; %.3f%% of the run\n",
              stall_ms, 100.0 * stall_ms / step_plain,
              100.0 * std::accumulate(stall.begin(), stall.end(), 0.0) / 1e3 / ck.seconds);
  std::printf("  persisted: %zu checkpoints of %.1f MB (%zu failed); while training %.2f s each, %.2f GB/s median (slowest shard + "
              "manifest); the final one, training stopped, %.2f GB/s\n",
              ck.checkpoints, ck_bytes / 1e6, ck.checkpoint_failures, median(persist_s), median(persist_gbps), idle_gbps);
  std::printf("  fio, the same files (a job each), buffered + fsync: %.2f GB/s before, %.2f GB/s after -> ratio %.2f "
              "while training, %.2f stopped\n",
              fio_before, fio_after, median(persist_gbps) / fio, idle_gbps / fio);
  double fio_busy = std::max(1e-9, median(fio_loaded));
  std::printf("  fio beside the same training (no checkpoints), at the checkpoints' steps: %zu runs, %.2f GB/s median "
              "(steps %.1f ms) -> persist while training / fio while training %.2f\n",
              fio_loaded.size(), median(fio_loaded), median(step_times(loaded)), median(persist_gbps) / fio_busy);
  std::filesystem::remove_all(dir);
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
  int kill_within = 0;
  std::uint64_t seed = 6;
  int iters = 21;
  std::int64_t ckpt_hidden = 2048;
  std::uint64_t ckpt_every = 10, ckpt_steps = 60;
  std::string ckpt_dir = "ft_bench.ckpt";
  std::uint64_t baseline_ckpt_every = 10;
  int baseline_cap = 300;
  std::int64_t heal_hidden = 9100;
  std::uint64_t heal_batch = 8, heal_steps = 6;
  double heal_kill_at = 20;
  app.add_option("--parts", parts, "allreduce,faults,heal,checkpoint");
  app.add_option("--baseline-ckpt-every", baseline_ckpt_every, "the torchrun baseline's steps between torch.save");
  app.add_option("--baseline-cap", baseline_cap, "seconds the torchrun baseline may run (0: not run)");
  app.add_option("--heal-hidden", heal_hidden, "hidden width of the heal part's model (9100: a 1 GB state)");
  app.add_option("--heal-batch", heal_batch, "batch of the heal part");
  app.add_option("--heal-steps", heal_steps, "steps of the heal part's runs after the replacement joined");
  app.add_flag("--heal-trace", heal_trace, "print each heal run's commits and events with their times");
  app.add_option("--heal-kill-at", heal_kill_at, "seconds into the heal part's runs of the kill (past the replicas' start)");
  app.add_option("--ckpt-hidden", ckpt_hidden, "hidden width of the checkpoint part's model");
  app.add_option("--ckpt-every", ckpt_every, "steps between checkpoints");
  app.add_option("--ckpt-steps", ckpt_steps, "steps of the checkpoint part's runs");
  app.add_option("--ckpt-dir", ckpt_dir, "where the checkpoint part writes (removed after)");
  app.add_option("--replicas", replicas);
  app.add_option("--steps", o.steps);
  app.add_option("--batch", o.batch);
  app.add_option("--hidden", o.model.hidden);
  app.add_option("--fault-every", fault_every, "mean steps between faults");
  app.add_option("--kill-within", kill_within,
                 "a fault lands 1 to this many ms into a step (0: the failure-free run's median step; 20 before 2026-12-07)");
  app.add_option("--seed", seed);
  std::string events_out;
  app.add_option("--events-out", events_out, "file for the events of the faults part's run with faults");
  app.add_option("--iters", iters, "allreduce repetitions");
  CLI11_PARSE(app, argc, argv);
  if (parts.find("allreduce") != std::string::npos) allreduce_part(iters);
  if (parts.find("faults") != std::string::npos) faults_part(replicas, o, fault_every, kill_within, seed, baseline_ckpt_every, std::chrono::seconds(baseline_cap), events_out);
  if (parts.find("heal") != std::string::npos) {
    auto h = o;
    h.model.hidden = heal_hidden;
    h.batch = heal_batch;
    heal_part(h, std::chrono::milliseconds(static_cast<long long>(heal_kill_at * 1000)), heal_steps);
  }
  if (parts.find("checkpoint") != std::string::npos) {
    auto c = o;
    c.model.hidden = ckpt_hidden;
    c.steps = ckpt_steps;
    c.end_with_all_replicas = false;
    checkpoint_part(replicas, c, ckpt_every, ckpt_dir);
  }
  return 0;
}
