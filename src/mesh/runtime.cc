// The controller's runtime and the proc role (see sceptre/mesh/runtime.h).
#include "sceptre/mesh/runtime.h"

#include <arpa/inet.h>
#include <execinfo.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <openssl/rand.h>

#include <cerrno>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <sstream>

#include "core/log.h"
#include "host/local_host.h"
#include "mesh/supervisor.h"
#include "sceptre/actor/port.h"
#include "sceptre/mesh/detail/cast.h"

namespace sceptre {
namespace detail {

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

}  // namespace detail

namespace {

// What a proc sends the controller once it serves its address.
struct BootReport {
  std::uint64_t rank = 0;
  ActorId node;   // its cast node; node.proc is its ProcId
  ActorId agent;  // its ProcAgent
  std::int64_t pid = 0;
  SCEPTRE_FIELDS(rank, node, agent, pid)
};

const char* env_or(const char* name, const char* fallback) {
  const char* v = std::getenv(name);
  return v && *v ? v : fallback;
}

ProcOptions proc_options(const Config& config) {
  ProcOptions o;
  if (config.transport == "tcp") o.listen = "tcp:127.0.0.1:0";
  o.stop_timeout = config.stop_timeout;
  return o;
}

void apply_log_level(const Config& config) {
  log().set_level(spdlog::level::from_str(config.log_level));
}

// The proc role: serve, report, run until the lifeline closes, exit. Never returns.
bool proc_role() {
  const char* role = std::getenv("SCEPTRE_ROLE");
  return role && std::string_view(role) == "proc";
}

void serve_proc();

// A proc that crashes prints where, on its stderr (which the controller keeps the tail of for the
// failure report), then dies of the same signal.
void on_crash(int sig) {
  const char head[] = "sceptre proc: fatal signal; stack:\n";
  (void)!::write(2, head, sizeof head - 1);
  void* frames[64];
  int n = ::backtrace(frames, 64);
  ::backtrace_symbols_fd(frames, n, 2);
  ::signal(sig, SIG_DFL);
  ::raise(sig);
}

void install_crash_handler() {
  void* warm[1];
  (void)::backtrace(warm, 1);  // loads libgcc now: not inside the handler
  struct sigaction sa {};
  sa.sa_handler = on_crash;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_RESETHAND | SA_NODEFER;
  for (int sig : {SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGABRT}) ::sigaction(sig, &sa, nullptr);
}

[[noreturn]] void run_proc() {
  try {
    serve_proc();
  } catch (const std::exception& e) {  // never back into the user's main
    std::fprintf(stderr, "sceptre proc: %s\n", e.what());
    std::_Exit(3);
  }
  std::fflush(stdout);
  std::fflush(stderr);
  std::exit(0);
}

void serve_proc() {
  // When the controller dies, the pipes to it close with the lifeline: a write to them then fails
  // (EPIPE) instead of killing the proc before it has stopped its actors.
  std::signal(SIGPIPE, SIG_IGN);
  std::setvbuf(stdout, nullptr, _IOLBF, 0);  // a pipe: lines should reach the controller as printed
  auto config = Config::load();
  if (!config) {
    std::fprintf(stderr, "sceptre proc: bad configuration: %s\n", config.error().to_string().c_str());
    std::_Exit(2);
  }
  apply_log_level(*config);
  auto boot = PortId::parse(env_or("SCEPTRE_BOOT", ""));
  if (!boot) {
    std::fprintf(stderr, "sceptre proc: bad SCEPTRE_BOOT: %s\n", boot.error().to_string().c_str());
    std::_Exit(2);
  }
  const int lifeline = std::atoi(env_or("SCEPTRE_LIFELINE", "3"));
  const std::uint64_t rank = std::strtoull(env_or("SCEPTRE_RANK", "0"), nullptr, 10);
  install_crash_handler();
  // User code that calls exit() in a handler must end the proc with that status, promptly: the
  // static destructors exit() would run next race the proc's threads, which still use them.
  // Registered last, this runs first, and skips them (glibc's on_exit gives the status).
  ::on_exit(
      [](int status, void*) {
        std::fflush(stdout);
        std::fflush(stderr);
        ::_exit(status);
      },
      nullptr);
  {
    Proc proc(proc_options(*config));
    // Destroyed before the proc: it reads the proc's handlers.
    std::unique_ptr<detail::ProcMonitor> monitor;
    if (const char* health = std::getenv("SCEPTRE_HEALTH"); health && *health) {
      monitor = std::make_unique<detail::ProcMonitor>(proc, *config, health,
                                                      std::strtoull(env_or("SCEPTRE_MESH_ID", "0"), nullptr, 10), rank);
      proc.on_supervision([m = monitor.get()](const SupervisionEvent& e) { m->actor_failed(e); });
    }
    ActorId node = detail::cast_node(proc);
    ActorId agent = proc.spawn<detail::ProcAgent>("agent").id();
    PortRef<BootReport>(*boot).send(BootReport{rank, node, agent, ::getpid()});
    char c;
    for (;;) {
      ssize_t n = ::read(lifeline, &c, 1);
      if (n == 0 || (n < 0 && errno != EINTR)) break;  // the controller let go, or is gone
    }
    proc.on_supervision({});  // failures while stopping are not reported
    monitor.reset();
  }  // stops the actors, gracefully first
}

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
  std::unique_ptr<Proc> proc;
  // Made after the host, whose pump thread tells it of every exit (hence atomic), and declared
  // before it: the host, destroyed first, stops telling.
  std::unique_ptr<Supervisor> supervisor_owner;
  std::atomic<Supervisor*> supervisor{nullptr};
  std::shared_ptr<host::LocalHost> host;
  std::mutex mu;
  std::vector<std::weak_ptr<ProcMeshState>> meshes;
};

struct ProcMeshState {
  std::string name;
  std::weak_ptr<host::LocalHost> host;
  std::vector<pid_t> pids;
  std::shared_ptr<MeshHealth> health;  // once every proc came up
  std::chrono::milliseconds grace{0};
  std::once_flag stopped;

  ~ProcMeshState() {
    try {
      stop();
    } catch (const std::exception& e) {
      log().error("proc mesh '{}': stopping it failed: {}", name, e.what());
    }
  }
  void stop() {
    std::call_once(stopped, [&] {
      if (health) health->stopping = true;  // its procs' exits are expected now
      auto h = host.lock();
      if (!h) return;
      h->stop(pids, grace);
      for (std::size_t r = 0; r < pids.size(); ++r) {  // a proc that failed on its way out says so
        auto st = pids[r] ? h->status(pids[r]) : std::nullopt;
        if (st && st->code != 0 && !(health && health->failure(r))) log().warn("proc mesh '{}': rank {} (pid {}) ended with {}", name, r, pids[r], st->to_string());
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

std::shared_ptr<const MeshMembers> make_members(const MeshView& procs, const std::string& name,
                                                const Extent& per_proc, std::vector<ActorId> actors) {
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
  m->nodes = pm.nodes;
  m->agents = pm.agents;
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
  for (std::size_t r = 0; r < view.size(); ++r) {
    const std::size_t b = view.base_rank(r);
    by_proc[m.proc_of[b]].push_back(m.actors[b].index);
  }
  const auto timeout = current_config().stop_timeout;
  std::size_t most = 0;  // an agent stops its actors one after another
  for (auto& [p, indices] : by_proc) most = std::max(most, indices.size());
  std::vector<std::pair<std::uint32_t, Future<bool>>> pending;
  for (auto& [p, indices] : by_proc) {
    pending.emplace_back(p, ActorRef<ProcAgent>(m.agents.at(p))
                                .call<&ProcAgent::stop_actors>(m.actors[0].name, std::move(indices),
                                                               static_cast<std::int64_t>(timeout.count())));
  }
  for (auto& [p, f] : pending) {
    try {
      (void)f.get(timeout * static_cast<long>(most) + std::chrono::seconds(10));
    } catch (const Exception& e) {
      throw CallError(Error(Code::kUnavailable, "stopping '" + m.name + "' in proc " + m.nodes.at(p).proc.addr +
                                                    ": " + e.what()));
    }
  }
}

}  // namespace detail

// --- Runtime ---------------------------------------------------------------------------------------

Runtime::Runtime(int argc, char** argv) : Runtime(argc, argv, [] {
  if (proc_role()) return Config{};  // the proc reads its own (run_proc), never this one
  auto c = Config::load();
  if (!c) throw Exception(std::move(c).error().with_context("sceptre configuration"));
  return std::move(*c);
}()) {}

Runtime::Runtime(int argc, char** argv, Config config) {
  if (proc_role()) run_proc();
  auto state = std::make_shared<detail::RuntimeState>();
  state->config = std::move(config);
  for (int i = 0; i < argc; ++i) state->argv.emplace_back(argv[i]);
  {
    std::lock_guard lock(detail::g_mu);
    if (detail::g_runtime) throw Exception(Error(Code::kFailedPrecondition, "a sceptre::Runtime exists already"));
  }
  apply_log_level(state->config);
  // Every proc of the job authenticates with one secret; the procs inherit it.
  if (!std::getenv("SCEPTRE_SECRET") || !*std::getenv("SCEPTRE_SECRET")) {
    ::setenv("SCEPTRE_SECRET", random_secret().c_str(), 1);
  }
  state->proc = std::make_unique<Proc>(proc_options(state->config));
  detail::RuntimeState* raw = state.get();
  state->host = std::make_shared<host::LocalHost>(
      state->argv, host::LocalHost::Options{{state->config.log_fold, state->config.log_fold_window},
                                            state->config.stderr_tail_lines,
                                            [raw](pid_t pid, const host::ExitStatus& status) {
                                              if (auto* s = raw->supervisor.load()) s->on_exit(pid, status);
                                            }});
  state->host->set_stop_grace(state->config.stop_timeout + std::chrono::seconds(2));
  state->supervisor_owner = std::make_unique<detail::Supervisor>(state->config, *state->proc, state->host);
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
  for (auto& s : live) s->stop();
  state_->host.reset();  // stops any proc left, prints what they wrote; no exit is told after this
  state_->supervisor = nullptr;
  state_->supervisor_owner.reset();
  state_->proc.reset();
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

ProcMesh HostMesh::spawn_procs(const Extent& extent, std::string name) const {
  std::shared_ptr<detail::RuntimeState> rt = detail::runtime_state();
  if (Status s = check_actor_name(name); !s.ok()) {
    throw CallError(Error(s.error()).with_context("the name of a proc mesh"));
  }
  const Config& config = rt->config;
  const std::size_t n = extent.num_ranks();
  auto state = std::make_shared<detail::ProcMeshState>();
  state->name = name;
  state->host = rt->host;
  state->grace = config.stop_timeout + std::chrono::seconds(2);
  state->pids.resize(n, 0);

  auto fail = [&](std::size_t rank, const std::string& why) {
    std::vector<std::string> tail = state->pids[rank] ? rt->host->stderr_tail(state->pids[rank]) : std::vector<std::string>{};
    std::string text = "proc mesh '" + name + "' " + extent.to_string() + ": rank " + std::to_string(rank) + " " +
                       extent.point(rank).to_string() + " (pid " + std::to_string(state->pids[rank]) + ") " + why;
    if (!tail.empty()) {
      text += "; the last lines of its stderr:";
      for (const auto& l : tail) text += "\n    " + l;
    }
    state->grace = std::chrono::milliseconds(1000);
    state->stop();
    throw CallError(Error(Code::kUnavailable, std::move(text)));
  };

  auto [boot_ref, boot_rx] = open_port<BootReport>();
  const std::string master_port = std::to_string(free_port());
  const std::string config_json = config.to_json();
  const char* secret = std::getenv("SCEPTRE_SECRET");
  detail::Supervisor& supervisor = *rt->supervisor.load();
  const std::string health_addr = supervisor.address();
  const std::uint64_t mesh_id = supervisor.next_mesh_id();
  for (std::size_t r = 0; r < n; ++r) {
    host::ProcSpec spec;
    spec.mesh = name;
    spec.rank = r;
    const std::string rs = std::to_string(r), ns = std::to_string(n);
    spec.env = {"RANK=" + rs,
                "WORLD_SIZE=" + ns,
                "LOCAL_RANK=" + rs,
                "LOCAL_WORLD_SIZE=" + ns,
                "MASTER_ADDR=127.0.0.1",
                "MASTER_PORT=" + master_port,
                "SCEPTRE_ROLE=proc",
                "SCEPTRE_MESH=" + name,
                "SCEPTRE_RANK=" + rs,
                "SCEPTRE_EXTENT=" + extent.to_string(),
                "SCEPTRE_BOOT=" + boot_ref.id().to_string(),
                "SCEPTRE_LIFELINE=3",
                "SCEPTRE_SECRET=" + std::string(secret ? secret : ""),
                "SCEPTRE_CONFIG=" + config_json,
                "SCEPTRE_HEALTH=" + health_addr,
                "SCEPTRE_MESH_ID=" + std::to_string(mesh_id),
                "SCEPTRE_CONTROLLER=" + rt->proc->id().to_string()};
    auto pid = rt->host->spawn(spec);
    if (!pid) fail(r, "could not be started: " + pid.error().to_string());
    state->pids[r] = *pid;
  }
  {
    std::lock_guard lock(rt->mu);
    std::erase_if(rt->meshes, [](const auto& w) { return w.expired(); });
    rt->meshes.push_back(state);
  }

  std::vector<std::optional<BootReport>> reports(n);
  std::size_t got = 0;
  const auto deadline = std::chrono::steady_clock::now() + config.spawn_timeout;
  while (got < n) {
    try {
      BootReport b = boot_rx.recv(std::chrono::milliseconds(50));
      if (b.rank >= n || reports[b.rank] || b.pid != state->pids[b.rank]) {
        log().warn("proc mesh '{}': a boot report from rank {} pid {} that is not expected; ignored", name, b.rank,
                   b.pid);
        continue;
      }
      reports[b.rank] = std::move(b);
      ++got;
      continue;
    } catch (const TimeoutError&) {
    }
    for (std::size_t r = 0; r < n; ++r) {
      if (reports[r]) continue;
      if (auto st = rt->host->status(state->pids[r])) fail(r, "exited before it came up (" + st->to_string() + ")");
    }
    if (std::chrono::steady_clock::now() >= deadline) {
      for (std::size_t r = 0; r < n; ++r) {
        if (!reports[r]) {
          fail(r, "did not come up within " + std::to_string(config.spawn_timeout.count()) +
                      " ms (Config::spawn_timeout)");
        }
      }
    }
  }

  // Supervised from now on: an exit, a lost heartbeat or a failed actor is a failure of the mesh.
  std::vector<ProcId> proc_ids;
  for (std::size_t r = 0; r < n; ++r) proc_ids.push_back(reports[r]->node.proc);
  state->health = std::make_shared<detail::MeshHealth>(mesh_id, name, extent, state->pids, std::move(proc_ids), std::string());
  supervisor.add(state->health);

  auto members = std::make_shared<detail::MeshMembers>();
  members->name = name;
  members->extent = extent;
  members->health = state->health;
  for (std::size_t r = 0; r < n; ++r) {
    members->actors.push_back(reports[r]->node);
    members->agents.push_back(reports[r]->agent);
    members->proc_of.push_back(static_cast<std::uint32_t>(r));
  }
  members->nodes = members->actors;
  members->fanout = config.cast_fanout;
  members->root_fanout = config.cast_root_fanout;
  members->keep_alive = state;
  members->outstanding.reset(new std::atomic<std::int64_t>[n]());
  return ProcMesh(std::move(state), detail::MeshView(std::move(members)));
}

int ProcMesh::pid(std::size_t rank) const {
  if (!state_) throw CallError(Error(Code::kFailedPrecondition, "pid of an empty ProcMesh"));
  return state_->pids.at(view_.base_rank(rank));
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
