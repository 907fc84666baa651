#include "sceptre/wire/frame.h"

#include <cstdio>
#include <cstring>
#include <string>

namespace sceptre::wire {
namespace {

template <class T>
void put(std::byte* at, T value) {
  std::memcpy(at, &value, sizeof(T));
}

template <class T>
T get(const std::byte* at) {
  T value;
  std::memcpy(&value, at, sizeof(T));
  return value;
}

bool known_kind(std::uint8_t kind) {
  return kind >= static_cast<std::uint8_t>(FrameKind::kData) &&
         kind <= static_cast<std::uint8_t>(FrameKind::kReject);
}

}  // namespace

Status append_frame_prefix(FrameKind kind, std::uint64_t seq, const Message& msg,
                           const FrameLimits& limits, std::vector<std::byte>& out) {
  if (msg.parts.size() > limits.max_parts) {
    return Error(Code::kInvalidArgument, "message has " + std::to_string(msg.parts.size()) +
                                             " parts; the limit is " +
                                             std::to_string(limits.max_parts));
  }
  if (msg.byte_size() > limits.max_frame_bytes || msg.body.size() > UINT32_MAX) {
    return Error(Code::kInvalidArgument, "message of " + std::to_string(msg.byte_size()) +
                                             " bytes exceeds the frame limit of " +
                                             std::to_string(limits.max_frame_bytes));
  }
  // Appended with insert (no zero-fill): this runs once per message on the send path.
  std::array<std::byte, kFrameHeaderSize> header;
  std::byte* p = header.data();
  put<std::uint8_t>(p, kFrameMagic);
  put<std::uint8_t>(p + 1, static_cast<std::uint8_t>(kind));
  put<std::uint16_t>(p + 2, static_cast<std::uint16_t>(msg.parts.size()));
  put<std::uint32_t>(p + 4, static_cast<std::uint32_t>(msg.body.size()));
  put<std::uint64_t>(p + 8, seq);
  out.insert(out.end(), header.begin(), header.end());
  for (const Part& part : msg.parts) {
    std::array<std::byte, 8> size;
    put<std::uint64_t>(size.data(), part.size());
    out.insert(out.end(), size.begin(), size.end());
  }
  return {};
}

std::vector<std::byte> encode_frame(FrameKind kind, std::uint64_t seq, const Message& msg) {
  std::vector<std::byte> out;
  FrameLimits unlimited{SIZE_MAX, UINT16_MAX};
  append_frame_prefix(kind, seq, msg, unlimited, out).check();
  out.insert(out.end(), msg.body.begin(), msg.body.end());
  for (const Part& part : msg.parts) out.insert(out.end(), part.data(), part.data() + part.size());
  return out;
}

Result<FrameHeader> decode_frame_header(std::span<const std::byte, kFrameHeaderSize> bytes,
                                        const FrameLimits& limits) {
  const std::byte* p = bytes.data();
  auto magic = get<std::uint8_t>(p);
  if (magic != kFrameMagic) {
    char hex[8];
    std::snprintf(hex, sizeof(hex), "0x%02x", magic);
    return Error(Code::kDataLoss, std::string("bad frame magic ") + hex +
                                      " (not a sceptre peer, or a corrupt stream)");
  }
  auto kind = get<std::uint8_t>(p + 1);
  if (!known_kind(kind)) return Error(Code::kDataLoss, "unknown frame kind " + std::to_string(kind));
  FrameHeader h;
  h.kind = static_cast<FrameKind>(kind);
  h.num_parts = get<std::uint16_t>(p + 2);
  h.body_size = get<std::uint32_t>(p + 4);
  h.seq = get<std::uint64_t>(p + 8);
  if (h.num_parts > limits.max_parts) {
    return Error(Code::kDataLoss, "frame announces " + std::to_string(h.num_parts) +
                                      " parts; the limit is " + std::to_string(limits.max_parts));
  }
  if (h.body_size > limits.max_frame_bytes) {
    return Error(Code::kDataLoss, "frame body of " + std::to_string(h.body_size) +
                                      " bytes exceeds the limit of " +
                                      std::to_string(limits.max_frame_bytes));
  }
  return h;
}

Status FrameDecoder::fail(Error error) {
  error_ = error;
  return error;
}

Status FrameDecoder::feed(std::span<const std::byte> bytes, std::vector<Frame>& out) {
  if (error_) return *error_;
  std::size_t i = 0;
  while (i < bytes.size()) {
    if (state_ == State::kHeader && staged_ == 0 && bytes.size() - i >= kFrameHeaderSize) {
      // Fast path: a whole frame without parts lies in the input; take it in one step.
      auto header = decode_frame_header(
          std::span<const std::byte, kFrameHeaderSize>(bytes.data() + i, kFrameHeaderSize), limits_);
      if (!header) return fail(header.error());
      std::size_t rest = bytes.size() - i - kFrameHeaderSize;
      if (header->num_parts == 0 && rest >= header->body_size) {
        const std::byte* body = bytes.data() + i + kFrameHeaderSize;
        Frame& frame = out.emplace_back(Frame{header->kind, header->seq, {}});
        frame.msg.body.assign(body, body + header->body_size);
        i += kFrameHeaderSize + header->body_size;
        continue;
      }
    }
    std::span<std::byte> target;
    switch (state_) {
      case State::kHeader: target = std::span(header_buf_); break;
      case State::kPartSizes: target = std::span(sizes_buf_); break;
      case State::kBody: target = std::span(current_.msg.body); break;
      case State::kPart: {
        Part& part = current_.msg.parts[part_index_];
        target = std::span(part.mutable_data(), part.size());
        break;
      }
    }
    std::size_t take = std::min(target.size() - staged_, bytes.size() - i);
    std::memcpy(target.data() + staged_, bytes.data() + i, take);
    i += take;
    SCEPTRE_RETURN_IF_ERROR(commit_direct_any(take, out));
  }
  return {};
}

std::span<std::byte> FrameDecoder::direct_target() {
  if (error_ || state_ != State::kPart) return {};
  Part& part = current_.msg.parts[part_index_];
  return {part.mutable_data() + staged_, part.size() - staged_};
}

Status FrameDecoder::commit_direct(std::size_t n, std::vector<Frame>& out) {
  if (error_) return *error_;
  SCEPTRE_CHECK(state_ == State::kPart && n <= direct_target().size());
  return commit_direct_any(n, out);
}

// Accounts `n` bytes just written into the current target and moves on when it is full.
Status FrameDecoder::commit_direct_any(std::size_t n, std::vector<Frame>& out) {
  staged_ += n;
  switch (state_) {
    case State::kHeader:
      if (staged_ == kFrameHeaderSize) {
        staged_ = 0;
        return on_header_complete(out);
      }
      return {};
    case State::kPartSizes:
      if (staged_ == sizes_buf_.size()) {
        staged_ = 0;
        return on_sizes_complete(out);
      }
      return {};
    case State::kBody:
      if (staged_ == current_.msg.body.size()) {
        staged_ = 0;
        start_part_or_finish(out);
      }
      return {};
    case State::kPart:
      if (staged_ == current_.msg.parts[part_index_].size()) {
        staged_ = 0;
        ++part_index_;
        start_part_or_finish(out);
      }
      return {};
  }
  return {};
}

Status FrameDecoder::on_header_complete(std::vector<Frame>& out) {
  auto header = decode_frame_header(std::span<const std::byte, kFrameHeaderSize>(header_buf_),
                                    limits_);
  if (!header) return fail(header.error());
  header_ = *header;
  if (header_.num_parts > 0) {
    sizes_buf_.resize(8 * std::size_t{header_.num_parts});
    state_ = State::kPartSizes;
    return {};
  }
  sizes_buf_.clear();
  return on_sizes_complete(out);
}

Status FrameDecoder::on_sizes_complete(std::vector<Frame>& out) {
  std::size_t total = header_.body_size;
  part_sizes_.resize(header_.num_parts);
  for (std::size_t k = 0; k < part_sizes_.size(); ++k) {
    part_sizes_[k] = get<std::uint64_t>(sizes_buf_.data() + 8 * k);
    if (part_sizes_[k] > limits_.max_frame_bytes - total) {
      return fail(Error(Code::kDataLoss, "frame with parts exceeds the limit of " +
                                             std::to_string(limits_.max_frame_bytes) + " bytes"));
    }
    total += part_sizes_[k];
  }
  current_ = Frame{header_.kind, header_.seq, {}};
  current_.msg.parts.resize(part_sizes_.size());
  part_index_ = 0;
  if (header_.body_size > 0) {
    current_.msg.body.resize(header_.body_size);
    state_ = State::kBody;
    return {};
  }
  start_part_or_finish(out);
  return {};
}

void FrameDecoder::start_part_or_finish(std::vector<Frame>& out) {
  while (part_index_ < part_sizes_.size() && part_sizes_[part_index_] == 0) ++part_index_;
  if (part_index_ < part_sizes_.size()) {
    current_.msg.parts[part_index_] = Part::allocate(part_sizes_[part_index_]);
    state_ = State::kPart;
    return;
  }
  out.push_back(std::move(current_));
  current_ = Frame{};
  state_ = State::kHeader;
}

}  // namespace sceptre::wire
