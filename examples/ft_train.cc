// Fault-tolerant data-parallel training on this host: the README's main job.
//
// Four replica groups (one proc each) train an MLP classifier with libtorch, data parallel, under
// a per-step quorum run by this controller. Failures can be injected on a schedule; a failed
// replica is respawned and heals from a live peer while the others keep training. At the end it
// prints a summary, checks that every live replica holds the same bits, and writes a plot of loss
// and live replicas over time with the failures marked.
//
// Checkpoints go to OUT/checkpoints every 100 steps; run it again and it resumes from the newest
// complete one (--fresh starts over).
//
// On a host with at least as many GPUs as replicas, each replica's proc is bound to a GPU of its
// own, and with a CUDA or ROCm libtorch its model trains there and the quorum sums with NCCL or
// RCCL (--device, --collective override the choice).
//
//   ft_train [--replicas 4] [--steps 600] [--kill-every 4] [--freeze-every 9] [--out ft_train.out]
//            [--checkpoint-every 100] [--checkpoint-dir OUT/checkpoints] [--keep 3] [--fresh]
//            [--device auto|cpu|cuda] [--collective auto|gloo|nccl]
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <atomic>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <random>
#include <thread>

#include "sceptre/gpu/runtime.h"
#include "sceptre/sceptre.h"
#include "sceptre/train/ft_ddp.h"
#include "sceptre/train/replica_core.h"

namespace {

using namespace sceptre;
using Clock = std::chrono::steady_clock;

const char* kind_name(train::Event::Kind k) {
  switch (k) {
    case train::Event::Kind::kCommitted: return "committed";
    case train::Event::Kind::kRetried: return "retried";
    case train::Event::Kind::kFailed: return "failed";
    case train::Event::Kind::kRespawned: return "respawned";
    case train::Event::Kind::kHealing: return "healing";
    case train::Event::Kind::kHealFailed: return "heal failed";
    case train::Event::Kind::kJoined: return "joined";
    case train::Event::Kind::kPaused: return "paused";
    case train::Event::Kind::kResumed: return "resumed";
    case train::Event::Kind::kCheckpointing: return "checkpointing";
    case train::Event::Kind::kCheckpointed: return "checkpointed";
    case train::Event::Kind::kCheckpointFailed: return "checkpoint failed";
    case train::Event::Kind::kCheckpointSkipped: return "checkpoint skipped";
    case train::Event::Kind::kRestored: return "restored";
    case train::Event::Kind::kRegrouped: return "regrouped";
  }
  return "?";
}

}  // namespace

int main(int argc, char** argv) {
  Runtime runtime(argc, argv);  // in a proc, this never returns

  CLI::App app{"sceptre: fault-tolerant data-parallel training on this host"};
  std::size_t replicas = 4;
  train::TrainOptions o;
  o.steps = 600;
  double kill_every = 4, freeze_every = 9;  // the default run shows recoveries; 0 turns them off
  std::uint64_t seed = 1;
  std::string out = "ft_train.out";
  std::size_t print_every = 20;
  app.add_option("--replicas", replicas, "replica groups (one proc each)")->check(CLI::Range(1, 64));
  app.add_option("--steps", o.steps, "committed steps to train");
  app.add_option("--batch", o.batch, "samples per replica per step");
  app.add_option("--hidden", o.model.hidden, "hidden width of the MLP");
  app.add_option("--dropout", o.model.dropout, "dropout after each hidden layer (masks drawn per sample block)")
      ->check(CLI::Range(0.0, 0.99));
  app.add_option("--min-replicas", o.min_replicas, "below this many live replicas training pauses");
  app.add_option("--kill-every", kill_every, "SIGKILL a random replica every this many seconds (0: never)");
  app.add_option("--freeze-every", freeze_every, "SIGSTOP a random replica every this many seconds (0: never)");
  app.add_option("--seed", seed, "model, data and fault schedule");
  app.add_option("--out", out, "folder for the step log, the events and the plot");
  app.add_option("--print-every", print_every, "a progress line every this many steps");
  std::string checkpoint_dir;
  bool fresh = false;
  o.checkpoint.every = 100;
  app.add_option("--checkpoint-dir", checkpoint_dir, "checkpoints (default OUT/checkpoints; 'none' turns them off)");
  app.add_option("--checkpoint-every", o.checkpoint.every, "committed steps between checkpoints (0: only at the end)");
  app.add_option("--keep", o.checkpoint.keep, "complete checkpoints kept")->check(CLI::Range(1, 1000));
  app.add_option("--device", o.device, "where the models live: auto (a GPU when libtorch sees one), cpu, cuda")
      ->check(CLI::IsMember({"auto", "cpu", "cuda"}));
  app.add_option("--collective", o.collective, "how gradients are summed: auto (NCCL on GPUs, else Gloo), gloo, nccl")
      ->check(CLI::IsMember({"auto", "gloo", "nccl"}));
  app.add_flag("--fresh", fresh, "start over: remove the checkpoints instead of resuming from them");
  CLI11_PARSE(app, argc, argv);
  if (checkpoint_dir.empty()) checkpoint_dir = out + "/checkpoints";
  if (checkpoint_dir != "none") {
    if (fresh) std::filesystem::remove_all(checkpoint_dir);
    o.checkpoint.dir = checkpoint_dir;
  }
  o.model.seed = static_cast<std::int64_t>(seed);
  o.min_replicas = std::min(o.min_replicas, replicas);

  // A GPU of its own for each replica when the host has enough (or when one is asked for: then
  // too few is spawn_procs' clear error).
  const auto gpus = static_cast<std::size_t>(gpu::runtime().device_count());
  const bool on_gpus = o.device == "cuda" || (o.device == "auto" && gpus >= replicas && gpus > 0);
  ProcMesh procs = runtime.this_host().spawn_procs({{on_gpus ? "gpus" : "replicas", replicas}}, "replicas");
  train::FtDdp ddp(procs, o);

  auto t0 = Clock::now();
  auto since = [&] { return std::chrono::duration<double>(Clock::now() - t0).count(); };
  std::string last_event = "-";
  std::vector<std::pair<double, std::string>> faults;
  ddp.on_event([&](const train::Event& e) {
    if (e.kind == train::Event::Kind::kCommitted) return;
    double at = std::chrono::duration<double>(e.when - t0).count();
    std::printf("  [%7.2f s] step %-5llu replica %zu %s: %s\n", at, static_cast<unsigned long long>(e.step), e.replica,
                kind_name(e.kind), e.what.c_str());
    last_event = std::string(kind_name(e.kind)) + " r" + std::to_string(e.replica);
    if (e.kind == train::Event::Kind::kFailed) faults.emplace_back(at, last_event);
  });
  std::uint64_t last_samples = 0;
  double last_t = 0;
  std::uint64_t samples = 0;
  ddp.on_step([&](const train::StepRecord& r, std::size_t live) {
    samples += r.count * r.members.size();
    if ((r.step + 1) % print_every == 0 || r.step + 1 == o.steps) {
      double rate = (samples - last_samples) / std::max(1e-9, r.seconds - last_t);
      last_samples = samples;
      last_t = r.seconds;
      std::printf("step %5llu/%llu  loss %.4f  %8.0f samples/s  live %zu/%zu  last: %s\n",
                  static_cast<unsigned long long>(r.step + 1), static_cast<unsigned long long>(o.steps), r.loss, rate,
                  live, replicas, last_event.c_str());
      std::fflush(stdout);
    }
  });

  // The fault schedule: a seeded choice of victim at fixed intervals.
  std::atomic<bool> done{false};
  std::thread injector([&] {
    if (kill_every <= 0 && freeze_every <= 0) return;
    std::mt19937_64 rng(seed);
    double next_kill = kill_every > 0 ? kill_every : 1e18, next_freeze = freeze_every > 0 ? freeze_every : 1e18;
    while (!done.load()) {
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
      double now = since();
      bool kill = now >= next_kill, freeze = now >= next_freeze;
      if (!kill && !freeze) continue;
      std::size_t victim = rng() % replicas;
      int pid = procs.pid(victim);
      if (pid > 0) ::kill(pid, kill ? SIGKILL : SIGSTOP);
      std::printf("  [%7.2f s] inject: %s replica %zu (pid %d)\n", now, kill ? "SIGKILL" : "SIGSTOP", victim, pid);
      if (kill) next_kill += kill_every;
      else next_freeze += freeze_every;
    }
  });

  std::printf("training %llu steps on %zu replicas (%zu parameters each)\n", static_cast<unsigned long long>(o.steps),
              replicas, train::ReplicaCore(o.model).parameter_count());
  train::Summary s;
  try {
    s = ddp.run();
  } catch (const std::exception& e) {
    done = true;
    injector.join();
    std::fprintf(stderr, "ft_train: %s\n", e.what());
    return 1;
  }
  done = true;
  injector.join();

  std::uint64_t first_digest = s.digests.empty() ? 0 : s.digests.begin()->second;
  bool identical = std::all_of(s.digests.begin(), s.digests.end(), [&](auto& d) { return d.second == first_digest; });
  std::uint64_t committed = s.committed - s.start_step;
  if (s.start_step > 0) {
    std::printf("\nresumed from the checkpoint of step %llu\n", static_cast<unsigned long long>(s.start_step));
  }
  std::printf("\nsummary: %llu steps committed of %llu attempted (step efficiency %.1f%%), %zu failures survived, "
              "%zu heals, %llu samples in %.1f s (%.0f samples/s)\n",
              static_cast<unsigned long long>(committed), static_cast<unsigned long long>(s.attempted),
              100.0 * committed / std::max<std::uint64_t>(1, s.attempted), s.failures, s.heals,
              static_cast<unsigned long long>(s.samples), s.seconds, s.samples / std::max(1e-9, s.seconds));
  std::printf("         models on %s, gradients summed with %s\n", s.device.c_str(), s.collective.c_str());
  std::printf("         attempts lost: %llu; quorums re-formed during a step: %zu\n",
              static_cast<unsigned long long>(s.attempted - committed), s.regroups);
  std::printf("         final loss %.4f; %zu live replicas %s (digest %016llx)\n",
              s.steps.empty() ? 0.f : s.steps.back().loss,
              s.digests.size(), identical ? "bitwise identical" : "DIFFER", static_cast<unsigned long long>(first_digest));

  if (!o.checkpoint.dir.empty()) {
    std::printf("         checkpoints: %zu written, %zu failed, in %s\n", s.checkpoints, s.checkpoint_failures,
                o.checkpoint.dir.c_str());
  }

  // The step log, the failures, and a plot through gnuplot when it is installed.
  ::mkdir(out.c_str(), 0755);
  {
    std::ofstream f(out + "/steps.tsv");
    f << "# seconds\tstep\tloss\tlive\n";
    for (auto& r : s.steps) f << r.seconds << '\t' << r.step << '\t' << r.loss << '\t' << r.members.size() << '\n';
    std::ofstream g(out + "/failures.tsv");
    for (auto& [t, what] : faults) g << t << '\t' << what << '\n';
  }
  std::string plot = out + "/plot.gp";
  {
    std::ofstream p(plot);
    p << "set terminal png size 1000,500\nset output '" << out << "/ft_train.png'\n"
      << "set xlabel 'seconds'\nset ylabel 'loss'\nset y2label 'live replicas'\nset y2range [0:" << replicas + 1
      << "]\nset y2tics 1\nset ytics nomirror\n";
    for (auto& [t, what] : faults) p << "set arrow from " << t << ", graph 0 to " << t << ", graph 1 nohead lc 'red' dt 2\n";
    p << "plot '" << out << "/steps.tsv' using 1:3 with lines title 'loss', '' using 1:4 axes x1y2 with steps "
      << "title 'live replicas'\n";
  }
  if (std::system(("command -v gnuplot >/dev/null && gnuplot " + plot + " 2>/dev/null").c_str()) == 0) {
    std::printf("plot: %s/ft_train.png (failures marked in red); step log: %s/steps.tsv\n", out.c_str(), out.c_str());
  } else {
    std::printf("step log: %s/steps.tsv (install gnuplot for the plot)\n", out.c_str());
  }
  return identical && s.committed == o.steps ? 0 : 1;
}
