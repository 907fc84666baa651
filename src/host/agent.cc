#include "host/agent.h"

#include "core/log.h"
#include "host/local_host.h"
#include "sceptre/actor/errors.h"

namespace sceptre::host {

// --- HostAgent (in the agent process) --------------------------------------------------------------

std::shared_ptr<LocalHost> HostAgent::host() {
  auto h = host_.lock();
  if (!h) throw CallError(Error(Code::kCancelled, "the host agent is stopping"));
  return h;
}

SpawnAnswer HostAgent::spawn(std::string mesh, std::uint64_t rank, std::vector<std::string> env,
                              std::vector<std::string> wrap, std::int32_t gpu) {
  ProcSpec spec{std::move(mesh), rank, std::move(env), std::move(wrap), gpu};
  auto pid = host()->spawn(spec);
  if (!pid) return SpawnAnswer{0, std::move(pid).error()};
  return SpawnAnswer{*pid, {}};
}

void HostAgent::kill(std::int64_t pid, std::int32_t signal) { host()->kill(static_cast<pid_t>(pid), signal); }

void HostAgent::stop(std::vector<std::int64_t> pids, std::int64_t grace_ms) {
  std::vector<pid_t> p(pids.begin(), pids.end());
  host()->stop(p, std::chrono::milliseconds(grace_ms));
}

std::vector<std::string> HostAgent::stderr_tail(std::int64_t pid) { return host()->stderr_tail(static_cast<pid_t>(pid)); }

// --- RemoteHost (in the controller) ----------------------------------------------------------------

RemoteHost::RemoteHost(std::uint32_t id, std::string name, std::chrono::milliseconds call_timeout, OnExit on_exit)
    : id_(id), name_(std::move(name)), call_timeout_(call_timeout), on_exit_(std::move(on_exit)) {}

void RemoteHost::set_agent(ActorRef<HostAgent> agent) {
  std::lock_guard lock(mu_);
  agent_ = std::move(agent);
}

std::optional<ActorRef<HostAgent>> RemoteHost::agent() const {
  std::lock_guard lock(mu_);
  if (lost_) return std::nullopt;
  return agent_;
}

Result<pid_t> RemoteHost::spawn(const ProcSpec& spec) {
  std::optional<ActorRef<HostAgent>> a;
  {
    std::lock_guard lock(mu_);
    if (lost_) return Error(Code::kUnavailable, "host " + name_ + " is lost: " + lost_->to_string());
    a = agent_;
  }
  if (!a) return Error(Code::kUnavailable, "host " + name_ + " has no agent yet");
  try {
    SpawnAnswer answer =
        a->call<&HostAgent::spawn>(spec.mesh, spec.rank, spec.env, spec.wrap, static_cast<std::int32_t>(spec.gpu))
            .get(call_timeout_);
    if (answer.pid == 0) return Error(answer.error.code(), "host " + name_ + ": " + answer.error.message());
    return static_cast<pid_t>(answer.pid);
  } catch (const Exception& e) {
    return Error(Code::kUnavailable, "host " + name_ + ": " + e.what());
  }
}

void RemoteHost::kill(pid_t pid, int signal) {
  auto a = agent();
  if (!a) return;
  try {
    a->send<&HostAgent::kill>(static_cast<std::int64_t>(pid), static_cast<std::int32_t>(signal));
  } catch (const Exception& e) {
    log().warn("host {}: could not signal pid {}: {}", name_, pid, e.what());
  }
}

std::optional<ExitStatus> RemoteHost::status(pid_t pid) const {
  std::lock_guard lock(mu_);
  auto it = ended_.find(pid);
  if (it == ended_.end()) return std::nullopt;
  return it->second.status;
}

std::vector<std::string> RemoteHost::stderr_tail(pid_t pid) const {
  std::lock_guard lock(mu_);
  auto it = ended_.find(pid);
  return it != ended_.end() ? it->second.tail : std::vector<std::string>{};
}

void RemoteHost::stop(const std::vector<pid_t>& pids, std::chrono::milliseconds grace) {
  auto a = agent();
  if (pids.empty() || !a) return;
  std::vector<std::int64_t> p(pids.begin(), pids.end());
  try {
    a->call<&HostAgent::stop>(std::move(p), static_cast<std::int64_t>(grace.count()))
        .get(grace + std::chrono::seconds(10));
  } catch (const Exception& e) {
    log().warn("host {}: stopping {} procs: {}", name_, pids.size(), e.what());
  }
}

void RemoteHost::notice(const ExitNotice& n) {
  const auto pid = static_cast<pid_t>(n.pid);
  ExitStatus st{n.code, n.signal};
  {
    std::lock_guard lock(mu_);
    ended_[pid] = Ended{st, n.tail};
  }
  if (on_exit_) on_exit_(*this, pid, st);
}

void RemoteHost::lost(const Error& why) {
  std::lock_guard lock(mu_);
  if (!lost_) lost_ = why;
}

}  // namespace sceptre::host
