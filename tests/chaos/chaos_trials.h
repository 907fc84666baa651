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

#include "sceptre/sceptre.h"

namespace sceptre::chaos {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

inline const std::vector<std::string> kKinds = {"kill", "segv", "exit", "sigstop", "freeze", "stuck"};

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
};

inline FailureCause expected_cause(const std::string& kind) {
  if (kind == "kill" || kind == "segv") return FailureCause::kKilled;
  if (kind == "exit") return FailureCause::kExited;
  if (kind == "stuck") return FailureCause::kStuck;
  return FailureCause::kHeartbeatLost;
}

inline void run_trial(const std::string& kind, int trial, std::mt19937_64& rng, KindResult& out) {
  auto seen = std::make_shared<Seen>();
  std::vector<pid_t> pids;
  const std::size_t victim = rng() % 2;
  const auto delay = std::chrono::microseconds(rng() % 20'000);
  {
    auto procs = this_host().spawn_procs({{"procs", 2}}, "trial");
    procs.on_failure([seen](const MeshFailure& f) {
      std::lock_guard lock(seen->mu);
      seen->failures.push_back(f);
      seen->cv.notify_all();
      return Supervise::kHandled;
    });
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
  auto deadline = Clock::now() + 10s;
  for (pid_t p : pids) {
    while (alive(p) && Clock::now() < deadline) std::this_thread::sleep_for(5ms);
    if (alive(p)) ++out.leaked;
  }
}

}  // namespace sceptre::chaos
