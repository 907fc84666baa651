// Binding a proc to a GPU of its host, and to the CPUs near it.
//
// A host starts a proc whose ProcSpec names a GPU (its "gpus" coordinate) with the variables the
// vendor's stack reads so that the proc sees that device alone — CUDA_VISIBLE_DEVICES on NVIDIA;
// ROCR_VISIBLE_DEVICES and HIP_VISIBLE_DEVICES on AMD — and, when the host's topology says which
// CPUs are near the device (sysfs' local_cpulist of its PCI function), SCEPTRE_CPUS with them,
// which the proc applies to itself before its first thread starts.
//
// A host without a GPU runtime (gpu::runtime() is none) binds nothing: "gpus" is then only the
// name of a dimension, as on CPU hosts, said once in the log.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "sceptre/core/result.h"
#include "sceptre/gpu/runtime.h"

namespace sceptre::host {

struct GpuBinding {
  std::vector<std::string> env;  // NAME=value, for the proc
  std::string pci_bus_id;        // of the device ("" when nothing is bound)
};
// What binds a proc to device `index` of `inv` (this host's inventory). Errors:
// kInvalidArgument when the host has no device `index` (naming `host` and what it has).
Result<GpuBinding> gpu_binding(const gpu::Inventory& inv, int index, const std::string& host);

// The CPUs near PCI device `bus_id` ("0-15,32-47"), from
// ${SCEPTRE_SYSFS:-/sys}/bus/pci/devices/<bus_id>/local_cpulist; nullopt when unknown.
std::optional<std::string> local_cpulist(const std::string& bus_id);

// "0-3,8,10-11" → {0,1,2,3,8,10,11}; kInvalidArgument for anything else.
Result<std::vector<int>> parse_cpulist(const std::string& list);

// In a proc: pins the process to SCEPTRE_CPUS (when set), as far as its allowed CPUs go. Call
// before any thread starts (threads inherit it). Returns a warning to log, or "" when none.
std::string apply_cpu_binding();

}  // namespace sceptre::host
