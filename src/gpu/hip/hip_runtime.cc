// The HIP backend: AMD's HIP runtime, opened at run time (hip_api.h lists what it uses).
//
// HIP binds a device to a thread (hipSetDevice), device 0 until the thread binds another, so
// this backend keeps no state of its own beyond the devices it found.
#include <cstdlib>

#include "gpu/backends.h"
#include "gpu/dynlib.h"
#include "gpu/hip/hip_api.h"

namespace sceptre::gpu {
namespace {

using namespace hip;  // NOLINT: the runtime's own names read best here

hipStream_t stream_of(Runtime::Handle h) { return static_cast<hipStream_t>(h); }
hipEvent_t event_of(Runtime::Handle h) { return static_cast<hipEvent_t>(h); }

Status check(const Api& api, const char* fn, hipError_t r) {
  if (r == kSuccess) return ok_status();
  return vendor_error(fn, r, api.hipGetErrorName(r), api.hipGetErrorString(r));
}

// What selects device `i` of this process in a child's ROCR_VISIBLE_DEVICES: ROCr filters the
// devices first, then HIP_VISIBLE_DEVICES (or CUDA_VISIBLE_DEVICES, which HIP also reads) indexes
// what ROCr left.
std::string visible_id(int i) {
  std::string id = std::to_string(i);
  auto hip = visible_list("HIP_VISIBLE_DEVICES");
  if (!hip) hip = visible_list("CUDA_VISIBLE_DEVICES");
  if (hip && static_cast<std::size_t>(i) < hip->size()) id = (*hip)[i];
  const auto rocr = visible_list("ROCR_VISIBLE_DEVICES");
  if (rocr) {
    char* end = nullptr;
    const unsigned long k = std::strtoul(id.c_str(), &end, 10);
    if (end && !*end && k < rocr->size()) id = (*rocr)[k];
  }
  return id;
}

class HipRuntime final : public Runtime {
 public:
  HipRuntime(Api api, Origin origin) : api_(api), origin_(std::move(origin)) {}

  Status discover() {
    int n = 0;
    SCEPTRE_RETURN_IF_ERROR(check("hipGetDeviceCount", api_.hipGetDeviceCount(&n)));
    for (int i = 0; i < n; ++i) {
      hipDevice_t d = 0;
      SCEPTRE_RETURN_IF_ERROR(check("hipDeviceGet", api_.hipDeviceGet(&d, i)));
      char name[256] = {}, bus[32] = {};
      std::size_t memory = 0;
      SCEPTRE_RETURN_IF_ERROR(check("hipDeviceGetName", api_.hipDeviceGetName(name, sizeof name, d)));
      SCEPTRE_RETURN_IF_ERROR(check("hipDeviceTotalMem", api_.hipDeviceTotalMem(&memory, d)));
      SCEPTRE_RETURN_IF_ERROR(check("hipDeviceGetPCIBusId", api_.hipDeviceGetPCIBusId(bus, sizeof bus, i)));
      devices_.push_back(DeviceInfo{i, name, lower_case(bus), memory, visible_id(i)});
    }
    return ok_status();
  }

  const Origin& origin() const override { return origin_; }
  int device_count() const override { return static_cast<int>(devices_.size()); }
  Result<DeviceInfo> device(int index) const override {
    SCEPTRE_RETURN_IF_ERROR(check_index(index));
    return devices_[index];
  }
  Status set_device(int index) override {
    SCEPTRE_RETURN_IF_ERROR(check_index(index));
    return check("hipSetDevice", api_.hipSetDevice(index));
  }

  Result<void*> allocate(std::size_t bytes) override {
    void* p = nullptr;
    SCEPTRE_RETURN_IF_ERROR(check("hipMalloc", api_.hipMalloc(&p, bytes)));
    return p;
  }
  Status free(void* device_ptr) override { return check("hipFree", api_.hipFree(device_ptr)); }

  Status copy_to_device(void* dst, const void* src, std::size_t bytes, Handle stream) override {
    return copy(dst, src, bytes, kHostToDevice, stream);
  }
  Status copy_to_host(void* dst, const void* src, std::size_t bytes, Handle stream) override {
    return copy(dst, src, bytes, kDeviceToHost, stream);
  }
  Status copy_on_device(void* dst, const void* src, std::size_t bytes, Handle stream) override {
    return copy(dst, src, bytes, kDeviceToDevice, stream);
  }

  Result<Handle> create_stream() override {
    hipStream_t s = nullptr;
    SCEPTRE_RETURN_IF_ERROR(check("hipStreamCreate", api_.hipStreamCreate(&s)));
    return static_cast<Handle>(s);
  }
  Status destroy_stream(Handle stream) override {
    return check("hipStreamDestroy", api_.hipStreamDestroy(stream_of(stream)));
  }
  Status synchronize(Handle stream) override {
    return check("hipStreamSynchronize", api_.hipStreamSynchronize(stream_of(stream)));
  }

  Result<Handle> create_event() override {
    hipEvent_t e = nullptr;
    SCEPTRE_RETURN_IF_ERROR(check("hipEventCreate", api_.hipEventCreate(&e)));
    return static_cast<Handle>(e);
  }
  Status destroy_event(Handle event) override {
    return check("hipEventDestroy", api_.hipEventDestroy(event_of(event)));
  }
  Status record(Handle event, Handle stream) override {
    return check("hipEventRecord", api_.hipEventRecord(event_of(event), stream_of(stream)));
  }
  Status wait_event(Handle event) override {
    return check("hipEventSynchronize", api_.hipEventSynchronize(event_of(event)));
  }
  Result<bool> query(Handle event) override {
    const hipError_t r = api_.hipEventQuery(event_of(event));
    if (r == kNotReady) return false;
    SCEPTRE_RETURN_IF_ERROR(check("hipEventQuery", r));
    return true;
  }
  Result<float> elapsed_ms(Handle start, Handle end) override {
    float ms = 0;
    SCEPTRE_RETURN_IF_ERROR(check("hipEventElapsedTime", api_.hipEventElapsedTime(&ms, event_of(start), event_of(end))));
    return ms;
  }

  Result<int> export_dmabuf(void* device_ptr, std::size_t bytes) override {
    if (!api_.hipMemGetHandleForAddressRange) {
      return Error(Code::kUnimplemented, "HIP runtime " + origin_.version + " cannot export dmabuf "
                                         "(no hipMemGetHandleForAddressRange; ROCm 6 has it)");
    }
    int fd = -1;
    SCEPTRE_RETURN_IF_ERROR(check("hipMemGetHandleForAddressRange",
                                  api_.hipMemGetHandleForAddressRange(&fd, device_ptr, bytes, kDmaBufFd, 0)));
    return fd;
  }

 private:
  Status check(const char* fn, hipError_t r) const { return gpu::check(api_, fn, r); }
  Status check_index(int index) const { return check_device_index("HIP", index, device_count()); }
  Status copy(void* dst, const void* src, std::size_t bytes, hipMemcpyKind kind, Handle stream) {
    return check("hipMemcpyAsync", api_.hipMemcpyAsync(dst, src, bytes, kind, stream_of(stream)));
  }

  const Api api_;
  const Origin origin_;
  std::vector<DeviceInfo> devices_;  // fixed after discover()
};

}  // namespace

Result<std::unique_ptr<Runtime>> make_hip_runtime() {
  auto lib = DynLib::open(library_names("SCEPTRE_HIP_LIBRARY", "libamdhip64.so"));
  if (!lib) return std::move(lib).error();
  Api api;
#define SCEPTRE_HIP_BIND(name, type) SCEPTRE_RETURN_IF_ERROR(lib->bind(api.name, #name));
  SCEPTRE_HIP_FUNCTIONS(SCEPTRE_HIP_BIND)
#undef SCEPTRE_HIP_BIND
#define SCEPTRE_HIP_BIND_OPTIONAL(name, type) lib->bind_optional(api.name, #name);
  SCEPTRE_HIP_OPTIONAL_FUNCTIONS(SCEPTRE_HIP_BIND_OPTIONAL)
#undef SCEPTRE_HIP_BIND_OPTIONAL
  int version = 0;
  SCEPTRE_RETURN_IF_ERROR(check(api, "hipInit", api.hipInit(0)));
  SCEPTRE_RETURN_IF_ERROR(check(api, "hipRuntimeGetVersion", api.hipRuntimeGetVersion(&version)));
  // HIP_VERSION = major * 10000000 + minor * 100000 + patch.
  Origin origin{Vendor::kHip, lib->path(),
                std::to_string(version / 10000000) + "." + std::to_string(version / 100000 % 100) + "." +
                    std::to_string(version % 100000)};
  auto rt = std::make_unique<HipRuntime>(api, std::move(origin));
  SCEPTRE_RETURN_IF_ERROR(rt->discover());
  return std::unique_ptr<Runtime>(std::move(rt));
}

}  // namespace sceptre::gpu
