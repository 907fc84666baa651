// The supervision machinery behind sceptre/mesh/supervision.h.
//
//   MeshHealth  per spawn_procs: which ranks failed, the casts in flight that wait on them, the
//               spawn's handler and the last heartbeat of every rank. Shared by the ProcMesh and
//               by every ActorMesh spawned on it (through MeshMembers::health).
//   Supervisor  the controller's: serves the health channel every proc reports to (heartbeats,
//               failed actors, stuck handlers), hears from the host agent which procs ended,
//               checks heartbeats, marks ranks failed and runs the handlers on a thread of its own.
//   ProcMonitor a proc's: sends heartbeats on its own channel (own I/O thread: a handler stuck on
//               the proc's I/O thread does not silence it), runs the watchdog over the proc's
//               handlers and reports its actors' failures.
#pragma once

#include <sys/types.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "sceptre/actor/errors.h"
#include "sceptre/actor/proc.h"
#include "sceptre/channel/context.h"
#include "sceptre/channel/rx.h"
#include "sceptre/channel/tx.h"
#include "sceptre/core/config.h"
#include "sceptre/mesh/supervision.h"
#include "sceptre/wire/codec.h"

namespace sceptre::host {
class Host;
class RemoteHost;
struct ExitStatus;
}  // namespace sceptre::host

namespace sceptre::detail {

using SteadyClock = std::chrono::steady_clock;

class MeshHealth {
 public:
  // `hosts`: where each rank runs. `serves`, for a mesh of host agents (launch_hosts): the host
  // each rank's agent serves; when such a rank fails, every proc on its host fails with it.
  MeshHealth(std::uint64_t id, std::string name, Extent extent, std::vector<pid_t> pids, std::vector<ProcId> procs,
             std::vector<std::weak_ptr<host::Host>> hosts, std::vector<std::weak_ptr<host::RemoteHost>> serves = {});

  const std::uint64_t id;
  const std::string name;
  const Extent extent;
  const std::vector<std::weak_ptr<host::Host>> hosts;
  const std::vector<std::weak_ptr<host::RemoteHost>> serves;
  std::shared_ptr<host::Host> host(std::size_t rank) const { return rank < hosts.size() ? hosts[rank].lock() : nullptr; }

  std::size_t size() const { return size_; }
  // Each rank's proc and its pid: they change when the rank is respawned.
  pid_t pid(std::size_t rank) const;
  ProcId proc(std::size_t rank) const;
  // A failed rank's new proc: it is healthy again, and heard from now.
  void rejoin(std::size_t rank, pid_t pid, ProcId proc);

  // Set once the mesh is being stopped: from then on nothing that happens to it is a failure.
  std::atomic<bool> stopping{false};

  bool any_failed() const { return any_failed_.load(std::memory_order_acquire); }
  std::optional<MeshFailure> failure(std::size_t rank) const;
  std::vector<std::size_t> failed_ranks() const;

  // A cast in flight that waits on the procs `procs` (ranks of this mesh): `fail` is called, once,
  // if one of them fails before `done()` is true. When one has failed already, nothing is
  // registered and its failure is returned.
  std::optional<Failure> watch(std::vector<std::uint32_t> procs, std::function<bool()> done,
                               std::function<void(const Failure&)> fail);

  // Marks the failure's rank failed and fails the casts waiting on it; false (and nothing
  // changes) when the rank failed before, the failure is of a proc the rank no longer runs
  // (failure.pid is not its pid), or the mesh is stopping.
  bool mark_failed(const MeshFailure& failure);
  // The proc `pid` of `rank` is gone (exited, killed, lost): true the first time only, and only
  // while `pid` is the rank's proc. A rank can fail first (a stuck handler) and be gone later.
  bool mark_gone(std::size_t rank, pid_t pid);
  bool gone(std::size_t rank) const;

  void set_handler(FailureHandler handler);
  FailureHandler handler() const;

  // Heartbeats, by rank: steady-clock nanoseconds of the last one.
  // Heartbeats, by rank. `heard_from(rank, at)`: a heartbeat arrived now, showing the link both
  // ways as of `at` (never earlier than what was known: the later of the two counts).
  void heard_from(std::size_t rank);
  void heard_from(std::size_t rank, SteadyClock::time_point at);
  SteadyClock::time_point last_heard(std::size_t rank) const;    // the link both ways, as of
  SteadyClock::time_point last_arrived(std::size_t rank) const;  // any heartbeat

  // How a failed rank fails the calls that wait on it.
  static Failure as_failure(const MeshFailure& f);

 private:
  struct Watch {
    std::vector<std::uint32_t> procs;  // sorted
    std::function<bool()> done;
    std::function<void(const Failure&)> fail;
  };
  const std::size_t size_;
  mutable std::mutex mu_;
  std::vector<pid_t> pids_;
  std::vector<ProcId> procs_;
  std::vector<std::optional<MeshFailure>> failures_;
  std::vector<char> gone_;
  std::atomic<bool> any_failed_{false};
  std::vector<Watch> watches_;
  std::size_t purge_at_ = 64;
  FailureHandler handler_;
  std::unique_ptr<std::atomic<std::int64_t>[]> last_heard_;
  std::unique_ptr<std::atomic<std::int64_t>[]> last_arrived_;
};

// What a proc tells the controller on its health channel.
struct HealthReport {
  enum Kind : std::uint8_t { kHeartbeat = 0, kActorFailed = 1, kStuck = 2 };
  std::uint64_t mesh = 0;  // the spawn's id (SCEPTRE_MESH_ID)
  std::uint64_t rank = 0;
  std::int64_t pid = 0;  // of the proc that reports: a report from another than the rank's is stale
  std::uint8_t kind = kHeartbeat;
  std::string actor, endpoint, exception_type, message;
  std::int64_t running_ms = 0;  // kStuck: how long the handler had run
  std::int64_t limit_ms = 0;    // kStuck: the proc's Config::watchdog_timeout
  // kHeartbeat: how long the controller has acknowledged none of this proc's reports. Heartbeats
  // that arrive while their acknowledgements do not mean a link cut one way.
  std::int64_t unacked_ms = 0;
  SCEPTRE_FIELDS(mesh, rank, pid, kind, actor, endpoint, exception_type, message, running_ms, limit_ms, unacked_ms)
};

class Supervisor {
 public:
  // `proc`: the controller's, told of every proc lost (Proc::peer_lost); it outlives this.
  // `listen`: the health channel's address; empty: per Config::transport, on this host.
  Supervisor(const Config& config, Proc& proc, std::string listen = "");
  ~Supervisor();  // stops its threads; handlers still queued are dropped
  Supervisor(const Supervisor&) = delete;
  Supervisor& operator=(const Supervisor&) = delete;

  // The health channel's address (SCEPTRE_HEALTH of every proc).
  std::string address() const;
  std::uint64_t next_mesh_id() { return next_id_.fetch_add(1) + 1; }

  // A spawn whose procs have all come up: supervised from now on. A proc that ended already
  // (between its boot report and now) fails at once.
  void add(const std::shared_ptr<MeshHealth>& health);

  // The handler of failures no mesh handled.
  void set_handler(FailureHandler handler);

  // The agent of `host` reaped `pid` (LocalHost::Options::on_exit, RemoteHost's notices).
  void on_exit(const host::Host& host, pid_t pid, const host::ExitStatus& status);
  // A failed rank of `health` runs again as `pid` at `proc` (ProcMesh::respawn).
  void rejoin(const std::shared_ptr<MeshHealth>& health, std::size_t rank, pid_t pid, ProcId proc);

 private:
  void on_report(wire::Message&& msg);
  // Marks the failure and queues it for the handlers. Any thread.
  void fail(const std::shared_ptr<MeshHealth>& health, MeshFailure failure);
  MeshFailure describe(const MeshHealth& health, std::size_t rank, pid_t pid, FailureCause cause, std::string what) const;
  // The agent of `lost` is gone (`why`: its own failure): every proc there fails.
  void host_lost(const std::shared_ptr<host::RemoteHost>& lost, const MeshFailure& why);
  void check_heartbeats();
  void deliver();
  [[noreturn]] void unhandled(std::vector<MeshFailure> failures);

  const Config config_;
  Proc& proc_;
  std::atomic<std::uint64_t> next_id_{0};

  mutable std::mutex mu_;
  std::condition_variable wake_;
  bool closing_ = false;
  std::map<std::uint64_t, std::weak_ptr<MeshHealth>> meshes_;
  // By (Host::id, pid): the rank a proc is.
  std::map<std::pair<std::uint32_t, pid_t>, std::pair<std::weak_ptr<MeshHealth>, std::size_t>> by_pid_;
  std::deque<std::pair<std::shared_ptr<MeshHealth>, MeshFailure>> queue_;
  FailureHandler handler_;

  channel::Context ctx_;  // the health channel's own I/O thread
  std::unique_ptr<channel::Rx> rx_;
  std::thread checker_;
  std::thread deliverer_;
};

// The proc side (see above). Built by the proc role when SCEPTRE_HEALTH is set.
class ProcMonitor {
 public:
  // `orphaned` is called (on the monitor's thread) once the controller has acknowledged nothing
  // for Config::orphan_timeout: the proc must then stop itself.
  ProcMonitor(Proc& proc, const Config& config, const std::string& health_addr, std::uint64_t mesh, std::uint64_t rank,
              std::function<void()> orphaned);
  ~ProcMonitor();
  ProcMonitor(const ProcMonitor&) = delete;
  ProcMonitor& operator=(const ProcMonitor&) = delete;

  // A top-level actor of the proc failed (Proc::on_supervision).
  void actor_failed(const SupervisionEvent& event);

 private:
  void send(HealthReport report);
  void run();
  void watch_controller();

  Proc& proc_;
  const Config config_;
  const std::uint64_t mesh_, rank_;
  channel::Context ctx_;
  std::unique_ptr<channel::Tx> tx_;
  std::mutex mu_;
  std::condition_variable wake_;
  bool closing_ = false;
  std::function<void()> orphaned_;
  std::thread thread_;
  std::thread orphan_thread_;
  // Steady-clock nanoseconds when the last flush that completed began: all sent before was acknowledged.
  std::atomic<std::int64_t> acked_{0};
};

}  // namespace sceptre::detail
