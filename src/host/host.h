// Host: what the controller needs of the agent of one host, wherever it runs — the controller's
// own (LocalHost, in-process) or an agent process (RemoteHost, in host/agent.h). It starts procs,
// signals them, says how they ended and what they last wrote on stderr, and stops them.
//
// Threads: every method may be called from any thread.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "sceptre/core/result.h"

namespace sceptre::host {

// How a proc ended.
struct ExitStatus {
  int code = 0;    // exit code, when it exited
  int signal = 0;  // the signal that killed it, else 0
  std::string to_string() const;  // "exit code 3", "killed by signal 9 (Killed)"
};

struct ProcSpec {
  std::string mesh;                      // for the log prefix
  std::uint64_t rank = 0;
  std::vector<std::string> env;          // NAME=value, added to (or replacing) the agent's
  // Run the proc image through this command (e.g. {"unshare", "--net", "--"}): it must exec the
  // program it is given, so that the pid stays the proc's. Empty: the image is run directly.
  std::vector<std::string> wrap;
  // The GPU of the host to bind the proc to (its "gpus" coordinate; see host/gpu_binding.h), or
  // -1 for none. More than the host has: spawn() fails with kInvalidArgument.
  int gpu = -1;
};

class Host {
 public:
  virtual ~Host() = default;

  // Numbers hosts within one controller (0: the controller's own); a pid is unique per host.
  virtual std::uint32_t id() const = 0;
  // For reports: the host's name, and its address when it has one of its own.
  virtual std::string name() const = 0;

  // Starts a proc; returns its pid, or why it could not be started.
  virtual Result<pid_t> spawn(const ProcSpec& spec) = 0;
  virtual void kill(pid_t pid, int signal) = 0;
  // How the proc ended; nullopt while it runs (or when it is not known to have ended). Never blocks
  // on the network.
  virtual std::optional<ExitStatus> status(pid_t pid) const = 0;
  // The last lines it wrote to stderr (up to Config::stderr_tail_lines).
  virtual std::vector<std::string> stderr_tail(pid_t pid) const = 0;
  // Lets every proc of `pids` go (each stops itself), kills the ones still there after `grace`;
  // returns once all have ended (or, for a host out of reach, once that is clear).
  virtual void stop(const std::vector<pid_t>& pids, std::chrono::milliseconds grace) = 0;
};

}  // namespace sceptre::host
