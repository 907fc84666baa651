// The proc and host-agent roles (see mesh/proc_role.h).
#include "mesh/proc_role.h"

#include <arpa/inet.h>
#include <execinfo.h>
#include <fcntl.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <mutex>

#include "core/log.h"
#include "host/gpu_binding.h"
#include "host/agent.h"
#include "host/local_host.h"
#include "mesh/supervisor.h"
#include "sceptre/actor/port.h"
#include "sceptre/mesh/detail/cast.h"

namespace sceptre::detail {

const char* env_or(const char* name, const char* fallback) {
  const char* v = std::getenv(name);
  return v && *v ? v : fallback;
}

ProcOptions proc_options(const Config& config, std::string listen_host) {
  ProcOptions o;
  if (listen_host.empty()) {
    if (const char* a = std::getenv("SCEPTRE_HOST_ADDR"); a && *a) listen_host = a;
  }
  if (!listen_host.empty()) {
    o.listen = "tcp:" + listen_host + ":0";
  } else if (config.transport != "unix") {
    o.listen = "tcp:127.0.0.1:0";
  }
  o.stop_timeout = config.stop_timeout;
  o.io.poll_before_sleep = std::chrono::microseconds(config.io_poll_us);
  return o;
}

// Waits until an interface of this process's network namespace has the address `host` (its
// launcher may still be wiring it). Bindability is no test: a fresh namespace lets a socket bind
// an address it does not have yet.
static bool wait_for_address(const std::string& host, std::chrono::milliseconds timeout) {
  in_addr want{};
  if (::inet_pton(AF_INET, host.c_str(), &want) != 1) return false;
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  for (;;) {
    ifaddrs* all = nullptr;
    bool found = false;
    if (::getifaddrs(&all) == 0) {
      for (ifaddrs* a = all; a && !found; a = a->ifa_next) {
        found = a->ifa_addr && a->ifa_addr->sa_family == AF_INET && (a->ifa_flags & IFF_UP) &&
                reinterpret_cast<sockaddr_in*>(a->ifa_addr)->sin_addr.s_addr == want.s_addr;
      }
      ::freeifaddrs(all);
    }
    if (found) return true;
    if (std::chrono::steady_clock::now() >= deadline) return false;
    ::usleep(2000);
  }
}

void apply_log_level(const Config& config) {
  log().set_level(spdlog::level::from_str(config.log_level));
}

// The proc role (and the host agent's, which is a proc with a HostAgent in it): serve, report,
// run until the lifeline closes, exit. Never returns.
static std::string_view role() {
  const char* r = std::getenv("SCEPTRE_ROLE");
  return r ? std::string_view(r) : std::string_view();
}
bool proc_role() { return role() == "proc" || role() == "host"; }

static void serve_proc(const std::vector<std::string>& argv);

// A proc that crashes prints where, on its stderr (which the controller keeps the tail of for the
// failure report), then dies of the same signal.
static void on_crash(int sig) {
  const char head[] = "sceptre proc: fatal signal; stack:\n";
  (void)!::write(2, head, sizeof head - 1);
  void* frames[16];  // the innermost: with the line above, it fits a default stderr tail
  int n = ::backtrace(frames, 16);
  ::backtrace_symbols_fd(frames, n, 2);
  ::signal(sig, SIG_DFL);
  ::raise(sig);
}

static void install_crash_handler() {
  void* warm[1];
  (void)::backtrace(warm, 1);  // loads libgcc now: not inside the handler
  struct sigaction sa {};
  sa.sa_handler = on_crash;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_RESETHAND | SA_NODEFER;
  for (int sig : {SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGABRT}) ::sigaction(sig, &sa, nullptr);
}

[[noreturn]] void run_proc(const std::vector<std::string>& argv) {
  try {
    serve_proc(argv);
  } catch (const std::exception& e) {  // never back into the user's main
    std::fprintf(stderr, "sceptre proc: %s\n", e.what());
    std::_Exit(3);
  }
  std::fflush(stdout);
  std::fflush(stderr);
  std::exit(0);
}

static void serve_proc(const std::vector<std::string>& argv) {
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
  // The CPUs near this proc's GPU (host/gpu_binding.h), before the first thread starts.
  if (std::string warning = host::apply_cpu_binding(); !warning.empty()) log().warn("proc rank {}: {}", rank, warning);
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
  // The main thread waits for the lifeline to close, or for the monitor to say the controller
  // is out of reach (a pipe of its own wakes the wait).
  int orphan_pipe[2];
  if (::pipe2(orphan_pipe, O_CLOEXEC) != 0) throw Exception(Error(Code::kInternal, "pipe2 failed"));
  const bool agent_role = role() == "host";
  if (const char* a = std::getenv("SCEPTRE_HOST_ADDR"); a && *a && !wait_for_address(a, config->spawn_timeout)) {
    std::fprintf(stderr, "sceptre %s: the address %s never came up here\n", agent_role ? "host" : "proc", a);
    std::_Exit(2);
  }
  {
    Proc proc(proc_options(*config));
    // A host agent's procs (destroyed before the proc: stopping them uses it).
    std::shared_ptr<host::LocalHost> procs_host;
    ActorId host_agent;
    if (agent_role) {
      auto notices = PortId::parse(env_or("SCEPTRE_HOST_EVENTS", ""));
      if (!notices) {
        std::fprintf(stderr, "sceptre host: bad SCEPTRE_HOST_EVENTS: %s\n", notices.error().to_string().c_str());
        std::_Exit(2);
      }
      const auto host_id = static_cast<std::uint32_t>(std::strtoul(env_or("SCEPTRE_HOST_ID", "0"), nullptr, 10));
      host::LocalHost::Options o{{config->log_fold, config->log_fold_window}, config->stderr_tail_lines, {}, host_id,
                                 env_or("SCEPTRE_HOST_NAME", ""), config->gpu_health_interval, config->proc_zygote,
                                 config->spawn_timeout};
      auto self = std::make_shared<std::weak_ptr<host::LocalHost>>();  // set once it is made
      o.on_exit = [self, host_id, to = PortRef<host::ExitNotice>(*notices)](pid_t pid, const host::ExitStatus& st) {
        auto h = self->lock();  // the pump may still tell of an exit while the LocalHost goes
        host::ExitNotice n{host_id, pid, st.code, st.signal, h ? h->stderr_tail(pid) : std::vector<std::string>{}};
        try {
          to.send(std::move(n));
        } catch (const std::exception& e) {
          log().warn("host agent: could not tell the controller that pid {} ended: {}", pid, e.what());
        }
      };
      procs_host = std::make_shared<host::LocalHost>(argv, o);
      *self = procs_host;
      procs_host->set_stop_grace(config->stop_timeout + std::chrono::seconds(2));
      host_agent = proc.spawn<host::HostAgent>("host", std::weak_ptr<host::LocalHost>(procs_host)).id();
    }
    // Destroyed before the proc: it reads the proc's handlers.
    std::unique_ptr<detail::ProcMonitor> monitor;
    if (const char* health = std::getenv("SCEPTRE_HEALTH"); health && *health) {
      monitor = std::make_unique<detail::ProcMonitor>(
          proc, *config, health, std::strtoull(env_or("SCEPTRE_MESH_ID", "0"), nullptr, 10), rank,
          [w = orphan_pipe[1]] { (void)!::write(w, "x", 1); });
    }
    // The proc calls its supervision handler outside its own lock, so clearing the handler does
    // not wait for a call in progress: the monitor is reached through a slot that does.
    struct Slot {
      std::mutex mu;
      detail::ProcMonitor* monitor = nullptr;
    };
    auto slot = std::make_shared<Slot>();
    slot->monitor = monitor.get();
    if (monitor) {
      proc.on_supervision([slot](const SupervisionEvent& e) {
        std::lock_guard lock(slot->mu);
        if (slot->monitor) slot->monitor->actor_failed(e);
      });
    }
    ActorId node = detail::cast_node(proc);
    ActorId agent = proc.spawn<detail::ProcAgent>("agent").id();
    PortRef<BootReport>(*boot).send(BootReport{rank, node, agent, ::getpid(), host_agent});
    for (;;) {
      pollfd fds[2] = {{lifeline, POLLIN, 0}, {orphan_pipe[0], POLLIN, 0}};
      int n = ::poll(fds, 2, -1);
      if (n < 0 && errno == EINTR) continue;
      if (n < 0 || fds[1].revents) break;  // the controller is out of reach
      if (fds[0].revents) {
        char c;
        ssize_t got = ::read(lifeline, &c, 1);
        if (got == 0 || (got < 0 && errno != EINTR && errno != EAGAIN)) break;  // the controller let go, or is gone
      }
    }
    proc.on_supervision({});  // failures while stopping are not reported
    {
      std::lock_guard lock(slot->mu);
      slot->monitor = nullptr;
    }
    monitor.reset();
    procs_host.reset();  // stops this host's procs: released, then killed after their grace
  }  // stops the actors, gracefully first
  ::close(orphan_pipe[0]);
  ::close(orphan_pipe[1]);
}

}  // namespace sceptre::detail
