// Zygote: a process of the controller's own binary, started once in the "zygote" role, that
// forks procs on request instead of each one being executed afresh.
//
// Why: a binary linked with libtorch spends ~0.25 s of CPU in libtorch's static initialisers
// every time it starts (more with a CUDA libtorch), and a replacement for a failed replica pays
// it while the survivors train. The zygote pays it once; a proc forked from it starts in a few
// milliseconds with everything initialised before main already done.
//
// How: the zygote stops inside the Runtime's constructor, before anything there runs or any
// thread starts, and waits on a SOCK_SEQPACKET socket to its host. A request carries the proc's
// working directory and whole environment, and its stdout, stderr and lifeline as descriptors
// (SCM_RIGHTS). The zygote forks twice: the grandchild sets up fds 0-3, its process group,
// signals, directory and environment, then returns into the Runtime's constructor as the proc;
// the child between exits at once, so the grandchild is re-parented to the host process, which
// is a child subreaper (PR_SET_CHILD_SUBREAPER): the host reaps, signals and watches it like any
// child it started itself. The zygote dies with its socket (the host gone or done with it).
//
// What a fork cannot give: libraries read some variables once, when they are loaded (the
// dynamic loader's LD_*, OpenMP's OMP_*, malloc's tuning), and those were the zygote's: the
// environment its host had when it was made. So a proc is forked only when its environment
// differs from that in variables read later, at run time (suits()); any other goes through
// posix_spawn, as does one wrapped in a command. And the code of main() before the Runtime runs
// once, in the zygote, not in each proc forked from it.
#pragma once

#include <spawn.h>
#include <sys/types.h>

#include <chrono>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "sceptre/core/result.h"

namespace sceptre::host {

class Zygote {
 public:
  // Starts one: /proc/self/exe with `argv` (the command line the procs get), environment `env`
  // ("NAME=value") and SCEPTRE_ROLE=zygote; returns once it is ready to fork, or an error saying
  // why it cannot be (e.g. a thread was running in it already, so forks would not be safe).
  static Result<std::unique_ptr<Zygote>> start(const std::vector<std::string>& argv,
                                               const std::vector<std::string>& env,
                                               std::chrono::milliseconds timeout);
  ~Zygote();  // closes the socket (the zygote exits) and reaps it
  Zygote(const Zygote&) = delete;
  Zygote& operator=(const Zygote&) = delete;

  // Whether a proc with environment `env` ("NAME=value" strings) may be forked: `env` differs
  // from the zygote's own only in variables read at run time.
  bool suits(const std::vector<std::string>& env) const;
  // Forks a proc: environment `env`, working directory `cwd`, `out`, `err` and `lifeline` as its
  // fds 1, 2 and 3 (stdin is /dev/null). Returns its pid, a child of this process. The caller
  // keeps its descriptors (the proc has its own copies). An error means the zygote cannot serve
  // any more.
  Result<pid_t> spawn(const std::string& cwd, const std::vector<std::string>& env, int out, int err, int lifeline);

  pid_t pid() const { return pid_; }

 private:
  Zygote(pid_t pid, int sock, std::map<std::string, std::string> env) : pid_(pid), sock_(sock), env_(std::move(env)) {}
  const pid_t pid_;
  const int sock_;
  const std::map<std::string, std::string> env_;  // the zygote's, as it started
  std::mutex mu_;                                  // one request at a time
};

// Initialises `attr` with what every proc starts with, forked or executed: no signal blocked,
// SIGINT, SIGTERM, SIGHUP, SIGPIPE, SIGCHLD and SIGQUIT at their defaults, a process group of its
// own (a Ctrl-C at the terminal reaches the controller only). posix_spawnattr_destroy it after.
void init_proc_attributes(posix_spawnattr_t& attr);

// In a process started as a zygote (SCEPTRE_ROLE=zygote), serves forks: returns only in a proc
// forked from it, with its environment set up. In any other process, returns at once. The
// Runtime's constructors call it first.
void serve_zygote_if_asked();

}  // namespace sceptre::host
