// Rx: the receiving end of a channel, made by serve(). Any number of Tx may dial it; messages
// from each arrive in that sender's order, exactly once; there is no order across senders.
//
// Delivery: with a MessageHandler, each message is handed to it on the Context's I/O thread
// (the fast path: no thread hop). Without one, messages wait in a bounded queue for recv();
// when the queue is full the Rx stops reading, so senders feel backpressure.
//
// Failure: a sender that disconnects, crashes, fails authentication or sends garbage loses
// its own connection (logged); the Rx keeps serving everyone else.
#pragma once

#include <chrono>
#include <functional>
#include <memory>

#include "sceptre/channel/addr.h"
#include "sceptre/channel/context.h"
#include "sceptre/channel/options.h"
#include "sceptre/core/result.h"
#include "sceptre/wire/message.h"

namespace sceptre::channel {

using MessageHandler = std::function<void(wire::Message)>;

class Rx {
 public:
  struct Impl;
  explicit Rx(std::shared_ptr<Impl> impl);
  ~Rx();  // close()
  Rx(const Rx&) = delete;
  Rx& operator=(const Rx&) = delete;

  // The address senders dial: the bound one (a tcp port 0 is resolved here).
  const ChannelAddr& address() const;

  // Next message, waiting up to `timeout`: kDeadlineExceeded when none came, kCancelled once
  // closed, kFailedPrecondition when a handler was given. Any thread.
  Result<wire::Message> recv(std::chrono::milliseconds timeout);

  // Stops listening and closes every connection. Idempotent; waits for the I/O thread, so the
  // handler is not running and will not run after it returns.
  void close();

  // Tests and monitoring: connections currently authenticated and open.
  std::size_t connection_count() const;
  // Tests and monitoring: handshakes refused (wrong secret, replay, bad version, garbage).
  std::size_t rejected_count() const;

 private:
  std::shared_ptr<Impl> impl_;
};

Result<std::unique_ptr<Rx>> serve(Context& ctx, const ChannelAddr& addr,
                                  const ChannelOptions& options, MessageHandler handler = {});

}  // namespace sceptre::channel
