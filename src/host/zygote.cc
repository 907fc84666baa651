#include "host/zygote.h"

#include <dirent.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstdlib>
#include <cstdio>
#include <cstring>
#include <set>
#include <string_view>


namespace sceptre::host {
namespace {

// The protocol, on a stream socket: a request is a 4-byte length, sent with the proc's three
// descriptors (SCM_RIGHTS), then that many bytes: the working directory and the environment,
// each string ended by a NUL. A reply is a 4-byte int: the pid, or -errno. The zygote's first
// word is 0 when it is ready, or the number of threads it found running (forks would not be safe).
constexpr int kFds = 3;
constexpr std::uint32_t kMaxRequest = 64u << 20;
// What a proc starts with: no signal blocked, these at their default.
constexpr int kDefaultSignals[] = {SIGINT, SIGTERM, SIGHUP, SIGPIPE, SIGCHLD, SIGQUIT};

bool write_all(int fd, const void* data, std::size_t n) {
  auto* p = static_cast<const char*>(data);
  while (n > 0) {
    ssize_t w = ::send(fd, p, n, MSG_NOSIGNAL);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) return false;
    p += w;
    n -= static_cast<std::size_t>(w);
  }
  return true;
}

bool read_all(int fd, void* data, std::size_t n) {
  auto* p = static_cast<char*>(data);
  while (n > 0) {
    ssize_t r = ::recv(fd, p, n, 0);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) return false;
    p += r;
    n -= static_cast<std::size_t>(r);
  }
  return true;
}

// Waits until `fd` is readable, up to `timeout`.
bool readable(int fd, std::chrono::milliseconds timeout) {
  pollfd p{fd, POLLIN, 0};
  for (;;) {
    int n = ::poll(&p, 1, static_cast<int>(timeout.count()));
    if (n < 0 && errno == EINTR) continue;
    return n > 0;
  }
}

std::map<std::string, std::string> parse_env(const std::vector<std::string>& env) {
  std::map<std::string, std::string> m;
  for (const auto& kv : env) {
    auto eq = kv.find('=');
    m[kv.substr(0, eq)] = eq == std::string::npos ? "" : kv.substr(eq + 1);
  }
  return m;
}

// Read by sceptre or by a GPU runtime when it is first used, after the proc started.
bool read_at_run_time(std::string_view name) {
  static const std::set<std::string_view> kNames = {
      "RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT",
      "CUDA_VISIBLE_DEVICES", "ROCR_VISIBLE_DEVICES", "HIP_VISIBLE_DEVICES"};
  return name.rfind("SCEPTRE_", 0) == 0 || kNames.count(name) != 0;
}

// A request's header: its length, with room for its descriptors beside it.
struct Header {
  std::uint32_t length = 0;
  iovec iov{&length, sizeof length};
  alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int) * kFds)] = {};
  msghdr msg{};
  Header() {
    msg.msg_iov = &iov;
    msg.msg_iovlen = 1;
    msg.msg_control = control;
    msg.msg_controllen = sizeof control;
  }
  Header(const Header&) = delete;
  Header& operator=(const Header&) = delete;
};

int thread_count() {
  int n = 0;
  if (DIR* d = ::opendir("/proc/self/task")) {
    while (dirent* e = ::readdir(d)) n += e->d_name[0] != '.';
    ::closedir(d);
  }
  return n;
}

// In the grandchild: becomes the proc the request describes. Returns to the Runtime.
void become_proc(pid_t zygote, int sock, const std::vector<std::string>& strings, const int fds[kFds]) {
  ::close(sock);
  const int targets[kFds] = {1, 2, 3};
  for (int i = 0; i < kFds; ++i) ::dup2(fds[i], targets[i]);  // (the received ones are all above 3)
  for (int i = 0; i < kFds; ++i) ::close(fds[i]);
  int null = ::open("/dev/null", O_RDONLY);
  if (null >= 0 && null != 0) {
    ::dup2(null, 0);
    ::close(null);
  }
  ::setpgid(0, 0);  // as posix_spawn's procs: a Ctrl-C at the terminal reaches the controller only
  sigset_t none;
  sigemptyset(&none);
  ::sigprocmask(SIG_SETMASK, &none, nullptr);
  for (int s : kDefaultSignals) ::signal(s, SIG_DFL);
  if (!strings.empty() && ::chdir(strings[0].c_str()) != 0) {
    std::fprintf(stderr, "sceptre zygote: chdir %s: %s\n", strings[0].c_str(), std::strerror(errno));
    ::_exit(2);
  }
  const std::string from = "SCEPTRE_FORKED_FROM=" + std::to_string(zygote);
  ::clearenv();
  for (std::size_t i = 1; i < strings.size(); ++i) ::putenv(::strdup(strings[i].c_str()));  // the proc's own
  ::putenv(::strdup(from.c_str()));
}

}  // namespace

void init_proc_attributes(posix_spawnattr_t& attr) {
  posix_spawnattr_init(&attr);
  sigset_t none, defaults;
  sigemptyset(&none);
  sigemptyset(&defaults);
  for (int s : kDefaultSignals) sigaddset(&defaults, s);
  posix_spawnattr_setsigmask(&attr, &none);
  posix_spawnattr_setsigdefault(&attr, &defaults);
  posix_spawnattr_setpgroup(&attr, 0);
  posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF | POSIX_SPAWN_SETPGROUP);
}

Result<std::unique_ptr<Zygote>> Zygote::start(const std::vector<std::string>& argv,
                                              const std::vector<std::string>& env_in,
                                              std::chrono::milliseconds timeout) {
  // Its procs are re-parented to this process when their first parent exits.
  if (::prctl(PR_SET_CHILD_SUBREAPER, 1) != 0) {
    return Error(Code::kUnavailable, std::string("prctl(PR_SET_CHILD_SUBREAPER): ") + std::strerror(errno));
  }
  int sv[2];
  if (::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) != 0) {
    return Error(Code::kInternal, std::string("socketpair: ") + std::strerror(errno));
  }
  std::vector<std::string> env_strings;
  for (const auto& kv : env_in) {
    if (kv.rfind("SCEPTRE_ROLE=", 0) != 0 && kv.rfind("SCEPTRE_ZYGOTE=", 0) != 0) env_strings.push_back(kv);
  }
  auto env = parse_env(env_strings);
  env_strings.push_back("SCEPTRE_ROLE=zygote");
  env_strings.push_back("SCEPTRE_ZYGOTE=3");
  std::vector<char*> envp, args;
  for (auto& s : env_strings) envp.push_back(s.data());
  envp.push_back(nullptr);
  std::vector<std::string> argv_copy = argv;
  for (auto& s : argv_copy) args.push_back(s.data());
  args.push_back(nullptr);

  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
  posix_spawn_file_actions_addopen(&fa, 1, "/dev/null", O_WRONLY, 0);  // its stderr is this process's
  posix_spawn_file_actions_adddup2(&fa, sv[1], 3);
  posix_spawnattr_t attr;
  init_proc_attributes(attr);
  pid_t pid = 0;
  int rc = ::posix_spawn(&pid, "/proc/self/exe", &fa, &attr, args.data(), envp.data());
  posix_spawn_file_actions_destroy(&fa);
  posix_spawnattr_destroy(&attr);
  ::close(sv[1]);
  if (rc != 0) {
    ::close(sv[0]);
    return Error(Code::kInternal, std::string("posix_spawn of the zygote: ") + std::strerror(rc));
  }
  auto fail = [&](std::string why) -> Error {
    ::close(sv[0]);
    ::kill(pid, SIGKILL);
    while (::waitpid(pid, nullptr, 0) < 0 && errno == EINTR) {
    }
    return Error(Code::kUnavailable, "the zygote " + why);
  };
  std::int32_t word = -1;
  if (!readable(sv[0], timeout)) return fail("did not come up within " + std::to_string(timeout.count()) + " ms");
  if (!read_all(sv[0], &word, sizeof word)) return fail("ended before it was ready (its binary's main must make the Runtime first)");
  if (word != 0) return fail("found " + std::to_string(word) + " threads running in it: forks would not be safe");
  return std::unique_ptr<Zygote>(new Zygote(pid, sv[0], std::move(env)));
}

Zygote::~Zygote() {
  ::close(sock_);  // it reads EOF and exits
  for (int i = 0; i < 200; ++i) {
    pid_t got = ::waitpid(pid_, nullptr, WNOHANG);
    if (got == pid_ || (got < 0 && errno != EINTR)) return;
    ::usleep(5000);
  }
  ::kill(pid_, SIGKILL);
  while (::waitpid(pid_, nullptr, 0) < 0 && errno == EINTR) {
  }
}

bool Zygote::suits(const std::vector<std::string>& env) const {
  auto want = parse_env(env);
  for (const auto& [name, value] : want) {
    auto it = env_.find(name);
    if ((it == env_.end() || it->second != value) && !read_at_run_time(name)) return false;
  }
  for (const auto& [name, value] : env_) {
    if (!want.count(name) && !read_at_run_time(name)) return false;
  }
  return true;
}

Result<pid_t> Zygote::spawn(const std::string& cwd, const std::vector<std::string>& env, int out, int err,
                            int lifeline) {
  std::string body = cwd;
  body.push_back('\0');
  for (const auto& kv : env) {
    body += kv;
    body.push_back('\0');
  }
  if (body.size() > kMaxRequest) return Error(Code::kInvalidArgument, "the proc's environment is too large for the zygote");
  std::lock_guard lock(mu_);
  Header h;
  h.length = static_cast<std::uint32_t>(body.size());
  cmsghdr* c = CMSG_FIRSTHDR(&h.msg);
  c->cmsg_level = SOL_SOCKET;
  c->cmsg_type = SCM_RIGHTS;
  c->cmsg_len = CMSG_LEN(sizeof(int) * kFds);
  const int fds[kFds] = {out, err, lifeline};
  std::memcpy(CMSG_DATA(c), fds, sizeof fds);
  ssize_t sent;
  do {
    sent = ::sendmsg(sock_, &h.msg, MSG_NOSIGNAL);
  } while (sent < 0 && errno == EINTR);
  if (sent != static_cast<ssize_t>(sizeof h.length) || !write_all(sock_, body.data(), body.size())) {
    return Error(Code::kUnavailable, std::string("the zygote is gone: ") + std::strerror(errno));
  }
  std::int32_t reply = 0;
  if (!readable(sock_, std::chrono::seconds(30)) || !read_all(sock_, &reply, sizeof reply)) {
    return Error(Code::kUnavailable, "the zygote did not answer");
  }
  if (reply <= 0) return Error(Code::kInternal, std::string("the zygote's fork: ") + std::strerror(-reply));
  return static_cast<pid_t>(reply);
}

void serve_zygote_if_asked() {
  const char* role = std::getenv("SCEPTRE_ROLE");
  if (!role || std::string_view(role) != "zygote") return;
  const char* s = std::getenv("SCEPTRE_ZYGOTE");
  const int sock = s ? std::atoi(s) : -1;
  if (sock < 0) ::_exit(2);
  ::fcntl(sock, F_SETFD, FD_CLOEXEC);
  ::signal(SIGPIPE, SIG_IGN);
  const pid_t zygote = ::getpid();
  std::int32_t threads = thread_count();
  std::int32_t ready = threads == 1 ? 0 : threads;
  if (!write_all(sock, &ready, sizeof ready) || ready != 0) ::_exit(0);
  for (;;) {
    Header h;
    ssize_t got;
    do {
      got = ::recvmsg(sock, &h.msg, MSG_CMSG_CLOEXEC | MSG_WAITALL);
    } while (got < 0 && errno == EINTR);
    if (got != static_cast<ssize_t>(sizeof h.length)) ::_exit(0);  // the host is done with it, or gone
    const std::uint32_t length = h.length;
    int fds[kFds] = {-1, -1, -1};
    cmsghdr* c = CMSG_FIRSTHDR(&h.msg);
    const bool have_fds = c && c->cmsg_level == SOL_SOCKET && c->cmsg_type == SCM_RIGHTS &&
                          c->cmsg_len == CMSG_LEN(sizeof(int) * kFds);
    if (have_fds) std::memcpy(fds, CMSG_DATA(c), sizeof fds);
    if (length > kMaxRequest) ::_exit(2);
    std::string body(length, '\0');
    if (!read_all(sock, body.data(), body.size())) ::_exit(0);
    std::vector<std::string> strings;
    for (std::size_t at = 0; at < body.size();) {
      auto end = body.find('\0', at);
      if (end == std::string::npos) end = body.size();
      strings.emplace_back(body, at, end - at);
      at = end + 1;
    }
    std::int32_t reply = -EINVAL;
    int report[2] = {-1, -1};
    if (have_fds && ::pipe2(report, O_CLOEXEC) == 0) {
      pid_t first = ::fork();
      if (first == 0) {
        pid_t proc = ::fork();
        if (proc == 0) {
          ::close(report[0]);
          ::close(report[1]);
          become_proc(zygote, sock, strings, fds);
          return;  // the proc, back in the Runtime's constructor
        }
        std::int32_t v = proc > 0 ? proc : -errno;
        (void)!::write(report[1], &v, sizeof v);
        ::_exit(0);  // its child is re-parented to the host now
      }
      reply = -errno;
      ::close(report[1]);
      if (first > 0) {
        std::int32_t v = -ECHILD;
        while (::read(report[0], &v, sizeof v) < 0 && errno == EINTR) {
        }
        while (::waitpid(first, nullptr, 0) < 0 && errno == EINTR) {
        }
        reply = v;
      }
      ::close(report[0]);
    }
    for (int fd : fds) {
      if (fd >= 0) ::close(fd);
    }
    if (!write_all(sock, &reply, sizeof reply)) ::_exit(0);
  }
}

}  // namespace sceptre::host
