// MeshView (see sceptre/mesh/view.h): a view is an extent and the base rank of each of its ranks;
// slicing and selecting only compute a new list, casting turns the list into the tree's groups.
#include "sceptre/mesh/view.h"

#include <limits>
#include <numeric>

#include "sceptre/actor/errors.h"
#include "sceptre/mesh/actor_mesh.h"
#include "sceptre/mesh/selection.h"
#include "sceptre/mesh/slice.h"
#include "core/log.h"
#include "mesh/supervisor.h"

namespace sceptre {

std::optional<Point> cast_point() {
  const detail::CastContext* ctx = detail::current_cast();
  if (!ctx || !ctx->extent) return std::nullopt;
  return ctx->extent->point(ctx->rank);
}

namespace detail {
namespace {

[[noreturn]] void fail(Code code, std::string what) { throw CallError(Error(code, std::move(what))); }

}  // namespace

const CastItem* first_failure(const CastReply& reply) {
  const CastItem* first = nullptr;
  for (const auto& f : reply.failures) {
    if (f.failure && (!first || f.rank < first->rank)) first = &f;
  }
  return first;
}

MeshView::MeshView(std::shared_ptr<const MeshMembers> members)
    : members_(std::move(members)), extent_(members_->extent), base_(members_->actors.size()) {
  std::iota(base_.begin(), base_.end(), std::size_t{0});
}

MeshView::MeshView(std::shared_ptr<const MeshMembers> members, Extent extent, std::vector<std::size_t> base)
    : members_(std::move(members)), extent_(std::move(extent)), base_(std::move(base)) {}

ActorId MeshView::actor(std::size_t rank) const {
  const std::size_t b = base_rank(rank);
  std::shared_lock lock(members_->table_mu);
  return members_->actors.at(b);
}

std::size_t MeshView::base_rank(std::size_t rank) const {
  if (rank >= base_.size()) {
    fail(Code::kOutOfRange, "rank " + std::to_string(rank) + " of a view of " + std::to_string(base_.size()) +
                                " members of '" + name() + "'");
  }
  return base_[rank];
}

namespace {

// The dimension `dim` of `extent`, or CallError naming the known ones.
std::size_t find_dim(const Extent& extent, std::string_view dim, const std::string& mesh) {
  if (auto d = extent.dim(dim)) return *d;
  fail(Code::kInvalidArgument,
       "mesh '" + mesh + "' " + extent.to_string() + " has no dimension '" + std::string(dim) + "'");
}

// The view of `sliced`, a Slice of this view's own ranks (Slice::of(extent) cut down), whose
// dimensions are `names`.
std::pair<Extent, std::vector<std::size_t>> apply(const Slice& sliced, std::vector<std::string> names,
                                                  const std::vector<std::size_t>& base) {
  Extent out = Extent::make(std::move(names), sliced.sizes).value();
  std::vector<std::size_t> out_base;
  out_base.reserve(out.num_ranks());
  for (std::size_t r : sliced.base_ranks()) out_base.push_back(base[r]);
  return {std::move(out), std::move(out_base)};
}

}  // namespace

MeshView MeshView::slice(std::string_view dim, std::size_t index) const {
  std::size_t d = find_dim(extent_, dim, name());
  if (index >= extent_.sizes()[d]) {
    fail(Code::kOutOfRange, "index " + std::to_string(index) + " of dimension '" + std::string(dim) + "' of mesh '" +
                                name() + "' " + extent_.to_string());
  }
  std::vector<std::string> names = extent_.names();
  names.erase(names.begin() + static_cast<std::ptrdiff_t>(d));
  auto [extent, base] = apply(Slice::of(extent_).index(d, index).value(), std::move(names), base_);
  return MeshView(members_, std::move(extent), std::move(base));
}

MeshView MeshView::slice(std::string_view dim, Range range) const {
  std::size_t d = find_dim(extent_, dim, name());
  const std::size_t size = extent_.sizes()[d];
  const std::string what = "range [" + std::to_string(range.begin) + ", " + std::to_string(range.end) + ") step " +
                           std::to_string(range.step) + " of dimension '" + std::string(dim) + "' of mesh '" +
                           name() + "' " + extent_.to_string();
  if (range.step == 0) fail(Code::kInvalidArgument, what + ": the step is 0");
  if (range.begin >= range.end) fail(Code::kInvalidArgument, what + ": the range is empty");
  if (range.end > size) fail(Code::kOutOfRange, what + ": it ends past the dimension");
  auto [extent, base] =
      apply(Slice::of(extent_).range(d, range.begin, range.end, range.step).value(), extent_.names(), base_);
  return MeshView(members_, std::move(extent), std::move(base));
}

MeshView MeshView::select(std::string_view selection, std::uint64_t seed) const {
  auto parsed = Selection::parse(selection);
  if (!parsed) throw CallError(std::move(parsed).error());
  auto ranks = parsed->eval(extent_, seed);
  if (!ranks) throw CallError(std::move(ranks).error());
  if (ranks->size() == base_.size()) return *this;
  if (ranks->empty()) {
    fail(Code::kOutOfRange, "the selection '" + std::string(selection) + "' picks no member of mesh '" + name() +
                                "' " + extent_.to_string());
  }
  std::vector<std::size_t> base;
  base.reserve(ranks->size());
  for (std::size_t r : *ranks) base.push_back(base_.at(r));
  Extent extent = Extent::make({"rank"}, {base.size()}).value();  // before `base` is moved from
  return MeshView(members_, std::move(extent), std::move(base));
}

MeshView MeshView::only(std::size_t rank) const { return MeshView(members_, Extent(), {base_rank(rank)}); }

std::size_t MeshView::least_loaded() const {
  if (base_.empty()) fail(Code::kFailedPrecondition, "choose on an empty view of '" + name() + "'");
  const std::size_t n = base_.size();
  const std::size_t start = members_->next_choice.fetch_add(1, std::memory_order_relaxed) % n;
  std::size_t best = start;
  std::int64_t best_load = std::numeric_limits<std::int64_t>::max();
  // A failed member answers at once (with its failure), so its load stays low: never choose one
  // while a live member is left.
  const MeshHealth* health = members_->health && members_->health->any_failed() ? members_->health.get() : nullptr;
  for (std::size_t i = 0; i < n; ++i) {
    std::size_t r = (start + i) % n;
    if (health && health->failure(members_->proc_of[base_[r]])) continue;
    std::int64_t load = members_->outstanding[base_[r]].load(std::memory_order_relaxed);
    if (load < best_load) best = r, best_load = load;
  }
  return best;
}

std::function<void()> MeshView::hold(std::size_t rank) const {
  const std::size_t b = base_rank(rank);
  members_->outstanding[b].fetch_add(1, std::memory_order_relaxed);
  return [counters = members_->outstanding, b] { counters[b].fetch_sub(1, std::memory_order_relaxed); };
}

CastMessage MeshView::cast_message(std::string_view endpoint, wire::Message&& args, CastMode mode,
                                   std::string reducer) const {
  CastMessage msg;
  msg.endpoint = std::string(endpoint);
  msg.args = wire::Part::adopt(std::move(args.body));
  msg.arg_parts = std::move(args.parts);
  std::shared_lock lock(members_->table_mu);
  msg.groups.resize(members_->nodes.size());
  for (std::size_t i = 0; i < msg.groups.size(); ++i) msg.groups[i].comm = members_->nodes[i];
  for (std::size_t r = 0; r < base_.size(); ++r) {
    const std::size_t b = base_[r];
    const ActorId& actor = members_->actors[b];
    CastGroup& g = msg.groups[members_->proc_of[b]];
    g.indices.push_back(actor.index);
    g.ranks.push_back(r);
  }
  // One spawn, one name.
  if (!base_.empty()) msg.name = members_->actors[base_[0]].name;
  msg.mode = mode;
  msg.reducer = std::move(reducer);
  msg.fanout = members_->fanout;
  msg.hop_fanout = members_->root_fanout;
  msg.extent = extent_;
  return msg;
}

Future<CastReply> MeshView::cast(std::string_view endpoint, wire::Message&& args, CastMode mode, std::string reducer,
                                  std::function<void(CastReply&&)> on_stream) const {
  CastMessage msg = cast_message(endpoint, std::move(args), mode, std::move(reducer));
  MeshHealth* health = members_ ? members_->health.get() : nullptr;
  if (!health) return start_cast(std::move(msg), std::move(on_stream));
  // msg.groups[p] is the group of the proc mesh's rank p (the nodes are in rank order); once the
  // failed procs are taken out, procs[i] says whose group msg.groups[i] is.
  std::vector<std::uint32_t> procs(msg.groups.size());
  std::iota(procs.begin(), procs.end(), std::uint32_t{0});
  if (health->any_failed()) {
    CastReply failed;  // a stream's members in failed procs
    std::vector<CastGroup> live;
    std::vector<std::uint32_t> live_procs;
    live.reserve(msg.groups.size());
    for (std::size_t p = 0; p < msg.groups.size(); ++p) {
      CastGroup& g = msg.groups[p];
      auto failure = health->failure(p);
      if (!failure) {
        live.push_back(std::move(g));
        live_procs.push_back(static_cast<std::uint32_t>(p));
        continue;
      }
      if (g.indices.empty()) continue;  // the tree routes around it
      const Failure f = MeshHealth::as_failure(*failure);
      if (mode == CastMode::kCollect || mode == CastMode::kReduce) {
        auto state = std::make_shared<FutureState<CastReply>>();
        state->set_failure(f);
        return Future<CastReply>(std::move(state));
      }
      if (mode == CastMode::kStream) {
        for (std::uint64_t rank : g.ranks) failed.failures.push_back(CastItem{rank, f, {}, {}});
        failed.count += g.ranks.size();
      } else {
        log().debug("a broadcast to '{}' skips {} members in failed rank {} of '{}'", name(), g.indices.size(), p,
                    health->name);
      }
    }
    msg.groups = std::move(live);
    procs = std::move(live_procs);
    if (failed.count > 0) on_stream(std::move(failed));
  }
  // Every proc the cast passes through, relays included: if one fails, what waits on the
  // replies below it is lost too.
  CastWatch watch{members_->health, {}};
  if (mode != CastMode::kBroadcast) {
    for (std::size_t i : cast_path(msg.groups, msg.hop_fanout, msg.fanout)) watch.procs.push_back(procs[i]);
  }
  return start_cast(std::move(msg), std::move(on_stream), mode == CastMode::kBroadcast ? nullptr : &watch);
}

}  // namespace detail
}  // namespace sceptre
