// The controller's runtime: meshes of procs and of host agents (see sceptre/mesh/runtime.h). What
// runs in a proc or an agent is mesh/proc_role.cc.
#include "sceptre/mesh/runtime.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <openssl/rand.h>

#include <algorithm>
#include <cerrno>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <numeric>
#include <mutex>
#include <sstream>

#include "core/log.h"
#include "host/agent.h"
#include "host/host_network.h"
#include "host/local_host.h"
#include "host/zygote.h"
#include "mesh/proc_role.h"
#include "mesh/supervisor.h"
#include "sceptre/actor/port.h"
#include "sceptre/mesh/detail/cast.h"

namespace sceptre {

namespace {

using detail::apply_log_level;
using detail::BootReport;
using detail::proc_options;
using detail::proc_role;
using detail::run_proc;

std::string random_secret() {
  unsigned char bytes[24];
  if (RAND_bytes(bytes, sizeof bytes) != 1) throw Exception(Error(Code::kInternal, "RAND_bytes failed"));
  static const char* hex = "0123456789abcdef";
  std::string s;
  for (unsigned char b : bytes) s += hex[b >> 4], s += hex[b & 15];
  return s;
}

// A TCP port free on 127.0.0.1 now (for MASTER_PORT; whoever binds it first gets it).
int free_port() {
  int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return 29500;
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof a;
  int port = 29500;
  if (::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0 &&
      ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len) == 0) {
    port = ntohs(a.sin_port);
  }
  ::close(fd);
  return port;
}

}  // namespace

namespace detail {

struct RuntimeState {
  Config config;
  std::vector<std::string> argv;
  std::unique_ptr<host::HostNetwork> net;  // transport "netns": the hosts' bridge; goes last
  std::unique_ptr<Proc> proc;
  // Made after the host, whose pump thread tells it of every exit (hence atomic), and declared
  // before it: the host, destroyed first, stops telling.
  std::unique_ptr<Supervisor> supervisor_owner;
  std::atomic<Supervisor*> supervisor{nullptr};
  std::mutex exit_mu;  // held by the host's pump while it tells the supervisor of an exit
  std::shared_ptr<host::LocalHost> host;
  std::mutex mu;
  std::vector<std::weak_ptr<ProcMeshState>> meshes;
  // Launched hosts: their agents tell of every proc that ended on one port, read by one thread.
  std::map<std::uint32_t, std::weak_ptr<host::RemoteHost>> remotes;
  std::uint32_t next_host_id = 1;
  std::optional<PortId> notices;
  std::thread notice_thread;
  std::atomic<bool> closing{false};

  // The hosts' notice port, opened with the first launch. mu held.
  const PortId& notice_port() {
    if (notices) return *notices;
    auto port = sceptre::open_port<host::ExitNotice>();
    notices = port.first.id();
    notice_thread = std::thread([this, rx = std::move(port.second)]() mutable {
      while (!closing.load()) {
        std::optional<host::ExitNotice> n;
        try {
          n = rx.recv(std::chrono::milliseconds(100));
        } catch (const TimeoutError&) {
          continue;
        } catch (const Exception& e) {
          log().warn("host notices: {}", e.what());
          continue;
        }
        std::shared_ptr<host::RemoteHost> h;
        {
          std::lock_guard lock(mu);
          auto it = remotes.find(n->host);
          if (it != remotes.end()) h = it->second.lock();
        }
        if (h) h->notice(*n);
      }
    });
    return *notices;
  }
};

// Where and how the ranks of one spawn run.
struct SpawnPlan {
  std::string name;
  Extent extent;
  std::vector<std::weak_ptr<host::Host>> hosts;           // by rank
  std::size_t per_host = 1;                               // LOCAL_WORLD_SIZE
  std::string master_addr = "127.0.0.1";
  std::string role = "proc";
  std::vector<std::vector<std::string>> env;              // by rank, added to sceptre's (may be empty)
  std::vector<std::string> wrap;                          // ProcSpec::wrap
  std::function<Status(std::size_t rank, pid_t pid)> on_started;  // before its boot report is awaited
  std::vector<std::weak_ptr<host::RemoteHost>> serves;    // MeshHealth::serves
  std::shared_ptr<void> keep_hosts;                       // what the hosts belong to
  FailureHandler on_failure;
};

struct ProcMeshState {
  std::string name;
  Extent extent;
  SpawnPlan plan;  // a respawned rank starts as it did
  bool is_agents = false;
  std::chrono::milliseconds grace{0};
  std::once_flag stopped;
  // What every proc of the spawn is started with (a respawned rank too).
  std::string master_port, config_json, health_addr, controller;
  std::uint64_t mesh_id = 0;

  std::mutex mu;  // pids and derived: a respawn changes them while others read
  std::vector<pid_t> pids;
  std::shared_ptr<MeshHealth> health;  // once every proc came up
  std::vector<ActorId> host_agents;    // an agents' mesh: each rank's HostAgent
  std::weak_ptr<MeshMembers> members;  // the proc mesh's own (its procs' nodes and agents)
  // Every actor mesh spawned on these procs, and how to make one of its members again.
  struct Derived {
    std::weak_ptr<MeshMembers> members;
    ActorSpawner spawn_one;
  };
  std::vector<Derived> derived;
  std::mutex respawn_mu;  // one respawn at a time

  ~ProcMeshState() {
    try {
      stop();
    } catch (const std::exception& e) {
      log().error("proc mesh '{}': stopping it failed: {}", name, e.what());
    }
  }
  std::vector<pid_t> pid_list() {
    std::lock_guard lock(mu);
    return pids;
  }
  std::shared_ptr<host::Host> host_of(std::size_t rank) const {
    return rank < plan.hosts.size() ? plan.hosts[rank].lock() : nullptr;
  }
  // Stops the procs of (rank, pid), host by host (all at once: each host's stop waits for its own).
  void stop_ranks(const std::map<std::size_t, pid_t>& ranks, std::chrono::milliseconds how_long) const {
    std::map<host::Host*, std::pair<std::shared_ptr<host::Host>, std::vector<pid_t>>> by_host;
    for (auto& [r, pid] : ranks) {
      if (auto h = host_of(r); h && pid) {
        auto& e = by_host[h.get()];
        e.first = h;
        e.second.push_back(pid);
      }
    }
    std::vector<std::thread> stoppers;
    for (auto& [raw, e] : by_host) {
      if (by_host.size() == 1) {
        e.first->stop(e.second, how_long);
      } else {
        stoppers.emplace_back([&e, how_long] { e.first->stop(e.second, how_long); });
      }
    }
    for (auto& t : stoppers) t.join();
  }
  void stop() {
    std::lock_guard no_respawn(respawn_mu);  // one in progress finishes first; none starts after
    std::call_once(stopped, [&] {
      if (health) {
        health->stopping = true;  // its procs' exits are expected now
        health->set_handler({});  // what the handler refers to may go with the mesh
      }
      const std::vector<pid_t> all = pid_list();
      std::map<std::size_t, pid_t> ranks;
      for (std::size_t r = 0; r < all.size(); ++r) ranks[r] = all[r];
      stop_ranks(ranks, grace);
      for (std::size_t r = 0; r < all.size(); ++r) {  // a proc that failed on its way out says so
        auto h = host_of(r);
        auto st = all[r] && h ? h->status(all[r]) : std::nullopt;
        if (st && st->code != 0 && !(health && health->failure(r))) {
          log().warn("proc mesh '{}': rank {} (pid {}) ended with {}", name, r, all[r], st->to_string());
        }
      }
    });
  }
};

namespace {
std::mutex g_mu;
std::shared_ptr<RuntimeState> g_runtime;  // the controller's; set while its Runtime lives
Runtime* g_runtime_object = nullptr;

std::shared_ptr<RuntimeState> runtime_state() {
  std::lock_guard lock(g_mu);
  if (!g_runtime) throw CallError(Error(Code::kFailedPrecondition, "no sceptre::Runtime in this process"));
  return g_runtime;
}
}  // namespace

// The running controller's configuration, else the defaults.
Config current_config() {
  std::lock_guard lock(g_mu);
  return g_runtime ? g_runtime->config : Config{};
}

std::chrono::milliseconds spawn_timeout() { return current_config().spawn_timeout; }

std::shared_ptr<MeshMembers> make_members(const MeshView& procs, const std::string& name, const Extent& per_proc,
                                          std::vector<ActorId> actors) {
  const MeshMembers& pm = *procs.members();
  std::vector<std::string> names = procs.extent().names();
  std::vector<std::size_t> sizes = procs.extent().sizes();
  for (std::size_t i = 0; i < per_proc.ndim(); ++i) {
    if (procs.extent().dim(per_proc.names()[i])) {
      throw CallError(Error(Code::kInvalidArgument, "spawning '" + name + "': the per-proc extent " +
                                                        per_proc.to_string() + " repeats a dimension of " +
                                                        procs.extent().to_string()));
    }
    names.push_back(per_proc.names()[i]);
    sizes.push_back(per_proc.sizes()[i]);
  }
  auto extent = Extent::make(std::move(names), std::move(sizes));
  if (!extent) throw CallError(std::move(extent).error());
  auto m = std::make_shared<MeshMembers>();
  m->name = name;
  m->extent = std::move(*extent);
  const std::size_t per = per_proc.num_ranks();
  m->proc_of.resize(actors.size());
  for (std::size_t k = 0; k < actors.size(); ++k) {
    m->proc_of[k] = static_cast<std::uint32_t>(pm.proc_of[procs.base_rank(k / per)]);
  }
  m->actors = std::move(actors);
  {
    std::shared_lock lock(pm.table_mu);
    m->nodes = pm.nodes;
    m->agents = pm.agents;
  }
  m->fanout = pm.fanout;
  m->root_fanout = pm.root_fanout;
  m->keep_alive = pm.keep_alive;
  m->health = pm.health;
  m->outstanding.reset(new std::atomic<std::int64_t>[m->actors.size()]());
  return m;
}

void stop_members(const MeshView& view) {
  const MeshMembers& m = *view.members();
  std::map<std::uint32_t, std::vector<std::uint64_t>> by_proc;
  std::vector<ActorId> agents;
  std::string actor_name;
  {
    std::shared_lock lock(m.table_mu);
    for (std::size_t r = 0; r < view.size(); ++r) {
      const std::size_t b = view.base_rank(r);
      by_proc[m.proc_of[b]].push_back(m.actors[b].index);
    }
    agents = m.agents;
    actor_name = m.actors[0].name;
  }
  const auto timeout = current_config().stop_timeout;
  std::size_t most = 0;  // an agent stops its actors one after another
  for (auto& [p, indices] : by_proc) most = std::max(most, indices.size());
  std::vector<std::pair<std::uint32_t, Future<bool>>> pending;
  for (auto& [p, indices] : by_proc) {
    pending.emplace_back(p, ActorRef<ProcAgent>(agents.at(p))
                                .call<&ProcAgent::stop_actors>(actor_name, std::move(indices),
                                                               static_cast<std::int64_t>(timeout.count())));
  }
  for (auto& [p, f] : pending) {
    try {
      (void)f.get(timeout * static_cast<long>(most) + std::chrono::seconds(10));
    } catch (const Exception& e) {
      throw CallError(Error(Code::kUnavailable, "stopping '" + m.name + "' in proc " + agents.at(p).proc.addr +
                                                    ": " + e.what()));
    }
  }
}

}  // namespace detail

// --- Runtime ---------------------------------------------------------------------------------------

Runtime::Runtime(int argc, char** argv) : Runtime(argc, argv, [] {
  host::serve_zygote_if_asked();  // a zygote returns from it only as a new proc
  if (proc_role()) return Config{};  // the proc reads its own (run_proc), never this one
  auto c = Config::load();
  if (!c) throw Exception(std::move(c).error().with_context("sceptre configuration"));
  return std::move(*c);
}()) {}

Runtime::Runtime(int argc, char** argv, Config config) {
  host::serve_zygote_if_asked();
  std::vector<std::string> args(argv, argv + argc);
  if (proc_role()) run_proc(args);
  auto state = std::make_shared<detail::RuntimeState>();
  state->config = std::move(config);
  state->argv = std::move(args);
  {
    std::lock_guard lock(detail::g_mu);
    if (detail::g_runtime) throw Exception(Error(Code::kFailedPrecondition, "a sceptre::Runtime exists already"));
  }
  apply_log_level(state->config);
  // Every proc of the job authenticates with one secret; the procs inherit it.
  if (!std::getenv("SCEPTRE_SECRET") || !*std::getenv("SCEPTRE_SECRET")) {
    ::setenv("SCEPTRE_SECRET", random_secret().c_str(), 1);
  }
  // Hosts in network namespaces reach the controller on a bridge of its own; every proc serves TCP.
  std::string listen_host;
  if (state->config.transport == "netns") {
    auto net = host::HostNetwork::make();
    if (!net) throw Exception(std::move(net).error().with_context("sceptre transport 'netns'"));
    state->net = std::move(*net);
    listen_host = state->net->controller_address();
  }
  state->proc = std::make_unique<Proc>(proc_options(state->config, listen_host));
  detail::RuntimeState* raw = state.get();
  state->host = std::make_shared<host::LocalHost>(
      state->argv, host::LocalHost::Options{{state->config.log_fold, state->config.log_fold_window},
                                            state->config.stderr_tail_lines,
                                            [raw](pid_t pid, const host::ExitStatus& status) {
                                              std::lock_guard lock(raw->exit_mu);
                                              if (auto* s = raw->supervisor.load()) s->on_exit(*raw->host, pid, status);
                                            },
                                            0, std::string(), state->config.gpu_health_interval,
                                            state->config.proc_zygote, state->config.spawn_timeout});
  state->host->set_stop_grace(state->config.stop_timeout + std::chrono::seconds(2));
  state->supervisor_owner = std::make_unique<detail::Supervisor>(
      state->config, *state->proc, listen_host.empty() ? std::string() : "tcp:" + listen_host + ":0");
  state->supervisor = state->supervisor_owner.get();
  (void)detail::cast_node(*state->proc);
  std::lock_guard lock(detail::g_mu);
  detail::g_runtime = state;
  detail::g_runtime_object = this;
  state_ = std::move(state);
}

Runtime::~Runtime() {
  {
    std::lock_guard lock(detail::g_mu);
    detail::g_runtime.reset();
    detail::g_runtime_object = nullptr;
  }
  std::vector<std::shared_ptr<detail::ProcMeshState>> live;
  {
    std::lock_guard lock(state_->mu);
    for (auto& w : state_->meshes) {
      if (auto s = w.lock()) live.push_back(std::move(s));
    }
  }
  // Procs first (those on launched hosts need their agents to stop them), then the agents.
  for (auto& s : live) {
    if (!s->is_agents) s->stop();
  }
  for (auto& s : live) s->stop();
  state_->closing = true;
  if (state_->notice_thread.joinable()) state_->notice_thread.join();
  // Supervision ends before the host: no exit is told to it after this, and its threads (a
  // handler in progress included) are done before the host they use goes away.
  {
    std::lock_guard lock(state_->exit_mu);
    state_->supervisor = nullptr;
  }
  state_->supervisor_owner.reset();
  state_->host.reset();  // stops any proc left, prints what they wrote
  state_->proc.reset();
  state_->net.reset();
}

Runtime& Runtime::current() {
  std::lock_guard lock(detail::g_mu);
  if (!detail::g_runtime_object) throw CallError(Error(Code::kFailedPrecondition, "no sceptre::Runtime in this process"));
  return *detail::g_runtime_object;
}

const Config& Runtime::config() const { return state_->config; }

void Runtime::on_failure(FailureHandler handler) { state_->supervisor.load()->set_handler(std::move(handler)); }
Proc& Runtime::proc() { return *state_->proc; }

HostMesh this_host() { return Runtime::current().this_host(); }

// --- spawning procs ------------------------------------------------------------------------------

namespace {

// Starts the procs of `ranks` of `state` and waits until each has reported that it is up.
// Throws CallError naming the first that did not, after stopping the ones it started.
std::vector<BootReport> start_procs(detail::RuntimeState& rt, detail::ProcMeshState& state,
                                    const std::vector<std::size_t>& ranks) {
  const Config& config = rt.config;
  const detail::SpawnPlan& plan = state.plan;
  const std::size_t n = state.extent.num_ranks();
  std::map<std::size_t, pid_t> started;
  auto fail = [&](std::size_t rank, const std::string& why, Code code = Code::kUnavailable) {
    const pid_t pid = started.count(rank) ? started[rank] : 0;
    auto h = state.host_of(rank);
    std::vector<std::string> tail = pid && h ? h->stderr_tail(pid) : std::vector<std::string>{};
    std::string text = "proc mesh '" + state.name + "' " + state.extent.to_string() + ": rank " +
                       std::to_string(rank) + " " + state.extent.point(rank).to_string() + " (pid " +
                       std::to_string(pid) + (h ? " on " + h->name() : std::string()) + ") " + why;
    if (!tail.empty()) {
      text += "; the last lines of its stderr:";
      for (const auto& l : tail) text += "\n    " + l;
    }
    state.stop_ranks(started, std::chrono::milliseconds(1000));
    throw CallError(Error(code, std::move(text)));
  };
  const auto gpus_dim = state.extent.dim("gpus");

  auto [boot_ref, boot_rx] = open_port<BootReport>();
  const char* secret = std::getenv("SCEPTRE_SECRET");
  for (std::size_t r : ranks) {
    host::ProcSpec spec;
    spec.mesh = state.name;
    spec.rank = r;
    spec.wrap = plan.wrap;
    if (gpus_dim) spec.gpu = static_cast<int>(state.extent.point(r).coords()[*gpus_dim]);
    const std::string rs = std::to_string(r), ns = std::to_string(n);
    spec.env = {"RANK=" + rs,
                "WORLD_SIZE=" + ns,
                "LOCAL_RANK=" + std::to_string(r % plan.per_host),
                "LOCAL_WORLD_SIZE=" + std::to_string(plan.per_host),
                "MASTER_ADDR=" + plan.master_addr,
                "MASTER_PORT=" + state.master_port,
                "SCEPTRE_ROLE=" + plan.role,
                "SCEPTRE_MESH=" + state.name,
                "SCEPTRE_RANK=" + rs,
                "SCEPTRE_EXTENT=" + state.extent.to_string(),
                "SCEPTRE_BOOT=" + boot_ref.id().to_string(),
                "SCEPTRE_LIFELINE=3",
                "SCEPTRE_SECRET=" + std::string(secret ? secret : ""),
                "SCEPTRE_CONFIG=" + state.config_json,
                "SCEPTRE_HEALTH=" + state.health_addr,
                "SCEPTRE_MESH_ID=" + std::to_string(state.mesh_id),
                "SCEPTRE_CONTROLLER=" + state.controller};
    if (r < plan.env.size()) spec.env.insert(spec.env.end(), plan.env[r].begin(), plan.env[r].end());
    auto h = state.host_of(r);
    if (!h) fail(r, "could not be started: its host is gone");
    auto pid = h->spawn(spec);
    if (!pid) {
      // A request the host cannot meet (more GPUs than it has, a GPU runtime it lacks) is the
      // caller's to fix: its code stands.
      const Code c = pid.error().code();
      const Code code = c == Code::kInvalidArgument || c == Code::kFailedPrecondition ? c : Code::kUnavailable;
      fail(r, "could not be started: " + pid.error().to_string(), code);
    }
    started[r] = *pid;
    if (plan.on_started) {
      if (Status s = plan.on_started(r, *pid); !s.ok()) fail(r, "could not be set up: " + s.error().to_string());
    }
  }

  std::map<std::size_t, BootReport> reports;
  const auto deadline = std::chrono::steady_clock::now() + config.spawn_timeout;
  while (reports.size() < ranks.size()) {
    try {
      BootReport b = boot_rx.recv(std::chrono::milliseconds(50));
      auto it = started.find(b.rank);
      if (it == started.end() || reports.count(b.rank) || b.pid != it->second) {
        log().warn("proc mesh '{}': a boot report from rank {} pid {} that is not expected; ignored", state.name,
                   b.rank, b.pid);
        continue;
      }
      rt.proc->peer_back(b.node.proc);  // its address may be one a lost proc had
      reports[b.rank] = std::move(b);
      continue;
    } catch (const TimeoutError&) {
    }
    for (auto& [r, pid] : started) {
      if (reports.count(r)) continue;
      auto h = state.host_of(r);
      if (auto st = h ? h->status(pid) : std::nullopt) fail(r, "exited before it came up (" + st->to_string() + ")");
    }
    if (std::chrono::steady_clock::now() >= deadline) {
      for (auto& [r, pid] : started) {
        if (!reports.count(r)) {
          fail(r, "did not come up within " + std::to_string(config.spawn_timeout.count()) +
                      " ms (Config::spawn_timeout)");
        }
      }
    }
  }
  std::vector<BootReport> out;
  for (std::size_t r : ranks) out.push_back(std::move(reports.at(r)));
  return out;
}

}  // namespace

namespace detail {

// The agents of one launch_hosts, and the RemoteHosts they serve.
struct HostMeshState {
  ProcMesh agents;
  std::vector<std::shared_ptr<host::RemoteHost>> hosts;
  std::vector<std::string> addresses, links;
  std::mutex mu;
  std::vector<std::weak_ptr<ProcMeshState>> meshes;  // spawned on these hosts
  std::once_flag stopped;

  ~HostMeshState() {
    try {
      stop();
    } catch (const std::exception& e) {
      log().error("host mesh: stopping it failed: {}", e.what());
    }
  }
  void stop() {
    std::call_once(stopped, [&] {
      std::vector<std::shared_ptr<ProcMeshState>> live;
      {
        std::lock_guard lock(mu);
        for (auto& w : meshes) {
          if (auto m = w.lock()) live.push_back(std::move(m));
        }
      }
      for (auto& m : live) m->stop();
      agents.stop();
    });
  }
};

}  // namespace detail


ProcMesh HostMesh::spawn_procs(const Extent& extent, std::string name, FailureHandler on_failure) const {
  std::shared_ptr<detail::RuntimeState> rt = detail::runtime_state();
  detail::SpawnPlan plan;
  plan.name = std::move(name);
  plan.on_failure = std::move(on_failure);
  const std::size_t per = extent.num_ranks();
  plan.per_host = std::max<std::size_t>(per, 1);
  if (!state_) {
    plan.extent = extent;
    plan.hosts.assign(per, rt->host);
    if (rt->net) {
      plan.master_addr = rt->net->controller_address();
      plan.env.assign(per, {"SCEPTRE_HOST_ADDR=" + rt->net->controller_address()});
    }
    return detail::spawn_mesh(rt, std::move(plan), false);
  }
  const detail::HostMeshState& hm = *state_;
  if (extent.dim("hosts")) {
    throw CallError(Error(Code::kInvalidArgument, "spawning '" + plan.name + "' on hosts: the extent " +
                                                      extent.to_string() + " has a dimension 'hosts' already"));
  }
  std::vector<std::string> names{"hosts"};
  std::vector<std::size_t> sizes{hm.hosts.size()};
  for (std::size_t i = 0; i < extent.ndim(); ++i) {
    names.push_back(extent.names()[i]);
    sizes.push_back(extent.sizes()[i]);
  }
  auto full = Extent::make(std::move(names), std::move(sizes));
  if (!full) throw CallError(std::move(full).error());
  plan.extent = std::move(*full);
  for (std::size_t k = 0; k < hm.hosts.size(); ++k) {
    for (std::size_t i = 0; i < per; ++i) plan.hosts.push_back(hm.hosts[k]);
  }
  if (!hm.addresses.empty() && !hm.addresses[0].empty()) plan.master_addr = hm.addresses[0];
  plan.keep_hosts = state_;
  ProcMesh mesh = detail::spawn_mesh(rt, std::move(plan), false);
  {
    std::lock_guard lock(state_->mu);
    std::erase_if(state_->meshes, [](const auto& w) { return w.expired(); });
    state_->meshes.push_back(mesh.state_);
  }
  return mesh;
}

ProcMesh detail::spawn_mesh(const std::shared_ptr<detail::RuntimeState>& rt, detail::SpawnPlan plan, bool is_agents) {
  const std::string name = plan.name;
  if (Status s = check_actor_name(name); !s.ok()) {
    throw CallError(Error(s.error()).with_context("the name of a proc mesh"));
  }
  const Config& config = rt->config;
  const Extent extent = plan.extent;
  const std::size_t n = extent.num_ranks();
  detail::Supervisor& supervisor = *rt->supervisor.load();
  auto state = std::make_shared<detail::ProcMeshState>();
  state->name = name;
  state->extent = extent;
  FailureHandler on_failure = std::move(plan.on_failure);
  state->plan = std::move(plan);
  state->is_agents = is_agents;
  state->grace = config.stop_timeout + std::chrono::seconds(2);
  state->master_port = std::to_string(free_port());
  state->config_json = config.to_json();
  state->health_addr = supervisor.address();
  state->mesh_id = supervisor.next_mesh_id();
  state->controller = rt->proc->id().to_string();

  std::vector<std::size_t> all(n);
  std::iota(all.begin(), all.end(), std::size_t{0});
  std::vector<BootReport> reports;
  try {
    reports = start_procs(*rt, *state, all);
  } catch (...) {
    state->grace = std::chrono::milliseconds(1000);
    throw;  // start_procs stopped what it started
  }
  for (const auto& b : reports) state->pids.push_back(static_cast<pid_t>(b.pid));
  {
    std::lock_guard lock(rt->mu);
    std::erase_if(rt->meshes, [](const auto& w) { return w.expired(); });
    rt->meshes.push_back(state);
  }

  // Supervised from now on: an exit, a lost heartbeat or a failed actor is a failure of the mesh.
  std::vector<ProcId> proc_ids;
  for (const auto& b : reports) proc_ids.push_back(b.node.proc);
  state->health = std::make_shared<detail::MeshHealth>(state->mesh_id, name, extent, state->pids, std::move(proc_ids),
                                                       state->plan.hosts, state->plan.serves);
  if (on_failure) state->health->set_handler(std::move(on_failure));
  supervisor.add(state->health);

  auto members = std::make_shared<detail::MeshMembers>();
  members->name = name;
  members->extent = extent;
  members->health = state->health;
  for (std::size_t r = 0; r < n; ++r) {
    members->actors.push_back(reports[r].node);
    members->agents.push_back(reports[r].agent);
    members->proc_of.push_back(static_cast<std::uint32_t>(r));
  }
  members->nodes = members->actors;
  members->fanout = config.cast_fanout;
  members->root_fanout = config.cast_root_fanout;
  members->keep_alive = state;
  members->outstanding.reset(new std::atomic<std::int64_t>[n]());
  state->members = members;
  for (const auto& b : reports) state->host_agents.push_back(b.host);
  return ProcMesh(std::move(state), detail::MeshView(std::move(members)));
}

// --- launched hosts ------------------------------------------------------------------------------

HostMesh Runtime::launch_hosts(std::size_t count, HostLaunch how) {
  std::shared_ptr<detail::RuntimeState> rt = state_;
  if (count == 0) throw CallError(Error(Code::kInvalidArgument, "launch_hosts of no hosts"));
  if (how.netns && !rt->net) {
    throw CallError(Error(Code::kFailedPrecondition,
                          "hosts in network namespaces need Config::transport \"netns\" (SCEPTRE_TRANSPORT=netns), "
                          "so that the controller serves on their bridge"));
  }
  if (how.netns && count > host::HostNetwork::kMaxHosts) {
    throw CallError(Error(Code::kInvalidArgument, "at most 250 hosts in network namespaces"));
  }
  auto hm = std::make_shared<detail::HostMeshState>();
  std::vector<std::uint32_t> ids;
  PortId notices;
  {
    std::lock_guard lock(rt->mu);
    notices = rt->notice_port();
    for (std::size_t k = 0; k < count; ++k) ids.push_back(rt->next_host_id++);
  }
  detail::RuntimeState* raw = rt.get();
  auto on_exit = [raw](const host::Host& h, pid_t pid, const host::ExitStatus& st) {
    std::lock_guard lock(raw->exit_mu);
    if (auto* s = raw->supervisor.load()) s->on_exit(h, pid, st);
  };
  detail::SpawnPlan plan;
  plan.name = how.name;
  auto extent = Extent::make({"hosts"}, {count});
  if (!extent) throw CallError(std::move(extent).error());
  plan.extent = std::move(*extent);
  plan.hosts.assign(count, rt->host);
  plan.per_host = count;  // all on this machine
  plan.role = "host";
  plan.on_failure = std::move(how.on_failure);
  for (std::size_t k = 0; k < count; ++k) {
    std::string addr = how.netns ? rt->net->host_address(k) : rt->net ? rt->net->controller_address() : std::string();
    std::string name = how.netns ? "host " + std::to_string(k) + " (" + addr + ")"
                                 : "host " + std::to_string(k) + " of '" + how.name + "'";
    auto remote = std::make_shared<host::RemoteHost>(ids[k], name, rt->config.spawn_timeout, on_exit);
    hm->hosts.push_back(remote);
    plan.serves.push_back(remote);
    hm->addresses.push_back(how.netns ? addr : std::string());
    hm->links.push_back(how.netns ? rt->net->link(k) : std::string());
    std::vector<std::string> env{"SCEPTRE_HOST_ID=" + std::to_string(ids[k]), "SCEPTRE_HOST_EVENTS=" + notices.to_string(),
                                 "SCEPTRE_HOST_NAME=" + name};
    if (!addr.empty()) env.push_back("SCEPTRE_HOST_ADDR=" + addr);
    plan.env.push_back(std::move(env));
  }
  plan.wrap = how.agent_command;
  if (how.netns) {
    plan.master_addr = rt->net->host_address(0);
    auto wrap = host::HostNetwork::wrap();
    plan.wrap.insert(plan.wrap.begin(), wrap.begin(), wrap.end());
    plan.on_started = [net = rt->net.get(), timeout = rt->config.spawn_timeout](std::size_t k, pid_t pid) {
      return net->attach(pid, k, timeout);
    };
  }
  {
    std::lock_guard lock(rt->mu);
    for (auto& h : hm->hosts) rt->remotes[h->id()] = h;
  }
  hm->agents = detail::spawn_mesh(rt, std::move(plan), true);
  const auto& agents = hm->agents.state_->host_agents;
  for (std::size_t k = 0; k < count; ++k) hm->hosts[k]->set_agent(ActorRef<host::HostAgent>(agents.at(k)));
  return HostMesh(std::move(hm));
}

Extent HostMesh::extent() const {
  if (state_) return state_->agents.extent();
  return *Extent::make({"hosts"}, {1});
}
std::size_t HostMesh::size() const { return state_ ? state_->hosts.size() : 1; }
std::string HostMesh::address(std::size_t k) const { return state_ ? state_->addresses.at(k) : std::string(); }
std::string HostMesh::link(std::size_t k) const { return state_ ? state_->links.at(k) : std::string(); }
ProcMesh HostMesh::agents() const { return state_ ? state_->agents : ProcMesh(); }
void HostMesh::on_failure(FailureHandler handler) const {
  if (!state_) throw CallError(Error(Code::kFailedPrecondition, "on_failure of the controller's own host"));
  state_->agents.on_failure(std::move(handler));
}
void HostMesh::stop() const {
  if (state_) state_->stop();
}

void ProcMesh::respawn(const std::vector<std::size_t>& ranks) const {
  if (!state_ || !state_->health) throw CallError(Error(Code::kFailedPrecondition, "respawn of an empty ProcMesh"));
  if (state_->is_agents) {
    throw CallError(Error(Code::kUnimplemented, "respawn of host agents ('" + name() + "'): launch new hosts instead"));
  }
  std::shared_ptr<detail::RuntimeState> rt = detail::runtime_state();
  detail::ProcMeshState& st = *state_;
  std::lock_guard one(st.respawn_mu);
  if (st.health->stopping.load()) {
    throw CallError(Error(Code::kCancelled, "respawn of '" + name() + "', which is stopping"));
  }
  std::vector<std::size_t> base;
  for (std::size_t r : ranks) {
    const std::size_t b = view_.base_rank(r);
    if (!st.health->failure(b)) {
      throw CallError(Error(Code::kFailedPrecondition, "respawn of rank " + std::to_string(r) + " of '" + name() +
                                                           "', which has not failed"));
    }
    base.push_back(b);
  }
  std::sort(base.begin(), base.end());
  base.erase(std::unique(base.begin(), base.end()), base.end());
  // What is left of the old procs goes first (a stuck one, or one whose actor failed, still
  // runs), and the controller forgets them: calls still waiting on them fail now.
  {
    std::vector<pid_t> old;
    for (std::size_t b : base) {
      old.push_back(st.health->pid(b));
      rt->proc->peer_lost(st.health->proc(b), Error(Code::kUnavailable, "rank " + std::to_string(b) + " of '" +
                                                                            st.name + "' is being respawned"));
    }
    std::map<std::size_t, pid_t> old_ranks;
    for (std::size_t i = 0; i < base.size(); ++i) {
      if (auto h = st.host_of(base[i])) h->kill(old[i], SIGKILL);
      old_ranks[base[i]] = old[i];
    }
    st.stop_ranks(old_ranks, std::chrono::milliseconds(1000));
  }
  std::vector<BootReport> reports = start_procs(*rt, st, base);
  std::vector<pid_t> fresh;
  for (const auto& b : reports) fresh.push_back(static_cast<pid_t>(b.pid));

  // Everything that can fail first: every actor mesh's members in the new procs, made with the
  // arguments they were first made with. On failure the new procs go, and nothing has changed.
  std::vector<detail::ProcMeshState::Derived> derived;
  {
    std::lock_guard lock(st.mu);
    derived = st.derived;
  }
  struct Made {
    std::shared_ptr<detail::MeshMembers> members;
    std::vector<std::pair<std::size_t, ActorId>> slots;  // index in members->actors, new actor
  };
  std::vector<Made> made;
  const auto timeout = detail::spawn_timeout();
  try {
    for (auto& d : derived) {
      auto m = d.members.lock();
      if (!m) continue;
      Made one{m, {}};
      for (std::size_t i = 0; i < base.size(); ++i) {
        for (std::size_t k = 0; k < m->proc_of.size(); ++k) {
          if (m->proc_of[k] != base[i]) continue;
          try {
            one.slots.emplace_back(k, d.spawn_one(reports[i].node.proc, timeout));
          } catch (const Exception& e) {
            throw CallError(Error(Code::kUnavailable, "respawning '" + m->name + "' on rank " + std::to_string(base[i]) +
                                                          " of '" + st.name + "': " + e.what()));
          }
        }
      }
      made.push_back(std::move(one));
    }
  } catch (...) {
    std::map<std::size_t, pid_t> fresh_ranks;
    for (std::size_t i = 0; i < base.size(); ++i) fresh_ranks[base[i]] = fresh[i];
    st.stop_ranks(fresh_ranks, std::chrono::milliseconds(1000));
    throw;
  }

  // Then the tables: the procs' own, every actor mesh's, the pids; last, the ranks are healthy.
  auto set_proc = [&](detail::MeshMembers& m, std::size_t i) {
    m.nodes.at(base[i]) = reports[i].node;
    m.agents.at(base[i]) = reports[i].agent;
  };
  if (auto m = st.members.lock()) {
    std::unique_lock lock(m->table_mu);
    for (std::size_t i = 0; i < base.size(); ++i) {
      m->actors.at(base[i]) = reports[i].node;
      set_proc(*m, i);
    }
  }
  for (auto& one : made) {
    std::unique_lock lock(one.members->table_mu);
    for (auto& [k, actor] : one.slots) one.members->actors.at(k) = std::move(actor);
    for (std::size_t i = 0; i < base.size(); ++i) set_proc(*one.members, i);
  }
  {
    std::lock_guard lock(st.mu);
    for (std::size_t i = 0; i < base.size(); ++i) st.pids.at(base[i]) = fresh[i];
  }
  auto* supervisor = rt->supervisor.load();
  if (!supervisor) throw CallError(Error(Code::kCancelled, "the runtime is shutting down"));
  for (std::size_t i = 0; i < base.size(); ++i) {
    supervisor->rejoin(st.health, base[i], fresh[i], reports[i].node.proc);
  }
}

namespace detail {
void add_actor_mesh(const std::shared_ptr<ProcMeshState>& procs, const std::shared_ptr<MeshMembers>& members,
                    ActorSpawner spawn_one) {
  if (!procs) return;
  std::lock_guard lock(procs->mu);
  std::erase_if(procs->derived, [](const auto& d) { return d.members.expired(); });
  procs->derived.push_back(ProcMeshState::Derived{members, std::move(spawn_one)});
}
}  // namespace detail

int ProcMesh::pid(std::size_t rank) const {
  if (!state_) throw CallError(Error(Code::kFailedPrecondition, "pid of an empty ProcMesh"));
  const std::size_t b = view_.base_rank(rank);
  std::lock_guard lock(state_->mu);
  return state_->pids.at(b);
}

void ProcMesh::stop() const {
  if (state_) state_->stop();
}

void ProcMesh::on_failure(FailureHandler handler) const {
  if (!state_ || !state_->health) throw CallError(Error(Code::kFailedPrecondition, "on_failure of an empty ProcMesh"));
  state_->health->set_handler(std::move(handler));
}

std::vector<std::size_t> ProcMesh::failed_ranks() const {
  if (!state_ || !state_->health) return {};
  std::vector<std::size_t> out;
  for (std::size_t r = 0; r < view_.size(); ++r) {
    if (state_->health->failure(view_.base_rank(r))) out.push_back(r);
  }
  return out;
}

std::optional<MeshFailure> ProcMesh::failure(std::size_t rank) const {
  if (!state_ || !state_->health) return std::nullopt;
  return state_->health->failure(view_.base_rank(rank));
}

}  // namespace sceptre
