// Actor types of the mesh tests. The test binary is its own proc image: these run in the procs
// it spawns (and the controller-child modes of main.cc).
#pragma once

#include <sys/mman.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "sceptre/sceptre.h"

namespace sceptre::testing {

struct Whoami {
  std::int64_t pid = 0;
  std::int64_t cast_rank = -1;   // cast_point()->rank(), -1 outside a cast
  std::string point;             // cast_point()->to_string()
  std::int64_t tag = 0;          // the constructor's argument
  SCEPTRE_FIELDS(pid, cast_rank, point, tag)
};

class Probe : public Actor {
 public:
  explicit Probe(std::int64_t tag = 0) : tag_(tag) {}

  Whoami whoami() {
    auto p = cast_point();
    return Whoami{::getpid(), p ? static_cast<std::int64_t>(p->rank()) : -1, p ? p->to_string() : "", tag_};
  }
  std::string env(std::string name) {
    const char* v = std::getenv(name.c_str());
    return v ? v : "<unset>";
  }
  // The value the reductions fold: the member's rank in the view cast to, times `scale`.
  std::int64_t rank_times(std::int64_t scale) { return static_cast<std::int64_t>(cast_point()->rank()) * scale; }
  double half_rank() { return static_cast<double>(cast_point()->rank()) / 2; }
  std::vector<std::int64_t> ranks_list() { return {static_cast<std::int64_t>(cast_point()->rank())}; }
  // Fails on the members whose view rank is in `ranks`.
  int fail_on(std::vector<std::int64_t> ranks) {
    for (auto r : ranks) {
      if (r == static_cast<std::int64_t>(cast_point()->rank())) {
        throw std::runtime_error("member " + std::to_string(r) + " refuses");
      }
    }
    return 1;
  }
  // Per-sender order: appends; history() tells what came in which order.
  void record(std::int64_t seq) { seen_.push_back(seq); }
  std::vector<std::int64_t> history() { return seen_; }
  // Sleeps, then answers its pid.
  std::int64_t sleep_ms(std::int64_t ms) {
    std::this_thread::sleep_for(std::chrono::milliseconds(ms));
    return ::getpid();
  }
  void say(std::string line) {
    std::printf("%s\n", line.c_str());
    std::fflush(stdout);
  }
  void say_rank(std::string prefix) {
    std::printf("%s %zu\n", prefix.c_str(), cast_point()->rank());
    std::fflush(stdout);
  }

 private:
  std::int64_t tag_;
  std::vector<std::int64_t> seen_;
};
SCEPTRE_ACTOR(Probe, whoami, env, rank_times, half_rank, ranks_list, fail_on, record, history, sleep_ms, say,
              say_rank);

// The supervision tests' member: fails in the ways a real one does.
class Faulty : public Actor {
 public:
  std::int64_t pid() { return ::getpid(); }
  // Dies: "segv" (a real invalid write), "abort", "exit" (status 1, without unwinding).
  void crash(std::string how) {
    std::fprintf(stderr, "faulty %d: about to %s\n", static_cast<int>(::getpid()), how.c_str());
    if (how == "segv") {  // a real fault, at an address the sanitizers do not vet: a page with no access
      void* page = ::mmap(nullptr, 4096, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
      *static_cast<volatile int*>(page) = 1;
    }
    if (how == "abort") std::abort();
    std::_Exit(1);
  }
  // Runs for `ms` without returning: a handler stuck for that long.
  std::int64_t stuck_ms(std::int64_t ms) {
    std::this_thread::sleep_for(std::chrono::milliseconds(ms));
    return ms;
  }
  // Throws: fire-and-forget, this fails the actor.
  void throw_now(std::string what) { throw std::logic_error(what); }
};
SCEPTRE_ACTOR(Faulty, pid, crash, stuck_ms, throw_now);

// A user accumulator: concatenates, then sorts, so the order members answer in does not matter.
struct Concat {
  std::vector<std::int64_t> operator()(std::vector<std::int64_t> a, const std::vector<std::int64_t>& b) const {
    a.insert(a.end(), b.begin(), b.end());
    std::sort(a.begin(), a.end());
    return a;
  }
};

// A user accumulator that fails, as one meeting tensors of different shapes would.
struct Refuse {
  std::int64_t operator()(std::int64_t, std::int64_t) const { throw std::invalid_argument("shapes differ"); }
};

}  // namespace sceptre::testing
