// The cast tree (see sceptre/mesh/detail/cast.h): the CastNode actor that every proc runs, the
// Gather that combines what comes back up, and the sender's entry point.
#include "sceptre/mesh/detail/cast.h"

#include <algorithm>
#include <mutex>
#include <unordered_map>

#include "actor/actor_cell.h"
#include "actor/envelope.h"
#include "actor/proc_impl.h"
#include "core/log.h"
#include "mesh/supervisor.h"
#include "sceptre/actor/actor.h"
#include "sceptre/actor/endpoint.h"

namespace sceptre::detail {
namespace {

// --- reducers -------------------------------------------------------------------------------------

std::mutex& reducers_mu() {
  static std::mutex mu;
  return mu;
}
std::unordered_map<std::string, CombineFn>& reducers() {
  static std::unordered_map<std::string, CombineFn> table;
  return table;
}

// --- gathering ------------------------------------------------------------------------------------

// What one node collects for its parent: its own targets' replies and its children's
// CastReplies. In stream mode each is passed up as it comes; otherwise one CastReply goes up once
// every member of the subtree is accounted for. Any thread (the replies of actors with threads of
// their own arrive on those threads).
class Gather {
 public:
  Gather(Proc::Impl& proc, CastMode mode, CombineFn combine, PortId parent, std::uint64_t expected)
      : proc_(proc), mode_(mode), combine_(combine), parent_(std::move(parent)), expected_(expected) {}

  // The port the children's CastReplies come to (closed once the subtree is done).
  void set_child_port(PortId port) { child_port_ = std::move(port); }

  void add_local(std::uint64_t rank, PortDelivery&& d) {
    CastItem item;
    item.rank = rank;
    if (!d.ok) {
      item.failure = delivery_failure(d);
    } else {
      // The reply's body stays where it arrived: the item views it.
      auto body = std::make_shared<std::vector<std::byte>>(std::move(d.msg.body));
      std::span<const std::byte> payload = std::span<const std::byte>(*body).subspan(d.offset);
      item.body = wire::Part::view(payload.data(), payload.size(), body);
      item.parts = std::move(d.msg.parts);
    }
    CastReply one;
    one.count = 1;
    (item.failure ? one.failures : one.items).push_back(std::move(item));
    add(std::move(one));
  }

  // Members that cannot be reached (a child node that is not there).
  void add_failures(const std::vector<std::uint64_t>& ranks, const Failure& failure) {
    CastReply r;
    r.count = ranks.size();
    for (std::uint64_t rank : ranks) r.failures.push_back(CastItem{rank, failure, {}, {}});
    add(std::move(r));
  }

  void add(CastReply&& r) {
    if (mode_ == CastMode::kStream) {
      bool done;
      {
        std::lock_guard lock(mu_);
        count_ += r.count;
        done = count_ >= expected_;
      }
      send_up(r);
      if (done) close_child_port();
      return;
    }
    std::unique_lock lock(mu_);
    if (sent_) return;
    acc_.count += r.count;
    for (auto& f : r.failures) acc_.failures.push_back(std::move(f));
    if (mode_ == CastMode::kReduce) {
      for (auto& item : r.items) fold(std::move(item));
      if (r.reduced) fold(std::move(*r.reduced));
    } else {
      for (auto& item : r.items) acc_.items.push_back(std::move(item));
    }
    if (acc_.count < expected_) return;
    sent_ = true;
    CastReply out = std::move(acc_);
    lock.unlock();
    send_up(out);
    close_child_port();
  }

  // Nothing to wait for (every chunk pruned, no local target).
  void finish_if_empty() {
    if (expected_ == 0) add(CastReply{});
  }

 private:
  void fold(CastItem&& item) {  // mu_ held
    if (!acc_.reduced) {
      acc_.reduced = std::move(item);
      return;
    }
    auto combined = combine_(*acc_.reduced, item);
    if (!combined) {
      acc_.failures.push_back(CastItem{item.rank, Failure::call(std::move(combined).error()), {}, {}});
      return;
    }
    acc_.reduced = std::move(*combined);
  }
  void send_up(const CastReply& r) { proc_.send_to_port(parent_, true, wire::encode(r)); }
  void close_child_port() {
    if (child_port_) proc_.close_port(child_port_->index);
  }

  Proc::Impl& proc_;
  const CastMode mode_;
  const CombineFn combine_;
  const PortId parent_;
  const std::uint64_t expected_;
  std::optional<PortId> child_port_;
  std::mutex mu_;
  CastReply acc_;
  std::uint64_t count_ = 0;  // stream mode
  bool sent_ = false;
};

std::uint64_t count_targets(std::span<const CastGroup> groups) {
  std::uint64_t n = 0;
  for (const auto& g : groups) n += g.indices.size();
  return n;
}

// Contiguous chunks of the groups after a node's own, at most `fanout` of them; a chunk without a
// target is pruned whole. One function for the nodes and for cast_path, so they agree.
struct Chunk {
  std::span<const CastGroup> groups;
  std::uint64_t targets;
};
std::vector<Chunk> split(std::span<const CastGroup> rest, std::uint64_t fanout) {
  std::vector<Chunk> chunks;
  const std::size_t per = (rest.size() + fanout - 1) / fanout;
  for (std::size_t at = 0; at < rest.size(); at += per) {
    auto groups = rest.subspan(at, std::min(per, rest.size() - at));
    if (std::uint64_t n = count_targets(groups)) chunks.push_back(Chunk{groups, n});
  }
  return chunks;
}
// The fan-out of a hop: the sender's node's own, or the tree's (at least 2).
std::uint64_t hop_fanout(std::uint64_t hop, std::uint64_t fanout) { return hop ? hop : std::max<std::uint64_t>(fanout, 2); }

void visit_path(std::span<const CastGroup> all, std::span<const CastGroup> rest, std::uint64_t fanout,
                std::uint64_t tree_fanout, std::vector<std::size_t>& out) {
  for (const Chunk& c : split(rest, fanout)) {
    out.push_back(static_cast<std::size_t>(c.groups.data() - all.data()));
    visit_path(all, c.groups.subspan(1), hop_fanout(0, tree_fanout), tree_fanout, out);
  }
}

// The node registry: each Proc's cast node.
std::mutex& nodes_mu() {
  static std::mutex mu;
  return mu;
}
std::unordered_map<const Proc*, ActorId>& nodes() {
  static std::unordered_map<const Proc*, ActorId> table;
  return table;
}

}  // namespace

// --- the node -------------------------------------------------------------------------------------

// One per proc. Its one endpoint never throws and never blocks: it hands the cast to its own
// targets and its children and returns; replies are gathered by port sinks.
class CastNode : public Actor {
 public:
  void cast(CastMessage msg) {
    Proc::Impl& proc = this->proc().impl();
    if (msg.groups.empty() || msg.groups.front().comm != id()) {
      log().error("cast node {}: a cast whose first group is not this node's; dropped", id().to_string());
      return;
    }
    std::span<const CastGroup> rest = std::span<const CastGroup>(msg.groups).subspan(1);
    const CastGroup& mine = msg.groups.front();
    for (const auto& g : msg.groups) {
      if (g.indices.size() == g.ranks.size()) continue;
      log().error("cast node {}: a cast to '{}' with a group of {} indices and {} ranks; dropped", id().to_string(),
                  msg.endpoint, g.indices.size(), g.ranks.size());
      if (msg.reply && msg.mode != CastMode::kBroadcast) {  // its sender hears of it rather than waiting
        std::vector<std::uint64_t> ranks;
        for (const auto& h : msg.groups) ranks.insert(ranks.end(), h.ranks.begin(), h.ranks.end());
        Gather(proc, msg.mode, nullptr, *msg.reply, ranks.size())
            .add_failures(ranks, Failure::call(Error(Code::kInvalidArgument, "a malformed cast group")));
      }
      return;
    }
    const std::vector<Chunk> chunks = split(rest, hop_fanout(msg.hop_fanout, msg.fanout));

    std::shared_ptr<Gather> gather;
    if (msg.mode != CastMode::kBroadcast) {
      if (!msg.reply) {
        log().error("cast node {}: a cast to '{}' without a reply port; dropped", id().to_string(), msg.endpoint);
        return;
      }
      CombineFn combine = nullptr;
      if (msg.mode == CastMode::kReduce && !(combine = find_reducer(msg.reducer))) {
        Failure f = Failure::call(Error(Code::kNotFound, "no reducer '" + msg.reducer + "' in proc " + proc.id.addr));
        std::vector<std::uint64_t> ranks;
        for (const auto& g : msg.groups) ranks.insert(ranks.end(), g.ranks.begin(), g.ranks.end());
        Gather(proc, msg.mode, nullptr, *msg.reply, ranks.size()).add_failures(ranks, f);
        return;
      }
      std::uint64_t expected = mine.indices.size();
      for (const auto& c : chunks) expected += c.targets;
      gather = std::make_shared<Gather>(proc, msg.mode, combine, *msg.reply, expected);
    }

    // Children first: their subtrees are the longer way.
    if (!chunks.empty()) {
      std::optional<PortId> child_port;
      if (gather) {
        child_port = proc.open_port(
            [gather](PortDelivery&& d) {
              if (!d.ok) {
                log().error("cast: a failure where a subtree's reply belongs: {}", delivery_failure(d).error.to_string());
                return;
              }
              auto reply = delivery_value<CastReply>(d);
              if (!reply) {
                log().error("cast: a subtree's reply does not decode: {}", reply.error().to_string());
                return;
              }
              gather->add(std::move(*reply));
            },
            false);
        gather->set_child_port(*child_port);
      }
      for (const Chunk& c : chunks) {
        CastMessage child{msg.name, msg.endpoint, msg.args, msg.arg_parts, {c.groups.begin(), c.groups.end()},
                          msg.mode, msg.reducer, child_port, msg.fanout, 0, msg.extent};
        const ActorId& to = c.groups.front().comm;
        if (gather) remember(to.to_string(), gather, c.groups);
        wire::Message m = encode_call_header(to, "cast", std::nullopt, proc.id, id());
        wire::encode_into(m, child);
        proc.route(to.proc, std::move(m));
      }
    }

    // Then this proc's own targets, each with its rank in the view.
    auto extent = std::make_shared<const Extent>(msg.extent);
    for (std::size_t i = 0; i < mine.indices.size(); ++i) {
      const std::uint64_t rank = mine.ranks[i];
      std::optional<PortId> reply;
      if (gather) {
        reply = proc.open_port([gather, rank](PortDelivery&& d) { gather->add_local(rank, std::move(d)); }, true);
      }
      wire::Message m =
          encode_call_header(ActorId{proc.id, msg.name, mine.indices[i]}, msg.endpoint, reply, proc.id, id());
      m.body.insert(m.body.end(), msg.args.bytes().begin(), msg.args.bytes().end());
      m.parts = msg.arg_parts;
      proc.deliver_local_call(std::move(m), std::make_shared<const CastContext>(CastContext{rank, extent}));
    }
    if (gather) gather->finish_if_empty();
  }

 protected:
  // A child node that could not be reached: every gather still waiting for it hears that its
  // members failed. A broadcast target that is gone is only logged.
  void undeliverable(const Undeliverable& u) override {
    if (u.endpoint != "cast") {
      log().warn("cast node {}: a broadcast to {} ({}) was not delivered: {}", id().to_string(), u.destination,
                 u.endpoint, u.error.to_string());
      return;
    }
    auto it = awaiting_.find(u.destination);
    if (it == awaiting_.end()) {
      log().warn("cast node {}: a broadcast to the cast node {} was not delivered: {}", id().to_string(),
                 u.destination, u.error.to_string());
      return;
    }
    std::vector<Awaiting> waiting = std::move(it->second);
    awaiting_.erase(it);
    Failure f = Failure::call(Error(u.error).with_context("cast through " + u.destination));
    for (auto& w : waiting) {
      if (auto g = w.gather.lock()) g->add_failures(w.ranks, f);
    }
  }

 private:
  struct Awaiting {
    std::weak_ptr<Gather> gather;
    std::vector<std::uint64_t> ranks;
  };
  void remember(const std::string& child, const std::shared_ptr<Gather>& gather, std::span<const CastGroup> groups) {
    auto& list = awaiting_[child];
    if (list.size() >= 64) {  // forget the gathers that are done
      std::erase_if(list, [](const Awaiting& a) { return a.gather.expired(); });
    }
    Awaiting a{gather, {}};
    for (const auto& g : groups) a.ranks.insert(a.ranks.end(), g.ranks.begin(), g.ranks.end());
    list.push_back(std::move(a));
  }

  std::unordered_map<std::string, std::vector<Awaiting>> awaiting_;
};
SCEPTRE_ACTOR(CastNode, cast);

// --- entry points ---------------------------------------------------------------------------------

std::vector<std::size_t> cast_path(const std::vector<CastGroup>& groups, std::uint64_t hop, std::uint64_t fanout) {
  std::vector<std::size_t> out;
  visit_path(groups, groups, hop_fanout(hop, fanout), fanout, out);
  return out;
}

bool register_reducer(const std::string& key, CombineFn combine) {
  std::lock_guard lock(reducers_mu());
  reducers().emplace(key, combine);
  return true;
}

CombineFn find_reducer(const std::string& key) {
  std::lock_guard lock(reducers_mu());
  auto it = reducers().find(key);
  return it == reducers().end() ? nullptr : it->second;
}

ActorId cast_node(Proc& proc) {
  std::lock_guard lock(nodes_mu());
  auto it = nodes().find(&proc);
  // A Proc at the address of a destroyed one has a different id.
  if (it != nodes().end() && it->second.proc == proc.id()) return it->second;
  ActorId node = proc.spawn<CastNode>("cast").id();
  nodes()[&proc] = node;
  return node;
}

Future<CastReply> start_cast(CastMessage msg, std::function<void(CastReply&&)> on_stream, const CastWatch* watch) {
  Proc& proc = Proc::current();
  ActorId node = cast_node(proc);
  auto state = std::make_shared<FutureState<CastReply>>();
  msg.groups.insert(msg.groups.begin(), CastGroup{node, {}, {}});
  const std::uint64_t total = count_targets(msg.groups);
  if (total == 0) {  // nobody to tell
    state->set_value(CastReply{});
    return Future<CastReply>(std::move(state));
  }
  Proc::Impl* impl = &proc.impl();
  std::function<void(const Failure&)> on_failure;  // a watched proc failed: fail what still waits
  if (msg.mode == CastMode::kStream) {
    // Which members have answered, so that a failure reaches exactly the others.
    struct Progress {
      std::mutex mu;
      std::uint64_t count = 0;
      std::vector<std::uint64_t> waiting;  // the members' ranks
      std::vector<char> answered;          // by rank
      PortId port;
    };
    auto progress = std::make_shared<Progress>();
    for (const auto& g : msg.groups) progress->waiting.insert(progress->waiting.end(), g.ranks.begin(), g.ranks.end());
    std::uint64_t top = 0;
    for (std::uint64_t r : progress->waiting) top = std::max(top, r + 1);
    progress->answered.assign(top, 0);
    auto sink = std::make_shared<std::function<void(CastReply&&)>>(std::move(on_stream));
    progress->port = impl->open_port(
        [state, progress, total, sink, impl](PortDelivery&& d) {
          auto reply = d.ok ? delivery_value<CastReply>(d) : Result<CastReply>(delivery_failure(d).error);
          if (!reply) {
            log().error("cast: a stream reply that does not decode: {}", reply.error().to_string());
            return;
          }
          std::lock_guard lock(progress->mu);
          if (state->ready()) return;  // failed by supervision: these members were told already
          for (const auto* list : {&reply->items, &reply->failures}) {
            for (const auto& item : *list) {
              if (item.rank < progress->answered.size()) progress->answered[item.rank] = 1;
            }
          }
          progress->count += reply->count;
          (*sink)(std::move(*reply));
          if (progress->count >= total) {
            impl->close_port(progress->port.index);
            state->set_value(CastReply{});
          }
        },
        false);
    msg.reply = progress->port;
    on_failure = [w = std::weak_ptr(state), progress, sink, impl](const Failure& f) {
      auto s = w.lock();
      if (!s) return;
      std::lock_guard lock(progress->mu);
      if (s->ready()) return;
      CastReply failed;
      for (std::uint64_t r : progress->waiting) {
        if (!progress->answered[r]) failed.failures.push_back(CastItem{r, f, {}, {}}), progress->answered[r] = 1;
      }
      failed.count = failed.failures.size();
      impl->close_port(progress->port.index);
      (*sink)(std::move(failed));
      s->set_value(CastReply{});
    };
  } else if (msg.mode != CastMode::kBroadcast) {
    msg.reply = impl->open_port([state](PortDelivery&& d) { complete_from(*state, std::move(d)); }, true);
    on_failure = [w = std::weak_ptr(state), impl, port = msg.reply->index](const Failure& f) {
      auto s = w.lock();
      if (s && s->set_failure(f)) impl->close_port(port);
    };
  }
  if (msg.mode == CastMode::kBroadcast) state->set_value(CastReply{});
  if (watch && watch->health && on_failure) {
    auto failed = watch->health->watch(
        watch->procs, [w = std::weak_ptr(state)] {
          auto s = w.lock();
          return !s || s->ready();
        },
        on_failure);
    if (failed) {  // between the view's check and now
      on_failure(*failed);
      return Future<CastReply>(std::move(state));
    }
  }
  wire::Message m = begin_call(node, "cast", std::nullopt);
  wire::encode_into(m, msg);
  send_call(node, std::move(m));
  return Future<CastReply>(std::move(state));
}

const CastContext* current_cast() { return static_cast<const CastContext*>(current_call_context()); }

}  // namespace sceptre::detail
