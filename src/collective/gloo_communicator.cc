// The Gloo backend of Communicator: a gloo::rendezvous::Context over Gloo's TCP transport,
// rendezvous through our KeyValue store, gloo::allreduce (ring) with a per-call timeout (Gloo
// counts it per wait, so it bounds silence rather than the collective's length), and abort by
// failing every connection of the context: this member's waiting operations fail at once, and
// its peers' as their connections to it close. (Gloo's own closeConnections() wakes only the
// peers: an operation of this member's own would wait out its timeout, deaf to them too.)
#include <gloo/allreduce.h>
#include <gloo/math.h>
#include <gloo/rendezvous/context.h>
#include <gloo/rendezvous/prefix_store.h>
#include <gloo/rendezvous/store.h>
#include <gloo/transport/tcp/device.h>

#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <mutex>
#include <stdexcept>
#include <thread>

#include "sceptre/collective/communicator.h"

namespace sceptre::collective {

Result<void> MemoryStore::set(const std::string& key, std::string value) {
  {
    std::lock_guard lock(mu_);
    values_[key] = std::move(value);
  }
  cv_.notify_all();
  return {};
}

Result<std::string> MemoryStore::get(const std::string& key, std::chrono::milliseconds timeout) {
  std::unique_lock lock(mu_);
  if (!cv_.wait_for(lock, timeout, [&] { return values_.count(key) != 0; })) {
    return Error(Code::kDeadlineExceeded, "no value for '" + key + "' after " + std::to_string(timeout.count()) + " ms");
  }
  return values_.at(key);
}

namespace {

// Gloo's store interface on top of ours; errors become exceptions, which connect_gloo catches.
class GlooStore final : public gloo::rendezvous::Store {
 public:
  GlooStore(KeyValue& kv, std::string prefix, std::chrono::milliseconds timeout)
      : kv_(kv), prefix_(std::move(prefix)), timeout_(timeout) {}

  void set(const std::string& key, const std::vector<char>& data) override {
    auto r = kv_.set(prefix_ + "/" + key, std::string(data.begin(), data.end()));
    if (!r.ok()) throw std::runtime_error("rendezvous: " + r.error().to_string());
  }
  std::vector<char> get(const std::string& key) override {
    auto r = kv_.get(prefix_ + "/" + key, timeout_);
    if (!r.ok()) throw std::runtime_error("rendezvous: " + r.error().to_string());
    return std::vector<char>(r->begin(), r->end());
  }
  void wait(const std::vector<std::string>& keys) override { wait(keys, timeout_); }
  void wait(const std::vector<std::string>& keys, const std::chrono::milliseconds& timeout) override {
    for (const auto& k : keys) {
      auto r = kv_.get(prefix_ + "/" + k, timeout);
      if (!r.ok()) throw std::runtime_error("rendezvous: " + r.error().to_string());
    }
  }

 private:
  KeyValue& kv_;
  std::string prefix_;
  std::chrono::milliseconds timeout_;
};

// Gloo's TCP event loop (Debian's libgloo, 2022) removes a descriptor for another thread only at
// its next tick, and ticks on an event or every 10 ms; each pair's connect and each pair's close
// wait for that tick, so a 4-member rendezvous took 10-40 ms on an idle loopback. A Ticker is an
// eventfd in the loop's epoll set; while a Poke lives, a thread writes to it every 200 us, so the
// loop ticks that often and those waits end within 200 us.
class Ticker final : public gloo::transport::tcp::Handler {
 public:
  Ticker() : fd_(::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC)) {
    if (fd_ < 0) throw std::runtime_error(std::string("eventfd: ") + std::strerror(errno));
  }
  ~Ticker() override { ::close(fd_); }  // after the loop is gone (closing it leaves the epoll set)
  Ticker(const Ticker&) = delete;
  Ticker& operator=(const Ticker&) = delete;

  void attach(gloo::transport::tcp::Device& device) { device.registerDescriptor(fd_, EPOLLIN, this); }
  void handleEvents(int) override {  // on the loop's thread
    std::uint64_t n;
    while (::read(fd_, &n, sizeof n) < 0 && errno == EINTR) {
    }
  }
  void poke() const {
    const std::uint64_t one = 1;
    while (::write(fd_, &one, sizeof one) < 0 && errno == EINTR) {
    }
  }

 private:
  int fd_;
};

class Poke {
 public:
  explicit Poke(const Ticker& t)
      : thread_([this, &t] {
          while (!done_.load(std::memory_order_relaxed)) {
            t.poke();
            std::this_thread::sleep_for(std::chrono::microseconds(200));
          }
        }) {}
  ~Poke() {
    done_ = true;
    thread_.join();
  }
  Poke(const Poke&) = delete;
  Poke& operator=(const Poke&) = delete;

 private:
  std::atomic<bool> done_{false};
  std::thread thread_;
};

class GlooCommunicator final : public Communicator {
 public:
  GlooCommunicator(std::unique_ptr<Ticker> ticker, std::shared_ptr<gloo::rendezvous::Context> context,
                   std::chrono::milliseconds timeout)
      : ticker_(std::move(ticker)), context_(std::move(context)), timeout_(timeout) {}
  // The pairs' closes, and the loop's end, each wait for a tick of the loop.
  ~GlooCommunicator() override {
    Poke poke(*ticker_);
    context_.reset();  // the last reference to the device too: its loop ends, the ticker stays
  }

  std::size_t rank() const override { return static_cast<std::size_t>(context_->rank); }
  std::size_t size() const override { return static_cast<std::size_t>(context_->size); }
  std::string_view backend() const override { return "gloo"; }

  Result<void> allreduce_sum(std::span<float> data) override {
    {
      std::lock_guard lock(mu_);
      if (aborted_) return Error(Code::kAborted, "the communicator was aborted: " + why_);
      in_flight_ = true;
    }
    Result<void> result;
    if (!data.empty() && context_->size > 1) {
      try {
        gloo::AllreduceOptions opts(context_);
        opts.setInput(data.data(), data.size());
        opts.setOutput(data.data(), data.size());
        opts.setAlgorithm(gloo::AllreduceOptions::Algorithm::RING);
        opts.setReduceFunction(
            static_cast<void (*)(void*, const void*, const void*, std::size_t)>(&gloo::sum<float>));
        opts.setTag(tag_++);
        opts.setTimeout(timeout_);
        gloo::allreduce(opts);
      } catch (const std::exception& e) {
        result = Error(Code::kUnavailable, std::string("allreduce failed: ") + e.what());
      }
    }
    std::lock_guard lock(mu_);
    in_flight_ = false;
    if (aborted_) {
      Poke poke(*ticker_);
      context_->closeConnections();  // the abort that came meanwhile
      if (!result.ok()) result = Error(Code::kAborted, "allreduce aborted: " + why_ + " (" + result.error().message() + ")");
    }
    return result;
  }

  // Gloo's closeConnections() wakes the peers blocked on this member, never an operation of this
  // member's own: that one, and every later notice of the peers' failures, would wait out its
  // timeout. So with a collective in flight, the connections close when it ends, which it does
  // as the failure that caused the abort reaches it (a dead peer's connections close, and each
  // member that fails closes its own).
  void abort(const std::string& why) override {
    std::lock_guard lock(mu_);
    if (aborted_) return;
    aborted_ = true;
    why_ = why;
    if (!in_flight_) {
      Poke poke(*ticker_);
      context_->closeConnections();
    }
  }

 private:
  std::unique_ptr<Ticker> ticker_;  // outlives the loop, which calls it
  std::shared_ptr<gloo::rendezvous::Context> context_;
  std::chrono::milliseconds timeout_;
  std::uint32_t tag_ = 0;
  std::mutex mu_;
  bool aborted_ = false, in_flight_ = false;
  std::string why_;
};

}  // namespace

Result<std::unique_ptr<Communicator>> connect_gloo(KeyValue& store, std::size_t rank, std::size_t size,
                                                   const CommOptions& options) {
  if (size == 0 || rank >= size) {
    return Error(Code::kInvalidArgument,
                 "rank " + std::to_string(rank) + " is not in a communicator of " + std::to_string(size));
  }
  try {
    gloo::transport::tcp::attr attr;
    attr.hostname = options.hostname;
    auto ticker = std::make_unique<Ticker>();  // declared first: it outlives the device's loop
    auto device = gloo::transport::tcp::CreateDevice(attr);
    ticker->attach(static_cast<gloo::transport::tcp::Device&>(*device));
    auto context = std::make_shared<gloo::rendezvous::Context>(static_cast<int>(rank), static_cast<int>(size));
    auto rendezvous = options.rendezvous_timeout.count() > 0 ? options.rendezvous_timeout : options.timeout;
    context->setTimeout(rendezvous);
    GlooStore gloo_store(store, options.prefix, rendezvous);
    {
      Poke poke(*ticker);
      try {
        context->connectFullMesh(gloo_store, device);
      } catch (...) {
        context.reset();  // its pairs close, and the device's loop ends, while the loop ticks
        device.reset();
        throw;
      }
    }
    context->setTimeout(options.timeout);
    return std::unique_ptr<Communicator>(new GlooCommunicator(std::move(ticker), std::move(context), options.timeout));
  } catch (const std::exception& e) {
    return Error(Code::kUnavailable, "gloo rendezvous of rank " + std::to_string(rank) + " of " +
                                         std::to_string(size) + " ('" + options.prefix + "') failed: " + e.what());
  }
}

}  // namespace sceptre::collective
