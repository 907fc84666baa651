#include "host/host_network.h"

#include <fcntl.h>
#include <spawn.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <thread>

extern char** environ;

namespace sceptre::host {
namespace {

std::string join(const std::vector<std::string>& argv) {
  std::string s;
  for (const auto& a : argv) s += (s.empty() ? "" : " ") + a;
  return s;
}

std::string ns_of(const std::string& proc_dir) {
  char buf[64] = {};
  ssize_t n = ::readlink((proc_dir + "/ns/net").c_str(), buf, sizeof buf - 1);
  return n > 0 ? std::string(buf, static_cast<std::size_t>(n)) : std::string();
}

}  // namespace

Status run_command(const std::vector<std::string>& argv) {
  int out[2];
  if (::pipe2(out, O_CLOEXEC) != 0) return Error(Code::kInternal, std::string("pipe2: ") + std::strerror(errno));
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
  posix_spawn_file_actions_adddup2(&fa, out[1], 1);
  posix_spawn_file_actions_adddup2(&fa, out[1], 2);
  std::vector<std::string> args = argv;
  std::vector<char*> cargs;
  for (auto& a : args) cargs.push_back(a.data());
  cargs.push_back(nullptr);
  pid_t pid = 0;
  int rc = ::posix_spawnp(&pid, cargs[0], &fa, nullptr, cargs.data(), environ);
  posix_spawn_file_actions_destroy(&fa);
  ::close(out[1]);
  if (rc != 0) {
    ::close(out[0]);
    return Error(Code::kInternal, "could not run '" + join(argv) + "': " + std::strerror(rc));
  }
  std::string text;
  char buf[512];
  for (;;) {
    ssize_t n = ::read(out[0], buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    text.append(buf, static_cast<std::size_t>(n));
    if (text.size() > 4096) text.erase(0, text.size() - 4096);
  }
  ::close(out[0]);
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  if (WIFEXITED(status) && WEXITSTATUS(status) == 0) return {};
  while (!text.empty() && (text.back() == '\n' || text.back() == ' ')) text.pop_back();
  return Error(Code::kInternal, "'" + join(argv) + "' failed (" +
                                    (WIFEXITED(status) ? "exit code " + std::to_string(WEXITSTATUS(status))
                                                       : "signal " + std::to_string(WTERMSIG(status))) +
                                    ")" + (text.empty() ? "" : ": " + text));
}

Result<std::unique_ptr<HostNetwork>> HostNetwork::make() {
  if (::geteuid() != 0) {
    return Error(Code::kFailedPrecondition,
                 "hosts in network namespaces need root (CAP_NET_ADMIN): run as root, or use transport unix/tcp");
  }
  ::mkdir("/run/sceptre", 0755);
  const int first = static_cast<int>(::getpid() % 200);
  for (int i = 0; i < 200; ++i) {
    const int n = 1 + (first + i) % 200;
    const std::string path = "/run/sceptre/net-" + std::to_string(n) + ".lock";
    int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    if (fd < 0) return Error(Code::kInternal, "open " + path + ": " + std::strerror(errno));
    if (::flock(fd, LOCK_EX | LOCK_NB) != 0) {  // another job's
      ::close(fd);
      continue;
    }
    std::unique_ptr<HostNetwork> net(new HostNetwork(n, fd));
    const std::string br = net->bridge();
    (void)run_command({"ip", "link", "del", br});  // left by a job that was killed; usually absent
    // A link-layer address of its own: by default a bridge takes the lowest of its ports', so
    // adding a host's veth could change it under the hosts that resolved it already.
    char mac[32];
    std::snprintf(mac, sizeof mac, "02:53:43:00:00:%02x", n);
    for (const auto& cmd : std::vector<std::vector<std::string>>{
             {"ip", "link", "add", br, "address", mac, "type", "bridge"},
             {"ip", "addr", "add", net->controller_address() + "/24", "dev", br},
             {"ip", "link", "set", br, "up"}}) {
      if (Status s = run_command(cmd); !s.ok()) return Error(s.error()).with_context("making the hosts' bridge");
    }
    return net;
  }
  return Error(Code::kResourceExhausted, "every host network 10.213.1-200.0/24 is in use by another job");
}

HostNetwork::~HostNetwork() {
  (void)run_command({"ip", "link", "del", bridge()});
  ::close(lock_fd_);
}

std::string HostNetwork::controller_address() const { return "10.213." + std::to_string(n_) + ".1"; }
std::string HostNetwork::host_address(std::size_t k) const {
  return "10.213." + std::to_string(n_) + "." + std::to_string(k + 2);
}
std::string HostNetwork::link(std::size_t k) const { return "sc-" + std::to_string(n_) + "-" + std::to_string(k); }
std::string HostNetwork::bridge() const { return "sc-br-" + std::to_string(n_); }

Status HostNetwork::attach(pid_t pid, std::size_t k, std::chrono::milliseconds timeout) {
  if (k >= kMaxHosts) return Error(Code::kInvalidArgument, "at most 250 hosts in network namespaces");
  const std::string dir = "/proc/" + std::to_string(pid);
  const std::string ours = ns_of("/proc/self");
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  for (;;) {  // `unshare` makes the namespace after it has started
    const std::string theirs = ns_of(dir);
    if (theirs.empty()) return Error(Code::kUnavailable, "host " + std::to_string(k) + " (pid " + std::to_string(pid) + ") ended before its network was made");
    if (theirs != ours) break;
    if (std::chrono::steady_clock::now() >= deadline) {
      return Error(Code::kDeadlineExceeded, "host " + std::to_string(k) + " (pid " + std::to_string(pid) +
                                                ") did not get a network namespace of its own");
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  const std::string veth = link(k), p = std::to_string(pid);
  (void)run_command({"ip", "link", "del", veth});  // a host k before this one; usually absent
  // The address may have been an earlier host k's: what this side remembers of its link-layer
  // address must go, or packets to the new host go to the old one's until the entry times out.
  (void)run_command({"ip", "neigh", "flush", "to", host_address(k), "dev", bridge()});
  auto run = [&](const std::vector<std::string>& cmd) -> Status {
    if (Status s = run_command(cmd); !s.ok()) {
      return Error(s.error()).with_context("wiring host " + std::to_string(k) + " (pid " + p + ")");
    }
    return {};
  };
  for (const auto& cmd : std::vector<std::vector<std::string>>{
           {"ip", "link", "add", veth, "type", "veth", "peer", "name", "eth0", "netns", p},
           {"ip", "link", "set", veth, "master", bridge(), "up"},
           {"nsenter", "-t", p, "-n", "ip", "link", "set", "lo", "up"},
           {"nsenter", "-t", p, "-n", "ip", "link", "set", "eth0", "up"}}) {
    if (Status s = run(cmd); !s.ok()) return s;
  }
  // The address last: the agent starts once it can bind it, and what it sends first must not be
  // lost on a link that is not forwarding yet (a lost SYN costs TCP a second).
  for (;;) {
    std::ifstream oper("/sys/class/net/" + veth + "/operstate"), port("/sys/class/net/" + veth + "/brport/state");
    std::string up, state;
    oper >> up;
    port >> state;
    if (up == "up" && state == "3") break;  // BR_STATE_FORWARDING
    if (std::chrono::steady_clock::now() >= deadline) {
      return Error(Code::kDeadlineExceeded, "host " + std::to_string(k) + "'s link " + veth + " did not come up (" + up +
                                                ", bridge port state " + state + ")");
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  return run({"nsenter", "-t", p, "-n", "ip", "addr", "add", host_address(k) + "/24", "dev", "eth0"});
}

}  // namespace sceptre::host
