#include "actor/executors.h"

#include <pthread.h>

#include "core/log.h"
#include "sceptre/actor/proc.h"

namespace sceptre {
namespace {
thread_local Executor* tl_executor = nullptr;
}  // namespace

Executor* current_executor() { return tl_executor; }

namespace detail {

void bind_proc_thread(Proc* proc);  // proc.cc

void bind_thread(Executor* executor, Proc* proc) {
  tl_executor = executor;
  bind_proc_thread(proc);
}

ThreadExecutor::ThreadExecutor(Proc* proc, std::string name) {
  thread_ = std::thread([state = state_, proc, name = std::move(name)] {
    pthread_setname_np(pthread_self(), name.substr(0, 15).c_str());
    bind_thread(state.get(), proc);
    for (;;) {
      try {
        state->io.run();
        break;
      } catch (const std::exception& e) {
        log().error("exception escaped an actor thread's task: {}", e.what());
      }
    }
    std::lock_guard lock(state->mu);
    state->finished = true;
    state->cv.notify_all();
  });
}

ThreadExecutor::~ThreadExecutor() {
  state_->work.reset();
  if (thread_.get_id() == std::this_thread::get_id()) {
    thread_.detach();  // run() returns once the current handler is done; the state lives on
    return;
  }
  // A handler that never returns (what a forced stop leaves behind) keeps this wait going: the
  // thread still touches its actor and proc, so leaving it behind would be worse. Say so.
  std::unique_lock lock(state_->mu);
  for (int waited = 1; !state_->cv.wait_for(lock, kJoinTimeout, [&] { return state_->finished; }); ++waited) {
    log().error("an actor thread's handler has not returned {} s after its actor stopped; still waiting",
                waited * kJoinTimeout.count());
  }
  lock.unlock();
  thread_.join();
}

}  // namespace detail
}  // namespace sceptre
