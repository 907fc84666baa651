#include "sceptre/channel/rx.h"

#include <asio/co_spawn.hpp>
#include <asio/detached.hpp>
#include <asio/post.hpp>
#include <asio/steady_timer.hpp>
#include <condition_variable>
#include <deque>
#include <map>
#include <mutex>
#include <set>

#include "channel/connection.h"
#include "channel/context_impl.h"
#include "channel/handshake.h"
#include "channel/secret.h"
#include "channel/socket.h"
#include "core/log.h"

namespace sceptre::channel {

using Clock = std::chrono::steady_clock;

// The receiver: a listener, the authenticated connections, and per sender (session) the next
// sequence number it expects. Sessions outlive connections so a sender that reconnects
// resumes exactly where it was.
struct Rx::Impl : std::enable_shared_from_this<Rx::Impl> {
  struct Session {
    explicit Session(asio::io_context& io) : ack_timer(io) {}
    std::uint64_t next = 0;
    bool started = false;  // `next` is known (the first frame of a new session sets it)
    std::shared_ptr<Connection> conn;
    std::size_t unacked_messages = 0;
    std::size_t unacked_bytes = 0;
    asio::steady_timer ack_timer;
    bool ack_armed = false;
    Clock::time_point idle_since = Clock::now();
  };

  Impl(Context& ctx, ChannelOptions options, std::string secret, MessageHandler handler)
      : ctx_(ctx.impl()),
        options_(std::move(options)),
        secret_(std::move(secret)),
        handler_(std::move(handler)) {}

  // --- I/O thread ---
  void on_accept(int fd);
  asio::awaitable<void> handshake(std::shared_ptr<Stream> sd);
  void attach(const SessionId& id, Stream sd);
  void on_frames(const SessionId& id, std::vector<wire::Frame>& frames);
  void deliver(wire::Message msg);
  void maybe_ack(Session& s);
  void send_ack(Session& s);
  void drop(Session& s, const std::string& why);
  void sweep_sessions();
  void close_all();

  Result<wire::Message> recv(std::chrono::milliseconds timeout);

  Context::Impl& ctx_;
  ChannelAddr addr_;
  const ChannelOptions options_;
  const std::string secret_;
  const MessageHandler handler_;
  std::unique_ptr<Listener> listener_;
  std::map<SessionId, std::unique_ptr<Session>> sessions_;
  std::set<std::shared_ptr<Stream>> handshaking_;
  bool io_closed_ = false;
  std::atomic<std::size_t> connections_{0};
  std::atomic<std::size_t> rejected_{0};

  // Queue for recv(), shared with callers' threads.
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<wire::Message> queue_;
  bool closed_ = false;
  bool paused_ = false;
  bool resume_posted_ = false;
};

void Rx::Impl::on_accept(int fd) {
  if (io_closed_) {
    ::close(fd);
    return;
  }
  auto stream = adopt_stream(ctx_.io, fd);
  if (!stream) {
    log().warn("{}: {}", addr_.to_string(), stream.error().to_string());
    return;
  }
  auto sd = std::make_shared<Stream>(std::move(*stream));
  handshaking_.insert(sd);
  asio::co_spawn(ctx_.io, handshake(sd), asio::detached);
}

asio::awaitable<void> Rx::Impl::handshake(std::shared_ptr<Stream> sd) {
  auto self = shared_from_this();
  asio::steady_timer timer(ctx_.io, options_.handshake_timeout);
  bool timed_out = false;
  cancel_on_expiry(timer, *sd, timed_out);
  auto session = co_await server_handshake(*sd, secret_);
  std::optional<std::uint64_t> welcome_seq;
  if (session && !io_closed_ && !timed_out) {
    sweep_sessions();
    auto& slot = sessions_[*session];
    if (!slot) slot = std::make_unique<Session>(ctx_.io);
    welcome_seq = slot->started ? slot->next : 0;
    wire::Message empty;  // (a named local: see the note on temporaries in handshake.cc)
    auto sent = co_await write_frame(*sd, wire::FrameKind::kWelcome, *welcome_seq, empty);
    if (!sent) welcome_seq.reset();
  }
  timer.cancel();
  handshaking_.erase(sd);
  if (io_closed_) co_return;
  if (!session || timed_out) {
    Error error = timed_out ? Error(Code::kDeadlineExceeded, "handshake timed out")
                            : session.error();
    if (is_permanent(error) || error.code() == Code::kDeadlineExceeded) {
      ++rejected_;
      log().warn("{} refused a connection: {}", addr_.to_string(), error.to_string());
    } else {
      log().debug("{}: connection lost in handshake: {}", addr_.to_string(), error.to_string());
    }
    co_return;
  }
  if (welcome_seq) attach(*session, std::move(*sd));
}

void Rx::Impl::attach(const SessionId& id, Stream sd) {
  Session& s = *sessions_.at(id);
  if (s.conn) drop(s, "superseded by a new connection from the same sender");
  s.unacked_messages = 0;
  s.unacked_bytes = 0;
  s.conn = std::make_shared<Connection>(
      std::move(sd), options_.limits,
      Connection::Handlers{
          [this, id](std::vector<wire::Frame>& frames) { on_frames(id, frames); },
          [this, id](const Error& error) {
            Session& session = *sessions_.at(id);
            session.conn.reset();
            session.idle_since = Clock::now();
            --connections_;
            log().debug("{}: sender disconnected: {}", addr_.to_string(), error.to_string());
          },
          {},
      });
  ++connections_;
  {
    std::lock_guard lock(mu_);
    if (paused_) s.conn->pause_reading();
  }
  s.conn->start();
}

void Rx::Impl::drop(Session& s, const std::string& why) {
  if (!s.conn) return;
  log().warn("{}: dropping a sender's connection: {}", addr_.to_string(), why);
  s.conn->close();
  s.conn.reset();
  s.idle_since = Clock::now();
  --connections_;
}

void Rx::Impl::on_frames(const SessionId& id, std::vector<wire::Frame>& frames) {
  Session& s = *sessions_.at(id);
  for (wire::Frame& frame : frames) {
    if (frame.kind != wire::FrameKind::kData) {
      drop(s, "unexpected frame kind " + std::to_string(static_cast<int>(frame.kind)));
      return;
    }
    if (!s.started) {
      s.next = frame.seq;
      s.started = true;
    }
    if (frame.seq > s.next) {
      drop(s, "sequence gap: expected " + std::to_string(s.next) + ", got " +
                  std::to_string(frame.seq));
      return;
    }
    ++s.unacked_messages;
    if (frame.seq < s.next) continue;  // a resent duplicate: acknowledge, do not deliver
    ++s.next;
    s.unacked_bytes += frame.msg.byte_size();
    deliver(std::move(frame.msg));
    if (io_closed_ || !s.conn) return;
  }
  maybe_ack(s);
}

void Rx::Impl::deliver(wire::Message msg) {
  if (handler_) {
    try {
      handler_(std::move(msg));
    } catch (const std::exception& e) {
      log().error("{}: message handler threw: {}", addr_.to_string(), e.what());
    }
    return;
  }
  std::lock_guard lock(mu_);
  queue_.push_back(std::move(msg));
  cv_.notify_one();
  if (!paused_ && queue_.size() >= options_.max_rx_queue) {
    paused_ = true;
    for (auto& [id, s] : sessions_) {
      if (s->conn) s->conn->pause_reading();
    }
  }
}

void Rx::Impl::maybe_ack(Session& s) {
  if (s.unacked_messages == 0 || !s.conn) return;
  if (s.unacked_messages >= options_.ack_every_messages ||
      s.unacked_bytes >= options_.ack_every_bytes) {
    send_ack(s);
    return;
  }
  if (s.ack_armed) return;
  s.ack_armed = true;
  s.ack_timer.expires_after(options_.ack_delay);
  s.ack_timer.async_wait([self = shared_from_this(), &s](const asio::error_code& ec) {
    s.ack_armed = false;
    if (!ec && !self->io_closed_) self->send_ack(s);
  });
}

void Rx::Impl::send_ack(Session& s) {
  if (!s.conn || s.unacked_messages == 0) return;
  s.conn->queue(wire::FrameKind::kAck, s.next, wire::Message{});
  s.conn->flush();
  s.unacked_messages = 0;
  s.unacked_bytes = 0;
}

void Rx::Impl::sweep_sessions() {
  auto now = Clock::now();
  for (auto it = sessions_.begin(); it != sessions_.end();) {
    Session& s = *it->second;
    if (!s.conn && !s.ack_armed && now - s.idle_since > options_.session_linger) {
      it = sessions_.erase(it);
    } else {
      ++it;
    }
  }
}

void Rx::Impl::close_all() {
  if (io_closed_) return;
  io_closed_ = true;
  if (listener_) listener_->close();
  for (auto& [id, s] : sessions_) {
    if (s->conn) s->conn->close();
    s->conn.reset();
    s->ack_timer.cancel();
  }
  for (const auto& sd : handshaking_) {
    asio::error_code ignored;
    sd->close(ignored);
  }
  connections_ = 0;
  std::lock_guard lock(mu_);
  closed_ = true;
  cv_.notify_all();
}

Result<wire::Message> Rx::Impl::recv(std::chrono::milliseconds timeout) {
  if (handler_) {
    return Error(Code::kFailedPrecondition,
                 "recv() on " + addr_.to_string() + ", which delivers to a handler");
  }
  std::unique_lock lock(mu_);
  cv_.wait_for(lock, timeout, [&] { return closed_ || !queue_.empty(); });
  if (closed_) return Error(Code::kCancelled, addr_.to_string() + " is closed");
  if (queue_.empty()) {
    return Error(Code::kDeadlineExceeded, "no message on " + addr_.to_string() + " within " +
                                              std::to_string(timeout.count()) + " ms");
  }
  wire::Message msg = std::move(queue_.front());
  queue_.pop_front();
  if (paused_ && !resume_posted_ && queue_.size() <= options_.max_rx_queue / 2) {
    resume_posted_ = true;
    asio::post(ctx_.io, [self = shared_from_this()] {
      {
        std::lock_guard inner(self->mu_);
        self->paused_ = false;
        self->resume_posted_ = false;
      }
      for (auto& [id, s] : self->sessions_) {
        if (s->conn) s->conn->resume_reading();
      }
    });
  }
  return msg;
}

// --- Rx ------------------------------------------------------------------------------------

Rx::Rx(std::shared_ptr<Impl> impl) : impl_(std::move(impl)) {}
Rx::~Rx() { close(); }

const ChannelAddr& Rx::address() const { return impl_->addr_; }

Result<wire::Message> Rx::recv(std::chrono::milliseconds timeout) { return impl_->recv(timeout); }

void Rx::close() {
  impl_->ctx_.run_sync([impl = impl_.get()] { impl->close_all(); });
}

std::size_t Rx::connection_count() const { return impl_->connections_.load(); }
std::size_t Rx::rejected_count() const { return impl_->rejected_.load(); }

Result<std::unique_ptr<Rx>> serve(Context& ctx, const ChannelAddr& addr,
                                  const ChannelOptions& options, MessageHandler handler) {
  auto secret = resolve_secret(options);
  if (!secret) return std::move(secret).error().with_context("serve " + addr.to_string());
  auto impl = std::make_shared<Rx::Impl>(ctx, options, std::move(*secret), std::move(handler));
  Result<std::unique_ptr<Listener>> listener = Error(Code::kInternal, "not started");
  std::weak_ptr<Rx::Impl> weak = impl;
  // The address and the listener are stored on the I/O thread, before any connection it accepts
  // can be handled there (its handlers read them): stored after run_sync, they raced the first
  // connection's handlers (TSan).
  ctx.impl().run_sync([&] {
    listener = listen(ctx.impl().io, addr, [weak](int fd) {
      if (auto self = weak.lock()) {
        self->on_accept(fd);
      } else {
        ::close(fd);
      }
    });
    if (listener) {
      impl->addr_ = (*listener)->address();
      impl->listener_ = std::move(*listener);
    }
  });
  if (!listener) return std::move(listener).error();
  return std::make_unique<Rx>(std::move(impl));
}

}  // namespace sceptre::channel
