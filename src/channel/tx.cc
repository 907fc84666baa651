#include "sceptre/channel/tx.h"

#include <asio/co_spawn.hpp>
#include <asio/detached.hpp>
#include <asio/post.hpp>
#include <asio/steady_timer.hpp>
#include <condition_variable>
#include <deque>
#include <mutex>
#include <optional>

#include "channel/connection.h"
#include "channel/context_impl.h"
#include "channel/handshake.h"
#include "channel/secret.h"
#include "channel/socket.h"
#include "core/log.h"

namespace sceptre::channel {

using Clock = std::chrono::steady_clock;

// The sender's state machine. Messages move incoming (any thread, under mu_) -> unacked_ (I/O
// thread; written or waiting to be written) -> acknowledged (freed). A broken connection
// rewinds `written_` and the next connection resends from where the receiver says it is.
struct Tx::Impl : std::enable_shared_from_this<Tx::Impl> {
  struct Pending {
    std::uint64_t seq = 0;
    wire::Message msg;
    Clock::time_point sent_at;
  };
  enum class State { kIdle, kConnecting, kConnected, kWaiting, kFailed };
  // Data handed to the connection beyond this waits until it drains (bounded staging).
  static constexpr std::size_t kConnectionHighWater = 4 << 20;

  Impl(Context& ctx, ChannelAddr addr, ChannelOptions options, std::string secret,
       UndeliveredHandler on_undelivered)
      : ctx_(ctx.impl()),
        addr_(std::move(addr)),
        options_(std::move(options)),
        secret_(std::move(secret)),
        on_undelivered_(std::move(on_undelivered)),
        backoff_(options_.reconnect_min),
        retry_timer_(ctx_.io),
        deadline_timer_(ctx_.io) {
    random_bytes(session_);
  }

  Status send(wire::Message&& msg, std::optional<std::chrono::milliseconds> wait);
  Status flush(std::chrono::milliseconds timeout);

  // --- I/O thread ---
  void take_incoming();
  void write_more();
  void connect();
  void on_connected(Stream sd, std::uint64_t next_expected);
  void on_frames(std::vector<wire::Frame>& frames);
  void on_ack(std::uint64_t next_expected);
  void on_broken(const Error& error);
  void retry_later();
  void arm_deadline();
  void fail(Error error);

  Context::Impl& ctx_;
  const ChannelAddr addr_;
  const ChannelOptions options_;
  const std::string secret_;
  const UndeliveredHandler on_undelivered_;
  SessionId session_{};

  // Shared with callers' threads.
  mutable std::mutex mu_;
  std::condition_variable cv_;
  // Threads blocked in send() waiting for room / in flush(). Senders are woken only once the
  // queue has drained to kResumeFraction of its bounds (hysteresis): waking one per
  // acknowledgement would cost a context switch per ack and trickle one message at a time.
  int room_waiters_ = 0;
  int flush_waiters_ = 0;
  static constexpr double kResumeFraction = 0.75;
  std::vector<Pending> incoming_;
  std::size_t queued_messages_ = 0;  // incoming + unacked
  std::size_t queued_bytes_ = 0;
  std::uint64_t accepted_ = 0;  // messages ever accepted by send()
  std::uint64_t acked_ = 0;     // of those, acknowledged
  bool take_posted_ = false;
  std::optional<Error> failed_;
  std::atomic<std::size_t> connections_{0};

  // I/O thread only.
  std::deque<Pending> unacked_;
  std::vector<Pending> spare_;  // an empty vector with capacity, swapped in as incoming_
  std::size_t written_ = 0;  // unacked_[0, written_) are queued on the current connection
  std::uint64_t next_seq_ = 0;
  State state_ = State::kIdle;
  std::shared_ptr<Connection> conn_;
  std::chrono::milliseconds backoff_;
  std::optional<Error> last_error_;
  asio::steady_timer retry_timer_;
  asio::steady_timer deadline_timer_;
  bool deadline_armed_ = false;
};

Status Tx::Impl::send(wire::Message&& msg, std::optional<std::chrono::milliseconds> wait) {
  std::size_t size = msg.byte_size();
  if (size > options_.limits.max_frame_bytes || msg.parts.size() > options_.limits.max_parts ||
      msg.body.size() > UINT32_MAX) {
    return Error(Code::kInvalidArgument,
                 "message of " + std::to_string(size) + " bytes in " +
                     std::to_string(msg.parts.size()) + " parts exceeds the frame limits of " +
                     addr_.to_string());
  }
  std::unique_lock lock(mu_);
  auto has_room = [&] {
    return queued_messages_ == 0 || (queued_messages_ < options_.max_queued_messages &&
                                     queued_bytes_ + size <= options_.max_queued_bytes);
  };
  if (!failed_ && !has_room() && wait && !ctx_.io.get_executor().running_in_this_thread()) {
    ++room_waiters_;
    cv_.wait_for(lock, *wait, [&] { return failed_ || has_room(); });
    --room_waiters_;
  }
  if (failed_) return *failed_;
  if (!has_room()) {
    return Error(Code::kResourceExhausted,
                 "send queue to " + addr_.to_string() + " is full (" +
                     std::to_string(queued_messages_) + " messages, " +
                     std::to_string(queued_bytes_) + " bytes not yet acknowledged)");
  }
  incoming_.push_back(Pending{0, std::move(msg), {}});
  ++queued_messages_;
  queued_bytes_ += size;
  ++accepted_;
  if (ctx_.io.get_executor().running_in_this_thread()) {
    // On the I/O thread (a reply from a handler): write now if the link is idle, rather
    // than after a trip through the scheduler. take_incoming() keeps the order of anything
    // other threads queued before.
    lock.unlock();
    take_incoming();
    return {};
  }
  bool post = !take_posted_;
  take_posted_ = true;
  lock.unlock();
  if (post) asio::post(ctx_.io, [self = shared_from_this()] { self->take_incoming(); });
  return {};
}

Status Tx::Impl::flush(std::chrono::milliseconds timeout) {
  std::unique_lock lock(mu_);
  std::uint64_t target = accepted_;
  ++flush_waiters_;
  bool done = cv_.wait_for(lock, timeout, [&] { return failed_ || acked_ >= target; });
  --flush_waiters_;
  if (failed_) return *failed_;
  if (!done) {
    return Error(Code::kDeadlineExceeded,
                 std::to_string(target - acked_) + " messages to " + addr_.to_string() +
                     " not acknowledged within " + std::to_string(timeout.count()) + " ms");
  }
  return {};
}

void Tx::Impl::take_incoming() {
  // The batch's vector goes back to the callers' side afterwards, so its capacity is reused
  // instead of regrown (and freed on this thread) for every batch.
  std::vector<Pending> batch;
  batch.swap(spare_);
  {
    std::lock_guard lock(mu_);
    batch.swap(incoming_);
    take_posted_ = false;
  }
  if (state_ == State::kFailed) return;
  // One clock reading per batch: the delivery deadline counts from when the channel took the
  // message, microseconds after send() on a healthy I/O thread.
  Clock::time_point now = Clock::now();
  for (Pending& p : batch) {
    p.seq = next_seq_++;
    p.sent_at = now;
    unacked_.push_back(std::move(p));
  }
  batch.clear();
  spare_.swap(batch);
  arm_deadline();
  if (state_ == State::kConnected) {
    write_more();
  } else if (state_ == State::kIdle) {
    connect();
  }
}

void Tx::Impl::write_more() {
  while (written_ < unacked_.size() && conn_->queued_bytes() < kConnectionHighWater) {
    const Pending& p = unacked_[written_++];
    conn_->queue(wire::FrameKind::kData, p.seq, p.msg);
  }
  conn_->flush();
}

void Tx::Impl::connect() {
  state_ = State::kConnecting;
  asio::co_spawn(
      ctx_.io,
      [self = shared_from_this()]() -> asio::awaitable<void> {
        auto fd = co_await connect_fd(self->ctx_.io, self->addr_, self->options_.connect_timeout);
        if (self->state_ != State::kConnecting) {
          if (fd) ::close(*fd);
          co_return;
        }
        if (!fd) {
          self->on_broken(fd.error());
          co_return;
        }
        auto stream = adopt_stream(self->ctx_.io, *fd);
        if (!stream) {
          self->on_broken(stream.error());
          co_return;
        }
        Stream sd = std::move(*stream);
        asio::steady_timer timer(self->ctx_.io, self->options_.handshake_timeout);
        bool timed_out = false;
        cancel_on_expiry(timer, sd, timed_out);
        const std::string peer_name = self->addr_.to_string();
        auto next = co_await client_handshake(sd, self->secret_, self->session_, peer_name);
        timer.cancel();
        if (self->state_ != State::kConnecting) co_return;
        if (timed_out) {
          self->on_broken(Error(Code::kUnavailable, "handshake with " + self->addr_.to_string() +
                                                        " timed out"));
        } else if (!next) {
          if (is_permanent(next.error())) {
            self->fail(next.error());
          } else {
            self->on_broken(next.error());
          }
        } else {
          self->on_connected(std::move(sd), *next);
        }
      },
      asio::detached);
}

void Tx::Impl::on_connected(Stream sd, std::uint64_t next_expected) {
  // Whatever the receiver already has was delivered, even if its ack never reached us.
  on_ack(next_expected);
  written_ = 0;
  state_ = State::kConnected;
  backoff_ = options_.reconnect_min;
  ++connections_;
  conn_ = std::make_shared<Connection>(
      std::move(sd), options_.limits,
      Connection::Handlers{
          [this](std::vector<wire::Frame>& frames) { on_frames(frames); },
          [this](const Error& error) { on_broken(error); },
          [this] { write_more(); },
      });
  conn_->start();
  write_more();
}

void Tx::Impl::on_frames(std::vector<wire::Frame>& frames) {
  for (const wire::Frame& frame : frames) {
    if (frame.kind != wire::FrameKind::kAck) {
      conn_->close();
      on_broken(Error(Code::kDataLoss, addr_.to_string() + " sent an unexpected frame kind " +
                                           std::to_string(static_cast<int>(frame.kind))));
      return;
    }
    on_ack(frame.seq);
  }
}

void Tx::Impl::on_ack(std::uint64_t next_expected) {
  std::size_t messages = 0;
  std::size_t bytes = 0;
  while (!unacked_.empty() && unacked_.front().seq < next_expected) {
    bytes += unacked_.front().msg.byte_size();
    unacked_.pop_front();
    ++messages;
    if (written_ > 0) --written_;
  }
  if (messages == 0) return;
  std::lock_guard lock(mu_);
  queued_messages_ -= messages;
  queued_bytes_ -= bytes;
  acked_ += messages;
  bool drained = queued_messages_ <= options_.max_queued_messages * kResumeFraction &&
                 queued_bytes_ <= options_.max_queued_bytes * kResumeFraction;
  if (flush_waiters_ > 0 || (room_waiters_ > 0 && drained)) cv_.notify_all();
}

void Tx::Impl::on_broken(const Error& error) {
  if (state_ == State::kFailed) return;
  if (conn_) {
    conn_->close();
    conn_.reset();
  }
  written_ = 0;
  last_error_ = error;
  log().debug("channel to {} broken: {}", addr_.to_string(), error.to_string());
  retry_later();
}

void Tx::Impl::retry_later() {
  bool pending;
  {
    std::lock_guard lock(mu_);
    pending = !incoming_.empty();
  }
  if (unacked_.empty() && !pending) {
    state_ = State::kIdle;  // reconnect when there is something to send
    return;
  }
  state_ = State::kWaiting;
  retry_timer_.expires_after(backoff_);
  backoff_ = std::min(backoff_ * 2, options_.reconnect_max);
  retry_timer_.async_wait([self = shared_from_this()](const asio::error_code& ec) {
    if (!ec && self->state_ == State::kWaiting) self->connect();
  });
}

void Tx::Impl::arm_deadline() {
  if (deadline_armed_ || unacked_.empty() || state_ == State::kFailed) return;
  deadline_armed_ = true;
  deadline_timer_.expires_at(unacked_.front().sent_at + options_.delivery_timeout);
  deadline_timer_.async_wait([self = shared_from_this()](const asio::error_code& ec) {
    self->deadline_armed_ = false;
    if (ec || self->state_ == State::kFailed || self->unacked_.empty()) return;
    const Pending& oldest = self->unacked_.front();
    if (Clock::now() >= oldest.sent_at + self->options_.delivery_timeout) {
      std::string why = std::to_string(self->unacked_.size()) + " messages to " +
                        self->addr_.to_string() + " not acknowledged within " +
                        std::to_string(self->options_.delivery_timeout.count()) + " ms";
      if (self->last_error_) why += " (last error: " + self->last_error_->to_string() + ")";
      self->fail(Error(Code::kDeadlineExceeded, why));
      return;
    }
    self->arm_deadline();
  });
}

void Tx::Impl::fail(Error error) {
  if (state_ == State::kFailed) return;
  state_ = State::kFailed;
  std::vector<Pending> incoming;
  {
    std::lock_guard lock(mu_);
    failed_ = error;
    incoming.swap(incoming_);
    queued_messages_ = 0;
    queued_bytes_ = 0;
    cv_.notify_all();
  }
  if (conn_) {
    conn_->close();
    conn_.reset();
  }
  retry_timer_.cancel();
  deadline_timer_.cancel();
  std::vector<wire::Message> undelivered;
  undelivered.reserve(unacked_.size() + incoming.size());
  for (Pending& p : unacked_) undelivered.push_back(std::move(p.msg));
  for (Pending& p : incoming) undelivered.push_back(std::move(p.msg));
  unacked_.clear();
  if (error.code() != Code::kCancelled) {
    log().warn("channel to {} failed: {} ({} messages undelivered)", addr_.to_string(),
               error.to_string(), undelivered.size());
  }
  if (on_undelivered_ && !undelivered.empty()) on_undelivered_(std::move(undelivered), error);
}

// --- Tx ------------------------------------------------------------------------------------

Tx::Tx(std::shared_ptr<Impl> impl) : impl_(std::move(impl)) {}
Tx::~Tx() { close(); }

Status Tx::send(wire::Message&& msg) { return impl_->send(std::move(msg), std::nullopt); }
Status Tx::send(wire::Message&& msg, std::chrono::milliseconds wait) {
  return impl_->send(std::move(msg), wait);
}
Status Tx::flush(std::chrono::milliseconds timeout) { return impl_->flush(timeout); }

Status Tx::status() const {
  std::lock_guard lock(impl_->mu_);
  if (impl_->failed_) return *impl_->failed_;
  return {};
}

const ChannelAddr& Tx::peer() const { return impl_->addr_; }

void Tx::close() {
  impl_->ctx_.run_sync([impl = impl_.get()] {
    impl->fail(Error(Code::kCancelled, "channel to " + impl->addr_.to_string() + " closed"));
  });
}

bool Tx::break_connection_for_testing() {
  bool broke = false;
  impl_->ctx_.run_sync([&, impl = impl_.get()] {
    if (impl->conn_ && !impl->conn_->closed()) {
      impl->conn_->break_for_testing();  // the receiver sees the connection die...
      // ...and so does this side, now rather than when the read notices.
      impl->on_broken(Error(Code::kUnavailable, "connection broken for testing"));
      broke = true;
    }
  });
  return broke;
}

std::size_t Tx::connection_count() const { return impl_->connections_.load(); }

Result<std::unique_ptr<Tx>> dial(Context& ctx, const ChannelAddr& addr,
                                 const ChannelOptions& options,
                                 UndeliveredHandler on_undelivered) {
  auto secret = resolve_secret(options);
  if (!secret) return std::move(secret).error().with_context("dial " + addr.to_string());
  auto impl = std::make_shared<Tx::Impl>(ctx, addr, options, std::move(*secret),
                                         std::move(on_undelivered));
  // Connect now, so the first message does not pay for the handshake.
  asio::post(ctx.impl().io, [impl] {
    if (impl->state_ == Tx::Impl::State::kIdle) impl->connect();
  });
  return std::make_unique<Tx>(std::move(impl));
}

}  // namespace sceptre::channel
