#include "sceptre/channel/context.h"

#include "channel/context_impl.h"
#include "core/log.h"

namespace sceptre::channel {

Context::Impl::Impl() {
  thread = std::thread([this] {
    for (;;) {
      try {
        io.run();
        return;
      } catch (const std::exception& e) {
        // A handler threw: a bug in the runtime or in a user handler. Log it and keep the
        // thread alive so the other channels keep working.
        log().error("exception escaped a channel handler: {}", e.what());
      }
    }
  });
}

Context::Impl::~Impl() {
  work.reset();
  io.stop();
  if (thread.joinable()) thread.join();
}

Context::Context() : impl_(std::make_unique<Impl>()) {}
Context::~Context() = default;

bool Context::in_io_thread() const { return impl_->io.get_executor().running_in_this_thread(); }

}  // namespace sceptre::channel
