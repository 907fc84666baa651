// The wire form of a cast (one message to many actors) and the entry points the ActorMesh
// templates call. Not for users.
//
// A cast travels down a tree over the procs of the mesh. Every proc has one cast node (a
// CastNode actor, spawned on first use). The sender hands the cast to its own proc's node, whose
// group has no targets; a node delivers to its own group's targets, splits the groups after its
// own into at most `fanout` contiguous chunks (the sender's node: `hop_fanout`, by default 1, so
// that a controller sends one message per cast) and sends the cast on to the node of each
// chunk's first group, which does the same with its chunk. The tree depends only on the mesh, never on the selection
// (a chunk with no target is pruned whole), so every message from one sender to one actor
// takes the same path of FIFO channels: per-sender order holds through casts.
//
// Replies come back up the same tree: each node gathers its targets' replies and its
// children's, combines them (or reduces them with a registered reducer) and sends one
// CastReply to its parent.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "sceptre/actor/errors.h"
#include "sceptre/actor/future.h"
#include "sceptre/actor/proc.h"
#include "sceptre/core/ids.h"
#include "sceptre/mesh/extent.h"
#include "sceptre/wire/codec.h"

namespace sceptre::detail {

// One proc of the tree: its cast node and the actors there the cast is delivered to (possibly
// none: it still relays to its subtree). The actors of one mesh share their name, so a target is
// its index there and its rank in the view the cast was sent to: two arrays of integers, which
// travel as plain bytes.
struct CastGroup {
  ActorId comm;
  std::vector<std::uint64_t> indices;
  std::vector<std::uint64_t> ranks;
  SCEPTRE_FIELDS(comm, indices, ranks)
};

// One member's answer: its encoded reply value, or why it has none.
struct CastItem {
  std::uint64_t rank = 0;
  std::optional<Failure> failure;
  wire::Part body;
  std::vector<wire::Part> parts;
  SCEPTRE_FIELDS(rank, failure, body, parts)
};

// What a subtree sends up: every answer (collect), or their reduction, plus failures.
struct CastReply {
  std::vector<CastItem> items;      // collect and stream: one per member that answered
  std::optional<CastItem> reduced;  // reduce: the combination of every value so far
  std::vector<CastItem> failures;   // members that failed, in any mode
  std::uint64_t count = 0;          // members accounted for (answered or failed)
  SCEPTRE_FIELDS(items, reduced, failures, count)
};

enum class CastMode : std::uint8_t { kBroadcast = 0, kCollect = 1, kReduce = 2, kStream = 3 };

// Where the caller's view of the mesh places the receiving actor: its rank in the view the cast
// was sent to, and that view's extent.
struct CastContext {
  std::uint64_t rank = 0;
  std::shared_ptr<const Extent> extent;
};

struct CastMessage {
  std::string name;  // of the target actors
  std::string endpoint;
  wire::Part args;  // the encoded argument tuple; its parts are `arg_parts`
  std::vector<wire::Part> arg_parts;
  std::vector<CastGroup> groups;  // this subtree, its root first
  CastMode mode = CastMode::kCollect;
  std::string reducer;        // kReduce: the registered reducer's key
  std::optional<PortId> reply;  // where this subtree's CastReplies go (none: broadcast)
  std::uint64_t fanout = 16;
  std::uint64_t hop_fanout = 0;  // when not 0, this hop's fan-out instead (the sender's node's)
  Extent extent;  // the view's extent, for the receivers' CastContext
  SCEPTRE_FIELDS(name, endpoint, args, arg_parts, groups, mode, reducer, reply, fanout, hop_fanout, extent)
};

// --- reducers -------------------------------------------------------------------------------
// Combines two encoded values of one type; registered per (operation, value type) at static
// initialisation wherever a reduction is instantiated (the binary is the proc image).
using CombineFn = Result<CastItem> (*)(const CastItem& a, const CastItem& b);
bool register_reducer(const std::string& key, CombineFn combine);
CombineFn find_reducer(const std::string& key);

// A value encoded as a CastItem, and back.
template <class R>
CastItem encode_item(std::uint64_t rank, const R& value) {
  wire::Message m = wire::encode(value);
  return CastItem{rank, std::nullopt, wire::Part::adopt(std::move(m.body)), std::move(m.parts)};
}
template <class R>
Result<R> decode_item(const CastItem& item) {
  return wire::decode<R>(item.body.bytes(), item.parts);
}

template <class R, class Op>
struct ReducerRegistration {
  static Result<CastItem> combine(const CastItem& a, const CastItem& b) {
    auto x = decode_item<R>(a);
    if (!x) return std::move(x).error();
    auto y = decode_item<R>(b);
    if (!y) return std::move(y).error();
    try {  // a user's Op may throw (a shape mismatch): that is the reduction's failure, not the node's
      return encode_item<R>(std::min(a.rank, b.rank), Op{}(std::move(*x), std::move(*y)));
    } catch (const std::exception& e) {
      return Error(Code::kInvalidArgument, std::string("the reduction threw: ") + e.what());
    } catch (...) {
      return Error(Code::kInvalidArgument, "the reduction threw an exception that is not a std::exception");
    }
  }
  static const std::string& key() {
    static const std::string k = std::string(typeid(Op).name()) + "/" + typeid(R).name();
    return k;
  }
  static inline const bool registered = register_reducer(key(), &combine);
};

// --- sending --------------------------------------------------------------------------------
class MeshHealth;
// A cast under supervision: the health of the procs it goes to, and which of them have targets.
struct CastWatch {
  std::shared_ptr<MeshHealth> health;
  std::vector<std::uint32_t> procs;
};

// Sends `msg` (whose groups are every proc of the mesh, in tree order) through the current
// proc's cast node. For collect and reduce the future completes with the combined reply of
// every member; in stream mode `on_stream` receives each CastReply as it arrives (on an I/O
// thread) and the future completes, empty, once every member is accounted for; a broadcast's
// future is ready at once. A subtree whose node cannot be reached is reported as failures of its
// ranks. With a `watch`, a proc of it that fails while the cast is in flight fails the future at
// once (a stream: every member not yet answered receives the failure); without one, only the
// caller's get(timeout) bounds the wait.
Future<CastReply> start_cast(CastMessage msg, std::function<void(CastReply&&)> on_stream = {},
                             const CastWatch* watch = nullptr);

// The groups (indices into `groups`, the mesh's groups without the sender's node) whose nodes a
// cast sent with these fan-outs passes through: its targets' and the relays between them.
std::vector<std::size_t> cast_path(const std::vector<CastGroup>& groups, std::uint64_t hop_fanout,
                                   std::uint64_t fanout);

// The cast node of `proc` (spawned on first use).
ActorId cast_node(Proc& proc);

// The context of the cast being handled on this thread, if the current message came from one.
const CastContext* current_cast();

}  // namespace sceptre::detail
