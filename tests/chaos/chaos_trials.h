// The chaos suite's trials: inject one fault into a fresh mesh and time its detection. Run
// reduced by tests/chaos/chaos_test (in CI) and in full by bench/supervision_bench.
//
// A trial spawns a mesh of two procs (one Victim actor each), picks the victim rank and a delay
// of 0-20 ms from the seeded schedule, injects the fault and times it from the injection to the
// MeshFailure's `when` (both steady_clock, i.e. CLOCK_MONOTONIC, in this process). Kinds:
//   kill     SIGKILL of the victim proc            segv    SIGSEGV delivered to it
//   exit     its actor calls exit(1) (timed from the cast that asks it to)
//   sigstop  SIGSTOP of the proc                    freeze  its cgroup (v1 freezer) frozen
//   stuck    a handler that runs past Config::watchdog_timeout (timed from the limit, which the
//            controller's Config must set to Config::watchdog_timeout)
// and, on two launched hosts (Runtime::launch_hosts) with one proc each, of the victim host:
//   host-stop SIGSTOP of its agent        link-down  its veth taken down (ip link set ... down)
//   drop      the controller's packets to it dropped, one way (an nftables output rule)
// timed to the first failure of that host (its agent's, or a proc's on it). The link-down and
// drop kinds need hosts in network namespaces (Config::transport "netns", root); host-stop uses
// them when there, else plain agents.
// A false positive is any failure but the expected one of the victim; a leak is a pid of the
// trial still alive 10 s after its mesh was stopped.
#pragma once

#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <mutex>
#include <optional>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "host/host_network.h"
#include "sceptre/sceptre.h"

namespace sceptre::chaos {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

inline const std::vector<std::string> kKinds = {"kill",   "segv",      "exit", "sigstop", "freeze",
                                                 "stuck",  "host-stop", "link-down", "drop"};
inline bool host_kind(const std::string& kind) { return kind == "host-stop" || kind == "link-down" || kind == "drop"; }

class Victim : public Actor {
 public:
  std::int64_t pid() { return ::getpid(); }
  void exit_now() { std::exit(1); }
  std::int64_t stuck_ms(std::int64_t ms) {
    std::this_thread::sleep_for(std::chrono::milliseconds(ms));
    return ms;
  }
};
SCEPTRE_ACTOR(Victim, pid, exit_now, stuck_ms);

// Hosts in network namespaces where this process can make them (root, iproute2): the controller's
// Config::transport becomes "netns" unless SCEPTRE_TRANSPORT says otherwise. For main, before the
// Runtime.
inline void prefer_netns(Config& config) {
  if (!std::getenv("SCEPTRE_ROLE") && !std::getenv("SCEPTRE_TRANSPORT") && ::geteuid() == 0 &&
      host::run_command({"ip", "-V"}).ok()) {
    config.transport = "netns";
  }
}

// The watchdog limit of the stuck trials: the controller's Config::watchdog_timeout (Runtime::current()).
inline std::chrono::milliseconds watchdog_limit() { return Runtime::current().config().watchdog_timeout; }

inline bool alive(pid_t pid) {
  std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
  if (!stat) return false;
  std::string line;
  std::getline(stat, line);
  auto close = line.rfind(')');
  return close != std::string::npos && close + 2 < line.size() && line[close + 2] != 'Z';
}

inline bool write_file(const std::string& path, const std::string& text) {
  std::ofstream f(path);
  f << text;
  f.flush();
  return static_cast<bool>(f);
}

// A cgroup v1 freezer group for one trial.
class Freezer {
 public:
  static constexpr const char* kRoot = "/sys/fs/cgroup/freezer";
  explicit Freezer(int trial) : dir_(std::string(kRoot) + "/sceptre-bench-" + std::to_string(::getpid()) + "-" + std::to_string(trial)) {
    ok_ = ::mkdir(dir_.c_str(), 0755) == 0;
  }
  ~Freezer() {
    if (!ok_) return;
    thaw();
    // Tasks leave the group as they die; rmdir succeeds once it is empty.
    for (int i = 0; i < 200 && ::rmdir(dir_.c_str()) != 0; ++i) std::this_thread::sleep_for(10ms);
  }
  bool ok() const { return ok_; }
  bool add(pid_t pid) { return write_file(dir_ + "/cgroup.procs", std::to_string(pid)); }  // every thread
  bool freeze() { return write_file(dir_ + "/freezer.state", "FROZEN"); }
  // A frozen v1 task cannot die until thawed: the SIGKILL the supervisor sent waits for this.
  void thaw() { write_file(dir_ + "/freezer.state", "THAWED"); }

 private:
  std::string dir_;
  bool ok_ = false;
};

// The outcome of a kind's trials. `unavailable`: the kind cannot be injected here (why).
struct KindResult {
  std::string kind;
  std::vector<double> ms;  // detection latency per detected trial
  int missed = 0, false_positives = 0, leaked = 0, trials = 0;
  std::string unavailable;
};

inline double pct(std::vector<double> v, double p) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  std::size_t i = static_cast<std::size_t>(p * static_cast<double>(v.size() - 1) + 0.5);
  return v[std::min(i, v.size() - 1)];
}

// Collects the failures of one trial's mesh.
struct Seen {
  std::mutex mu;
  std::condition_variable cv;
  std::vector<MeshFailure> failures;

  // A failure handler that records into `seen` and handles the failure.
  static FailureHandler handler(std::shared_ptr<Seen> seen) {
    return [seen = std::move(seen)](const MeshFailure& f) {
      std::lock_guard lock(seen->mu);
      seen->failures.push_back(f);
      seen->cv.notify_all();
      return Supervise::kHandled;
    };
  }
};

// Counts the trial's processes still alive 10 s after its mesh stopped.
inline void count_leaks(const std::vector<pid_t>& pids, KindResult& out) {
  auto deadline = Clock::now() + 10s;
  for (pid_t p : pids) {
    while (alive(p) && Clock::now() < deadline) std::this_thread::sleep_for(5ms);
    if (alive(p)) ++out.leaked;
  }
}

inline FailureCause expected_cause(const std::string& kind) {
  if (kind == "kill" || kind == "segv") return FailureCause::kKilled;
  if (kind == "exit") return FailureCause::kExited;
  if (kind == "stuck") return FailureCause::kStuck;
  return FailureCause::kHeartbeatLost;
}

inline void run_host_trial(const std::string& kind, int trial, std::mt19937_64& rng, KindResult& out) {
  const bool netns = Runtime::current().config().transport == "netns";
  if (!netns && kind != "host-stop") {
    out.unavailable = "needs hosts in network namespaces: Config::transport netns (root, iproute2, nftables)";
    return;
  }
  auto seen = std::make_shared<Seen>();
  FailureHandler record = Seen::handler(seen);
  std::vector<pid_t> pids;
  const std::size_t victim = rng() % 2;
  const auto delay = std::chrono::microseconds(rng() % 20'000);
  const std::string table = "sceptre_chaos_" + std::to_string(::getpid());
  {
    HostLaunch how;
    how.name = "hosts";
    how.netns = netns;
    how.on_failure = record;
    auto hosts = Runtime::current().launch_hosts(2, how);
    auto procs = hosts.spawn_procs({{"procs", 1}}, "trial", record);
    auto members = procs.spawn<Victim>("victim");
    (void)members.call<&Victim::pid>().get(30s);
    for (std::size_t r = 0; r < procs.size(); ++r) pids.push_back(procs.pid(r));
    for (std::size_t k = 0; k < 2; ++k) pids.push_back(hosts.agents().pid(k));
    std::this_thread::sleep_for(delay);
    const Clock::time_point t0 = Clock::now();
    Status injected;
    if (kind == "host-stop") ::kill(hosts.agents().pid(victim), SIGSTOP);
    if (kind == "link-down") injected = host::run_command({"ip", "link", "set", hosts.link(victim), "down"});
    if (kind == "drop") {
      for (const auto& cmd : std::vector<std::vector<std::string>>{
               {"nft", "add", "table", "ip", table},
               {"nft", "add", "chain", "ip", table, "out", "{ type filter hook output priority 0 ; }"},
               {"nft", "add", "rule", "ip", table, "out", "ip", "daddr", hosts.address(victim), "drop"}}) {
        if (injected.ok()) injected = host::run_command(cmd);
      }
    }
    if (!injected.ok()) {
      out.unavailable = injected.error().to_string();
      (void)host::run_command({"nft", "delete", "table", "ip", table});
      return;
    }
    {
      // The victim host is rank `victim` of the agents and of the procs (one proc per host).
      std::unique_lock lock(seen->mu);
      seen->cv.wait_for(lock, 20s, [&] { return !seen->failures.empty(); });
      // Its consequences (the other of agent and proc) come within the same check.
      seen->cv.wait_for(lock, 200ms, [&] { return seen->failures.size() >= 2; });
      bool hit = false;
      for (const auto& f : seen->failures) {
        const bool expected = f.rank == victim && (f.cause == FailureCause::kHeartbeatLost ||
                                                   f.cause == FailureCause::kHostLost);
        if (expected) {
          if (!hit) out.ms.push_back(std::chrono::duration<double, std::milli>(f.when - t0).count());
          hit = true;
        } else {
          ++out.false_positives;
          std::fprintf(stderr, "%s trial %d (victim: host %zu): unexpected failure: %s\n", kind.c_str(), trial, victim,
                       f.summary().c_str());
        }
      }
      if (!hit) ++out.missed;
    }
    if (kind == "drop") (void)host::run_command({"nft", "delete", "table", "ip", table});
    hosts.stop();
  }
  ++out.trials;
  count_leaks(pids, out);
}

inline void run_trial(const std::string& kind, int trial, std::mt19937_64& rng, KindResult& out) {
  if (host_kind(kind)) return run_host_trial(kind, trial, rng, out);
  auto seen = std::make_shared<Seen>();
  std::vector<pid_t> pids;
  const std::size_t victim = rng() % 2;
  const auto delay = std::chrono::microseconds(rng() % 20'000);
  {
    auto procs = this_host().spawn_procs({{"procs", 2}}, "trial");
    procs.on_failure(Seen::handler(seen));
    auto members = procs.spawn<Victim>("victim");
    (void)members.call<&Victim::pid>().get(30s);
    for (std::size_t r = 0; r < procs.size(); ++r) pids.push_back(procs.pid(r));
    const pid_t target = pids[victim];
    std::optional<Freezer> freezer;
    if (kind == "freeze") {
      freezer.emplace(trial);
      if (!freezer->ok() || !freezer->add(target)) {
        out.unavailable = std::string("cannot use ") + Freezer::kRoot + " (not root, or no cgroup v1 freezer)";
        return;
      }
    }
    std::this_thread::sleep_for(delay);
    Clock::time_point t0 = Clock::now();
    if (kind == "kill") ::kill(target, SIGKILL);
    if (kind == "segv") ::kill(target, SIGSEGV);
    if (kind == "sigstop") ::kill(target, SIGSTOP);
    if (kind == "freeze") freezer->freeze();
    if (kind == "exit") members.slice("procs", victim).broadcast<&Victim::exit_now>();
    if (kind == "stuck") {
      members.slice("procs", victim).broadcast<&Victim::stuck_ms>(std::int64_t{watchdog_limit().count() + 1500});
      t0 += watchdog_limit();  // what is timed is the report after the limit
    }
    {
      std::unique_lock lock(seen->mu);
      seen->cv.wait_for(lock, 10s, [&] { return !seen->failures.empty(); });
      bool hit = false;
      for (const auto& f : seen->failures) {
        if (f.rank == victim && f.cause == expected_cause(kind) && !hit) {
          hit = true;
          out.ms.push_back(std::chrono::duration<double, std::milli>(f.when - t0).count());
        } else {
          ++out.false_positives;
          std::fprintf(stderr, "%s trial %d: unexpected failure: %s\n", kind.c_str(), trial, f.summary().c_str());
        }
      }
      if (!hit) ++out.missed;
    }
    if (freezer) freezer->thaw();
    if (kind == "sigstop") ::kill(target, SIGCONT);  // killed already; harmless
    procs.stop();
  }
  ++out.trials;
  count_leaks(pids, out);
}

}  // namespace sceptre::chaos
