// What every sceptre benchmark does the same way: pinned, forked client and server processes,
// percentiles of one series and medians over repetitions. Header-only, so that a benchmark is
// one executable with no library of its own.
#pragma once

#include <fcntl.h>
#include <sched.h>
#include <spawn.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

namespace bench {

using Clock = std::chrono::steady_clock;

// Untimed round trips before each latency series, for every implementation alike: the first
// messages of a size pay for first-touch allocations (page faults) in every implementation
// that does not preallocate, which is a start-up cost, not a steady-state one.
inline int warmup(int n) { return std::max(3, n / 10); }

// Called before any thread starts, so that every thread a library creates inherits the CPU.
inline void pin(int cpu) {
  cpu_set_t set;
  CPU_ZERO(&set);
  CPU_SET(cpu, &set);
  if (sched_setaffinity(0, sizeof(set), &set) != 0) std::perror("sched_setaffinity");
}

inline std::pair<double, double> percentiles(std::vector<double> v) {
  if (v.empty()) return {0, 0};
  std::sort(v.begin(), v.end());
  return {v[v.size() / 2], v[std::min(v.size() - 1, v.size() * 99 / 100)]};
}

inline double median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

inline double us_since(Clock::time_point t) {
  return std::chrono::duration<double, std::micro>(Clock::now() - t).count();
}

inline bool read_full(int fd, void* buf, std::size_t n) {
  auto* p = static_cast<char*>(buf);
  while (n) {
    ssize_t r = ::read(fd, p, n);
    if (r <= 0) return false;
    p += r;
    n -= static_cast<std::size_t>(r);
  }
  return true;
}

// send() rather than write(), so that a peer that went away is an error, not a SIGPIPE. Only
// for sockets.
inline bool write_full(int fd, const void* buf, std::size_t n) {
  const auto* p = static_cast<const char*>(buf);
  while (n) {
    ssize_t r = ::send(fd, p, n, MSG_NOSIGNAL);
    if (r <= 0) return false;
    p += r;
    n -= static_cast<std::size_t>(r);
  }
  return true;
}

// Runs `server` in a forked child pinned to `server_cpu`; the child reports its address on a
// pipe. Returns the child's pid and address. The caller must not have started threads yet:
// only the forking thread survives a fork.
inline std::pair<pid_t, std::string> fork_server(
    int server_cpu, const std::function<void(const std::function<void(std::string)>&)>& server) {
  int fds[2];
  if (::pipe(fds) != 0) std::abort();
  pid_t pid = ::fork();
  if (pid == 0) {
    ::close(fds[0]);
    pin(server_cpu);
    server([&](std::string addr) {
      addr += "\n";
      (void)!::write(fds[1], addr.data(), addr.size());
    });
    ::_exit(0);
  }
  ::close(fds[1]);
  std::string addr;
  char c;
  while (::read(fds[0], &c, 1) == 1 && c != '\n') addr += c;
  ::close(fds[0]);
  return {pid, addr};
}

inline void reap(pid_t pid) {
  ::kill(pid, SIGKILL);
  ::waitpid(pid, nullptr, 0);
}

// Runs one implementation's client in a fresh forked process, so that no state (heap
// fragmentation, threads, caches of a library) carries over from one implementation to the
// next. The result comes back through a pipe, hence trivially copyable. The child leaves with
// _exit: a library's exit-time teardown is not part of the measurement and must not hang it.
template <class Flat>
Flat in_child(const std::function<Flat()>& client, const char* program) {
  static_assert(std::is_trivially_copyable_v<Flat>);
  int fds[2];
  if (::pipe(fds) != 0) std::abort();
  std::fflush(nullptr);  // or the child would print the parent's buffered output again
  pid_t pid = ::fork();
  if (pid == 0) {
    ::close(fds[0]);
    Flat flat = client();
    (void)!::write(fds[1], &flat, sizeof(flat));
    std::fflush(nullptr);
    ::_exit(0);
  }
  ::close(fds[1]);
  Flat flat{};
  if (!read_full(fds[0], &flat, sizeof(flat))) {
    std::fprintf(stderr, "%s: a client process died\n", program);
    std::exit(1);
  }
  ::close(fds[0]);
  ::waitpid(pid, nullptr, 0);
  return flat;
}

// Runs `binary args` under Open MPI's `mpirun` with `np` ranks over TCP on loopback, on every CPU
// (mpirun would inherit a benchmark's pinning): (true, its output) or (false, why it failed).
inline std::pair<bool, std::string> run_mpi(const std::string& mpirun, const std::string& binary, int np,
                                            const std::string& args) {
  const long cpus = ::sysconf(_SC_NPROCESSORS_ONLN);
  std::string cmd = "taskset -c 0-" + std::to_string(cpus > 0 ? cpus - 1 : 0) + " " + mpirun +
                    " --allow-run-as-root --oversubscribe --bind-to none -np " + std::to_string(np) +
                    " --mca btl tcp,self --mca btl_tcp_if_include lo --mca pml ob1 " + binary + " " + args + " 2>&1";
  FILE* p = ::popen(cmd.c_str(), "r");
  if (!p) return {false, "popen failed"};
  std::string out;
  char buf[512];
  while (std::fgets(buf, sizeof buf, p)) out += buf;
  int rc = ::pclose(p);
  if (rc != 0) return {false, "failed (" + std::to_string(rc) + "): " + out};
  return {true, out};
}

// The lines of `text` that start with `prefix`.
inline std::vector<std::string> lines_starting(const std::string& text, const std::string& prefix) {
  std::vector<std::string> lines;
  for (std::size_t at = 0; at < text.size();) {
    auto end = text.find('\n', at);
    if (end == std::string::npos) end = text.size();
    if (text.compare(at, prefix.size(), prefix) == 0) lines.push_back(text.substr(at, end - at));
    at = end + 1;
  }
  return lines;
}

// Starts `args` (args[0] an absolute path) in a process group of its own, stdout to a pipe, stderr
// to /dev/null: its pid (the group's id, for kill(-pid)) and the pipe's read end, or (-1, nullptr).
inline std::pair<pid_t, FILE*> spawn_group(std::vector<std::string> args) {
  int fds[2];
  if (::pipe(fds) != 0) return {-1, nullptr};
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_adddup2(&fa, fds[1], 1);
  posix_spawn_file_actions_addclose(&fa, fds[0]);
  posix_spawn_file_actions_addopen(&fa, 2, "/dev/null", O_WRONLY, 0);
  posix_spawnattr_t attr;
  posix_spawnattr_init(&attr);
  posix_spawnattr_setpgroup(&attr, 0);
  posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETPGROUP);
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  pid_t pid = 0;
  int rc = ::posix_spawn(&pid, argv[0], &fa, &attr, argv.data(), environ);
  posix_spawn_file_actions_destroy(&fa);
  posix_spawnattr_destroy(&attr);
  ::close(fds[1]);
  if (rc != 0) {
    ::close(fds[0]);
    return {-1, nullptr};
  }
  return {pid, ::fdopen(fds[0], "r")};
}

}  // namespace bench
