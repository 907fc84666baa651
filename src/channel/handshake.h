// The connection handshake: mutual challenge-response over the per-job secret, plus protocol
// and build versions, before any message is delivered.
//
//   client -> server  HELLO      magic, protocol, build, session id, client nonce
//   server -> client  CHALLENGE  protocol, build, server nonce, server proof
//                     (or REJECT naming both versions when the protocols differ)
//   client -> server  AUTH       client proof
//   server -> client  WELCOME    seq = next sequence number the server expects from the session
//                     (or REJECT when the proof is wrong)
//
// proof = HMAC-SHA256(secret, label || client nonce || server nonce || session id), with
// different labels for the two directions. Fresh random nonces on both sides make a recorded
// AUTH useless on another connection (replay), and the server proves the secret too, so a
// client never sends messages to an impostor.
#pragma once

#include <array>
#include <asio/awaitable.hpp>
#include <cstdint>
#include <functional>
#include <string>

#include "channel/stream.h"
#include "sceptre/core/result.h"
#include "sceptre/wire/archive.h"
#include "sceptre/wire/frame.h"

namespace sceptre::channel {

inline constexpr std::uint32_t kProtocolVersion = 1;
const char* build_version();

using SessionId = std::array<std::uint8_t, 16>;
using Nonce = std::array<std::uint8_t, 32>;
using Proof = std::array<std::uint8_t, 32>;

struct Hello {
  std::string magic = "sceptre";
  std::uint32_t protocol = kProtocolVersion;
  std::string build = build_version();
  SessionId session{};
  Nonce nonce{};
  SCEPTRE_FIELDS(magic, protocol, build, session, nonce)
};

struct Challenge {
  std::uint32_t protocol = kProtocolVersion;
  std::string build = build_version();
  Nonce nonce{};
  Proof proof{};
  SCEPTRE_FIELDS(protocol, build, nonce, proof)
};

struct Auth {
  Proof proof{};
  SCEPTRE_FIELDS(proof)
};

struct Reject {
  Code code = Code::kUnauthenticated;
  std::string reason;
  SCEPTRE_FIELDS(code, reason)
};

// Handshake frames are small; a stranger cannot make us allocate more than this before it
// has proved the secret.
inline constexpr wire::FrameLimits kHandshakeLimits{4096, 0};

Proof make_proof(const std::string& secret, std::string_view label, const Nonce& client_nonce,
                 const Nonce& server_nonce, const SessionId& session);
bool proofs_equal(const Proof& a, const Proof& b);  // constant time
void random_bytes(std::span<std::uint8_t> out);
inline constexpr std::string_view kServerLabel = "sceptre-server";
inline constexpr std::string_view kClientLabel = "sceptre-client";

// Reads / writes one whole frame with asio on a connected descriptor.
asio::awaitable<Result<wire::Frame>> read_frame(Stream& sd,
                                                const wire::FrameLimits& limits);
asio::awaitable<Status> write_frame(Stream& sd, wire::FrameKind kind,
                                    std::uint64_t seq, const wire::Message& msg);

// Client side. Returns the next sequence number the server expects from `session`.
// Errors whose code is kUnauthenticated or kFailedPrecondition are permanent (a wrong secret
// or an incompatible peer does not heal by retrying); others are worth a retry.
asio::awaitable<Result<std::uint64_t>> client_handshake(Stream& sd,
                                                        const std::string& secret,
                                                        const SessionId& session,
                                                        const std::string& peer_name);

// Server side, up to a verified AUTH: returns the session id the client proved. The caller
// then sends WELCOME with the session's next sequence number. Rejections are sent to the
// peer here and returned as errors for the log.
asio::awaitable<Result<SessionId>> server_handshake(Stream& sd,
                                                    const std::string& secret);

bool is_permanent(const Error& error);

}  // namespace sceptre::channel
