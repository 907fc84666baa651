// What the GPU tests' procs report of themselves, and the fake host the tests set up: the
// binary (gpu_proc_test) is its own proc image.
#pragma once

#include <sched.h>

#include <cstdlib>
#include <string>

#include "sceptre/gpu/runtime.h"
#include "sceptre/sceptre.h"

namespace sceptre::testing {

struct GpuView {
  std::string vendor;                         // this proc's gpu::runtime()
  std::int64_t devices = 0;
  std::string bus_id;                         // of its device 0
  std::string cuda_visible, rocr_visible, hip_visible, cpus_env;
  std::string cpus;                           // what it may run on ("0", "1", "0,1")
  SCEPTRE_FIELDS(vendor, devices, bus_id, cuda_visible, rocr_visible, hip_visible, cpus_env, cpus)
};

class GpuProbe : public Actor {
 public:
  GpuView view() {
    gpu::Runtime& rt = gpu::runtime();
    GpuView v;
    v.vendor = std::string(gpu::vendor_name(rt.vendor()));
    v.devices = rt.device_count();
    if (auto d = rt.device(0); d.ok()) v.bus_id = d->pci_bus_id;
    v.cuda_visible = env("CUDA_VISIBLE_DEVICES");
    v.rocr_visible = env("ROCR_VISIBLE_DEVICES");
    v.hip_visible = env("HIP_VISIBLE_DEVICES");
    v.cpus_env = env("SCEPTRE_CPUS");
    cpu_set_t set;
    if (::sched_getaffinity(0, sizeof set, &set) == 0) {
      for (int c = 0; c < CPU_SETSIZE; ++c) {
        if (CPU_ISSET(c, &set)) v.cpus += (v.cpus.empty() ? "" : ",") + std::to_string(c);
      }
    }
    return v;
  }

 private:
  static std::string env(const char* name) {
    const char* v = std::getenv(name);
    return v ? v : "<unset>";
  }
};
SCEPTRE_ACTOR(GpuProbe, view);

}  // namespace sceptre::testing

namespace sceptre::testing {

// The fake host's files (made by main): the sysfs tree (SCEPTRE_SYSFS) in which host device d
// sits near CPU d % 2, and the fault file the fake NVML and ROCm SMI read
// (SCEPTRE_FAKE_GPU_FAULTS).
std::string faults_file();

}  // namespace sceptre::testing
