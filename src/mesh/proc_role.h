// The process side of a mesh: what the controller's binary does when it is started as a proc
// (SCEPTRE_ROLE=proc) or as a host agent (SCEPTRE_ROLE=host, a proc with a HostAgent and a
// LocalHost of its own): serve a Proc, report to the controller, run until the lifeline closes
// or the controller is out of reach, exit. Shared with the controller: the boot report and the
// ProcAgent it talks to.
#pragma once

#include <string>
#include <vector>

#include "sceptre/actor/actor.h"
#include "sceptre/actor/proc.h"
#include "sceptre/core/config.h"
#include "sceptre/core/ids.h"

namespace sceptre::detail {

// Every proc's agent for the controller's control requests. It has a thread of its own, so
// that it may wait for the actors it stops (they run on the I/O thread).
class ProcAgent : public Actor {
 public:
  static constexpr bool kOwnThread = true;

  // Stops the actors `name`[index] of this proc; true when every stop was graceful. An actor
  // that is not here (stopped already) counts as stopped.
  bool stop_actors(std::string name, std::vector<std::uint64_t> indices, std::int64_t timeout_ms) {
    bool graceful = true;
    for (std::uint64_t index : indices) {
      try {
        graceful &= proc().stop(ActorId{proc().id(), name, index}, std::chrono::milliseconds(timeout_ms));
      } catch (const CallError&) {
      }
    }
    return graceful;
  }
};
SCEPTRE_ACTOR(ProcAgent, stop_actors);

// What a proc sends the controller once it serves its address.
struct BootReport {
  std::uint64_t rank = 0;
  ActorId node;   // its cast node; node.proc is its ProcId
  ActorId agent;  // its ProcAgent
  std::int64_t pid = 0;
  ActorId host;   // a host agent's HostAgent; empty for a proc
  SCEPTRE_FIELDS(rank, node, agent, pid, host)
};

const char* env_or(const char* name, const char* fallback);
// What a proc or agent serves: TCP on `listen_host`, else on SCEPTRE_HOST_ADDR when its launcher
// gave it one (a host in a network namespace, or any proc of a job with transport "netns"), else
// per Config::transport.
ProcOptions proc_options(const Config& config, std::string listen_host = "");
void apply_log_level(const Config& config);
// True in a proc or a host agent (SCEPTRE_ROLE).
bool proc_role();
// Serves the proc (or agent) role; never returns. `argv`: the command line, which an agent's
// procs get too.
[[noreturn]] void run_proc(const std::vector<std::string>& argv);

}  // namespace sceptre::detail
