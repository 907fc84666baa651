#include "channel/connection.h"

#include <sys/socket.h>
#include <unistd.h>

#include <asio/post.hpp>
#include <cerrno>
#include <climits>
#include <cstring>

namespace sceptre::channel {

Connection::Connection(Stream sd, wire::FrameLimits limits,
                       Handlers handlers)
    : sd_(std::move(sd)),
      limits_(limits),
      handlers_(std::move(handlers)),
      decoder_(limits),
      read_buffer_(kReadBuffer) {}

Connection::~Connection() { close(); }

void Connection::start() {
  // Not inline: a failure on the first read must not call back into a caller that is still
  // setting up (a completion never runs inside the call that started it).
  asio::post(sd_.get_executor(), [self = shared_from_this()] { self->read_some(); });
}

void Connection::append_staged(const std::byte* data, std::size_t size) {
  std::size_t offset = filling_.staging.size();
  filling_.staging.insert(filling_.staging.end(), data, data + size);
  note_staged(offset);
}

// Accounts the staging bytes from `offset` to the end as the next segment; contiguous staged
// bytes share one segment (one iovec).
void Connection::note_staged(std::size_t offset) {
  std::size_t size = filling_.staging.size() - offset;
  if (size == 0) return;
  filling_.bytes += size;
  if (!filling_.segments.empty() && filling_.segments.back().part.empty() &&
      filling_.segments.back().offset + filling_.segments.back().size == offset) {
    filling_.segments.back().size += size;
  } else {
    filling_.segments.push_back(Segment{offset, size, {}});
  }
}

void Connection::queue(wire::FrameKind kind, std::uint64_t seq, const wire::Message& msg) {
  if (closed_) return;
  std::size_t offset = filling_.staging.size();
  // A message over the limits was refused by the sender before it got here.
  wire::append_frame_prefix(kind, seq, msg, limits_, filling_.staging).check();
  filling_.staging.insert(filling_.staging.end(), msg.body.begin(), msg.body.end());
  note_staged(offset);
  for (const wire::Part& part : msg.parts) {
    if (part.size() < kCopyLimit) {
      append_staged(part.data(), part.size());
    } else {
      filling_.segments.push_back(Segment{0, part.size(), part});
      filling_.bytes += part.size();
    }
  }
}

void Connection::flush() {
  // Inside on_drained the write loop below picks the new frames up itself.
  if (closed_ || writing() || in_drained_ || filling_.segments.empty()) return;
  start_batch();
  write_some();
}

void Connection::start_batch() {
  std::swap(writing_, filling_);
  filling_.clear();
  written_ = 0;
  iov_.clear();
  iov_index_ = 0;
  for (const Segment& s : writing_.segments) {
    const std::byte* base = s.part.empty() ? writing_.staging.data() + s.offset : s.part.data();
    iov_.push_back(iovec{const_cast<std::byte*>(base), s.size});
  }
}

void Connection::write_some() {
  auto self = shared_from_this();  // a failure below may drop the owner's reference
  for (;;) {
    if (!write_batch()) return;
    writing_.clear();
    written_ = 0;
    if (filling_.segments.empty() && handlers_.on_drained) {
      in_drained_ = true;
      handlers_.on_drained();
      in_drained_ = false;
    }
    if (closed_ || filling_.segments.empty()) return;
    start_batch();
  }
}

// Writes the current batch; false when it must wait for the socket (or failed).
bool Connection::write_batch() {
  while (!closed_ && iov_index_ < iov_.size()) {
    int count = static_cast<int>(std::min<std::size_t>(iov_.size() - iov_index_, IOV_MAX));
    msghdr header{};
    header.msg_iov = iov_.data() + iov_index_;
    header.msg_iovlen = static_cast<std::size_t>(count);
    ssize_t n = ::sendmsg(sd_.native_handle(), &header, MSG_NOSIGNAL);
    if (n < 0) {
      if (errno == EINTR) continue;
      if (errno == EAGAIN || errno == EWOULDBLOCK) {
        sd_.async_wait(asio::socket_base::wait_write,
                       [self = shared_from_this()](const asio::error_code& ec) {
                         if (!ec && !self->closed_) self->write_some();
                       });
        return false;
      }
      fail(Error(Code::kUnavailable, std::string("write failed: ") + std::strerror(errno)));
      return false;
    }
    written_ += static_cast<std::size_t>(n);
    auto left = static_cast<std::size_t>(n);
    while (left > 0 && iov_index_ < iov_.size()) {
      iovec& v = iov_[iov_index_];
      std::size_t take = std::min(left, v.iov_len);
      v.iov_base = static_cast<char*>(v.iov_base) + take;
      v.iov_len -= take;
      left -= take;
      if (v.iov_len == 0) ++iov_index_;
    }
  }
  return !closed_;
}

// Reads go through asio's async_read_some rather than async_wait + read: async_wait re-arms
// the descriptor in epoll (an epoll_ctl) every time, async_read_some does not. asio still
// tries one speculative read before waiting, which finds nothing after a short read — one
// extra system call, but after the handler has run, so off a round trip's critical path.
void Connection::read_some() {
  if (closed_ || paused_ || reading_) return;
  std::span<std::byte> direct = decoder_.direct_target();
  bool into_part = direct.size() >= kDirectReadMin;
  asio::mutable_buffer target = into_part ? asio::buffer(direct.data(), direct.size())
                                          : asio::buffer(read_buffer_);
  reading_ = true;
  sd_.async_read_some(target, [self = shared_from_this(), into_part](const asio::error_code& ec,
                                                                      std::size_t n) {
    self->reading_ = false;
    if (self->closed_) return;
    if (ec) {
      self->fail(Error(Code::kUnavailable, ec == asio::error::eof
                                               ? std::string("peer closed the connection")
                                               : "read failed: " + ec.message()));
      return;
    }
    self->on_read(into_part, n);
  });
}

void Connection::on_read(bool into_part, std::size_t n) {
  Status status = into_part ? decoder_.commit_direct(n, frames_)
                            : decoder_.feed(std::span(read_buffer_.data(), n), frames_);
  if (!frames_.empty()) {
    handlers_.on_frames(frames_);
    frames_.clear();
  }
  if (closed_) return;
  if (!status.ok()) {
    fail(std::move(status).error().with_context("decoding a frame"));
    return;
  }
  read_some();
}

void Connection::resume_reading() {
  if (!paused_) return;
  paused_ = false;
  asio::post(sd_.get_executor(), [self = shared_from_this()] { self->read_some(); });
}

void Connection::fail(Error error) {
  if (closed_) return;
  auto on_error = handlers_.on_error;
  close();
  if (on_error) on_error(error);
}

void Connection::close() {
  if (closed_) return;
  closed_ = true;  // handlers stay (one may be running); none is called after this
  asio::error_code ignored;
  sd_.close(ignored);
}

void Connection::break_for_testing() {
  if (!closed_) ::shutdown(sd_.native_handle(), SHUT_RDWR);
}

}  // namespace sceptre::channel
