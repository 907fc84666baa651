#include "host/log_folder.h"

#include <gtest/gtest.h>

#include <map>
#include <random>
#include <sstream>

namespace sceptre::host {
namespace {

using std::chrono::milliseconds;
using Stream = LogFolder::Stream;

const LogFolder::Clock::time_point t0{};

// A LogFolder whose sink records what it is handed.
struct Folder {
  explicit Folder(LogFolder::Options options = {})
      : folder(options,
               [this](Stream stream, const std::string& line) { lines.emplace_back(stream, line); }) {}
  std::vector<std::string> texts() const {
    std::vector<std::string> out;
    for (const auto& [stream, line] : lines) out.push_back(line);
    return out;
  }
  std::vector<std::pair<Stream, std::string>> lines;
  LogFolder folder;
};

using Lines = std::vector<std::string>;

TEST(LogFolder, OneLineFromOneRankIsPrefixedWithMeshAndRank) {
  Folder f;
  f.folder.add(Stream::kStdout, "trainers", 3, "hello", t0);
  EXPECT_TRUE(f.lines.empty());  // it waits for identical lines
  f.folder.flush_all();
  EXPECT_EQ(f.texts(), Lines{"[trainers 3] hello"});
}

TEST(LogFolder, IdenticalLinesFromManyRanksFoldWithTheRanksAndACount) {
  Folder f;
  const std::uint64_t ranks[] = {7, 2, 0, 3, 1};
  for (int i = 0; i < 5; ++i) {
    f.folder.add(Stream::kStdout, "trainers", ranks[i], "epoch 3 done", t0 + milliseconds(i * 20));
  }
  f.folder.flush_due(t0 + milliseconds(99));
  EXPECT_TRUE(f.lines.empty());
  f.folder.flush_due(t0 + milliseconds(100));  // the window runs from the group's first line
  EXPECT_EQ(f.texts(), Lines{"[trainers 0-3,7 \xc3\x97" "5] epoch 3 done"});
}

TEST(LogFolder, RepeatsFromOneRankAreCountedToo) {
  Folder f;
  f.folder.add(Stream::kStdout, "m", 4, "loss=nan", t0);
  f.folder.add(Stream::kStdout, "m", 4, "loss=nan", t0);
  f.folder.add(Stream::kStdout, "n", 0, "x", t0);
  f.folder.add(Stream::kStdout, "n", 0, "x", t0);
  f.folder.add(Stream::kStdout, "n", 1, "x", t0);
  f.folder.flush_all();
  EXPECT_EQ(f.texts(), (Lines{"[m 4 \xc3\x97" "2] loss=nan", "[n 0-1 \xc3\x97" "3] x"}));
}

TEST(LogFolder, ALineAfterTheWindowStartsAGroupOfItsOwn) {
  Folder f;
  f.folder.add(Stream::kStdout, "m", 0, "x", t0);
  f.folder.add(Stream::kStdout, "m", 1, "x", t0 + milliseconds(60));
  f.folder.add(Stream::kStdout, "m", 2, "x", t0 + milliseconds(150));  // emits the first group
  EXPECT_EQ(f.texts(), Lines{"[m 0-1 \xc3\x97" "2] x"});
  EXPECT_EQ(f.folder.next_deadline(), t0 + milliseconds(250));
  f.folder.flush_due(t0 + milliseconds(250));
  EXPECT_EQ(f.texts(), (Lines{"[m 0-1 \xc3\x97" "2] x", "[m 2] x"}));
}

TEST(LogFolder, NextDeadlineIsTheOldestGroupsWindow) {
  Folder f;
  EXPECT_EQ(f.folder.next_deadline(), std::nullopt);
  f.folder.add(Stream::kStdout, "m", 0, "a", t0 + milliseconds(5));
  f.folder.add(Stream::kStdout, "m", 0, "b", t0 + milliseconds(30));
  EXPECT_EQ(f.folder.next_deadline(), t0 + milliseconds(105));
  f.folder.flush_due(t0 + milliseconds(105));
  EXPECT_EQ(f.folder.next_deadline(), t0 + milliseconds(130));
  f.folder.flush_due(t0 + milliseconds(200));
  EXPECT_EQ(f.folder.next_deadline(), std::nullopt);
  EXPECT_EQ(f.texts(), (Lines{"[m 0] a", "[m 0] b"}));
}

TEST(LogFolder, WithFoldingOffEveryLineIsEmittedAtOnce) {
  Folder f({.fold = false});
  f.folder.add(Stream::kStdout, "m", 2, "x", t0);
  EXPECT_EQ(f.texts(), Lines{"[m 2] x"});
  f.folder.add(Stream::kStderr, "m", 3, "x", t0);
  EXPECT_EQ(f.texts(), (Lines{"[m 2] x", "[m 3] x"}));
  EXPECT_EQ(f.lines[1].first, Stream::kStderr);
  EXPECT_EQ(f.folder.next_deadline(), std::nullopt);
}

TEST(LogFolder, DifferentMeshesNeverFold) {
  Folder f;
  f.folder.add(Stream::kStdout, "trainers", 0, "ready", t0);
  f.folder.add(Stream::kStdout, "workers", 0, "ready", t0);
  f.folder.add(Stream::kStdout, "trainers", 1, "ready", t0);
  f.folder.flush_all();
  EXPECT_EQ(f.texts(), (Lines{"[trainers 0-1 \xc3\x97" "2] ready", "[workers 0] ready"}));
}

TEST(LogFolder, StdoutAndStderrAreSeparate) {
  Folder f;
  f.folder.add(Stream::kStdout, "m", 0, "x", t0);
  f.folder.add(Stream::kStderr, "m", 1, "x", t0);
  f.folder.add(Stream::kStderr, "m", 2, "x", t0);
  f.folder.flush_all();
  ASSERT_EQ(f.lines.size(), 2u);
  EXPECT_EQ(f.lines[0], (std::pair{Stream::kStdout, std::string("[m 0] x")}));
  EXPECT_EQ(f.lines[1], (std::pair{Stream::kStderr, std::string("[m 1-2 \xc3\x97" "2] x")}));
}

TEST(LogFolder, AFoldNeverMovesALineBeforeAnEarlierLineOfItsRank) {
  Folder f;
  f.folder.add(Stream::kStdout, "m", 0, "a", t0);
  f.folder.add(Stream::kStdout, "m", 0, "b", t0);
  f.folder.add(Stream::kStdout, "m", 1, "b", t0);  // rank 1 has nothing pending: joins "b"
  f.folder.add(Stream::kStdout, "m", 1, "a", t0);  // joining "a" would put it before rank 1's "b"
  f.folder.add(Stream::kStdout, "m", 0, "a", t0);  // so would this, before rank 0's "b"
  f.folder.add(Stream::kStdout, "m", 2, "a", t0);  // rank 2 may join either: it joins the newest
  f.folder.flush_all();
  EXPECT_EQ(f.texts(), (Lines{"[m 0] a", "[m 0-1 \xc3\x97" "2] b", "[m 0-2 \xc3\x97" "3] a"}));
}

TEST(LogFolder, RanksAreCompressedIntoRanges) {
  EXPECT_EQ(compress_ranks({}), "");
  EXPECT_EQ(compress_ranks({5}), "5");
  EXPECT_EQ(compress_ranks({10, 3, 1, 2, 7, 9, 2}), "1-3,7,9-10");
  EXPECT_EQ(compress_ranks({0, 2, 4}), "0,2,4");
  EXPECT_EQ(compress_ranks({18446744073709551614u, 18446744073709551615u}),
            "18446744073709551614-18446744073709551615");
}

// --- property test: random ranks, lines and times; parse the output back -------------------------

struct Parsed {
  std::string mesh;
  std::vector<std::uint64_t> ranks;
  std::uint64_t count = 0;
  std::string text;
};

// Parses "[mesh 0-3,7 ×5] text" or "[mesh 3] text"; mesh names in this test have no spaces.
Parsed parse(const std::string& line) {
  Parsed p;
  auto close = line.find("] ");
  EXPECT_TRUE(line.size() > 1 && line[0] == '[' && close != std::string::npos) << line;
  p.text = line.substr(close + 2);
  std::istringstream header(line.substr(1, close - 1));
  std::string ranks, times;
  header >> p.mesh >> ranks >> times;
  std::istringstream list(ranks);
  for (std::string item; std::getline(list, item, ',');) {
    auto dash = item.find('-');
    std::uint64_t lo = std::stoull(item.substr(0, dash));
    std::uint64_t hi = dash == std::string::npos ? lo : std::stoull(item.substr(dash + 1));
    EXPECT_LE(lo, hi) << line;
    for (std::uint64_t r = lo; r <= hi; ++r) p.ranks.push_back(r);
  }
  if (times.empty()) {
    p.count = 1;
  } else {
    EXPECT_EQ(times.rfind("\xc3\x97", 0), 0u) << line;
    p.count = std::stoull(times.substr(2));
    EXPECT_GE(p.count, 2u) << line;
  }
  EXPECT_GE(p.count, p.ranks.size()) << line;
  return p;
}

// Maximal runs of equal texts: {"a","a","b"} -> {("a",2), ("b",1)}.
std::vector<std::pair<std::string, std::size_t>> runs(const std::vector<std::string>& texts) {
  std::vector<std::pair<std::string, std::size_t>> out;
  for (const auto& t : texts) {
    if (!out.empty() && out.back().first == t) {
      ++out.back().second;
    } else {
      out.push_back({t, 1});
    }
  }
  return out;
}

TEST(LogFolder, RandomTrafficKeepsEveryLineOnceAndEachRanksOrder) {
  std::mt19937_64 rng(20240601);
  const std::string meshes[] = {"a", "b"};
  for (int trial = 0; trial < 200; ++trial) {
    Folder f({.fold = true, .window = milliseconds(1 + rng() % 100)});
    using Source = std::tuple<Stream, std::string, std::uint64_t>;
    std::map<Source, std::vector<std::string>> sent;
    std::map<std::tuple<Stream, std::string, std::string>, std::uint64_t> sent_count;
    auto now = t0;
    const int n = 50 + static_cast<int>(rng() % 400);
    const int texts = 1 + static_cast<int>(rng() % 4);
    for (int i = 0; i < n; ++i) {
      now += milliseconds(rng() % 20);
      auto stream = rng() % 4 == 0 ? Stream::kStderr : Stream::kStdout;
      const std::string& mesh = meshes[rng() % 2];
      std::uint64_t rank = rng() % 12;
      std::string text = "line " + std::to_string(rng() % texts);
      f.folder.add(stream, mesh, rank, text, now);
      sent[{stream, mesh, rank}].push_back(text);
      ++sent_count[{stream, mesh, text}];
      if (rng() % 8 == 0) f.folder.flush_due(now);
      // add() and flush_due() leave nothing overdue behind.
      ASSERT_TRUE(f.folder.next_deadline().has_value());
      EXPECT_GT(*f.folder.next_deadline(), now);
    }
    f.folder.flush_all();
    EXPECT_EQ(f.folder.next_deadline(), std::nullopt);

    std::map<Source, std::vector<std::string>> got;  // one entry per emitted line naming the rank
    std::map<std::tuple<Stream, std::string, std::string>, std::uint64_t> got_count;
    std::uint64_t total = 0;
    for (const auto& [stream, line] : f.lines) {
      Parsed p = parse(line);
      for (std::uint64_t r : p.ranks) got[{stream, p.mesh, r}].push_back(p.text);
      got_count[{stream, p.mesh, p.text}] += p.count;
      total += p.count;
    }
    // (a) every line exactly once, counted in its fold.
    EXPECT_EQ(total, static_cast<std::uint64_t>(n)) << "trial " << trial;
    EXPECT_EQ(got_count, sent_count) << "trial " << trial;
    // (b) each rank's lines in its order: its emitted lines are its runs of equal lines, in order;
    // a run may fold into one line (the count), never two runs into one.
    ASSERT_EQ(got.size(), sent.size()) << "trial " << trial;
    for (const auto& [source, texts_sent] : sent) {
      auto sent_runs = runs(texts_sent);
      auto got_runs = runs(got[source]);
      ASSERT_EQ(got_runs.size(), sent_runs.size()) << "trial " << trial;
      for (std::size_t i = 0; i < sent_runs.size(); ++i) {
        EXPECT_EQ(got_runs[i].first, sent_runs[i].first) << "trial " << trial << " run " << i;
        EXPECT_LE(got_runs[i].second, sent_runs[i].second) << "trial " << trial << " run " << i;
      }
    }
  }
}

}  // namespace
}  // namespace sceptre::host
