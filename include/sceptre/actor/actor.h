// Actor: the base of every user actor. An actor is an object whose endpoints (member
// functions registered with SCEPTRE_ACTOR) are called by messages, one message at a time, in
// per-sender FIFO order, on the actor's executor; its state needs no locks.
//
// Lifecycle: created → running (on_start() has run) → stopping → stopped, or → failed. A
// fire-and-forget message whose endpoint throws fails the actor (a caller that waits gets the
// exception as a RemoteError instead, and the actor survives). A failed actor's children are
// stopped, its cleanup() runs, and its parent receives a SupervisionEvent; the parent's
// supervise() may handle it (return true) or not, in which case the parent fails too and the
// event travels up. Above the top actor the proc's supervision handler receives it.
//
// Compute-heavy actors declare `static constexpr bool kOwnThread = true;` to run on a thread
// of their own instead of the proc's I/O thread.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "sceptre/core/ids.h"
#include "sceptre/wire/codec.h"

namespace sceptre {

class Proc;
template <class A>
class ActorRef;
namespace detail {
class ActorCell;
}

enum class ActorStatus : std::uint8_t { kCreated, kRunning, kStopping, kStopped, kFailed };
std::string_view status_name(ActorStatus status);

// Why an actor failed, as its parent (and, unhandled, everyone above) sees it.
struct SupervisionEvent {
  ActorId actor;               // the actor that failed
  std::string endpoint;        // the endpoint whose exception failed it; empty if none
  std::string exception_type;  // demangled type of the exception, if one
  std::string message;         // what went wrong
  // The actors the event passed through on its way up, nearest first (empty at the parent).
  std::vector<ActorId> via;
  SCEPTRE_FIELDS(actor, endpoint, exception_type, message, via)

  std::string to_string() const;
};

// A message that could not be delivered, handed back to the actor that sent it.
struct Undeliverable {
  std::string destination;  // the actor or port, in text form
  std::string endpoint;     // for a call
  Error error;
  SCEPTRE_FIELDS(destination, endpoint, error)
};

class Actor {
 public:
  static constexpr bool kOwnThread = false;

  Actor() = default;
  virtual ~Actor() = default;
  Actor(const Actor&) = delete;
  Actor& operator=(const Actor&) = delete;

  // Valid from on_start() on (not in the constructor).
  const ActorId& id() const;
  Proc& proc() const;
  ActorStatus status() const;
  // A typed reference to this actor, to hand to others.
  template <class A>
  ActorRef<A> ref() const { return ActorRef<A>(id()); }

 protected:
  // Runs on the actor's executor before its first message; throwing fails the actor.
  virtual void on_start() {}
  // Runs on the actor's executor once it stops or fails, after its children have stopped.
  virtual void cleanup() {}
  // A child failed. Return true to handle it; false (or throwing) fails this actor too.
  virtual bool supervise(const SupervisionEvent& event) { return false; }
  // A message this actor sent could not be delivered. The default fails the actor.
  virtual void undeliverable(const Undeliverable& message);

  // Spawns a child in this actor's proc; it is stopped when this actor stops or fails.
  template <class C, class... Args>
  ActorRef<C> spawn(std::string name, Args&&... args);
  // Stops this actor gracefully once the current message is done.
  void stop_self();

 private:
  friend class detail::ActorCell;
  detail::ActorCell* cell_ = nullptr;  // set by the runtime before on_start(); owns this actor
};

}  // namespace sceptre
