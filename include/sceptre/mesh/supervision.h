// Supervision of meshes: how the controller learns that a member failed, and what it does then.
//
//   auto procs = sceptre::this_host().spawn_procs({{"gpus", 4}});
//   procs.on_failure([&](const sceptre::MeshFailure& f) {
//     std::cerr << f.to_string();
//     return sceptre::Supervise::kHandled;   // or kPassUp: the Runtime's handler, then the exit
//   });
//
// What is detected (by the controller, for every proc of every mesh it spawned):
//   - a proc that exits or is killed (a crash included): its host agent reaps it — at once;
//   - a proc that is frozen, or cut off from the controller: no heartbeat on its health channel
//     (a channel of its own) for Config::heartbeat_timeout; the controller then kills it, so it
//     can never come back as a member;
//   - an actor that failed (an exception in a message nobody waited for);
//   - a handler that has run for longer than Config::watchdog_timeout (the actor is not killed).
// Each becomes one MeshFailure for the rank of the proc mesh, delivered once per failed rank.
// From then on the rank is failed:
//   - every call, reduction or stream in flight that waits on an actor in it fails at once with
//     SupervisionError naming the rank and the cause (a stream: every member not yet answered);
//   - a new cast to a view that includes it fails at once (a stream: its members' items; a
//     broadcast skips it); views that exclude it keep working;
//   - the failure goes to the ProcMesh's handler, then (kPassUp, or none) to the Runtime's, and
//     when nobody handles it the controller prints a report (failure_report) on stderr and exits
//     with status 1; its procs follow through their lifelines.
// A mesh that is being stopped has no failures: its procs' exits are expected.
//
// Handlers run on the controller's supervision thread, one failure at a time, in the order the
// failures were detected; they may block (for instance to stop or spawn meshes) but should not
// take long: the next failure waits.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "sceptre/mesh/extent.h"

namespace sceptre {

enum class FailureCause : std::uint8_t {
  kExited = 0,         // the proc exited while its mesh was running (exit code in MeshFailure)
  kKilled = 1,         // a signal ended it (SIGKILL, SIGSEGV, ...)
  kActorFailed = 2,    // an actor of the proc failed: an exception nobody was waiting for
  kHeartbeatLost = 3,  // no heartbeat for Config::heartbeat_timeout: frozen, or cut off
  kStuck = 4,          // one handler ran longer than Config::watchdog_timeout
  kHostLost = 5,       // the agent of its host is gone (ended, frozen, cut off): the proc is out of reach
};
std::string_view to_string(FailureCause cause);

struct MeshFailure {
  std::string mesh;          // the proc mesh (its spawn_procs name)
  std::size_t rank = 0;      // the failed rank of that mesh
  Point point;               // that rank's point in the mesh's extent
  FailureCause cause = FailureCause::kExited;
  std::string what;          // one line: "killed by signal 9 (Killed)", "no heartbeat for 812 ms"
  int exit_code = 0;         // kExited
  int signal = 0;            // kKilled
  std::string actor;         // kActorFailed, kStuck: the actor and its endpoint
  std::string endpoint;
  std::string exception_type;  // kActorFailed: the demangled type of what it threw
  std::string host;          // where the proc ran, and its pid there
  int pid = 0;
  std::vector<std::string> last_lines;  // the last lines of its stderr (Config::stderr_tail_lines)
  // When the controller learned of it (steady clock, comparable with the caller's own readings).
  std::chrono::steady_clock::time_point when;

  // One line: "rank 2 {gpus=2} of 'procs' (pid 123 on host): killed by signal 9 (Killed)".
  std::string summary() const;
  // The summary, then the proc's last lines of stderr.
  std::string to_string() const;
};

enum class Supervise : std::uint8_t { kHandled, kPassUp };
using FailureHandler = std::function<Supervise(const MeshFailure&)>;

// A report of several failures a person can act on: the one detected first is named as the root
// cause, with its last lines of output; the others follow, those with the same cause and
// description folded into one line ("ranks 1-7 of 'procs': no heartbeat for 800 ms").
std::string failure_report(const std::vector<MeshFailure>& failures);

}  // namespace sceptre
