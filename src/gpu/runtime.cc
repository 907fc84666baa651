// Choosing the GPU runtime of this process, the none runtime, and what the backends share.
#include "sceptre/gpu/runtime.h"

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <mutex>

#include "gpu/backends.h"

namespace sceptre::gpu {

std::string_view vendor_name(Vendor vendor) {
  switch (vendor) {
    case Vendor::kCuda: return "cuda";
    case Vendor::kHip: return "hip";
    case Vendor::kNone: break;
  }
  return "none";
}

Code code_of_vendor_error(int code) {
  switch (code) {
    case 1: return Code::kInvalidArgument;       // invalid value
    case 2: return Code::kResourceExhausted;     // out of memory
    case 3: case 4: return Code::kFailedPrecondition;  // not initialised, deinitialised
    case 100: return Code::kUnavailable;         // no device
    case 101: return Code::kInvalidArgument;     // invalid device
    case 214: return Code::kDataLoss;            // uncorrectable ECC error
    case 801: return Code::kUnimplemented;       // not supported
    default: return Code::kInternal;
  }
}

Error vendor_error(const char* fn, int code, const char* name, const char* text) {
  std::string message = std::string(fn) + ": " + (name ? name : "error " + std::to_string(code));
  if (text && (!name || std::string_view(text) != name)) message += std::string(": ") + text;
  return Error(code_of_vendor_error(code), std::move(message));
}

std::optional<std::vector<std::string>> visible_list(const char* var) {
  const char* v = std::getenv(var);
  if (!v) return std::nullopt;
  std::vector<std::string> out;
  std::string_view s(v);
  while (!s.empty()) {
    const auto comma = s.find(',');
    std::string_view entry = s.substr(0, comma);
    while (!entry.empty() && entry.front() == ' ') entry.remove_prefix(1);
    while (!entry.empty() && entry.back() == ' ') entry.remove_suffix(1);
    if (entry.empty()) break;  // as the vendors do: the list ends at the first bad entry
    out.emplace_back(entry);
    if (comma == std::string_view::npos) break;
    s.remove_prefix(comma + 1);
  }
  return out;
}

std::string lower_case(std::string bus_id) {
  std::transform(bus_id.begin(), bus_id.end(), bus_id.begin(), [](unsigned char c) { return std::tolower(c); });
  return bus_id;
}

Status check_device_index(std::string_view vendor, int index, int count) {
  if (index >= 0 && index < count) return ok_status();
  return Error(Code::kInvalidArgument, std::string(vendor) + " device " + std::to_string(index) +
                                           " does not exist (this process sees " + std::to_string(count) + ")");
}

std::vector<std::string> library_names(const char* override_var, const char* default_name) {
  const char* v = std::getenv(override_var);
  if (v && *v) return {v};
  return {default_name};
}

// --- none ------------------------------------------------------------------------------------------

namespace {

class NoneRuntime final : public Runtime {
 public:
  explicit NoneRuntime(std::string why) : why_(std::move(why)) {}
  const Origin& origin() const override { return origin_; }
  int device_count() const override { return 0; }
  Result<DeviceInfo> device(int) const override { return no(); }
  Status set_device(int) override { return no(); }
  Result<void*> allocate(std::size_t) override { return no(); }
  Status free(void*) override { return no(); }
  Status copy_to_device(void*, const void*, std::size_t, Handle) override { return no(); }
  Status copy_to_host(void*, const void*, std::size_t, Handle) override { return no(); }
  Status copy_on_device(void*, const void*, std::size_t, Handle) override { return no(); }
  Result<Handle> create_stream() override { return no(); }
  Status destroy_stream(Handle) override { return no(); }
  Status synchronize(Handle) override { return no(); }
  Result<Handle> create_event() override { return no(); }
  Status destroy_event(Handle) override { return no(); }
  Status record(Handle, Handle) override { return no(); }
  Status wait_event(Handle) override { return no(); }
  Result<bool> query(Handle) override { return no(); }
  Result<float> elapsed_ms(Handle, Handle) override { return no(); }
  Result<int> export_dmabuf(void*, std::size_t) override { return no(); }

 private:
  Error no() const { return Error(Code::kFailedPrecondition, "no GPU runtime: " + why_); }
  const Origin origin_;
  const std::string why_;
};

// One vendor's runtime if it is viable here (it loads and sees a device), else why not.
Result<std::unique_ptr<Runtime>> try_vendor(Vendor v) {
  auto rt = v == Vendor::kCuda ? make_cuda_runtime() : make_hip_runtime();
  if (!rt) return Error(Code::kUnavailable, std::string(vendor_name(v)) + ": " + rt.error().message());
  if ((*rt)->device_count() == 0) {
    return Error(Code::kUnavailable, std::string(vendor_name(v)) + ": " + (*rt)->origin().library + " sees no device");
  }
  return rt;
}

}  // namespace

std::unique_ptr<Runtime> make_none_runtime(std::string why) { return std::make_unique<NoneRuntime>(std::move(why)); }

// --- choosing ---------------------------------------------------------------------------------------

namespace {

// The runtime `which` names; `why` says why a vendor was passed over when it is the none runtime.
Result<std::unique_ptr<Runtime>> choose(std::string_view which, std::string& why) {
  if (which == "none") return make_none_runtime(why = "SCEPTRE_GPU=none");
  if (which == "cuda") return try_vendor(Vendor::kCuda);
  if (which == "hip") return try_vendor(Vendor::kHip);
  if (!which.empty() && which != "auto") {
    return Error(Code::kInvalidArgument,
                 "SCEPTRE_GPU=" + std::string(which) + ": not a GPU runtime (auto, cuda, hip or none)");
  }
  why.clear();
  for (Vendor v : {Vendor::kCuda, Vendor::kHip}) {
    auto rt = try_vendor(v);
    if (rt) return rt;
    why += (why.empty() ? "" : "; ") + rt.error().message();
  }
  return make_none_runtime(why);
}

const char* gpu_env() {
  const char* v = std::getenv("SCEPTRE_GPU");
  return v ? v : "";
}

struct Process {
  std::unique_ptr<Runtime> runtime;
  std::string why;
  Status status;  // load()'s error, if it gave one
};

Process& process() {
  // Never destroyed: procs use their runtime until the very end, and a vendor's library must not
  // be torn down under threads still in it.
  static Process* p = [] {
    auto out = std::make_unique<Process>();
    auto rt = choose(gpu_env(), out->why);
    if (rt) {
      out->runtime = std::move(*rt);
    } else {
      out->why = rt.error().message();
      out->status = rt.error();
      out->runtime = make_none_runtime(out->why);
    }
    return out.release();
  }();
  return *p;
}

}  // namespace

Result<std::unique_ptr<Runtime>> load(std::string_view which) {
  std::string why;
  return choose(which, why);
}

Result<std::unique_ptr<Runtime>> load() { return load(gpu_env()); }

Runtime& runtime() { return *process().runtime; }
const std::string& why_none() { return process().why; }
const Status& load_status() { return process().status; }

Inventory inventory(Runtime& rt) {
  Inventory inv{rt.origin(), {}, {}};
  for (int i = 0; i < rt.device_count(); ++i) {
    auto d = rt.device(i);
    if (d) inv.devices.push_back(std::move(*d));
  }
  return inv;
}

Inventory inventory() {
  Inventory inv = inventory(runtime());
  if (inv.devices.empty()) inv.note = why_none();
  return inv;
}

}  // namespace sceptre::gpu
