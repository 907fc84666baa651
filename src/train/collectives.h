// A quorum's communicator, seen from the other threads of a replica's proc: the registry that
// CollectiveAbort aborts through, and which a replica's rendezvous and its failed sums consult.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>

#include "sceptre/collective/communicator.h"
#include "sceptre/train/ft_ddp.h"

namespace sceptre::train {

// The communicator each replica of this proc has now, by its job (its store's id), for
// CollectiveAbort; and the last quorum aborted, so that a communicator made for it afterwards
// is aborted at once.
class Collectives {
 public:
  using Clock = std::chrono::steady_clock;
  static Collectives& of_this_proc();
  // This job's communicator is now `comm`, for `quorum`; false if that quorum is aborted.
  bool set(const std::string& job, std::uint64_t quorum, std::shared_ptr<collective::Communicator> comm);
  // Aborts `quorum` (and every earlier one); `next`, when given, is where its members go on.
  void abort(const std::string& job, std::uint64_t quorum, const std::string& why, std::optional<Regroup> next);
  // Waits until the controller has aborted `quorum` (with a successor or not), up to `deadline`:
  // a sum that failed on its own (a peer's connection closed) learns whether a member was lost
  // and the quorum re-formed. True if it has.
  bool await_abort(const std::string& job, std::uint64_t quorum, Clock::time_point deadline);
  // Where the members of aborted `quorum` go on, if the controller re-formed it.
  std::optional<Regroup> successor(const std::string& job, std::uint64_t quorum);
  // Why `quorum` of this job was aborted; nothing if it was not (its rendezvous asks, as it waits).
  std::optional<std::string> aborted(const std::string& job, std::uint64_t quorum);
  void forget(const std::string& job);

 private:
  struct Entry {
    std::uint64_t quorum = 0, aborted = 0;
    std::string why;  // of the last abort
    std::shared_ptr<collective::Communicator> comm;
    std::map<std::uint64_t, Regroup> next;  // re-formed quorums: the successor of each
  };
  std::mutex mu_;
  std::condition_variable decided_;  // an abort came
  std::map<std::string, Entry> jobs_;
};

}  // namespace sceptre::train
