// A fake librocm_smi64.so.1: the ROCm SMI functions the HIP health monitor binds
// (src/gpu/hip/rocm_smi_api.h), over the host devices of fake_gpus.h and the faults
// SCEPTRE_FAKE_GPU_FAULTS injects (a lost device leaves SMI's list).
#include <vector>

#include "gpu/fake/fake_gpus.h"
#include "gpu/hip/rocm_smi_api.h"

using namespace sceptre::gpu::rocm_smi;
namespace fake = sceptre::gpu::fake;

namespace {
bool ready = false;
constexpr rsmi_status_t kInvalidArgs = 1, kNotInitialized = 0x8;
// SMI's device numbers: the host's devices that are not lost, in order.
std::vector<int> listed() {
  std::vector<int> out;
  for (int d = 0; d < fake::host_count(); ++d) {
    if (!fake::faults_of(d).lost) out.push_back(d);
  }
  return out;
}
}  // namespace

extern "C" {

rsmi_status_t rsmi_init(std::uint64_t) {
  ready = true;
  return kSuccess;
}
rsmi_status_t rsmi_status_string(rsmi_status_t r, const char** s) {
  *s = r == kSuccess ? "RSMI_STATUS_SUCCESS: success" : r == kNotInitialized ? "RSMI_STATUS_NOT_INITIALIZED" : "RSMI_STATUS_INVALID_ARGS";
  return kSuccess;
}
rsmi_status_t rsmi_num_monitor_devices(std::uint32_t* n) {
  if (!ready) return kNotInitialized;
  *n = static_cast<std::uint32_t>(listed().size());
  return kSuccess;
}
rsmi_status_t rsmi_dev_pci_id_get(std::uint32_t i, std::uint64_t* bdf) {
  const auto l = listed();
  if (!ready || i >= l.size()) return kInvalidArgs;
  *bdf = static_cast<std::uint64_t>(0x10 + l[i]) << 8;  // domain 0, device 0, function 0
  return kSuccess;
}
rsmi_status_t rsmi_dev_ecc_count_get(std::uint32_t i, rsmi_gpu_block_t block, rsmi_error_count_t* ec) {
  const auto l = listed();
  if (!ready || i >= l.size()) return kInvalidArgs;
  if (block != kUmc) return kNotSupported;
  ec->correctable_err = 0;
  ec->uncorrectable_err = fake::faults_of(l[i]).ecc;
  return kSuccess;
}

}  // extern "C"
