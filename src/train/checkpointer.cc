// The controller's side of checkpoints: see checkpointer.h.
#include "train/checkpointer.h"

#include <filesystem>
#include <thread>

#include <nlohmann/json.hpp>

namespace sceptre::train {

namespace {
// What a checkpoint's state depends on besides its bytes: resuming with another model or batch
// (the data position is in samples of blocks of `batch`) is refused.
std::string model_json(const TrainOptions& o) {
  const auto& m = o.model;
  return nlohmann::json{{"inputs", m.inputs},   {"hidden", m.hidden},
                        {"classes", m.classes}, {"seed", m.seed},
                        {"learning_rate", m.learning_rate}, {"dropout", m.dropout}, {"batch", o.batch}}
      .dump();
}

std::string megabytes(std::uint64_t bytes) {
  char b[32];
  std::snprintf(b, sizeof b, "%.1f MB", bytes / 1e6);
  return b;
}
}  // namespace

void Checkpointer::start(std::uint64_t step, std::vector<std::size_t> writers, DataPosition data,
                         const std::function<void()>& deliver) {
  if (!enabled() || step == last_step_ || writers.empty()) return;
  poll();
  if (flight_) {
    fail(step, "skipped: the checkpoint of step " + std::to_string(flight_->step) + " is still being written");
    return;
  }
  std::string dir = c_.dir + "/" + checkpoint_name(step);
  remove_checkpoint(dir);  // an earlier run's, newer than the one it resumed from: not complete
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) {
    fail(step, "cannot create " + dir + ": " + ec.message());
    return;
  }
  if (c_.writers > 0 && writers.size() > c_.writers) writers.resize(c_.writers);
  const auto& o = s_.options;
  auto t0 = Clock::now();
  std::vector<Future<Captured>> captures;
  std::vector<int> writer_pids;
  for (std::size_t k = 0; k < writers.size(); ++k) {
    writer_pids.push_back(s_.pid_of(writers[k]));
    captures.push_back(
        s_.replicas.at(writers[k]).call<&Replica::capture>(CheckpointPlan{step, dir, k, writers.size()}));
  }
  Flight f;
  f.step = step;
  f.dir = dir;
  f.manifest = Manifest{step, model_json(o), std::move(data), {}};
  f.writers = writers;
  std::string why;
  for (std::size_t k = 0; k < writers.size(); ++k) {
    try {
      f.captured.push_back(captures[k].get(o.step_timeout));
      f.bytes += f.captured.back().bytes;
    } catch (const std::exception& e) {
      why = "writer replica " + std::to_string(writers[k]) + " lost during the copy: " + e.what();
      s_.lost(writers[k], writer_pids[k]);
    }
  }
  double stall_ms = std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
  if (!why.empty()) {
    remove_checkpoint(dir);
    fail(step, why);
    return;
  }
  s_.event(Event::Kind::kCheckpointing, step, 0,
           "checkpoint of step " + std::to_string(step) + ": " + megabytes(f.bytes) + " in " +
               std::to_string(writers.size()) + " shards copied in " + std::to_string(stall_ms) + " ms, persisting",
           f.bytes, 0, stall_ms);
  deliver();
  f.started = Clock::now();
  for (auto& c : f.captured) f.writes.push_back(c.writer.call<&CheckpointWriter::write>(step));
  f.files.resize(writers.size());
  f.done.assign(writers.size(), false);
  flight_ = std::move(f);
}

void Checkpointer::poll() {
  if (!flight_) return;
  auto& f = *flight_;
  bool all = true;
  for (std::size_t k = 0; k < f.writers.size(); ++k) {
    if (f.done[k]) continue;
    if (f.writes[k].ready()) {
      f.done[k] = true;
      try {
        auto w = f.writes[k].get();
        f.write_seconds = std::max(f.write_seconds, w.seconds);
        if (w.ok) {
          f.files[k] = std::move(w.file);
        } else if (f.why.empty()) {
          f.why = "replica " + std::to_string(f.writers[k]) + ": " + w.error;
        }
      } catch (const std::exception& e) {
        if (f.why.empty()) f.why = "writer replica " + std::to_string(f.writers[k]) + " lost: " + e.what();
      }
    } else if (!s_.is_live(f.writers[k])) {
      f.done[k] = true;  // a dead writer's call may never answer
      if (f.why.empty()) f.why = "writer replica " + std::to_string(f.writers[k]) + " lost while persisting";
    } else {
      all = false;
    }
  }
  if (!all) return;
  double manifest_s = 0;
  if (f.why.empty()) {
    f.manifest.shards = f.files;
    auto t0 = Clock::now();
    if (auto r = write_manifest(f.dir, f.manifest); !r) f.why = r.error().to_string();
    manifest_s = std::chrono::duration<double>(Clock::now() - t0).count();
  }
  if (!f.why.empty()) {
    remove_checkpoint(f.dir);
    fail(f.step, "abandoned: " + f.why);
  } else {
    // The persist: the slowest shard's write and the manifest's (the manifest waits for the
    // step boundary that finds every shard written: `after` counts that too).
    double secs = f.write_seconds + manifest_s;
    double after = std::chrono::duration<double>(Clock::now() - f.started).count();
    auto removed = prune_checkpoints(c_.dir, c_.keep);
    char line[300];
    std::snprintf(line, sizeof line,
                  "checkpoint of step %llu complete: %s persisted in %.3f s (%.2f GB/s), complete %.3f s after the "
                  "copy%s",
                  static_cast<unsigned long long>(f.step), megabytes(f.bytes).c_str(), secs,
                  secs > 0 ? f.bytes / secs / 1e9 : 0.0, after,
                  removed.empty() ? "" : (", " + std::to_string(removed.size()) + " older removed").c_str());
    s_.event(Event::Kind::kCheckpointed, f.step, 0, line, f.bytes, secs);
    ++sum_.checkpoints;
    last_step_ = f.step;
  }
  flight_.reset();
}

void Checkpointer::finish(Clock::time_point deadline) {
  while (flight_ && Clock::now() < deadline) {
    poll();
    if (flight_) std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  if (flight_) {
    fail(flight_->step, "still being written when run() ended");
    flight_.reset();
  }
}

std::optional<Manifest> Checkpointer::resume(const std::vector<std::size_t>& members) {
  if (!enabled() || !c_.resume) return std::nullopt;
  const auto& o = s_.options;
  std::vector<std::string> skipped;
  auto found = find_checkpoints(c_.dir, &skipped);
  for (auto& why : skipped) s_.event(Event::Kind::kCheckpointSkipped, 0, 0, "skipping " + why);
  auto ours = nlohmann::json::parse(model_json(o));
  for (auto& cand : found) {
    auto theirs = nlohmann::json::parse(cand.manifest.model, nullptr, false);
    if (theirs != ours) {
      throw std::runtime_error("checkpoint " + cand.dir + " was trained with " + cand.manifest.model +
                               "; this job has " + ours.dump() + " (resume with the same model and batch, or "
                               "use another checkpoint directory)");
    }
    std::vector<Future<Restored>> loads;
    std::vector<int> pids;
    for (auto r : members) {
      pids.push_back(s_.pid_of(r));
      loads.push_back(s_.replicas.at(r).call<&Replica::restore>(cand.dir, cand.manifest));
    }
    std::vector<std::size_t> failed;  // indices into members
    std::optional<std::uint64_t> digest;
    std::string why;
    for (std::size_t i = 0; i < members.size(); ++i) {
      try {
        auto got = loads[i].get(o.step_timeout);
        if (got.ok && (!digest || *digest == got.digest)) {
          digest = got.digest;
          continue;
        }
        if (why.empty()) why = got.ok ? "replicas loaded different states" : got.error;
      } catch (const std::exception& e) {
        if (why.empty()) why = std::string("replica lost: ") + e.what();
      }
      failed.push_back(i);
    }
    if (!digest) {
      s_.event(Event::Kind::kCheckpointSkipped, cand.manifest.step, 0, "skipping " + cand.dir + ": " + why);
      continue;
    }
    for (auto i : failed) {
      const std::size_t r = members[i];
      s_.event(Event::Kind::kCheckpointSkipped, cand.manifest.step, r,
               "replica " + std::to_string(r) + " could not load " + cand.dir + " (" + why + "): replaced");
      s_.lost(r, pids[i]);
    }
    s_.event(Event::Kind::kRestored, cand.manifest.step, 0,
             "resumed from " + cand.dir + " (step " + std::to_string(cand.manifest.step) + ")");
    last_step_ = cand.manifest.step;
    return cand.manifest;
  }
  return std::nullopt;
}

void Checkpointer::fail(std::uint64_t step, const std::string& why) {
  s_.event(Event::Kind::kCheckpointFailed, step, 0, "checkpoint of step " + std::to_string(step) + " " + why);
  ++sum_.checkpoint_failures;
}

}  // namespace sceptre::train
