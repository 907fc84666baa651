#include "actor/actor_cell.h"

#include "actor/proc_impl.h"
#include "core/log.h"

namespace sceptre::detail {
namespace {

constexpr int kDrainBatch = 128;  // items per drain before yielding the executor to others

bool terminal(ActorStatus s) { return s == ActorStatus::kStopped || s == ActorStatus::kFailed; }

thread_local ActorCell* tl_cell = nullptr;  // the actor whose handler runs on this thread

}  // namespace

ActorCell* current_cell() { return tl_cell; }
const void* current_call_context() { return tl_cell ? tl_cell->call_context().get() : nullptr; }

}  // namespace sceptre::detail

bool sceptre::detail::inside_actor_handler() { return sceptre::detail::tl_cell != nullptr; }
void* sceptre::detail::current_actor_context() { return sceptre::detail::tl_cell; }
sceptre::detail::ActorContextScope::ActorContextScope(void* context) : previous_(tl_cell) {
  tl_cell = static_cast<ActorCell*>(context);
}
sceptre::detail::ActorContextScope::~ActorContextScope() { tl_cell = static_cast<ActorCell*>(previous_); }

namespace sceptre::detail {

ActorCell::ActorCell(Proc::Impl& proc, ActorId id, std::unique_ptr<Actor> actor,
                     const EndpointTable& table, bool own_thread, std::shared_ptr<ActorCell> parent)
    : proc_(proc),
      id_(std::move(id)),
      actor_(std::move(actor)),
      table_(table),
      own_thread_(own_thread ? std::make_unique<ThreadExecutor>(&proc.self, id_.name) : nullptr),
      executor_(own_thread_ ? own_thread_->executor() : &proc.io_executor),
      parent_(parent),
      self_(id_) {
  actor_->cell_ = this;
}

ActorCell::~ActorCell() = default;

Proc& ActorCell::proc() const { return proc_.self; }

ActorStatus ActorCell::status() const {
  std::lock_guard lock(mu_);
  return status_;
}

std::string ActorCell::reason() const {
  std::lock_guard lock(mu_);
  return reason_;
}

void ActorCell::enqueue(Item item) {
  std::unique_lock lock(mu_);
  if (terminal(status_)) {
    ActorStatus s = status_;
    std::string why = reason_;
    lock.unlock();
    reject(item, s, why);
    return;
  }
  queue_.push_back(std::move(item));
  schedule(lock);
}

void ActorCell::schedule(std::unique_lock<std::mutex>& lock) {
  if (scheduled_ || busy_) return;
  scheduled_ = true;
  if (executor_ == current_executor() && tl_cell == nullptr) {
    // On this actor's own executor outside any handler (a message from a socket): handle it
    // now, as a plain socket server would, instead of queueing a hop through the executor.
    lock.unlock();
    drain();
    return;
  }
  executor_->post([self = shared_from_this()] { self->drain(); });
}

void ActorCell::add_child(std::shared_ptr<ActorCell> child) {
  std::lock_guard lock(mu_);
  children_.push_back(std::move(child));
}

Future<void> ActorCell::request_stop() {
  enqueue(StopItem{});
  return Future<void>(stopped_);
}

void ActorCell::drain() {
  ActorCell* previous = tl_cell;
  tl_cell = this;
  for (int n = 0; n < kDrainBatch; ++n) {
    if (next_ == batch_.size()) {
      batch_.clear();
      next_ = 0;
      std::lock_guard lock(mu_);
      if (queue_.empty() || halted_) {
        scheduled_ = false;
        tl_cell = previous;
        return;
      }
      batch_.swap(queue_);
    }
    Item& item = batch_[next_++];
    handle(item);
    item = StartItem{};  // frees the message now, not when the batch ends
    if (busy_ || halted_) {
      std::lock_guard lock(mu_);
      scheduled_ = false;  // the Task's completion (or nothing, once halted) schedules again
      tl_cell = previous;
      return;
    }
  }
  tl_cell = previous;
  executor_->post([self = shared_from_this()] { self->drain(); });  // scheduled_ stays true
}

void ActorCell::reject_rest_of_batch(ActorStatus status, const std::string& reason) {
  for (; next_ < batch_.size(); ++next_) reject(batch_[next_], status, reason);
}

void ActorCell::handle(Item& item) {
  if (std::holds_alternative<StartItem>(item)) {
    {
      std::lock_guard lock(mu_);
      status_ = ActorStatus::kRunning;
    }
    running_ = true;
    try {
      actor_->on_start();
    } catch (const std::exception& e) {
      fail(SupervisionEvent{id_, "on_start", exception_type_name(e), e.what(), {}});
    }
  } else if (auto* call = std::get_if<CallItem>(&item)) {
    handle_call(*call);
  } else if (std::holds_alternative<StopItem>(item)) {
    begin_stop();
  } else if (auto* child = std::get_if<ChildItem>(&item)) {
    handle_child(*child);
  } else if (auto* bounce = std::get_if<BounceItem>(&item)) {
    try {
      actor_->undeliverable(bounce->what);
    } catch (const std::exception& e) {
      fail(SupervisionEvent{id_, "undeliverable", exception_type_name(e), e.what(), {}});
    }
  }
}

std::optional<std::pair<std::string_view, std::chrono::steady_clock::time_point>> ActorCell::running() const {
  const std::int64_t since = running_since_.load(std::memory_order_acquire);
  const std::string* endpoint = running_endpoint_.load(std::memory_order_relaxed);
  if (since == 0 || !endpoint) return std::nullopt;
  return std::pair{std::string_view(*endpoint),
                   std::chrono::steady_clock::time_point(std::chrono::steady_clock::duration(since))};
}

void ActorCell::handle_call(CallItem& call) {
  const CallHeader& h = call.header;
  if (!running_ || halted_) {
    reject_call(h, ActorStatus::kStopping, "");
    return;
  }
  auto endpoint = table_.endpoints.find(std::string(h.endpoint));
  if (endpoint == table_.endpoints.end()) {
    std::string known;
    for (const auto& [name, _] : table_.endpoints) known += (known.empty() ? "" : ", ") + name;
    proc_.call_failed(h, proc_.id, Failure::call(
                                     Error(Code::kNotFound, "actor " + id_.to_string() + " (" +
                                                                table_.type_name + ") has no endpoint '" +
                                                                std::string(h.endpoint) + "'; it has: " + known)));
    return;
  }
  context_ = call.context;  // cleared once the call is done, synchronously or by its Task
  Invocation invocation;
  struct Running {  // the watchdog's view of this handler, for as long as it runs
    ActorCell& cell;
    Running(ActorCell& c, const std::string* endpoint) : cell(c) {
      cell.running_endpoint_.store(endpoint, std::memory_order_relaxed);
      cell.running_since_.store(std::chrono::steady_clock::now().time_since_epoch().count(), std::memory_order_release);
    }
    ~Running() { cell.running_since_.store(0, std::memory_order_release); }
  } running(*this, &endpoint->first);
  try {
    invocation = endpoint->second(*actor_, std::span(call.msg.body).subspan(call.offset), call.msg.parts,
                                  h.reply ? proc_.reply_header(*h.reply) : wire::Message{});
  } catch (const BadArguments& e) {
    Error error = e.error();
    proc_.call_failed(h, proc_.id, Failure::call(
                                     std::move(error).with_context("call to " + id_.to_string())));
    return;
  } catch (const std::exception& e) {
    endpoint_threw(h.reply, h.endpoint, exception_type_name(e), e.what());
    return;
  } catch (...) {
    endpoint_threw(h.reply, h.endpoint, "unknown exception", "an exception not derived from std::exception");
    return;
  }
  if (auto* reply = std::get_if<wire::Message>(&invocation)) {
    context_.reset();
    if (h.reply) proc_.route(h.reply->proc, std::move(*reply));  // header and value, in one body
    return;
  }
  {
    std::lock_guard lock(mu_);
    busy_ = true;
  }
  std::get<Task<wire::Message>>(std::move(invocation))
      .start_detached([self = shared_from_this(), reply = h.reply, endpoint = std::string(h.endpoint)](
                          std::function<wire::Message()> outcome) {
        self->context_.reset();
        self->call_done(reply, endpoint, outcome);
        std::unique_lock lock(self->mu_);
        self->busy_ = false;
        if (terminal(self->status_)) {
          self->executor_->post([self] { self->finalize(); });
        } else if (!self->queue_.empty() || self->next_ < self->batch_.size()) {
          self->schedule(lock);
        }
      });
}

void ActorCell::call_done(const std::optional<PortId>& reply, std::string_view endpoint,
                          const std::function<wire::Message()>& outcome) {
  ActorCell* previous = tl_cell;
  tl_cell = this;
  try {
    wire::Message value = outcome();
    if (reply) proc_.send_to_port(*reply, true, std::move(value));
  } catch (const std::exception& e) {
    endpoint_threw(reply, endpoint, exception_type_name(e), e.what());
  } catch (...) {
    endpoint_threw(reply, endpoint, "unknown exception", "an exception not derived from std::exception");
  }
  tl_cell = previous;
}

void ActorCell::endpoint_threw(const std::optional<PortId>& reply, std::string_view endpoint,
                               std::string type, std::string what) {
  if (reply) {
    // Someone waits: the exception is theirs, and the actor lives on.
    Failure f{Failure::kRemote, Error(Code::kUnknown, what), type, what, id_.to_string(),
                  std::string(endpoint)};
    proc_.send_to_port(*reply, false, wire::encode(f));
    return;
  }
  fail(SupervisionEvent{id_, std::string(endpoint), std::move(type), std::move(what), {}});
}

void ActorCell::begin_stop() {
  bool last;
  std::vector<std::shared_ptr<ActorCell>> children;
  {
    std::lock_guard lock(mu_);
    if (status_ == ActorStatus::kStopping) return;  // already on its way
    status_ = ActorStatus::kStopping;
    running_ = false;
    children = children_;
    last = children_.empty();
  }
  for (auto& child : children) (void)child->request_stop();
  if (last) terminate(ActorStatus::kStopped, std::nullopt, "stopped");
}

void ActorCell::handle_child(ChildItem& item) {
  bool stopping_done;
  ActorStatus now;
  {
    std::lock_guard lock(mu_);
    std::erase(children_, item.child);
    now = status_;
    stopping_done = status_ == ActorStatus::kStopping && children_.empty();
  }
  if (item.failure && now == ActorStatus::kRunning) {
    const SupervisionEvent& event = *item.failure;
    bool handled = false;
    std::string why;
    try {
      handled = actor_->supervise(event);
    } catch (const std::exception& e) {
      why = " (supervise() threw " + exception_type_name(e) + ": " + e.what() + ")";
    }
    if (!handled) {
      // Passed up: the event keeps naming the actor that failed first; this actor fails with it.
      SupervisionEvent up = event;
      up.via.push_back(id_);
      terminate(ActorStatus::kFailed, std::move(up),
                "child " + event.actor.to_string() + " failed and was not handled" + why + ": " +
                    event.message);
      return;
    }
  }
  if (stopping_done) terminate(ActorStatus::kStopped, std::nullopt, "stopped");
}

void ActorCell::fail(SupervisionEvent event) {
  std::string reason = (event.endpoint.empty() ? std::string() : "endpoint '" + event.endpoint + "' threw ") +
                       (event.exception_type.empty() ? "" : event.exception_type + ": ") + event.message;
  terminate(ActorStatus::kFailed, std::move(event), std::move(reason));
}

void ActorCell::terminate(ActorStatus final_status, std::optional<SupervisionEvent> failure,
                          std::string reason) {
  std::vector<Item> queued;
  std::vector<std::shared_ptr<ActorCell>> children;
  {
    std::lock_guard lock(mu_);
    if (terminal(status_)) return;
    status_ = final_status;
    reason_ = reason;
    halted_ = true;
    running_ = false;
    queued.swap(queue_);
    children = children_;
  }
  reject_rest_of_batch(final_status, reason);  // older than `queued`: rejected first
  if (final_status == ActorStatus::kFailed) {
    log().warn("actor {} failed: {}", id_.to_string(), reason);
  }
  for (auto& item : queued) reject(item, final_status, reason);
  for (auto& child : children) (void)child->request_stop();
  finalize();
  stopped_->set_value(Unit{});
  notify_parent(std::move(failure));
}

void ActorCell::force_stop() {
  std::vector<Item> queued;
  std::vector<std::shared_ptr<ActorCell>> children;
  {
    std::lock_guard lock(mu_);
    if (terminal(status_)) return;
    status_ = ActorStatus::kStopped;
    halted_ = true;
    reason_ = "stopped by force (the graceful stop timed out)";
    queued.swap(queue_);
    children = children_;
  }
  log().warn("actor {}: graceful stop timed out, stopped by force", id_.to_string());
  for (auto& item : queued) reject(item, ActorStatus::kStopped, reason_);
  for (auto& child : children) child->force_stop();
  // cleanup() and the actor's destruction wait for the handler that may still be running.
  executor_->post([self = shared_from_this()] { self->finalize(); });
  stopped_->set_value(Unit{});
  notify_parent(std::nullopt);
}

void ActorCell::finalize() {
  std::unique_ptr<Actor> actor;
  {
    std::lock_guard lock(mu_);
    if (finalized_ || busy_) return;
    finalized_ = true;
    actor = std::move(actor_);
  }
  reject_rest_of_batch(ActorStatus::kStopped, reason());  // what a forced stop left in the batch
  ActorCell* previous = tl_cell;
  tl_cell = this;
  try {
    actor->cleanup();
  } catch (const std::exception& e) {
    log().error("cleanup() of actor {} threw {}: {}", id_.to_string(), exception_type_name(e), e.what());
  }
  actor.reset();
  tl_cell = previous;
}

void ActorCell::notify_parent(std::optional<SupervisionEvent> failure) {
  if (auto parent = parent_.lock()) {
    parent->enqueue(ChildItem{shared_from_this(), std::move(failure)});
  } else if (failure) {
    proc_.root_failed(*failure);
  }
}

void ActorCell::reject(Item& item, ActorStatus status, const std::string& reason) {
  if (auto* call = std::get_if<CallItem>(&item)) {
    reject_call(call->header, status, reason);
  } else if (auto* bounce = std::get_if<BounceItem>(&item)) {
    // Nobody is left to act on it (typically: the proc is shutting down and its channels fail
    // what they had not yet seen acknowledged).
    log().debug("actor {} is {}; dropping an undeliverable notice: {}", id_.to_string(),
               status_name(status), bounce->what.error.to_string());
  }
}

void ActorCell::reject_call(const CallHeader& header, ActorStatus status, const std::string& reason) {
  std::string text = "actor " + id_.to_string() + " is " + std::string(status_name(status)) +
                     (reason.empty() ? "" : " (" + reason + ")") + ": call to '" + std::string(header.endpoint) +
                     "' not handled";
  proc_.call_failed(header, proc_.id, Failure::supervision(
                                        Error(status == ActorStatus::kFailed ? Code::kAborted
                                                                              : Code::kUnavailable,
                                              std::move(text))));
}

}  // namespace sceptre::detail
