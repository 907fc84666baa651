// How a replica's quorum communicator is made and aborted: the controller's rendezvous store
// and its client, and this proc's registry of communicators, which CollectiveAbort aborts.
#include "train/collectives.h"

#include <algorithm>
#include <thread>

namespace sceptre::train {

using Clock = std::chrono::steady_clock;

// --- the rendezvous store -----------------------------------------------------------------------
void StoreActor::erase_prefix(std::string prefix) {
  for (auto it = values_.lower_bound(prefix); it != values_.end() && it->first.rfind(prefix, 0) == 0;) {
    it = values_.erase(it);
  }
}

Result<void> ActorStore::set(const std::string& key, std::string value) {
  try {
    store_.call<&StoreActor::set>(key, std::move(value)).get(std::chrono::seconds(30));
    return {};
  } catch (const std::exception& e) {
    return Error(Code::kUnavailable, std::string("rendezvous store: ") + e.what());
  }
}

Result<std::string> ActorStore::get(const std::string& key, std::chrono::milliseconds timeout) {
  auto deadline = Clock::now() + timeout;
  auto pause = std::chrono::microseconds(200);
  for (;;) {
    try {
      auto v = store_.call<&StoreActor::get>(key).get(std::chrono::seconds(30));
      if (v) return std::move(*v);
    } catch (const std::exception& e) {
      return Error(Code::kUnavailable, std::string("rendezvous store: ") + e.what());
    }
    if (abandoned_) {
      if (auto why = abandoned_()) return Error(Code::kAborted, "rendezvous abandoned waiting for '" + key + "': " + *why);
    }
    if (Clock::now() >= deadline) {
      return Error(Code::kDeadlineExceeded,
                   "rendezvous: no '" + key + "' after " + std::to_string(timeout.count()) + " ms");
    }
    std::this_thread::sleep_for(pause);
    pause = std::min(pause * 2, std::chrono::microseconds(1000));  // a quorum forms as its last member arrives
  }
}

// --- this proc's communicators ------------------------------------------------------------------
Collectives& Collectives::of_this_proc() {
  static Collectives c;
  return c;
}

bool Collectives::set(const std::string& job, std::uint64_t quorum, std::shared_ptr<collective::Communicator> comm) {
  std::lock_guard lock(mu_);
  auto& e = jobs_[job];
  e.quorum = quorum;
  e.comm = std::move(comm);
  return quorum > e.aborted;
}

void Collectives::abort(const std::string& job, std::uint64_t quorum, const std::string& why, std::optional<Regroup> next) {
  std::shared_ptr<collective::Communicator> comm;
  {
    std::lock_guard lock(mu_);
    auto& e = jobs_[job];
    if (quorum > e.aborted) {
      e.aborted = quorum;
      e.why = why;
    }
    if (next) {
      e.next[quorum] = *next;
      while (e.next.size() > 16) e.next.erase(e.next.begin());  // (a step's are read as it runs)
    }
    if (e.quorum == quorum) comm = e.comm;
  }
  decided_.notify_all();
  if (comm) comm->abort(why);
}

bool Collectives::await_abort(const std::string& job, std::uint64_t quorum, Clock::time_point deadline) {
  std::unique_lock lock(mu_);
  return decided_.wait_until(lock, deadline, [&] { return jobs_[job].aborted >= quorum; });
}

std::optional<Regroup> Collectives::successor(const std::string& job, std::uint64_t quorum) {
  std::lock_guard lock(mu_);
  auto it = jobs_.find(job);
  if (it == jobs_.end()) return std::nullopt;
  auto n = it->second.next.find(quorum);
  if (n == it->second.next.end()) return std::nullopt;
  return n->second;
}

std::optional<std::string> Collectives::aborted(const std::string& job, std::uint64_t quorum) {
  std::lock_guard lock(mu_);
  auto it = jobs_.find(job);
  if (it == jobs_.end() || it->second.aborted < quorum) return std::nullopt;
  return it->second.why;
}

void Collectives::forget(const std::string& job) {
  std::lock_guard lock(mu_);
  jobs_.erase(job);
}

// --- aborting a collective from the controller --------------------------------------------------
CollectiveAbort::CollectiveAbort(ActorRef<StoreActor> store) : job_(store.id().to_string()) {}

void CollectiveAbort::abort(std::uint64_t quorum, std::string why, std::optional<Regroup> next) {
  Collectives::of_this_proc().abort(job_, quorum, why, next);
}

}  // namespace sceptre::train
