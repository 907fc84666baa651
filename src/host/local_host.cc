#include "host/local_host.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstring>
#include <mutex>
#include <set>
#include <utility>

#include "core/log.h"
#include "host/gpu_binding.h"
#include "host/gpu_watch.h"
#include "host/zygote.h"

extern char** environ;

namespace sceptre::host {
namespace {

constexpr std::size_t kMaxLine = 64 * 1024;  // a longer line is cut into pieces of this size

Error errno_error(const std::string& what) {
  return Error(Code::kInternal, what + ": " + std::strerror(errno));
}

// A pipe whose ends are above 3 (so dup2 onto 0-3 in the child never meets one of them) and
// close on exec (so no other child inherits them).
Result<std::pair<int, int>> make_pipe() {
  int fds[2];
  if (::pipe2(fds, O_CLOEXEC) != 0) return errno_error("pipe2");
  for (int& fd : fds) {
    int high = ::fcntl(fd, F_DUPFD_CLOEXEC, 10);
    ::close(fd);
    fd = high;
  }
  if (fds[0] < 0 || fds[1] < 0) return errno_error("fcntl(F_DUPFD_CLOEXEC)");
  return std::pair{fds[0], fds[1]};
}

void write_all(int fd, std::string_view text) {
  while (!text.empty()) {
    ssize_t n = ::write(fd, text.data(), text.size());
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return;
    text.remove_prefix(static_cast<std::size_t>(n));
  }
}

// A descriptor that becomes readable when `pid` ends; -1 where the kernel has none.
int open_pidfd(pid_t pid) {
#ifdef SYS_pidfd_open
  int fd = static_cast<int>(::syscall(SYS_pidfd_open, pid, 0));
  if (fd < 0) return -1;
  int high = ::fcntl(fd, F_DUPFD_CLOEXEC, 10);
  ::close(fd);
  return high;
#else
  (void)pid;
  return -1;
#endif
}

ExitStatus decode_status(int status) {
  ExitStatus s;
  if (WIFEXITED(status)) s.code = WEXITSTATUS(status);
  if (WIFSIGNALED(status)) s.signal = WTERMSIG(status);
  return s;
}

}  // namespace

std::string ExitStatus::to_string() const {
  if (signal) return "killed by signal " + std::to_string(signal) + " (" + ::strsignal(signal) + ")";
  return "exit code " + std::to_string(code);
}

std::string LocalHost::name() const {
  if (!options_.name.empty()) return options_.name;
  char buf[256] = {};
  if (::gethostname(buf, sizeof buf - 1) != 0) return "localhost";
  return buf;
}

LocalHost::LocalHost(std::vector<std::string> argv, Options options)
    : argv_(std::move(argv)),
      options_(options),
      folder_(options.fold, [this](LogFolder::Stream stream, const std::string& line) {
        printed_.emplace_back(stream == LogFolder::Stream::kStderr ? 2 : 1, line + "\n");
      }) {
  auto p = make_pipe();
  if (!p) throw std::runtime_error(p.error().to_string());
  wake_[0] = p->first;
  wake_[1] = p->second;
  ::fcntl(wake_[0], F_SETFL, O_NONBLOCK);
  ::fcntl(wake_[1], F_SETFL, O_NONBLOCK);
  for (char** e = environ; e && *e; ++e) zygote_env_.emplace_back(*e);
  pump_ = std::thread([this] { pump(); });
}

LocalHost::~LocalHost() {
  watch_.reset();  // its thread reads children_
  std::vector<pid_t> all;
  {
    std::lock_guard lock(mu_);
    for (auto& [pid, c] : children_) all.push_back(pid);
  }
  stop(all, grace_);
  {
    std::lock_guard lock(zygote_mu_);
    zygote_.reset();
  }
  {
    std::lock_guard lock(mu_);
    stopping_ = true;
  }
  wake();
  pump_.join();
  folder_.flush_all();
  write_printed();
  ::close(wake_[0]);
  ::close(wake_[1]);
}

Result<GpuBinding> LocalHost::bind_gpu(int index) {
  if (index < 0) return GpuBinding{};
  const gpu::Inventory inv = gpu::inventory();
  if (inv.origin.vendor == gpu::Vendor::kNone) {
    // A vendor asked for by name and not there is an error; found nowhere, only a note.
    if (const Status& s = gpu::load_status(); !s.ok()) {
      return Error(Code::kFailedPrecondition, "host " + name() + " cannot bind a proc to a GPU: SCEPTRE_GPU names a "
                                              "runtime that is not viable here: " + s.error().message());
    }
    static std::once_flag said;
    std::call_once(said, [&] {
      log().debug("host {}: no GPU runtime ({}): 'gpus' names only a dimension of the procs here", name(), inv.note);
    });
  }
  return gpu_binding(inv, index, name());
}

Result<pid_t> LocalHost::spawn(const ProcSpec& spec) {
  auto binding = bind_gpu(spec.gpu);
  if (!binding) return std::move(binding).error();
  auto lifeline = make_pipe();
  if (!lifeline) return std::move(lifeline).error();
  auto out = make_pipe();
  auto err = make_pipe();
  auto close_all = [&] {
    for (auto* p : {&*lifeline, out ? &*out : nullptr, err ? &*err : nullptr}) {
      if (p) ::close(p->first), ::close(p->second);
    }
  };
  if (!out || !err) {
    Error e = !out ? out.error() : err.error();
    close_all();
    return e;
  }

  // The environment: the controller's, with the GPU binding's variables, then the spec's,
  // replacing any of the same name (the binding's win over the spec's).
  std::vector<std::string> added;
  std::set<std::string> names;
  for (const std::vector<std::string>* list : {&std::as_const(binding->env), &spec.env}) {  // the binding first: it wins
    for (const auto& kv : *list) {
      if (names.insert(kv.substr(0, kv.find('='))).second) added.push_back(kv);
    }
  }
  std::vector<std::string> env_strings;
  for (char** e = environ; e && *e; ++e) {
    std::string_view kv(*e);
    if (!names.count(std::string(kv.substr(0, kv.find('='))))) env_strings.emplace_back(kv);
  }
  env_strings.insert(env_strings.end(), added.begin(), added.end());
  std::vector<char*> envp, argv;
  for (auto& s : env_strings) envp.push_back(s.data());
  envp.push_back(nullptr);
  // /proc/self/exe, not the path it names: that still works after the binary was rebuilt. A
  // wrapper gets this process's exe by pid (its own /proc/self is the wrapper's).
  static const std::string self_exe = "/proc/self/exe";
  std::vector<std::string> args;
  std::string exe = self_exe;
  if (!spec.wrap.empty()) {
    args = spec.wrap;
    args.push_back("/proc/" + std::to_string(::getpid()) + "/exe");
    args.insert(args.end(), argv_.begin() + (argv_.empty() ? 0 : 1), argv_.end());
    exe = spec.wrap.front();
  } else {
    args = argv_;
  }
  for (auto& s : args) argv.push_back(s.data());
  argv.push_back(nullptr);

  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
  posix_spawn_file_actions_adddup2(&fa, out->second, 1);
  posix_spawn_file_actions_adddup2(&fa, err->second, 2);
  posix_spawn_file_actions_adddup2(&fa, lifeline->first, 3);
  posix_spawnattr_t attr;
  init_proc_attributes(attr);

  pid_t pid = 0;
  int rc = -1;
  if (auto z = spec.wrap.empty() ? zygote() : nullptr; z && z->suits(env_strings)) {
    char cwd[PATH_MAX];
    auto forked = ::getcwd(cwd, sizeof cwd) ? z->spawn(cwd, env_strings, out->second, err->second, lifeline->first)
                                            : Result<pid_t>(errno_error("getcwd"));
    if (forked) {
      pid = *forked;
      rc = 0;
    } else {
      log().warn("host {}: its zygote failed ({}); procs are started afresh from now on", name(),
                 forked.error().to_string());
      std::lock_guard lock(zygote_mu_);
      if (zygote_ == z) zygote_.reset();
    }
  }
  if (rc != 0) {
    rc = spec.wrap.empty() ? ::posix_spawn(&pid, exe.c_str(), &fa, &attr, argv.data(), envp.data())
                           : ::posix_spawnp(&pid, exe.c_str(), &fa, &attr, argv.data(), envp.data());
  }
  posix_spawn_file_actions_destroy(&fa);
  posix_spawnattr_destroy(&attr);
  // The child's ends are the child's now.
  ::close(out->second);
  ::close(err->second);
  ::close(lifeline->first);
  if (rc != 0) {
    ::close(out->first);
    ::close(err->first);
    ::close(lifeline->second);
    return Error(Code::kInternal, "posix_spawn " + exe + ": " + std::strerror(rc));
  }
  ::fcntl(out->first, F_SETFL, O_NONBLOCK);
  ::fcntl(err->first, F_SETFL, O_NONBLOCK);
  {
    std::lock_guard lock(mu_);
    Child& c = children_[pid];
    c.pid = pid;
    c.mesh = spec.mesh;
    c.rank = spec.rank;
    c.lifeline = lifeline->second;
    c.out = out->first;
    c.err = err->first;
    c.pidfd = open_pidfd(pid);
    c.gpu = binding->pci_bus_id;
  }
  if (!binding->pci_bus_id.empty()) watch_gpus();
  wake();
  return pid;
}

std::shared_ptr<Zygote> LocalHost::zygote() {
  std::lock_guard lock(zygote_mu_);
  if (!options_.zygote || zygote_tried_) return zygote_;
  zygote_tried_ = true;
  auto z = Zygote::start(argv_, zygote_env_, options_.zygote_timeout);
  if (!z) {
    log().warn("host {}: procs are started afresh, without a zygote: {}", name(), z.error().to_string());
    return nullptr;
  }
  log().debug("host {}: forking procs from zygote pid {}", name(), (*z)->pid());
  zygote_ = std::move(*z);
  return zygote_;
}

void LocalHost::watch_gpus() {
  std::call_once(watch_once_, [this] {
    if (options_.gpu_health_interval.count() <= 0) return;
    auto monitor = gpu::load_health(gpu::runtime().vendor());
    if (!monitor) {
      log().warn("host {}: the health of its GPUs is not watched: {}", name(), monitor.error().message());
      return;
    }
    log().debug("host {}: watching its GPUs with {}", name(), (*monitor)->library());
    auto in_use = [this] {
      std::lock_guard lock(mu_);
      std::vector<std::string> buses;
      for (const auto& [pid, c] : children_) {
        if (!c.gpu.empty() && !c.exit && !c.gpu_failed) buses.push_back(c.gpu);
      }
      std::sort(buses.begin(), buses.end());
      buses.erase(std::unique(buses.begin(), buses.end()), buses.end());
      return buses;
    };
    watch_ = std::make_unique<GpuWatch>(std::move(*monitor), options_.gpu_health_interval, std::move(in_use),
                                        [this](const gpu::Fault& f) { gpu_failed(f); });
  });
}

void LocalHost::gpu_failed(const gpu::Fault& fault) {
  const std::string why = "sceptre on " + name() + ": its GPU " + fault.pci_bus_id + " failed: " + fault.what;
  std::vector<std::string> killed;
  {
    std::lock_guard lock(mu_);
    for (auto& [pid, c] : children_) {
      if (c.gpu != fault.pci_bus_id || c.exit || c.gpu_failed) continue;
      c.gpu_failed = true;
      // The last line of its stderr, so that its failure says why it was killed.
      c.tail.push_back(why + "; the proc was killed");
      while (c.tail.size() > std::max<std::size_t>(options_.stderr_tail_lines, 1)) c.tail.pop_front();
      ::kill(pid, SIGKILL);
      killed.push_back("pid " + std::to_string(pid) + " (" + c.mesh + " rank " + std::to_string(c.rank) + ")");
    }
  }
  for (const auto& k : killed) log().error("{}; killed {}", why, k);
}

void LocalHost::release(pid_t pid) {
  std::lock_guard lock(mu_);
  auto it = children_.find(pid);
  if (it != children_.end() && it->second.lifeline >= 0) {
    ::close(it->second.lifeline);
    it->second.lifeline = -1;
  }
}

void LocalHost::kill(pid_t pid, int signal) {
  std::lock_guard lock(mu_);
  auto it = children_.find(pid);
  if (it != children_.end() && !it->second.exit) ::kill(pid, signal);  // not yet reaped: still ours
}

std::optional<ExitStatus> LocalHost::status(pid_t pid) const {
  std::lock_guard lock(mu_);
  auto it = children_.find(pid);
  return it == children_.end() ? std::nullopt : it->second.exit;
}

std::optional<ExitStatus> LocalHost::wait_exit(pid_t pid, std::chrono::milliseconds timeout) {
  std::unique_lock lock(mu_);
  auto it = children_.find(pid);
  if (it == children_.end()) return std::nullopt;
  exited_.wait_for(lock, timeout, [&] { return it->second.exit.has_value(); });
  return it->second.exit;
}

std::vector<std::string> LocalHost::stderr_tail(pid_t pid) const {
  std::lock_guard lock(mu_);
  auto it = children_.find(pid);
  if (it == children_.end()) return {};
  return {it->second.tail.begin(), it->second.tail.end()};
}

void LocalHost::stop(const std::vector<pid_t>& pids, std::chrono::milliseconds grace) {
  for (pid_t pid : pids) release(pid);
  auto deadline = std::chrono::steady_clock::now() + grace;
  for (pid_t pid : pids) {
    std::string mesh;
    std::uint64_t rank = 0;
    {
      std::lock_guard lock(mu_);
      auto it = children_.find(pid);
      if (pid <= 0 || it == children_.end()) continue;  // never started, or not ours: nothing to stop
      mesh = it->second.mesh;
      rank = it->second.rank;
    }
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
    if (wait_exit(pid, std::max(left, std::chrono::milliseconds(0)))) continue;
    log().warn("proc {} rank {} (pid {}) did not stop within {} ms; killing it", mesh, rank, pid, grace.count());
    kill(pid, SIGKILL);
    // SIGKILL cannot be refused; this only waits for the pump to reap it.
    while (!wait_exit(pid, std::chrono::milliseconds(1000))) {
    }
  }
}

void LocalHost::wake() {
  char c = 1;
  (void)!::write(wake_[1], &c, 1);
}

bool LocalHost::drain(Child& c, bool is_err) {
  int& fd = is_err ? c.err : c.out;
  std::string& partial = is_err ? c.err_partial : c.out_partial;
  char buf[16384];
  for (;;) {
    ssize_t n = ::read(fd, buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return true;
    if (n <= 0) {  // EOF (or an error, which ends the stream the same way)
      if (!partial.empty()) line(c, is_err, partial);
      partial.clear();
      ::close(fd);
      fd = -1;
      return false;
    }
    partial.append(buf, static_cast<std::size_t>(n));
    std::size_t start = 0;
    for (;;) {
      std::size_t nl = partial.find('\n', start);
      if (nl == std::string::npos) break;
      line(c, is_err, std::string_view(partial).substr(start, nl - start));
      start = nl + 1;
    }
    partial.erase(0, start);
    while (partial.size() >= kMaxLine) {
      line(c, is_err, std::string_view(partial).substr(0, kMaxLine));
      partial.erase(0, kMaxLine);
    }
  }
}

void LocalHost::line(Child& c, bool is_err, std::string_view text) {
  if (!text.empty() && text.back() == '\r') text.remove_suffix(1);
  if (is_err && options_.stderr_tail_lines > 0) {
    c.tail.emplace_back(text);
    while (c.tail.size() > options_.stderr_tail_lines) c.tail.pop_front();
  }
  folder_.add(is_err ? LogFolder::Stream::kStderr : LogFolder::Stream::kStdout, c.mesh, c.rank, text,
              LogFolder::Clock::now());
}

void LocalHost::pump() {
  std::vector<pollfd> fds;
  std::vector<std::pair<pid_t, bool>> owners;  // fds[i + 1] is (pid, is_err), or a pidfd's (pid, false)
  std::vector<std::pair<pid_t, ExitStatus>> ended;
  for (;;) {
    fds.clear();
    owners.clear();
    fds.push_back(pollfd{wake_[0], POLLIN, 0});
    bool unreaped = false;  // one whose end only polling can see
    {
      std::lock_guard lock(mu_);
      for (auto& [pid, c] : children_) {
        if (c.out >= 0) fds.push_back(pollfd{c.out, POLLIN, 0}), owners.emplace_back(pid, false);
        if (c.err >= 0) fds.push_back(pollfd{c.err, POLLIN, 0}), owners.emplace_back(pid, true);
        if (c.pidfd >= 0) fds.push_back(pollfd{c.pidfd, POLLIN, 0}), owners.emplace_back(pid, false);
        unreaped |= !c.exit && c.pidfd < 0;
      }
      if (stopping_ && !unreaped && owners.empty()) return;
    }
    // Reaping is polled (a proc's pipes may outlive it in a grandchild, and SIGCHLD belongs to
    // the application); a due fold sets the pace otherwise.
    int timeout = unreaped ? 100 : -1;
    if (auto due = folder_.next_deadline()) {
      auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(*due - LogFolder::Clock::now()).count();
      int wait = static_cast<int>(std::clamp<long long>(ms + 1, 0, 1000));
      timeout = timeout < 0 ? wait : std::min(timeout, wait);
    }
    ::poll(fds.data(), fds.size(), timeout);
    char sink[256];
    while (::read(wake_[0], sink, sizeof sink) > 0) {
    }
    bool any = false;
    {
      std::lock_guard lock(mu_);
      for (std::size_t i = 1; i < fds.size(); ++i) {
        if (!fds[i].revents) continue;
        auto [pid, is_err] = owners[i - 1];
        Child& c = children_[pid];
        if (fds[i].fd == c.pidfd) continue;  // reaped below
        drain(c, is_err);
      }
      for (auto& [pid, c] : children_) {
        if (c.exit) continue;
        int status = 0;
        const pid_t got = ::waitpid(pid, &status, WNOHANG);
        const bool lost = got < 0 && errno == ECHILD;
        if (lost) {
          // Reaped by someone else (the application ignores SIGCHLD, or waits for any child):
          // it has ended, how is lost.
          log().warn("proc {} rank {} (pid {}) was reaped by someone else; its exit status is unknown", c.mesh, c.rank, pid);
          status = W_EXITCODE(255, 0);
        }
        if (got == pid || lost) {
          // What it wrote before it died comes before anyone hears that it did.
          if (c.out >= 0) drain(c, false);
          if (c.err >= 0) drain(c, true);
          c.exit = decode_status(status);
          if (c.lifeline >= 0) ::close(c.lifeline), c.lifeline = -1;
          if (c.pidfd >= 0) ::close(c.pidfd), c.pidfd = -1;
          ended.emplace_back(pid, *c.exit);
          any = true;
        }
      }
      folder_.flush_due(LogFolder::Clock::now());
    }
    // Printed outside the lock: a stalled terminal must not stall spawn() or status().
    write_printed();
    if (any) exited_.notify_all();
    if (options_.on_exit) {
      for (const auto& [pid, status] : ended) options_.on_exit(pid, status);
    }
    ended.clear();
  }
}

void LocalHost::write_printed() {
  for (auto& [fd, text] : printed_) write_all(fd, text);
  printed_.clear();
}

}  // namespace sceptre::host
