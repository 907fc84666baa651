// Runtime, HostMesh and ProcMesh: the single controller.
//
//   int main(int argc, char** argv) {
//     sceptre::Runtime runtime(argc, argv);   // first: in a proc, this never returns
//     auto procs = sceptre::this_host().spawn_procs({{"gpus", 4}});
//     auto workers = procs.spawn<Worker>("worker", 0.1f);
//     float total = workers.sum<&Worker::step>(batch).get(30s);
//   }
//
// Bootstrap: spawn_procs starts the controller's own binary again, with the same command line
// and SCEPTRE_ROLE=proc in its environment. There the Runtime constructor becomes the proc: it
// serves a Proc, reports to the controller that it is up, and runs actors until the controller
// lets it go or dies; then it exits without ever returning to main. So construct the Runtime
// before anything in main that a proc must not do.
//
// The local host is served by a host agent inside the controller (no daemon): it starts the
// procs, prints their output line by line as "[mesh rank] line" (identical lines from many ranks
// folded into one, see Config::log_fold), and holds each proc's lifeline, a pipe whose closing —
// by ProcMesh::stop(), or by the kernel when the controller dies in any way, SIGKILL included —
// makes the proc stop itself.
//
// Supervision: every proc is watched from the moment spawn_procs returns (see supervision.h).
//
// Every proc's environment has RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE, MASTER_ADDR and
// MASTER_PORT (a free port of the controller's host, the same for every proc of one spawn), and
// sceptre's own: SCEPTRE_ROLE, SCEPTRE_MESH, SCEPTRE_RANK, SCEPTRE_EXTENT, SCEPTRE_CONFIG (the
// controller's effective Config), SCEPTRE_SECRET, SCEPTRE_BOOT, SCEPTRE_LIFELINE, SCEPTRE_HEALTH
// (the controller's health channel) and SCEPTRE_MESH_ID.
//
// Threads: a Runtime is made once, on the main thread; meshes may be used from any thread but
// spawn_procs, spawn and stop block until their members answer, so they are not for an actor's
// handler (which would block the thread the answers arrive on).
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <tuple>
#include <vector>

#include "sceptre/actor/errors.h"
#include "sceptre/actor/proc.h"
#include "sceptre/core/config.h"
#include "sceptre/mesh/actor_mesh.h"
#include "sceptre/mesh/extent.h"
#include "sceptre/mesh/supervision.h"
#include "sceptre/mesh/view.h"

namespace sceptre {

class ProcMesh;

namespace detail {
struct RuntimeState;
struct SpawnPlan;
// Starts the procs of a plan (runtime.cc).
ProcMesh spawn_mesh(const std::shared_ptr<RuntimeState>& rt, SpawnPlan plan, bool is_agents);
struct HostMeshState;
struct ProcMeshState;
struct RuntimeState;
struct SpawnPlan;

// The actors of one spawn, from the ActorRefs of each proc's members (proc-major order).
std::shared_ptr<MeshMembers> make_members(const MeshView& procs, const std::string& name, const Extent& per_proc,
                                          std::vector<ActorId> actors);
std::chrono::milliseconds spawn_timeout();
// Makes one member of an actor mesh again, in the proc `where` (ProcMesh::respawn).
using ActorSpawner = std::function<ActorId(const ProcId& where, std::chrono::milliseconds timeout)>;
void add_actor_mesh(const std::shared_ptr<ProcMeshState>& procs, const std::shared_ptr<MeshMembers>& members,
                    ActorSpawner spawn_one);
}  // namespace detail

// The hosts of the job: the controller's own (Runtime::this_host(), the default), or host agents
// started by a launcher (Runtime::launch_hosts), a mesh with extent {"hosts": K}.
class HostMesh {
 public:
  HostMesh() = default;  // the controller's host

  // Starts one proc per point of `extent` on every host of this mesh and returns once each has
  // reported that it is up. On K launched hosts the mesh's extent is {"hosts": K} followed by
  // `extent` (whose dimension names must not include "hosts"), rank-major by host; LOCAL_RANK and
  // LOCAL_WORLD_SIZE count within a host, and MASTER_ADDR is host 0's address. Throws CallError
  // naming the first member that did not come up and why: its exit status and the tail of its
  // stderr, or that it did not report within Config::spawn_timeout. Members already started are
  // stopped before it throws. `on_failure`, when given, is the mesh's failure handler from the
  // moment it is supervised (see ProcMesh::on_failure; set later, a proc that fails at once may
  // find none).
  ProcMesh spawn_procs(const Extent& extent, std::string name = "procs", FailureHandler on_failure = {}) const;

  // {"hosts": K} for launched hosts; {"hosts": 1} for the controller's.
  Extent extent() const;
  std::size_t size() const;
  // Host k's address (its network namespace's), "" when it shares the controller's network.
  std::string address(std::size_t k) const;
  // Host k's veth as the controller's namespace sees it ("sc-N-k"): taking it down cuts the host
  // off. "" when it has none.
  std::string link(std::size_t k) const;
  // The agents as a proc mesh (pids, failures). Empty for the controller's host.
  ProcMesh agents() const;
  // The handler of the agents' own failures (see ProcMesh::on_failure). The procs on a host whose
  // agent failed fail too, each in its own mesh, with FailureCause::kHostLost.
  void on_failure(FailureHandler handler) const;
  // Stops every proc mesh spawned on these hosts, then the agents. Idempotent; the last HostMesh
  // of a launch to go away does it too.
  void stop() const;

 private:
  friend class Runtime;
  explicit HostMesh(std::shared_ptr<detail::HostMeshState> state) : state_(std::move(state)) {}
  std::shared_ptr<detail::HostMeshState> state_;
};

// How Runtime::launch_hosts starts host agents.
struct HostLaunch {
  std::string name = "hosts";  // the agents' proc mesh
  // Each agent in a network namespace of its own, on a veth pair into a bridge of the controller's
  // (see host_network.h in the sources): needs Config::transport "netns", root and iproute2.
  // Otherwise the agents share the controller's network.
  bool netns = false;
  // Each agent run through this command, e.g. {"/usr/local/bin/sceptre", "host", "--"}, which must
  // exec the program it is given in the host role (as `sceptre host` does). Empty: the binary is
  // started in the host role directly.
  std::vector<std::string> agent_command;
  FailureHandler on_failure;  // the agents' (HostMesh::on_failure)
};

class Runtime {
 public:
  // In a proc (SCEPTRE_ROLE=proc), never returns. In the controller: reads the configuration
  // (Config::load() unless one is given), makes the controller's Proc and its host agent.
  // Throws Exception when the configuration is bad or a Runtime exists already.
  Runtime(int argc, char** argv);
  Runtime(int argc, char** argv, Config config);
  // Stops every mesh still running (their procs exit), then the controller's Proc.
  ~Runtime();
  Runtime(const Runtime&) = delete;
  Runtime& operator=(const Runtime&) = delete;

  // The runtime of this process; CallError (kFailedPrecondition) when there is none.
  static Runtime& current();
  const Config& config() const;
  Proc& proc();
  // The handler of failures that no mesh's handler took (see supervision.h). Without one, an
  // unhandled failure is reported on stderr and the controller exits with status 1.
  void on_failure(FailureHandler handler);
  HostMesh this_host() const { return HostMesh{}; }
  // Starts `count` host agents on this machine — the process launcher — each the controller's
  // binary in the host role, and returns once all have reported that they are up (throws
  // CallError like spawn_procs). Each agent starts, reaps and prints the procs of its host and is
  // supervised as a proc is: an agent that ends, freezes or is cut off fails its own rank and
  // every proc on its host.
  HostMesh launch_hosts(std::size_t count, HostLaunch how = {});

  std::shared_ptr<detail::RuntimeState> state() const { return state_; }

 private:
  std::shared_ptr<detail::RuntimeState> state_;
};

// The controller's host (Runtime::current().this_host()).
HostMesh this_host();

// Procs started by one spawn_procs, or a slice of them.
class ProcMesh {
 public:
  ProcMesh() = default;

  const std::string& name() const { return view_.name(); }
  const Extent& extent() const { return view_.extent(); }
  std::size_t size() const { return view_.size(); }
  ProcId proc(std::size_t rank) const { return view_.actor(rank).proc; }
  // The OS process of a member (on its host).
  int pid(std::size_t rank) const;

  ProcMesh slice(std::string_view dim, std::size_t index) const { return ProcMesh(state_, view_.slice(dim, index)); }
  ProcMesh slice(std::string_view dim, Range range) const { return ProcMesh(state_, view_.slice(dim, range)); }
  ProcMesh select(std::string_view selection, std::uint64_t seed = 0) const {
    return ProcMesh(state_, view_.select(selection, seed));
  }

  // One actor of type A in every proc, built there from `args` (which travel encoded); returns
  // once all are running. The mesh has this mesh's extent. Throws CallError naming the first
  // member whose constructor threw, or that did not answer within Config::spawn_timeout.
  template <class A, class... Args>
  ActorMesh<A> spawn(std::string name, Args&&... args) const {
    return spawn_many<A>(std::move(name), Extent(), std::forward<Args>(args)...);
  }
  // `per_proc.num_ranks()` actors in every proc: the mesh's extent is this mesh's followed by
  // `per_proc` (whose dimension names must differ from this mesh's).
  template <class A, class... Args>
  ActorMesh<A> spawn_many(std::string name, const Extent& per_proc, Args&&... args) const {
    Proc& here = Proc::current();
    const std::size_t m = per_proc.num_ranks();
    std::vector<Future<ActorRef<A>>> pending;
    pending.reserve(size() * m);
    for (std::size_t p = 0; p < size(); ++p) {
      for (std::size_t i = 0; i < m; ++i) pending.push_back(here.spawn_on<A>(proc(p), name, args...));
    }
    const auto deadline = std::chrono::steady_clock::now() + detail::spawn_timeout();
    std::vector<ActorId> actors;
    actors.reserve(pending.size());
    for (std::size_t k = 0; k < pending.size(); ++k) {
      try {
        auto left = std::max(deadline - std::chrono::steady_clock::now(), std::chrono::steady_clock::duration::zero());
        actors.push_back(pending[k].get(left).id());
      } catch (const Exception& e) {
        const std::size_t p = k / m;
        throw CallError(Error(Code::kUnavailable, "spawning '" + name + "' on rank " + std::to_string(p) + " " +
                                                      extent().point(p).to_string() + " of '" + this->name() +
                                                      "' (pid " + std::to_string(pid(p)) + "): " + e.what()));
      }
    }
    auto members = detail::make_members(view_, name, per_proc, std::move(actors));
    // How a respawned proc gets its members of this mesh back: with the same arguments.
    detail::add_actor_mesh(state_, members,
                           [name, saved = std::tuple<std::decay_t<Args>...>(args...)](
                               const ProcId& where, std::chrono::milliseconds timeout) {
                             return std::apply(
                                 [&](const auto&... a) {
                                   return Proc::current().spawn_on<A>(where, name, a...).get(timeout).id();
                                 },
                                 saved);
                           });
    return ActorMesh<A>(detail::MeshView(std::move(members)));
  }

  // Stops every proc of the spawn this mesh came from (slices included): each stops its actors
  // gracefully, up to Config::stop_timeout, then exits; one still there after that is killed.
  // Returns once all have exited. Idempotent; the last ProcMesh or ActorMesh of a spawn to go
  // away does it too.
  void stop() const;

  // Supervision (see supervision.h). The handler of this spawn's failures (slices included):
  // called once per failed rank; kPassUp hands the failure to the Runtime's handler.
  void on_failure(FailureHandler handler) const;
  // The ranks of this view that have failed, and why one did.
  std::vector<std::size_t> failed_ranks() const;
  std::optional<MeshFailure> failure(std::size_t rank) const;
  // Starts the failed `ranks` (of this view) again: what is left of their procs is killed, new
  // procs start with the same rank and environment, and every ActorMesh spawned on this mesh
  // gets its members there back, made with the arguments they were first spawned with. Once it
  // returns the ranks are members again, at the same ranks and points, and healthy. Blocks like
  // spawn_procs (so may be called from a failure handler, not from an actor's handler); throws
  // CallError (kFailedPrecondition) for a rank that has not failed, or naming the rank that did
  // not come up. Actor state is not carried over: the new members start fresh.
  void respawn(const std::vector<std::size_t>& ranks) const;

 private:
  friend class HostMesh;
  friend class Runtime;
  friend ProcMesh detail::spawn_mesh(const std::shared_ptr<detail::RuntimeState>&, detail::SpawnPlan, bool);
  ProcMesh(std::shared_ptr<detail::ProcMeshState> state, detail::MeshView view)
      : state_(std::move(state)), view_(std::move(view)) {}

  std::shared_ptr<detail::ProcMeshState> state_;
  detail::MeshView view_;  // a mesh of the procs' cast nodes
};

}  // namespace sceptre
