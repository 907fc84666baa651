#include "channel/handshake.h"

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/rand.h>

#include <asio/experimental/as_tuple.hpp>
#include <asio/read.hpp>
#include <asio/use_awaitable.hpp>
#include <sys/socket.h>

#include <cerrno>
#include <cstring>

#include "sceptre/wire/codec.h"

namespace sceptre::channel {
namespace {

constexpr auto kNoThrow = asio::experimental::as_tuple(asio::use_awaitable);

#define CO_RETURN_IF_ERROR(expr)                                            \
  do {                                                                      \
    auto status_ = (expr);                                                  \
    if (!status_.ok()) co_return std::move(status_).error();                \
  } while (0)

std::string versions_text(std::uint32_t protocol, const std::string& build) {
  return "protocol " + std::to_string(protocol) + " (build " + build + ")";
}

// The next frame, which must be of `kind`; a REJECT becomes the peer's error.
asio::awaitable<Result<wire::Frame>> expect_frame(Stream& sd, wire::FrameKind kind,
                                                  const std::string& peer_name) {
  auto frame = co_await read_frame(sd, kHandshakeLimits);
  if (!frame) co_return std::move(frame).error();
  if (frame->kind == wire::FrameKind::kReject) {
    auto reject = wire::decode<Reject>(frame->msg);
    if (!reject) co_return Error(Code::kFailedPrecondition, peer_name + " sent an unreadable rejection");
    co_return Error(reject->code, peer_name + " refused the connection: " + reject->reason);
  }
  if (frame->kind != kind) {
    co_return Error(Code::kFailedPrecondition,
                    peer_name + " broke the handshake (unexpected frame kind " +
                        std::to_string(static_cast<int>(frame->kind)) + ")");
  }
  co_return frame;
}

template <class T>
asio::awaitable<Result<T>> expect(Stream& sd, wire::FrameKind kind, const std::string& peer_name) {
  auto frame = co_await expect_frame(sd, kind, peer_name);
  if (!frame) co_return std::move(frame).error();
  auto value = wire::decode<T>(frame->msg);
  if (!value) {
    co_return Error(Code::kFailedPrecondition,
                    peer_name + " sent a malformed handshake: " + value.error().message());
  }
  co_return std::move(value).value();
}

// Note on the coroutines in this file: GCC 12 can destroy a non-trivial temporary inside a
// co_await expression twice, so arguments are built in named locals first.
asio::awaitable<Error> reject(Stream& sd, const Error& error) {
  wire::Message msg = wire::encode(Reject{error.code(), error.message()});
  co_await write_frame(sd, wire::FrameKind::kReject, 0, msg);
  co_return error;
}

}  // namespace

const char* build_version() {
#ifdef SCEPTRE_BUILD_VERSION
  return SCEPTRE_BUILD_VERSION;
#else
  return "unknown";
#endif
}

Proof make_proof(const std::string& secret, std::string_view label, const Nonce& client_nonce,
                 const Nonce& server_nonce, const SessionId& session) {
  std::vector<std::uint8_t> transcript(label.begin(), label.end());
  transcript.push_back(0);
  transcript.insert(transcript.end(), client_nonce.begin(), client_nonce.end());
  transcript.insert(transcript.end(), server_nonce.begin(), server_nonce.end());
  transcript.insert(transcript.end(), session.begin(), session.end());
  Proof proof{};
  unsigned int length = 0;
  HMAC(EVP_sha256(), secret.data(), static_cast<int>(secret.size()), transcript.data(),
       transcript.size(), proof.data(), &length);
  SCEPTRE_CHECK(length == proof.size());
  return proof;
}

bool proofs_equal(const Proof& a, const Proof& b) {
  return CRYPTO_memcmp(a.data(), b.data(), a.size()) == 0;
}

void random_bytes(std::span<std::uint8_t> out) {
  SCEPTRE_CHECK(RAND_bytes(out.data(), static_cast<int>(out.size())) == 1);
}

bool is_permanent(const Error& error) {
  return error.code() == Code::kUnauthenticated || error.code() == Code::kFailedPrecondition;
}

asio::awaitable<Result<wire::Frame>> read_frame(Stream& sd,
                                                const wire::FrameLimits& limits) {
  std::array<std::byte, wire::kFrameHeaderSize> header_bytes;
  auto [ec, n] = co_await asio::async_read(sd, asio::buffer(header_bytes), kNoThrow);
  if (ec) co_return Error(Code::kUnavailable, "connection lost during handshake: " + ec.message());
  auto header = wire::decode_frame_header(header_bytes, limits);
  if (!header) {
    co_return Error(Code::kFailedPrecondition,
                    "peer does not speak the sceptre protocol: " + header.error().message());
  }
  wire::Frame frame{header->kind, header->seq, {}};
  frame.msg.body.resize(header->body_size);
  auto [ec2, m] = co_await asio::async_read(sd, asio::buffer(frame.msg.body), kNoThrow);
  if (ec2) co_return Error(Code::kUnavailable, "connection lost during handshake: " + ec2.message());
  co_return frame;
}

asio::awaitable<Status> write_frame(Stream& sd, wire::FrameKind kind,
                                    std::uint64_t seq, const wire::Message& msg) {
  // send(MSG_NOSIGNAL) rather than asio's write(2): a peer that vanished must be an error on
  // this link, never a SIGPIPE for the whole process.
  std::vector<std::byte> bytes = wire::encode_frame(kind, seq, msg);
  std::size_t at = 0;
  while (at < bytes.size()) {
    ssize_t n = ::send(sd.native_handle(), bytes.data() + at, bytes.size() - at, MSG_NOSIGNAL);
    if (n >= 0) {
      at += static_cast<std::size_t>(n);
    } else if (errno == EAGAIN || errno == EWOULDBLOCK) {
      auto [ec] = co_await sd.async_wait(asio::socket_base::wait_write, kNoThrow);
      if (ec) co_return Error(Code::kUnavailable, "connection lost during handshake: " + ec.message());
    } else if (errno != EINTR) {
      co_return Error(Code::kUnavailable,
                      std::string("connection lost during handshake: ") + std::strerror(errno));
    }
  }
  co_return Status();
}

asio::awaitable<Result<std::uint64_t>> client_handshake(Stream& sd,
                                                        const std::string& secret,
                                                        const SessionId& session,
                                                        const std::string& peer_name) {
  Hello hello;
  hello.session = session;
  random_bytes(hello.nonce);
  wire::Message hello_msg = wire::encode(hello);
  CO_RETURN_IF_ERROR(co_await write_frame(sd, wire::FrameKind::kHello, 0, hello_msg));

  auto challenge = co_await expect<Challenge>(sd, wire::FrameKind::kChallenge, peer_name);
  if (!challenge) co_return std::move(challenge).error();
  if (challenge->protocol != kProtocolVersion) {
    co_return Error(Code::kFailedPrecondition,
                    "incompatible peer: this side speaks " +
                        versions_text(kProtocolVersion, build_version()) + ", " + peer_name +
                        " speaks " + versions_text(challenge->protocol, challenge->build));
  }
  Proof expected = make_proof(secret, kServerLabel, hello.nonce, challenge->nonce, session);
  if (!proofs_equal(expected, challenge->proof)) {
    // Tell the server too, so the refusal is logged on both sides.
    Error error(Code::kUnauthenticated,
                peer_name + " failed to prove the job secret (a stranger, or another job)");
    co_return co_await reject(sd, error);
  }
  Auth auth{make_proof(secret, kClientLabel, hello.nonce, challenge->nonce, session)};
  wire::Message auth_msg = wire::encode(auth);
  CO_RETURN_IF_ERROR(co_await write_frame(sd, wire::FrameKind::kAuth, 0, auth_msg));

  auto welcome = co_await expect_frame(sd, wire::FrameKind::kWelcome, peer_name);
  if (!welcome) co_return std::move(welcome).error();
  co_return welcome->seq;
}

asio::awaitable<Result<SessionId>> server_handshake(Stream& sd,
                                                    const std::string& secret) {
  const std::string peer = "client";
  auto hello = co_await expect<Hello>(sd, wire::FrameKind::kHello, peer);
  if (!hello) co_return std::move(hello).error();
  if (hello->magic != "sceptre") {
    Error error(Code::kFailedPrecondition, "not a sceptre hello");
    co_return co_await reject(sd, error);
  }
  if (hello->protocol != kProtocolVersion) {
    Error error(Code::kFailedPrecondition,
                "incompatible peer: server speaks " +
                    versions_text(kProtocolVersion, build_version()) + ", client speaks " +
                    versions_text(hello->protocol, hello->build));
    co_return co_await reject(sd, error);
  }
  Challenge challenge;
  random_bytes(challenge.nonce);
  challenge.proof = make_proof(secret, kServerLabel, hello->nonce, challenge.nonce, hello->session);
  wire::Message challenge_msg = wire::encode(challenge);
  CO_RETURN_IF_ERROR(co_await write_frame(sd, wire::FrameKind::kChallenge, 0, challenge_msg));

  auto auth = co_await expect<Auth>(sd, wire::FrameKind::kAuth, peer);
  if (!auth) co_return std::move(auth).error();
  Proof expected = make_proof(secret, kClientLabel, hello->nonce, challenge.nonce, hello->session);
  if (!proofs_equal(expected, auth->proof)) {
    Error error(Code::kUnauthenticated,
                "authentication failed (wrong job secret, or a replayed handshake)");
    co_return co_await reject(sd, error);
  }
  co_return hello->session;
}

}  // namespace sceptre::channel
