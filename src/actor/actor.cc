#include "sceptre/actor/actor.h"

#include <array>

#include "actor/actor_cell.h"
#include "sceptre/actor/errors.h"

namespace sceptre {

std::string_view status_name(ActorStatus status) {
  static constexpr std::array<std::string_view, 5> kNames = {"created", "running", "stopping",
                                                              "stopped", "failed"};
  auto i = static_cast<std::size_t>(status);
  return i < kNames.size() ? kNames[i] : "unknown";
}

std::string SupervisionEvent::to_string() const {
  std::string s = "actor " + actor.to_string() + " failed";
  if (!endpoint.empty()) s += " in endpoint '" + endpoint + "'";
  s += ": ";
  if (!exception_type.empty()) s += exception_type + ": ";
  s += message;
  for (const auto& a : via) s += " [passed up by " + a.to_string() + "]";
  return s;
}

const ActorId& Actor::id() const {
  SCEPTRE_CHECK(cell_ != nullptr);
  return cell_->id();
}

Proc& Actor::proc() const {
  SCEPTRE_CHECK(cell_ != nullptr);
  return cell_->proc();
}

ActorStatus Actor::status() const {
  SCEPTRE_CHECK(cell_ != nullptr);
  return cell_->status();
}

void Actor::undeliverable(const Undeliverable& message) {
  throw CallError(Error(message.error.code(), "a message to " + message.destination +
                                                  (message.endpoint.empty() ? "" : " ('" + message.endpoint + "')") +
                                                  " could not be delivered: " + message.error.to_string()));
}

void Actor::stop_self() {
  SCEPTRE_CHECK(cell_ != nullptr);
  (void)cell_->request_stop();
}

}  // namespace sceptre
