#include "host/gpu_watch.h"

namespace sceptre::host {

GpuWatch::GpuWatch(std::unique_ptr<gpu::HealthMonitor> monitor, std::chrono::milliseconds interval, InUse in_use,
                   OnFault on_fault)
    : monitor_(std::move(monitor)),
      interval_(interval),
      in_use_(std::move(in_use)),
      on_fault_(std::move(on_fault)),
      thread_([this] { run(); }) {}

GpuWatch::~GpuWatch() {
  {
    std::lock_guard lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  thread_.join();
}

void GpuWatch::run() {
  std::unique_lock lock(mu_);
  while (!cv_.wait_for(lock, interval_, [this] { return stop_; })) {
    lock.unlock();
    const std::vector<std::string> buses = in_use_();
    if (!buses.empty()) {
      for (const auto& fault : monitor_->poll(buses)) on_fault_(fault);
    }
    lock.lock();
  }
}

}  // namespace sceptre::host
