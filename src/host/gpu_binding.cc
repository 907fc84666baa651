#include "host/gpu_binding.h"

#include <sched.h>

#include <cstdlib>
#include <fstream>

namespace sceptre::host {

Result<GpuBinding> gpu_binding(const gpu::Inventory& inv, int index, const std::string& host) {
  if (inv.origin.vendor == gpu::Vendor::kNone) return GpuBinding{};
  const int n = static_cast<int>(inv.devices.size());
  if (index < 0 || index >= n) {
    return Error(Code::kInvalidArgument, "host " + host + " has " + std::to_string(n) + " GPU" + (n == 1 ? "" : "s") +
                                             " (" + std::string(gpu::vendor_name(inv.origin.vendor)) +
                                             "); there is no GPU " + std::to_string(index) + " for a proc to use");
  }
  const gpu::DeviceInfo& d = inv.devices[index];
  std::vector<std::string> env{"SCEPTRE_GPU=" + std::string(gpu::vendor_name(inv.origin.vendor)),
                               "SCEPTRE_GPU_BUS_ID=" + d.pci_bus_id};
  if (inv.origin.vendor == gpu::Vendor::kCuda) {
    env.push_back("CUDA_VISIBLE_DEVICES=" + d.visible_id);
  } else {
    // ROCr narrows the devices to this one; HIP then numbers what is left from 0.
    env.push_back("ROCR_VISIBLE_DEVICES=" + d.visible_id);
    env.push_back("HIP_VISIBLE_DEVICES=0");
  }
  if (auto cpus = local_cpulist(d.pci_bus_id)) env.push_back("SCEPTRE_CPUS=" + *cpus);
  return GpuBinding{std::move(env), d.pci_bus_id};
}

std::optional<std::string> local_cpulist(const std::string& bus_id) {
  const char* root = std::getenv("SCEPTRE_SYSFS");
  std::ifstream in(std::string(root && *root ? root : "/sys") + "/bus/pci/devices/" + bus_id + "/local_cpulist");
  std::string list;
  if (!in || !std::getline(in, list)) return std::nullopt;
  while (!list.empty() && (list.back() == '\n' || list.back() == ' ')) list.pop_back();
  if (list.empty() || !parse_cpulist(list).ok()) return std::nullopt;
  return list;
}

Result<std::vector<int>> parse_cpulist(const std::string& list) {
  std::vector<int> cpus;
  auto bad = [&] { return Error(Code::kInvalidArgument, "not a CPU list: '" + list + "'"); };
  std::size_t pos = 0;
  while (pos < list.size()) {
    std::size_t end = list.find(',', pos);
    if (end == std::string::npos) end = list.size();
    const std::string item = list.substr(pos, end - pos);
    char* e = nullptr;
    const long lo = std::strtol(item.c_str(), &e, 10);
    long hi = lo;
    if (e == item.c_str() || lo < 0) return bad();
    if (*e == '-') {
      const char* h = e + 1;
      hi = std::strtol(h, &e, 10);
      if (e == h || hi < lo) return bad();
    }
    if (*e || hi >= CPU_SETSIZE) return bad();
    for (long c = lo; c <= hi; ++c) cpus.push_back(static_cast<int>(c));
    pos = end + 1;
  }
  if (cpus.empty()) return bad();
  return cpus;
}

std::string apply_cpu_binding() {
  const char* want = std::getenv("SCEPTRE_CPUS");
  if (!want || !*want) return "";
  auto cpus = parse_cpulist(want);
  if (!cpus) return "SCEPTRE_CPUS: " + cpus.error().message() + "; not pinned";
  cpu_set_t allowed, set;
  CPU_ZERO(&set);
  if (::sched_getaffinity(0, sizeof allowed, &allowed) != 0) return "sched_getaffinity failed; not pinned";
  for (int c : *cpus) {
    if (CPU_ISSET(c, &allowed)) CPU_SET(c, &set);
  }
  if (CPU_COUNT(&set) == 0) {
    return std::string("SCEPTRE_CPUS=") + want + ": none of them is allowed here; not pinned";
  }
  if (::sched_setaffinity(0, sizeof set, &set) != 0) return "sched_setaffinity failed; not pinned";
  return "";
}

}  // namespace sceptre::host
