// GpuWatch: a host's thread that polls the health of the GPUs its procs are bound to.
//
// Every `interval` it asks the vendor's health monitor (gpu/health.h) about the devices
// `in_use` names and tells `on_fault` of each unhealthy one, every poll while it stays so: the
// host fails the procs bound to it (LocalHost), and the failure reaches supervision as any
// proc's death does, with the fault in its stderr tail.
//
// Threads: its own. `in_use` and `on_fault` run on it. The destructor stops and joins it (a poll
// under way finishes first).
#pragma once

#include <chrono>
#include <condition_variable>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "sceptre/gpu/health.h"

namespace sceptre::host {

class GpuWatch {
 public:
  using InUse = std::function<std::vector<std::string>()>;
  using OnFault = std::function<void(const gpu::Fault&)>;
  GpuWatch(std::unique_ptr<gpu::HealthMonitor> monitor, std::chrono::milliseconds interval, InUse in_use,
           OnFault on_fault);
  ~GpuWatch();
  GpuWatch(const GpuWatch&) = delete;
  GpuWatch& operator=(const GpuWatch&) = delete;

 private:
  void run();
  const std::unique_ptr<gpu::HealthMonitor> monitor_;
  const std::chrono::milliseconds interval_;
  const InUse in_use_;
  const OnFault on_fault_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool stop_ = false;
  std::thread thread_;  // last: starts once the rest is set
};

}  // namespace sceptre::host
