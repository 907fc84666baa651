// Context: the I/O thread that runs channels. Every Tx and Rx belongs to one Context, and
// their handlers (message handler, undelivered handler) run on its thread, one at a time.
//
// A Context must outlive the Tx and Rx made with it. Destroying it stops its thread.
#pragma once

#include <memory>

namespace sceptre::channel {

class Context {
 public:
  Context();
  ~Context();
  Context(const Context&) = delete;
  Context& operator=(const Context&) = delete;

  // True when called from this Context's I/O thread.
  bool in_io_thread() const;

  struct Impl;
  Impl& impl() { return *impl_; }

 private:
  std::unique_ptr<Impl> impl_;
};

}  // namespace sceptre::channel
