// Frames: how a Message crosses a byte stream.
//
//   header (16 bytes, little-endian)
//     u8  magic (0xA7)   u8 kind   u16 part count   u32 body length   u64 seq
//   part lengths        u64 per part
//   body                body length bytes
//   parts               each part's bytes, in order
//
// `seq` is the sequence number of a data frame, the cumulative acknowledgement of an ack frame
// (the next sequence number the receiver expects), and unused otherwise.
//
// FrameDecoder turns a byte stream into frames incrementally and checks everything against
// FrameLimits before allocating: a bad magic, unknown kind, too many parts or a frame larger
// than the limit is a sticky kDataLoss error. Large parts can be received directly into their
// own buffers (direct_target()), so they are never copied through a staging buffer.
#pragma once

#include <array>
#include <optional>
#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "sceptre/core/result.h"
#include "sceptre/wire/message.h"

namespace sceptre::wire {

inline constexpr std::uint8_t kFrameMagic = 0xA7;
inline constexpr std::size_t kFrameHeaderSize = 16;

enum class FrameKind : std::uint8_t {
  kData = 1,       // a message; seq = its sequence number
  kAck = 2,        // seq = next sequence number expected (everything before it was delivered)
  kHello = 3,      // handshake, client to server
  kChallenge = 4,  // handshake, server to client
  kAuth = 5,       // handshake, client to server
  kWelcome = 6,    // handshake accepted; seq = next sequence number the server expects
  kReject = 7,     // handshake refused; body says why
};

struct FrameLimits {
  std::size_t max_frame_bytes = std::size_t{1} << 30;  // body + parts
  std::size_t max_parts = 4096;
};

struct FrameHeader {
  FrameKind kind = FrameKind::kData;
  std::uint16_t num_parts = 0;
  std::uint32_t body_size = 0;
  std::uint64_t seq = 0;
};

struct Frame {
  FrameKind kind = FrameKind::kData;
  std::uint64_t seq = 0;
  Message msg;
};

// Writes header and part-length table for `msg` into `out` (appending). Body and parts follow.
// Fails with kInvalidArgument if the message is over the limits.
Status append_frame_prefix(FrameKind kind, std::uint64_t seq, const Message& msg,
                           const FrameLimits& limits, std::vector<std::byte>& out);

// The whole frame as one buffer: for handshakes and tests, not the data path.
std::vector<std::byte> encode_frame(FrameKind kind, std::uint64_t seq, const Message& msg);

Result<FrameHeader> decode_frame_header(std::span<const std::byte, kFrameHeaderSize> bytes,
                                        const FrameLimits& limits);

class FrameDecoder {
 public:
  explicit FrameDecoder(FrameLimits limits = {}) : limits_(limits) {}

  // Consumes all of `bytes`, appending each completed frame to `out`. After an error every
  // call returns the same error.
  Status feed(std::span<const std::byte> bytes, std::vector<Frame>& out);

  // Where the decoder wants the next bytes when it is inside a part: the rest of that part.
  // Empty when it is not. Bytes written there are then announced with commit_direct().
  std::span<std::byte> direct_target();
  Status commit_direct(std::size_t n, std::vector<Frame>& out);

  // True between frames (nothing partial buffered).
  bool idle() const { return state_ == State::kHeader && staged_ == 0; }

 private:
  enum class State { kHeader, kPartSizes, kBody, kPart };
  Status fail(Error error);
  Status commit_direct_any(std::size_t n, std::vector<Frame>& out);
  Status on_header_complete(std::vector<Frame>& out);
  Status on_sizes_complete(std::vector<Frame>& out);
  void start_part_or_finish(std::vector<Frame>& out);

  FrameLimits limits_;
  State state_ = State::kHeader;
  std::array<std::byte, kFrameHeaderSize> header_buf_{};
  std::vector<std::byte> sizes_buf_;
  std::size_t staged_ = 0;  // bytes of the header / size table / body / part gathered so far
  FrameHeader header_;
  std::vector<std::uint64_t> part_sizes_;
  std::size_t part_index_ = 0;
  Frame current_;
  std::optional<Error> error_;
};

}  // namespace sceptre::wire
