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

ExecutorScope::ExecutorScope(Executor* executor) : previous_(tl_executor) { tl_executor = executor; }
ExecutorScope::~ExecutorScope() { tl_executor = previous_; }

void bind_proc_thread(Proc* proc);  // proc.cc

void bind_thread(Executor* executor, Proc* proc) {
  tl_executor = executor;
  bind_proc_thread(proc);
}

ThreadExecutor::ThreadExecutor(Proc* proc, std::string name) {
  thread_ = std::thread([this, state = state_, proc, name = std::move(name)] {
    pthread_setname_np(pthread_self(), name.substr(0, 15).c_str());
    bind_thread(this, proc);
    for (;;) {
      try {
        state->io.run();
        return;
      } catch (const std::exception& e) {
        log().error("exception escaped an actor thread's task: {}", e.what());
      }
    }
  });
}

ThreadExecutor::~ThreadExecutor() {
  state_->work.reset();
  if (thread_.get_id() == std::this_thread::get_id()) {
    thread_.detach();  // run() returns once the current handler is done; the state lives on
    return;
  }
  thread_.join();
}

}  // namespace detail
}  // namespace sceptre
