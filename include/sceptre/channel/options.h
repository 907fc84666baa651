// ChannelOptions: every knob of a channel, with defaults that suit a training job on one
// cluster. The same options are given to serve() and dial(); each side uses its own fields.
#pragma once

#include <chrono>
#include <cstddef>
#include <string>

#include "sceptre/wire/frame.h"

namespace sceptre::channel {

struct ChannelOptions {
  // The per-job secret both ends must know (challenge-response with HMAC-SHA256). Empty means
  // "take SCEPTRE_SECRET from the environment"; if that is empty too, dial/serve fail.
  std::string secret;

  // Largest frame (body + parts) and part count accepted or sent.
  wire::FrameLimits limits;

  // Sender: messages queued or sent but not yet acknowledged. When either bound is reached,
  // send() refuses (or waits, with a timeout) — backpressure instead of unbounded memory.
  std::size_t max_queued_messages = 1 << 16;
  std::size_t max_queued_bytes = std::size_t{256} << 20;

  // Sender: a message not acknowledged this long after the channel took it (microseconds
  // after send()) fails the Tx; every message not acknowledged is handed back to the
  // sender's undelivered handler.
  std::chrono::milliseconds delivery_timeout{30'000};
  std::chrono::milliseconds connect_timeout{5'000};
  std::chrono::milliseconds handshake_timeout{5'000};
  // Sender: reconnect backoff after a broken connection, doubling from min to max.
  std::chrono::milliseconds reconnect_min{5};
  std::chrono::milliseconds reconnect_max{1'000};

  // Receiver: acknowledge after this many messages or bytes, or this long after the first
  // unacknowledged one, whichever comes first.
  std::size_t ack_every_messages = 256;
  std::size_t ack_every_bytes = std::size_t{1} << 20;
  std::chrono::microseconds ack_delay{2'000};
  // Receiver without a handler: messages waiting for recv(); reading pauses when it is full.
  std::size_t max_rx_queue = 1 << 16;
  // Receiver: how long the state of a disconnected sender (its next sequence number) is kept
  // for it to reconnect and resume.
  std::chrono::milliseconds session_linger{600'000};
};

}  // namespace sceptre::channel
