// Connection: one authenticated byte stream after the handshake, carrying frames both ways.
// Used by both ends of a channel (the Tx writes data and reads acks; the Rx does the opposite).
//
// Writing: queue() appends frames; flush() writes everything queued with as few writev calls
// as the kernel allows. Small bodies and parts are copied into one staging buffer so many
// small messages leave in one system call; parts of kCopyLimit bytes or more are written
// from where they live (no copy). While one batch is being written, new frames gather in the
// next one.
// Reading: reads into a staging buffer and decodes frames; a large part is read straight into
// its own buffer. Frames decoded from one read are handed over together (on_frames).
//
// Failure: a read or write error, EOF or an undecodable frame calls on_error once, closes the
// descriptor, and no callback runs after that. close() closes without calling on_error.
// All methods: Context's I/O thread only.
#pragma once

#include <sys/uio.h>

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "channel/stream.h"
#include "sceptre/core/result.h"
#include "sceptre/wire/frame.h"

namespace sceptre::channel {

class Connection : public std::enable_shared_from_this<Connection> {
 public:
  static constexpr std::size_t kCopyLimit = 16 * 1024;
  static constexpr std::size_t kReadBuffer = 64 * 1024;  // per connection: keep it modest
  static constexpr std::size_t kDirectReadMin = 32 * 1024;

  struct Handlers {
    std::function<void(std::vector<wire::Frame>&)> on_frames;
    std::function<void(const Error&)> on_error;
    std::function<void()> on_drained;  // the write queue became empty
  };

  Connection(Stream sd, wire::FrameLimits limits, Handlers handlers);
  ~Connection();

  void start();
  void queue(wire::FrameKind kind, std::uint64_t seq, const wire::Message& msg);
  void flush();
  std::size_t queued_bytes() const { return filling_.bytes + writing_.bytes - written_; }
  bool writing() const { return !writing_.segments.empty(); }

  void pause_reading() { paused_ = true; }
  void resume_reading();

  void close();
  bool closed() const { return closed_; }
  // Tests: shuts the socket down as a network fault would; both ends see the break.
  void break_for_testing();

 private:
  struct Segment {
    std::size_t offset = 0;  // into staging when part is empty
    std::size_t size = 0;
    wire::Part part;         // set for parts written in place
  };
  struct Batch {
    std::vector<std::byte> staging;
    std::vector<Segment> segments;
    std::size_t bytes = 0;
    void clear() {
      staging.clear();
      segments.clear();
      bytes = 0;
    }
  };

  void append_staged(const std::byte* data, std::size_t size);
  void note_staged(std::size_t offset);
  void start_batch();
  void write_some();
  bool write_batch();
  void read_some();
  void on_read(bool into_part, std::size_t n);
  void fail(Error error);

  Stream sd_;
  wire::FrameLimits limits_;
  Handlers handlers_;
  wire::FrameDecoder decoder_;
  std::vector<std::byte> read_buffer_;
  std::vector<wire::Frame> frames_;
  Batch filling_;
  Batch writing_;
  std::vector<iovec> iov_;
  std::size_t iov_index_ = 0;
  std::size_t written_ = 0;  // bytes of writing_ already written
  bool closed_ = false;
  bool paused_ = false;
  bool reading_ = false;
  bool in_drained_ = false;
};

}  // namespace sceptre::channel
