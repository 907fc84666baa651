// Host agents as processes of their own.
//
// An agent is the controller's own binary in the host role (SCEPTRE_ROLE=host), started by a
// launcher (today the process launcher: Runtime::launch_hosts). It serves a Proc like any proc —
// boot report, heartbeats, the orphan rule, a lifeline from whoever started it — and in it a
// HostAgent actor through which the controller starts, signals and stops the procs of that host,
// which are the agent's children (a LocalHost of its own: it reaps them, folds their output into
// its own, and holds their lifelines, so they end when the agent does). Every proc that ends is
// told to the controller at once (ExitNotice, with the tail of its stderr).
//
// On the controller, a RemoteHost is the Host such an agent serves.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <condition_variable>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "host/host.h"
#include "sceptre/actor/actor.h"
#include "sceptre/actor/actor_ref.h"
#include "sceptre/core/error.h"

namespace sceptre::host {

class LocalHost;

// An agent's word that one of its procs ended.
struct ExitNotice {
  std::uint32_t host = 0;  // Host::id of the agent
  std::int64_t pid = 0;
  std::int32_t code = 0;
  std::int32_t signal = 0;
  std::vector<std::string> tail;  // the last lines of its stderr
  SCEPTRE_FIELDS(host, pid, code, signal, tail)
};

// The agent's answer to spawn: the pid, or (pid 0) why the proc was not started, with the code
// the host gave it (kInvalidArgument for a GPU the host lacks).
struct SpawnAnswer {
  std::int64_t pid = 0;
  Error error;
  SCEPTRE_FIELDS(pid, error)
};

class HostAgent : public Actor {
 public:
  static constexpr bool kOwnThread = true;  // stop() waits for procs to end
  explicit HostAgent(std::weak_ptr<LocalHost> host) : host_(std::move(host)) {}

  // Starts a proc of the agent's binary with `env` (and `wrap` and `gpu`, see ProcSpec).
  SpawnAnswer spawn(std::string mesh, std::uint64_t rank, std::vector<std::string> env,
                     std::vector<std::string> wrap, std::int32_t gpu);
  void kill(std::int64_t pid, std::int32_t signal);
  void stop(std::vector<std::int64_t> pids, std::int64_t grace_ms);
  std::vector<std::string> stderr_tail(std::int64_t pid);

 private:
  std::shared_ptr<LocalHost> host();
  std::weak_ptr<LocalHost> host_;
};
SCEPTRE_ACTOR(HostAgent, spawn, kill, stop, stderr_tail);

class RemoteHost : public Host {
 public:
  // Told of every proc of this host that ended (from its ExitNotice), without locks held.
  using OnExit = std::function<void(const Host&, pid_t, const ExitStatus&)>;
  // The agent itself is named by set_agent() once it is up; until then spawn() fails.
  RemoteHost(std::uint32_t id, std::string name, std::chrono::milliseconds call_timeout, OnExit on_exit);
  void set_agent(ActorRef<HostAgent> agent);

  std::uint32_t id() const override { return id_; }
  std::string name() const override { return name_; }
  // A call to the agent, up to the call timeout; kUnavailable naming the host when it fails.
  Result<pid_t> spawn(const ProcSpec& spec) override;
  void kill(pid_t pid, int signal) override;  // sent; does not wait
  std::optional<ExitStatus> status(pid_t pid) const override;
  // Known once it ended (the notice carries it); nothing before: supervision must not wait on a
  // host that may be out of reach.
  std::vector<std::string> stderr_tail(pid_t pid) const override;
  void stop(const std::vector<pid_t>& pids, std::chrono::milliseconds grace) override;

  // What the agent said (the controller's notice port).
  void notice(const ExitNotice& notice);
  // The agent is gone (exited, lost, cut off): what needs it fails at once from now on.
  void lost(const Error& why);

 private:
  struct Ended {
    ExitStatus status;
    std::vector<std::string> tail;
  };
  const std::uint32_t id_;
  const std::string name_;
  std::optional<ActorRef<HostAgent>> agent() const;
  const std::chrono::milliseconds call_timeout_;
  const OnExit on_exit_;
  mutable std::mutex mu_;
  std::map<pid_t, Ended> ended_;
  std::optional<Error> lost_;
  std::optional<ActorRef<HostAgent>> agent_;
};

}  // namespace sceptre::host
