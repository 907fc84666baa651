// supervision_bench: how fast the controller learns of each kind of fault (issue 5), over many
// seeded trials, with false positives and leaked processes counted; then the same SIGKILL and
// SIGSTOP faults under torch.distributed.elastic's launcher (torchrun's machinery) as the peer.
//
// The trials and the kinds of fault are tests/chaos/chaos_trials.h's (the chaos suite runs them
// reduced in CI).
//
//   supervision_bench [--trials N] [--seed S] [--kinds kill,segv,...] [--peer-trials N]
//                     [--no-peer] [--soak SECONDS]
// --soak runs only the soak: a mesh of 4 procs (on 2 hosts in network namespaces where the
// transport is netns) busy with calls while stress-ng loads both CPUs,
// counting failures (any is a false positive).
#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <sstream>
#include <thread>

#include "bench_util.h"
#include "chaos/chaos_trials.h"
#include "sceptre/sceptre.h"

extern char** environ;

namespace {

using namespace sceptre;
using namespace sceptre::chaos;

// --- the peer: torch.distributed.elastic ------------------------------------------------------------

// Runs the peer script once: two workers under elastic_launch; kills (SIGKILL) or stops
// (SIGSTOP) one; returns how long until the launcher noticed (ms), or nullopt within `cap`.
std::optional<double> peer_trial(const std::string& script, const std::string& fault, std::chrono::seconds cap) {
  char dir_template[] = "/tmp/sceptre-peer-XXXXXX";
  if (!::mkdtemp(dir_template)) return std::nullopt;
  const std::string dir = dir_template;
  auto spawned = bench::spawn_group({"/usr/bin/python3", script, dir});  // Debian's: python3-torch
  pid_t launcher = spawned.first;
  FILE* out = spawned.second;
  if (!out) return std::nullopt;
  std::optional<double> noticed;
  pid_t worker = 0;
  char line[512];
  Clock::time_point t0{};
  while (std::fgets(line, sizeof line, out)) {
    std::istringstream in(line);
    std::string word;
    in >> word;
    if (word == "WORKERS") {
      in >> worker;
      t0 = Clock::now();
      ::kill(worker, fault == "kill" ? SIGKILL : SIGSTOP);
      // The launcher never notices a stopped worker by itself: give up after `cap`.
      std::thread([launcher, cap, fault] {
        std::this_thread::sleep_for(cap);
        if (fault != "kill") ::kill(-launcher, SIGKILL);
      }).detach();
    } else if (word == "NOTICED") {
      double mono_s = 0;
      in >> mono_s;
      const auto at = Clock::time_point(std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(mono_s)));
      noticed = std::chrono::duration<double, std::milli>(at - t0).count();
      break;
    }
  }
  ::kill(-launcher, SIGKILL);  // the launcher, its workers: the whole group
  std::fclose(out);
  ::waitpid(launcher, nullptr, 0);
  std::string rm = "rm -rf " + dir;
  (void)!std::system(rm.c_str());
  return noticed;
}

// --- soak --------------------------------------------------------------------------------------------

int soak(int seconds) {
  auto failures = std::make_shared<std::atomic<int>>(0);
  Runtime::current().on_failure([failures](const MeshFailure& f) {
    std::fprintf(stderr, "soak: FALSE POSITIVE: %s\n", f.summary().c_str());
    ++*failures;
    return Supervise::kHandled;
  });
  // With hosts in namespaces: 2 hosts of 2 procs, so the agents' heartbeats are soaked too.
  HostMesh hosts;
  if (Runtime::current().config().transport == "netns") {
    HostLaunch how;
    how.netns = true;
    hosts = Runtime::current().launch_hosts(2, how);
  }
  auto procs = hosts.spawn_procs(hosts.size() > 1 ? Extent({{"procs", 2}}) : Extent({{"procs", 4}}), "soak");
  auto members = procs.spawn<Victim>("victim");
  pid_t stress = 0;
  {
    std::vector<std::string> args{"stress-ng", "--cpu", "2", "--timeout", std::to_string(seconds + 5) + "s", "--quiet"};
    std::vector<char*> argv;
    for (auto& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    if (::posix_spawnp(&stress, "stress-ng", nullptr, nullptr, argv.data(), environ) != 0) {
      std::fprintf(stderr, "soak: cannot start stress-ng (apt-get install stress-ng)\n");
      return 2;
    }
  }
  const auto end = Clock::now() + std::chrono::seconds(seconds);
  std::size_t calls = 0, slow = 0;
  double worst_ms = 0;
  while (Clock::now() < end) {
    auto t = Clock::now();
    auto v = members.sum<&Victim::pid>().get(60s);
    (void)v;
    double ms = std::chrono::duration<double, std::milli>(Clock::now() - t).count();
    worst_ms = std::max(worst_ms, ms);
    slow += ms > 100;
    ++calls;
    std::this_thread::sleep_for(10ms);
  }
  ::kill(stress, SIGTERM);
  ::waitpid(stress, nullptr, 0);
  std::printf("soak: %d s under stress-ng --cpu 2, 4 procs on %zu host(s), %zu call+sum (%zu over 100 ms, worst %.1f ms), "
              "heartbeat %lld ms / timeout %lld ms: false positives %d\n",
              seconds, hosts.size(), calls, slow, worst_ms, static_cast<long long>(Runtime::current().config().heartbeat_interval.count()),
              static_cast<long long>(Runtime::current().config().heartbeat_timeout.count()), failures->load());
  return failures->load() == 0 ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  auto loaded = Config::load();
  if (!loaded) {
    std::fprintf(stderr, "%s\n", loaded.error().to_string().c_str());
    return 2;
  }
  Config config = *loaded;
  config.watchdog_timeout = 200ms;
  config.log_level = "error";
  prefer_netns(config);  // the host kinds need hosts in network namespaces
  Runtime runtime(argc, argv, config);

  CLI::App app("supervision_bench: fault detection latency (issue 5)");
  int trials = 100, peer_trials = 10, soak_seconds = 0;
  std::uint64_t seed = 5;
  std::string kinds = "kill,segv,exit,sigstop,freeze,stuck,host-stop,link-down,drop";
  bool no_peer = false;
  app.add_option("--trials", trials, "trials per kind");
  app.add_option("--seed", seed, "the schedule's seed");
  app.add_option("--kinds", kinds, "comma-separated kinds");
  app.add_option("--peer-trials", peer_trials, "trials per fault for the torch elastic peer");
  app.add_flag("--no-peer", no_peer, "skip the torch elastic peer");
  app.add_option("--soak", soak_seconds, "run only the soak, for this many seconds");
  CLI11_PARSE(app, argc, argv);
  if (soak_seconds > 0) return soak(soak_seconds);

  std::mt19937_64 rng(seed);
  std::vector<KindResult> results;
  std::stringstream list(kinds);
  for (std::string kind; std::getline(list, kind, ',');) {
    KindResult r;
    r.kind = kind;
    for (int t = 0; t < trials && r.unavailable.empty(); ++t) run_trial(kind, t, rng, r);
    if (!r.unavailable.empty()) std::fprintf(stderr, "%s: %s\n", kind.c_str(), r.unavailable.c_str());
    results.push_back(std::move(r));
    std::fprintf(stderr, "%s done\n", kind.c_str());
  }
  std::printf("sceptre: transport %s, heartbeat %lld ms, timeout %lld ms, watchdog %lld ms; %d trials per kind, seed %llu\n",
              config.transport.c_str(),
              static_cast<long long>(config.heartbeat_interval.count()),
              static_cast<long long>(config.heartbeat_timeout.count()), static_cast<long long>(config.watchdog_timeout.count()), trials,
              static_cast<unsigned long long>(seed));
  std::printf("%-9s %8s %10s %10s %10s %7s %7s %7s\n", "kind", "trials", "p50 ms", "p99 ms", "max ms", "missed", "false+",
              "leaked");
  for (const auto& r : results) {
    std::printf("%-9s %8d %10.2f %10.2f %10.2f %7d %7d %7d\n", r.kind.c_str(), r.trials, pct(r.ms, 0.5), pct(r.ms, 0.99),
                r.ms.empty() ? 0.0 : *std::max_element(r.ms.begin(), r.ms.end()), r.missed, r.false_positives, r.leaked);
  }
  std::fflush(stdout);

  if (!no_peer) {
    const std::string script = std::string(SCEPTRE_SOURCE_DIR) + "/bench/torch_elastic_peer.py";
    std::printf("peer: torch.distributed.elastic launcher (torchrun's), 2 workers, monitor_interval 5 s (torchrun's "
                "default); %d trials per fault\n",
                peer_trials);
    for (const std::string fault : {"kill", "stop"}) {
      std::vector<double> ms;
      int unnoticed = 0;
      for (int t = 0; t < peer_trials; ++t) {
        auto n = peer_trial(script, fault, 30s);
        if (n) {
          ms.push_back(*n);
        } else {
          ++unnoticed;
        }
      }
      std::printf("peer %-5s noticed %zu/%d: p50 %.0f ms, max %.0f ms; not noticed within 30 s: %d\n", fault.c_str(),
                  ms.size(), peer_trials, pct(ms, 0.5), ms.empty() ? 0.0 : *std::max_element(ms.begin(), ms.end()),
                  unnoticed);
    }
  }
  return 0;
}
