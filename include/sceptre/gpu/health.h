// gpu::HealthMonitor: what the vendor's management library says is wrong with a host's GPUs.
//
// The seed's list of failures starts with GPU memory errors: a replica on a GPU that has begun
// to fail must be taken out before it corrupts a step. A host polls its monitor for the devices
// its procs are bound to and fails those procs when their device is unhealthy (src/host/
// gpu_watch.h), so that the failure reaches supervision as any proc's death does, with why.
//
// Loaded at run time like the Runtime: NVML (libnvidia-ml.so.1, SCEPTRE_NVML_LIBRARY) for CUDA
// hosts, ROCm SMI (librocm_smi64.so, SCEPTRE_ROCM_SMI_LIBRARY) for HIP hosts.
//
// What counts as unhealthy: uncorrectable ECC errors since the driver loaded; pages retired and
// awaiting a reset (NVML) or retired (ROCm SMI); the device lost from the bus; hardware
// slowdown (thermal or power brake) that persists over `throttle_polls` polls.
//
// Threads: poll() from one thread at a time.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "sceptre/core/result.h"
#include "sceptre/gpu/runtime.h"

namespace sceptre::gpu {

struct Fault {
  std::string pci_bus_id;  // lower case, as DeviceInfo's
  std::string what;        // "2 uncorrectable ECC errors", "lost from the bus"
};

class HealthMonitor {
 public:
  virtual ~HealthMonitor() = default;
  virtual const std::string& library() const = 0;  // the path it was loaded from
  // The devices of `bus_ids` that are unhealthy now, each with why. A device the library cannot
  // find is a fault ("not found by <library>"); a query the device does not support (ECC on a
  // card without it) is no fault.
  virtual std::vector<Fault> poll(const std::vector<std::string>& bus_ids) = 0;
};

// The monitor of `vendor`'s GPUs; kUnavailable (with why) when its library is not viable here,
// kInvalidArgument for kNone. Hardware slowdown is a fault once seen on `throttle_polls` polls
// in a row.
Result<std::unique_ptr<HealthMonitor>> load_health(Vendor vendor, int throttle_polls = 3);

}  // namespace sceptre::gpu
