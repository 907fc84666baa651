// The torchft-style oracle of the train tests, and their small model.
#pragma once

#include <gtest/gtest.h>

#include <set>

#include "sceptre/train/ft_ddp.h"

namespace sceptre::train {

using namespace std::chrono_literals;

inline TrainOptions small(std::uint64_t steps) {
  TrainOptions o;
  o.model.hidden = 64;
  o.steps = steps;
  o.batch = 32;
  o.min_replicas = 1;
  o.collective_timeout = 3s;   // sanitizer builds on 2 busy cores
  o.rendezvous_timeout = 10s;
  o.chunk_bytes = 16 << 10;    // many chunks, several in flight
  o.end_with_all_replicas = true;
  return o;
}

// Every live replica holds the replay's bits; the committed sample blocks are all different.
// A resumed run's replay starts with the steps of the run it resumed (`before`, up to its
// start step).
inline void expect_oracle(const TrainOptions& o, const Summary& s, std::size_t min_live,
                   std::vector<StepRecord> before = {}) {
  ASSERT_EQ(s.committed, o.steps);
  ASSERT_GE(s.digests.size(), min_live);
  ASSERT_GE(before.size(), s.start_step);
  before.resize(s.start_step);
  auto all = before;
  all.insert(all.end(), s.steps.begin(), s.steps.end());
  ASSERT_EQ(all.size(), s.committed);
  std::uint64_t expect = replay(o, all);
  for (auto [replica, digest] : s.digests) {
    EXPECT_EQ(digest, expect) << "replica " << replica << " differs from the failure-free replay";
  }
  std::set<std::uint64_t> blocks;
  for (auto& r : before)
    for (auto f : r.first) blocks.insert(f);
  std::uint64_t committed = 0, highest = 0;
  for (auto& r : s.steps) {
    for (auto f : r.first) {
      EXPECT_TRUE(blocks.insert(f).second) << "sample block " << f << " committed twice";
      EXPECT_EQ(f % o.batch, 0u);
      highest = std::max(highest, f / o.batch);
      ++committed;
    }
  }
  EXPECT_EQ(s.samples, committed * o.batch);
  // Blocks not committed are only those handed out to the last, unfinished attempts.
  if (committed > 0) {
    EXPECT_LE(highest + 1 - blocks.size(), 4u * 2) << "sample blocks were skipped";
  }
}

}  // namespace sceptre::train
