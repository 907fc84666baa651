#include "host/log_folder.h"

#include <algorithm>
#include <utility>

#include "sceptre/core/result.h"

namespace sceptre::host {

namespace {
constexpr std::string_view kTimes = "\xc3\x97";  // "×" in UTF-8
}  // namespace

std::string compress_ranks(std::vector<std::uint64_t> ranks) {
  std::sort(ranks.begin(), ranks.end());
  ranks.erase(std::unique(ranks.begin(), ranks.end()), ranks.end());
  std::string out;
  for (std::size_t i = 0; i < ranks.size();) {
    std::size_t j = i;
    while (j + 1 < ranks.size() && ranks[j + 1] == ranks[j] + 1) ++j;
    if (!out.empty()) out += ',';
    out += std::to_string(ranks[i]);
    if (j > i) out += "-" + std::to_string(ranks[j]);
    i = j + 1;
  }
  return out;
}

LogFolder::LogFolder(Options options, Sink sink) : options_(options), sink_(std::move(sink)) {
  SCEPTRE_CHECK(sink_);
}

std::string LogFolder::group_key(Stream stream, std::string_view mesh, std::string_view text) {
  // The mesh's length keeps ("ab", "c") and ("a", "bc") apart.
  std::string key(1, static_cast<char>(stream));
  key += std::to_string(mesh.size());
  key += ':';
  key += mesh;
  key += text;
  return key;
}

void LogFolder::add(Stream stream, std::string_view mesh, std::uint64_t rank, std::string_view line,
                    Clock::time_point now) {
  if (!options_.fold) {
    emit(stream, mesh, {rank}, line);
    return;
  }
  flush_due(now);
  std::string key = group_key(stream, mesh, line);
  RankKey rank_key{stream, std::string(mesh), rank};
  // Joining the newest group of this text is safe for the rank's order unless a later group holds
  // one of the rank's lines: then this line would be emitted before that earlier one.
  auto newest = newest_group_.find(key);
  auto of_rank = newest_of_rank_.find(rank_key);
  std::uint64_t seq;
  if (newest != newest_group_.end() &&
      (of_rank == newest_of_rank_.end() || of_rank->second <= newest->second)) {
    seq = newest->second;
    pending_[seq - first_seq_].ranks.push_back(rank);
  } else {
    seq = first_seq_ + pending_.size();
    pending_.push_back(Group{stream, std::string(mesh), std::string(line), now + options_.window, {rank}});
    newest_group_.insert_or_assign(std::move(key), seq);
  }
  newest_of_rank_.insert_or_assign(std::move(rank_key), seq);
}

void LogFolder::flush_due(Clock::time_point now) {
  // Only a prefix: a group is never emitted before an older one, even if the clock went back.
  while (!pending_.empty() && pending_.front().due <= now) emit_front();
}

void LogFolder::flush_all() {
  while (!pending_.empty()) emit_front();
}

std::optional<LogFolder::Clock::time_point> LogFolder::next_deadline() const {
  if (pending_.empty()) return std::nullopt;
  return pending_.front().due;
}

void LogFolder::emit_front() {
  // Off the books before the sink runs, so the maps only ever name pending groups.
  Group group = std::move(pending_.front());
  pending_.pop_front();
  std::uint64_t seq = first_seq_++;
  if (auto it = newest_group_.find(group_key(group.stream, group.mesh, group.text));
      it != newest_group_.end() && it->second == seq) {
    newest_group_.erase(it);
  }
  for (std::uint64_t rank : group.ranks) {
    auto it = newest_of_rank_.find(RankKey{group.stream, group.mesh, rank});
    if (it != newest_of_rank_.end() && it->second == seq) newest_of_rank_.erase(it);
  }
  emit(group.stream, group.mesh, group.ranks, group.text);
}

void LogFolder::emit(Stream stream, std::string_view mesh, const std::vector<std::uint64_t>& ranks,
                     std::string_view text) {
  std::string out = "[";
  out += mesh;
  out += ' ';
  out += compress_ranks(ranks);
  if (ranks.size() > 1) {
    out += ' ';
    out += kTimes;
    out += std::to_string(ranks.size());
  }
  out += "] ";
  out += text;
  sink_(stream, out);
}

}  // namespace sceptre::host
