// The chaos suite, reduced for CI: every kind of fault of chaos_trials.h, a few seeded trials
// each, on real procs. Each fault must be detected as the failure it is, with no false positive
// and no process left behind. The latency bounds are loose sanity limits for sanitizer builds
// on two busy cores; the figures are bench/supervision_bench's.
//
// The binary is its own proc image (main below makes the Runtime first).
#include <gtest/gtest.h>

#include "chaos/chaos_trials.h"

namespace sceptre::chaos {
namespace {

class Chaos : public ::testing::TestWithParam<std::string> {};

TEST_P(Chaos, EveryInjectedFaultIsDetectedOnceAndNothingLeaks) {
  const std::string kind = GetParam();
  const char* env = std::getenv("SCEPTRE_CHAOS_TRIALS");
  const int trials = env ? std::atoi(env) : 6;
  std::mt19937_64 rng(std::hash<std::string>{}(kind));  // one fixed schedule per kind
  KindResult r;
  r.kind = kind;
  for (int t = 0; t < trials && r.unavailable.empty(); ++t) run_trial(kind, t, rng, r);
  if (!r.unavailable.empty()) GTEST_SKIP() << kind << ": " << r.unavailable;
  EXPECT_EQ(r.trials, trials);
  EXPECT_EQ(r.missed, 0);
  EXPECT_EQ(r.false_positives, 0);
  EXPECT_EQ(r.leaked, 0);
  const bool silent = kind == "sigstop" || kind == "freeze" || host_kind(kind);
  for (double ms : r.ms) EXPECT_LT(ms, silent ? 20'000.0 : 5'000.0) << kind;
}
INSTANTIATE_TEST_SUITE_P(Kinds, Chaos, ::testing::ValuesIn(kKinds));

}  // namespace
}  // namespace sceptre::chaos

int main(int argc, char** argv) {
  auto config = sceptre::Config::load();
  if (!config) {
    std::fprintf(stderr, "%s\n", config.error().to_string().c_str());
    return 2;
  }
  // Long enough that a handler calling exit() (the exit kind) is gone before it counts as stuck,
  // also under ThreadSanitizer, whose exit takes a few hundred ms.
  config->watchdog_timeout = std::chrono::seconds(1);
  // Generous for sanitizer builds: a proc declared lost must really be silent.
  if (!std::getenv("SCEPTRE_HEARTBEAT_TIMEOUT")) config->heartbeat_timeout = std::chrono::seconds(3);
  sceptre::chaos::prefer_netns(*config);
  sceptre::Runtime runtime(argc, argv, *config);
  ::testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}
