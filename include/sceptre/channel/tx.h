// Tx: the sending end of a channel, made by dial(). Messages from one Tx reach the Rx at the
// address in order and exactly once, also across broken and re-established connections: each
// carries a sequence number, the receiver acknowledges what it delivered, and after a
// reconnect the sender resends exactly what the receiver says it has not seen.
//
// Failure: a message not acknowledged within ChannelOptions::delivery_timeout, a peer that
// refuses the handshake (wrong secret, incompatible version, not a sceptre peer), or close()
// makes the Tx fail for good (a sticky error, returned by every later call). All messages not
// acknowledged at that moment are handed to the undelivered handler, in order, with the
// error — never dropped silently.
//
// Thread-safety: every method may be called from any thread. The undelivered handler runs on
// the Context's I/O thread.
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <vector>

#include "sceptre/channel/addr.h"
#include "sceptre/channel/context.h"
#include "sceptre/channel/options.h"
#include "sceptre/core/result.h"
#include "sceptre/wire/message.h"

namespace sceptre::channel {

using UndeliveredHandler = std::function<void(std::vector<wire::Message>, const Error&)>;

class Tx {
 public:
  struct Impl;
  explicit Tx(std::shared_ptr<Impl> impl);
  ~Tx();  // close()
  Tx(const Tx&) = delete;
  Tx& operator=(const Tx&) = delete;

  // Queues `msg` and returns at once. On success the message is moved from; on error it is
  // left untouched: kResourceExhausted when the send queue is full, or the Tx's sticky error.
  Status send(wire::Message&& msg);
  // Like send(), but waits up to `wait` for room in a full queue. From the I/O thread it
  // never waits (that would deadlock) and behaves as send().
  Status send(wire::Message&& msg, std::chrono::milliseconds wait);

  // Waits until every message sent so far is acknowledged. kDeadlineExceeded on timeout;
  // the sticky error if the Tx fails meanwhile.
  Status flush(std::chrono::milliseconds timeout);

  // OK while the Tx works (also while it reconnects); its sticky error once it has failed.
  Status status() const;
  const ChannelAddr& peer() const;

  // Fails the Tx with kCancelled: unacknowledged messages go to the undelivered handler before
  // close() returns. Idempotent.
  void close();

  // Tests only: drops the current connection as a network fault would; false when there was
  // no established connection to drop.
  bool break_connection_for_testing();
  // Connections established so far (1 + the number of reconnects).
  std::size_t connection_count() const;

 private:
  std::shared_ptr<Impl> impl_;
};

// Starts a channel to `addr`; connects in the background (and again after every break).
// Fails at once only for an address that cannot be dialled or a missing secret.
Result<std::unique_ptr<Tx>> dial(Context& ctx, const ChannelAddr& addr,
                                 const ChannelOptions& options,
                                 UndeliveredHandler on_undelivered = {});

}  // namespace sceptre::channel
