// LogFolder: turns the lines a controller reads from its procs' stdout and stderr into the lines it
// prints, each prefixed with the mesh name and rank: `[trainers 3] text`. With folding on, the same
// text printed by many ranks of one mesh within a short window becomes one line that lists the
// ranks and counts the lines: `[trainers 0-3,7 ×5] text`, so 512 ranks logging "epoch 3 done" print
// one line, not 512.
//
// What holds for the emitted lines, whatever the timing:
//   - every line added is emitted exactly once (alone, or counted in a fold);
//   - the lines of one rank (same mesh, same stream) come out in the order that rank wrote them;
//   - different meshes never fold together, nor do stdout and stderr.
// To keep the second, a line joins a pending group only if no later group holds an earlier line of
// its rank (otherwise it starts a group of its own), and groups are emitted in the order of their
// first line. So runs of one rank's lines fold, but a fold never moves a line past another.
//
// The cost of folding is latency: a line waits up to `window` after the first line of its group.
// With fold = false every line goes to the sink at once, from add().
//
// Not thread-safe: the caller owns one thread (the controller's output loop) that calls add(),
// flush_due() and flush_all() and waits on next_deadline(). The sink runs on that thread, inside
// those calls, and must not call back into the folder.
#pragma once

#include <chrono>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <tuple>
#include <unordered_map>
#include <vector>

namespace sceptre::host {

class LogFolder {
 public:
  using Clock = std::chrono::steady_clock;
  enum class Stream : std::uint8_t { kStdout, kStderr };
  struct Options {
    bool fold = true;
    std::chrono::milliseconds window{100};  // how long a group waits for more lines, from its first
  };
  using Sink = std::function<void(Stream, const std::string& line)>;  // a finished, prefixed line (no '\n')

  LogFolder(Options options, Sink sink);

  // One line (without '\n') from `rank` of mesh `mesh`, seen at `now`. Emits first every group
  // whose window has passed by `now`, so a caller that only adds still sees output. `now` is
  // expected not to go back (a steady clock); if it does, groups are still emitted in order.
  void add(Stream stream, std::string_view mesh, std::uint64_t rank, std::string_view line,
           Clock::time_point now);
  // Emits every group whose window has passed by `now`, oldest first.
  void flush_due(Clock::time_point now);
  // Emits everything pending, oldest first (at exit, or when the procs' pipes close).
  void flush_all();
  // When flush_due next has work; nullopt when nothing is pending.
  std::optional<Clock::time_point> next_deadline() const;

 private:
  // The lines of one text from one mesh and stream, emitted as one line.
  struct Group {
    Stream stream;
    std::string mesh;
    std::string text;
    Clock::time_point due;
    std::vector<std::uint64_t> ranks;  // one entry per line, in arrival order (repeats allowed)
  };
  // Where a (stream, mesh, ...) lives in the maps below.
  static std::string group_key(Stream stream, std::string_view mesh, std::string_view text);
  using RankKey = std::tuple<Stream, std::string, std::uint64_t>;

  void emit_front();
  void emit(Stream stream, std::string_view mesh, const std::vector<std::uint64_t>& ranks,
            std::string_view text);

  Options options_;
  Sink sink_;
  // Pending groups, oldest first; group i of the deque has sequence number first_seq_ + i.
  std::deque<Group> pending_;
  std::uint64_t first_seq_ = 0;
  // The newest pending group of each (stream, mesh, text): the only one a new line may join.
  std::unordered_map<std::string, std::uint64_t> newest_group_;
  // The newest pending group holding a line of each (stream, mesh, rank).
  std::map<RankKey, std::uint64_t> newest_of_rank_;
};

// "0-3,7": sorted distinct ranks, runs of consecutive ones as ranges. Exposed for tests.
std::string compress_ranks(std::vector<std::uint64_t> ranks);

}  // namespace sceptre::host
