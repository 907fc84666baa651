// MeshView: the non-template half of an ActorMesh — which actors it has, how its view of them
// is shaped, and the cast messages that reach them. Shared by all the views sliced from one
// spawn; a view is cheap to copy (its members are shared, its rank list is its own).
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <shared_mutex>
#include <string>
#include <string_view>
#include <vector>

#include "sceptre/core/ids.h"
#include "sceptre/mesh/detail/cast.h"
#include "sceptre/mesh/extent.h"

namespace sceptre {

// A range of one dimension for slicing: [begin, end) with a step.
struct Range {
  std::size_t begin = 0;
  std::size_t end = 0;
  std::size_t step = 1;
};

namespace detail {

class MeshHealth;

// The actors of one spawn over a ProcMesh. The entries of `actors`, `nodes` and `agents` change
// when a failed proc is respawned (ProcMesh::respawn): read and write them under `table_mu`.
struct MeshMembers {
  std::string name;
  Extent extent;                        // the procs' extent, then the per-proc extent
  std::vector<ActorId> actors;          // by rank in `extent`
  std::vector<std::uint32_t> proc_of;   // the index in `nodes` of each actor's proc
  std::vector<ActorId> nodes;           // every proc's cast node, in tree order
  std::vector<ActorId> agents;          // every proc's agent (stops actors), indexed like nodes
  mutable std::shared_mutex table_mu;
  std::size_t fanout = 16;
  std::size_t root_fanout = 1;
  std::shared_ptr<const void> keep_alive;  // the procs: they live while a view does
  std::shared_ptr<MeshHealth> health;      // of the procs (see supervision.h); null outside a controller
  // Requests sent by choose() and not yet answered, by rank. Shared on its own, so that a reply
  // in flight never holds the mesh (and its procs) alive.
  std::shared_ptr<std::atomic<std::int64_t>[]> outstanding;
  mutable std::atomic<std::uint64_t> next_choice{0};
};

class MeshView {
 public:
  MeshView() = default;
  explicit MeshView(std::shared_ptr<const MeshMembers> members);

  const std::string& name() const {
    static const std::string none;
    return members_ ? members_->name : none;
  }
  const std::shared_ptr<const MeshMembers>& members() const { return members_; }
  const Extent& extent() const { return extent_; }
  std::size_t size() const { return base_.size(); }
  // The rank in the spawn's full mesh of the view's `rank`.
  std::size_t base_rank(std::size_t rank) const;
  ActorId actor(std::size_t rank) const;

  // Errors are CallError (kInvalidArgument / kOutOfRange) naming the dimension and its size.
  MeshView slice(std::string_view dim, std::size_t index) const;  // drops the dimension
  MeshView slice(std::string_view dim, Range range) const;        // keeps it
  // The ranks a Selection picks (see selection.h), as a one-dimensional view {rank=N}, in rank
  // order; a selection that keeps the whole grid keeps the view's extent.
  MeshView select(std::string_view selection, std::uint64_t seed = 0) const;
  // One member, as a view of extent {} (so it is rank 0 of what it receives).
  MeshView only(std::size_t rank) const;

  // The member with the fewest requests outstanding from choose(); ties go round robin.
  std::size_t least_loaded() const;
  // Counts one more request outstanding at `rank`; the function returned counts it answered.
  std::function<void()> hold(std::size_t rank) const;

  // A cast of `endpoint` with the encoded arguments `args` to every member of the view.
  CastMessage cast_message(std::string_view endpoint, wire::Message&& args, CastMode mode,
                           std::string reducer = {}) const;
  // Sends that cast (see start_cast) under the supervision of the mesh's procs (see
  // supervision.h): with a failed member in the view a call or reduction fails at once, a stream
  // receives that member's failure at once and a broadcast skips it; the tree then routes around
  // the failed procs. A member failing while the cast is in flight fails it at once.
  Future<CastReply> cast(std::string_view endpoint, wire::Message&& args, CastMode mode, std::string reducer = {},
                         std::function<void(CastReply&&)> on_stream = {}) const;

 private:
  MeshView(std::shared_ptr<const MeshMembers> members, Extent extent, std::vector<std::size_t> base);

  std::shared_ptr<const MeshMembers> members_;
  Extent extent_;
  std::vector<std::size_t> base_;  // base rank of each view rank
};

}  // namespace detail
}  // namespace sceptre
