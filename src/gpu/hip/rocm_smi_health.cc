// The HIP health monitor: ROCm SMI, opened at run time (rocm_smi_api.h lists what it uses).
#include <cstdio>
#include <map>

#include "gpu/backends.h"
#include "gpu/dynlib.h"
#include "gpu/hip/rocm_smi_api.h"
#include "sceptre/gpu/health.h"

namespace sceptre::gpu {
namespace {

using namespace rocm_smi;  // NOLINT: ROCm SMI's own names read best here

// ROCm SMI's BDF id: domain in bits 63..32, bus 15..8, device 7..3, function 2..0.
std::string bus_id_of(std::uint64_t bdf) {
  char b[32];
  std::snprintf(b, sizeof b, "%04x:%02x:%02x.%x", static_cast<unsigned>(bdf >> 32), static_cast<unsigned>((bdf >> 8) & 0xff),
                static_cast<unsigned>((bdf >> 3) & 0x1f), static_cast<unsigned>(bdf & 0x7));
  return b;
}

class RocmSmiHealth final : public HealthMonitor {
 public:
  RocmSmiHealth(Api api, std::string library) : api_(api), library_(std::move(library)) {}
  const std::string& library() const override { return library_; }

  std::vector<Fault> poll(const std::vector<std::string>& bus_ids) override {
    // SMI numbers devices its own way: find each by its bus id, every poll (a lost device
    // leaves the list).
    std::map<std::string, std::uint32_t> index;
    std::uint32_t n = 0;
    if (api_.rsmi_num_monitor_devices(&n) == kSuccess) {
      for (std::uint32_t i = 0; i < n; ++i) {
        std::uint64_t bdf = 0;
        if (api_.rsmi_dev_pci_id_get(i, &bdf) == kSuccess) index[bus_id_of(bdf)] = i;
      }
    }
    std::vector<Fault> faults;
    for (const auto& bus : bus_ids) {
      auto it = index.find(bus);
      if (it == index.end()) {
        faults.push_back(Fault{bus, "lost from the bus (ROCm SMI does not find it)"});
        continue;
      }
      rsmi_error_count_t ec{};
      const rsmi_status_t r = api_.rsmi_dev_ecc_count_get(it->second, kUmc, &ec);
      if (r == kSuccess && ec.uncorrectable_err > 0) {
        faults.push_back(Fault{bus, std::to_string(ec.uncorrectable_err) + " uncorrectable ECC error" +
                                        (ec.uncorrectable_err == 1 ? "" : "s")});
      }
    }
    return faults;
  }

 private:
  const Api api_;
  const std::string library_;
};

}  // namespace

Result<std::unique_ptr<HealthMonitor>> make_rocm_smi_health() {
  auto lib = DynLib::open(library_names("SCEPTRE_ROCM_SMI_LIBRARY", "librocm_smi64.so.1"));
  if (!lib) return Error(Code::kUnavailable, "rocm-smi: " + lib.error().message());
  Api api;
#define SCEPTRE_ROCM_SMI_BIND(name, type) \
  if (auto s = lib->bind(api.name, #name); !s.ok()) return Error(Code::kUnavailable, "rocm-smi: " + s.error().message());
  SCEPTRE_ROCM_SMI_FUNCTIONS(SCEPTRE_ROCM_SMI_BIND)
#undef SCEPTRE_ROCM_SMI_BIND
  if (rsmi_status_t r = api.rsmi_init(0); r != kSuccess) {
    const char* s = nullptr;
    if (api.rsmi_status_string(r, &s) != kSuccess) s = nullptr;
    return Error(Code::kUnavailable, "rocm-smi: rsmi_init: " + std::string(s ? s : "error " + std::to_string(r)));
  }
  return std::unique_ptr<HealthMonitor>(std::make_unique<RocmSmiHealth>(api, lib->path()));
}

}  // namespace sceptre::gpu
