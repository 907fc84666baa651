// ActorCell: the runtime's side of one actor — its mailbox, status, children and executor.
// The proc holds every cell (also after the actor has stopped, so late messages get a precise
// "stopped"/"failed" answer instead of "no such actor").
//
// Mailbox: items are queued from any thread and handled on the actor's executor one at a
// time, in queue order (so per-sender FIFO). While an endpoint's Task is in flight the
// mailbox is "busy" and nothing else is handled.
//
// Threads: enqueue(), request_stop(), force_stop(), status() from any thread; everything
// else runs on the actor's executor.
#pragma once

#include <atomic>
#include <memory>
#include <mutex>
#include <optional>
#include <variant>
#include <vector>

#include "actor/envelope.h"
#include "actor/executors.h"
#include "sceptre/actor/actor.h"
#include "sceptre/actor/endpoint.h"
#include "sceptre/actor/future.h"
#include "sceptre/actor/proc.h"

namespace sceptre::detail {

class ActorCell;
// The actor whose handler runs on this thread, if any (the sender of calls made from it).
ActorCell* current_cell();
// The context of the call being handled on this thread (see CallItem), or null.
const void* current_call_context();

struct StartItem {};
struct StopItem {};
struct CallItem {
  CallHeader header;
  wire::Message msg;
  std::size_t offset = 0;
  // Set by the layer that delivered the call locally (a mesh cast: the receiver's rank in the
  // view it was sent to); readable by the handler through call_context() until it completes.
  std::shared_ptr<const void> context;
};
// A child reached a terminal status; `failure` when it failed.
struct ChildItem {
  std::shared_ptr<ActorCell> child;
  std::optional<SupervisionEvent> failure;
};
struct BounceItem {
  Undeliverable what;
};
using Item = std::variant<StartItem, CallItem, StopItem, ChildItem, BounceItem>;

class ActorCell : public std::enable_shared_from_this<ActorCell> {
 public:
  ActorCell(Proc::Impl& proc, ActorId id, std::unique_ptr<Actor> actor, const EndpointTable& table,
            bool own_thread, std::shared_ptr<ActorCell> parent);
  ~ActorCell();

  const ActorId& id() const { return id_; }
  // The id as the sender field of the calls this actor makes.
  const std::optional<ActorId>& self() const { return self_; }
  Proc& proc() const;
  Executor* executor() const { return executor_; }
  ActorStatus status() const;
  // The context of the call being handled (see CallItem), or null. Executor only.
  const std::shared_ptr<const void>& call_context() const { return context_; }
  // Why it stopped or failed (empty while alive).
  std::string reason() const;
  // The endpoint whose handler is running now and since when (steady clock), if one is; any
  // thread. Only a handler's synchronous run counts: a coroutine waiting on another actor is not
  // running.
  std::optional<std::pair<std::string_view, std::chrono::steady_clock::time_point>> running() const;

  void enqueue(Item item);
  void add_child(std::shared_ptr<ActorCell> child);
  // Asks for a graceful stop; the Future completes once the actor is stopped or failed.
  Future<void> request_stop();
  // Stops at once: queued messages fail, nothing more is handled; cleanup() runs when a
  // handler that is still running returns.
  void force_stop();

 private:
  // Drains now (on the executor, outside handlers) or posts a drain, unless one is pending or a
  // Task is in flight. Called with mu_ held; may release it.
  void schedule(std::unique_lock<std::mutex>& lock);
  void drain();
  void handle(Item& item);
  void handle_call(CallItem& call);
  void handle_child(ChildItem& item);
  void begin_stop();
  void call_done(const std::optional<PortId>& reply, std::string_view endpoint,
                 const std::function<wire::Message()>& outcome);
  void endpoint_threw(const std::optional<PortId>& reply, std::string_view endpoint, std::string type,
                      std::string what);
  void fail(SupervisionEvent event);
  // Moves to a terminal status: rejects what is queued, stops children, finalizes, tells the
  // parent (or the proc, for a top-level actor).
  void terminate(ActorStatus final_status, std::optional<SupervisionEvent> failure, std::string reason);
  // Runs cleanup() and destroys the actor, once, when no handler is running. Executor only.
  void finalize();
  void reject(Item& item, ActorStatus status, const std::string& reason);
  void reject_call(const CallHeader& header, ActorStatus status, const std::string& reason);
  void notify_parent(std::optional<SupervisionEvent> failure);

  Proc::Impl& proc_;
  const ActorId id_;
  std::unique_ptr<Actor> actor_;  // destroyed by finalize()
  const EndpointTable& table_;
  std::unique_ptr<ThreadExecutor> own_thread_;  // when the actor asked for one
  Executor* executor_;
  std::weak_ptr<ActorCell> parent_;  // the parent holds its children, not the other way round
  const std::optional<ActorId> self_;
  std::shared_ptr<FutureState<void>> stopped_ = std::make_shared<FutureState<void>>();

  // Items taken from queue_ in one swap and handled without the lock. Executor only.
  std::vector<Item> batch_;
  std::size_t next_ = 0;
  void reject_rest_of_batch(ActorStatus status, const std::string& reason);

  mutable std::mutex mu_;
  std::vector<Item> queue_;  // swapped with batch_ whole: no allocation per item
  bool scheduled_ = false;  // a drain is posted or running
  // An endpoint's Task is in flight. Written only on the executor (under mu_), so the
  // executor may read it without the lock.
  bool busy_ = false;
  std::atomic<bool> halted_{false};
  bool running_ = false;  // status_ == kRunning, readable without the lock. Executor only.  // terminal: the drain loop stops (set from any thread)
  bool finalized_ = false;
  std::shared_ptr<const void> context_;  // of the call being handled. Executor only.
  // The handler running now (see running()): its endpoint's name, which lives in the endpoint
  // table, and its start in steady-clock nanoseconds (0: none). Written on the executor.
  std::atomic<const std::string*> running_endpoint_{nullptr};
  std::atomic<std::int64_t> running_since_{0};
  ActorStatus status_ = ActorStatus::kCreated;
  std::string reason_;
  std::vector<std::shared_ptr<ActorCell>> children_;  // live ones
};

}  // namespace sceptre::detail
