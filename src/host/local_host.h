// LocalHost: the host agent of the controller's own machine, inside the controller process (the
// embedded default: no daemon to start). It starts procs — the controller's own binary again,
// in the proc role — reads their stdout and stderr line by line into a LogFolder that prints
// them on the controller's terminal, reaps them, and keeps each one's lifeline.
//
// The lifeline: every proc gets the read end of a pipe as fd 3 (SCEPTRE_LIFELINE=3); only this
// process holds the write end (O_CLOEXEC, so no other child inherits it). A proc stops itself
// when it reads EOF there: when release() closes it, and when the controller dies in any way
// (exit, exception, Ctrl-C, SIGKILL), because the kernel closes it then. Procs run in their own
// process group, so a Ctrl-C at the terminal reaches the controller only, which dies or cleans
// up, and the procs follow through their lifelines.
//
// Threads: spawn(), release(), kill(), wait_exit(), status() from any thread; one pump thread
// owned by the LocalHost reads the pipes, runs the folder and reaps. A proc's end wakes the pump
// at once through a pidfd (Linux >= 5.3); without one, reaping is polled every 100 ms.
//
// Procs of the binary itself are forked from a zygote where their environment allows
// (zygote.h): this process is then a child subreaper, so they are its children all the same.
// (Orphans of its procs' own children come to it too; the pump reaps only its procs.)
#pragma once

#include <sys/types.h>

#include <chrono>
#include <condition_variable>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "host/gpu_binding.h"
#include "host/host.h"
#include "host/log_folder.h"
#include "sceptre/core/result.h"
#include "sceptre/gpu/health.h"

namespace sceptre::host {

class GpuWatch;
class Zygote;

class LocalHost : public Host {
 public:
  struct Options {
    LogFolder::Options fold;
    std::size_t stderr_tail_lines = 20;
    // Told of every proc that ended, once it is reaped (what it wrote is read by then), on the
    // pump thread and without the LocalHost's lock held (it may call status() or stderr_tail()).
    std::function<void(pid_t, const ExitStatus&)> on_exit;
    std::uint32_t id = 0;          // Host::id
    std::string name;              // Host::name; empty: the machine's host name
    // How often the health of the GPUs its procs are bound to is polled (0: never); a proc
    // whose GPU fails is killed, with the fault as the last line of its stderr tail.
    std::chrono::milliseconds gpu_health_interval{1000};
    // Fork procs from a zygote (zygote.h) when their environment allows, instead of executing
    // the binary afresh for each; false: always posix_spawn.
    bool zygote = true;
    std::chrono::milliseconds zygote_timeout{30000};  // for the zygote to come up
  };
  // `argv`: the command line the procs get (the controller's own).
  LocalHost(std::vector<std::string> argv, Options options);
  // Releases every proc still running, gives them `grace` to exit, kills the rest, reaps them,
  // prints what they wrote.
  ~LocalHost() override;
  LocalHost(const LocalHost&) = delete;
  LocalHost& operator=(const LocalHost&) = delete;

  std::uint32_t id() const override { return options_.id; }
  std::string name() const override;
  // Starts a proc; returns its pid. Error (kInternal) with errno's text when it cannot.
  Result<pid_t> spawn(const ProcSpec& spec) override;
  // Closes the proc's lifeline: it stops itself.
  void release(pid_t pid);
  void kill(pid_t pid, int signal) override;
  // How the proc ended; nullopt while it runs (or when it is not one of ours).
  std::optional<ExitStatus> status(pid_t pid) const override;
  // Waits until the proc has ended and been reaped, up to `timeout`.
  std::optional<ExitStatus> wait_exit(pid_t pid, std::chrono::milliseconds timeout);
  // The last lines it wrote to stderr (up to Options::stderr_tail_lines).
  std::vector<std::string> stderr_tail(pid_t pid) const override;
  // Releases, then kills after `grace`, every proc in `pids`; returns once all are reaped.
  void stop(const std::vector<pid_t>& pids, std::chrono::milliseconds grace) override;

  void set_stop_grace(std::chrono::milliseconds grace) { grace_ = grace; }

 private:
  // What binds a proc to this host's GPU `index` (nothing for -1); see gpu_binding.h.
  Result<GpuBinding> bind_gpu(int index);
  // Starts the GpuWatch, once, at the first proc bound to a GPU.
  void watch_gpus();
  // The zygote, started at the first call; null if it cannot be (said once) or has failed.
  std::shared_ptr<Zygote> zygote();
  // The GpuWatch's word: kills the procs on that GPU. Its thread.
  void gpu_failed(const gpu::Fault& fault);
  struct Child {
    pid_t pid = 0;
    std::string mesh;
    std::uint64_t rank = 0;
    int lifeline = -1;                 // write end; -1 once released
    int pidfd = -1;                    // readable once it ends (-1: reaping is polled)
    int out = -1, err = -1;            // read ends; -1 at EOF
    std::string out_partial, err_partial;
    std::deque<std::string> tail;      // of stderr
    std::optional<ExitStatus> exit;
    std::string gpu;                   // PCI bus id of its GPU; "" when not bound to one
    bool gpu_failed = false;           // killed for it
  };
  void pump();
  void wake();
  // Reads what one pipe has; false at EOF. Pump thread, mu_ held.
  bool drain(Child& c, bool is_err);
  void line(Child& c, bool is_err, std::string_view text);  // mu_ held

  const std::vector<std::string> argv_;
  const Options options_;
  std::chrono::milliseconds grace_{5000};
  LogFolder folder_;  // pump thread only (and the destructor, after it joined)
  // What the folder emitted, to be written once mu_ is released. Pump thread only (as folder_).
  std::vector<std::pair<int, std::string>> printed_;
  void write_printed();

  mutable std::mutex mu_;
  std::condition_variable exited_;
  std::map<pid_t, Child> children_;
  bool stopping_ = false;
  int wake_[2] = {-1, -1};
  std::thread pump_;
  std::once_flag watch_once_;
  std::vector<std::string> zygote_env_;  // this process's environment when the LocalHost was made
  std::mutex zygote_mu_;
  bool zygote_tried_ = false;
  std::shared_ptr<Zygote> zygote_;
  std::unique_ptr<GpuWatch> watch_;  // once a proc is bound to a GPU and a monitor is there
};

}  // namespace sceptre::host
