// The CUDA backend: NVIDIA's driver API, opened at run time (cuda_api.h lists what it uses).
//
// The driver binds a context, not a device, to a thread: set_device(i) makes device i's primary
// context (the one the CUDA runtime and libtorch use too) current on the calling thread, and a
// thread with no current context is bound to device 0 on its first call. Primary contexts are
// retained only when first used — each costs device memory — and released when the runtime ends.
#include <mutex>

#include "gpu/backends.h"
#include "gpu/cuda/cuda_api.h"
#include "gpu/dynlib.h"

namespace sceptre::gpu {
namespace {

using namespace cuda;  // NOLINT: the driver's own names read best here

CUdeviceptr dptr(const void* p) { return reinterpret_cast<CUdeviceptr>(p); }
CUstream stream_of(Runtime::Handle h) { return static_cast<CUstream>(h); }
CUevent event_of(Runtime::Handle h) { return static_cast<CUevent>(h); }

// The Error of a driver call that returned `r` (ok for CUDA_SUCCESS), in the driver's words.
Status check(const Api& api, const char* fn, CUresult r) {
  if (r == kSuccess) return ok_status();
  const char* name = nullptr;
  const char* text = nullptr;
  if (api.cuGetErrorName(r, &name) != kSuccess) name = nullptr;
  if (api.cuGetErrorString(r, &text) != kSuccess) text = nullptr;
  return vendor_error(fn, r, name, text);
}

class CudaRuntime final : public Runtime {
 public:
  CudaRuntime(Api api, Origin origin) : api_(api), origin_(std::move(origin)) {}
  ~CudaRuntime() override {
    for (std::size_t i = 0; i < contexts_.size(); ++i) {
      if (contexts_[i]) api_.cuDevicePrimaryCtxRelease_v2(devices_[i].handle);
    }
  }

  // Reads every device's properties (no context needed for them).
  Status discover() {
    int n = 0;
    SCEPTRE_RETURN_IF_ERROR(check("cuDeviceGetCount", api_.cuDeviceGetCount(&n)));
    const auto visible = visible_list("CUDA_VISIBLE_DEVICES");
    for (int i = 0; i < n; ++i) {
      Device d;
      SCEPTRE_RETURN_IF_ERROR(check("cuDeviceGet", api_.cuDeviceGet(&d.handle, i)));
      char name[256] = {}, bus[32] = {};
      std::size_t memory = 0;
      SCEPTRE_RETURN_IF_ERROR(check("cuDeviceGetName", api_.cuDeviceGetName(name, sizeof name, d.handle)));
      SCEPTRE_RETURN_IF_ERROR(check("cuDeviceTotalMem_v2", api_.cuDeviceTotalMem_v2(&memory, d.handle)));
      SCEPTRE_RETURN_IF_ERROR(check("cuDeviceGetPCIBusId", api_.cuDeviceGetPCIBusId(bus, sizeof bus, d.handle)));
      std::string visible_id =
          visible && static_cast<std::size_t>(i) < visible->size() ? (*visible)[i] : std::to_string(i);
      d.info = DeviceInfo{i, name, lower_case(bus), memory, std::move(visible_id)};
      devices_.push_back(std::move(d));
    }
    contexts_.assign(devices_.size(), nullptr);
    return ok_status();
  }

  const Origin& origin() const override { return origin_; }
  int device_count() const override { return static_cast<int>(devices_.size()); }
  Result<DeviceInfo> device(int index) const override {
    SCEPTRE_RETURN_IF_ERROR(check_index(index));
    return devices_[index].info;
  }

  Status set_device(int index) override {
    SCEPTRE_RETURN_IF_ERROR(check_index(index));
    CUcontext ctx = nullptr;
    {
      std::lock_guard lock(mu_);
      if (!contexts_[index]) {
        SCEPTRE_RETURN_IF_ERROR(
            check("cuDevicePrimaryCtxRetain", api_.cuDevicePrimaryCtxRetain(&contexts_[index], devices_[index].handle)));
      }
      ctx = contexts_[index];
    }
    return check("cuCtxSetCurrent", api_.cuCtxSetCurrent(ctx));
  }

  Result<void*> allocate(std::size_t bytes) override {
    SCEPTRE_RETURN_IF_ERROR(bind_thread());
    CUdeviceptr p = 0;
    SCEPTRE_RETURN_IF_ERROR(check("cuMemAlloc_v2", api_.cuMemAlloc_v2(&p, bytes)));
    return reinterpret_cast<void*>(p);
  }
  Status free(void* device_ptr) override {
    SCEPTRE_RETURN_IF_ERROR(bind_thread());
    return check("cuMemFree_v2", api_.cuMemFree_v2(dptr(device_ptr)));
  }

  Status copy_to_device(void* dst, const void* src, std::size_t bytes, Handle stream) override {
    SCEPTRE_RETURN_IF_ERROR(bind_thread());
    return check("cuMemcpyHtoDAsync_v2", api_.cuMemcpyHtoDAsync_v2(dptr(dst), src, bytes, stream_of(stream)));
  }
  Status copy_to_host(void* dst, const void* src, std::size_t bytes, Handle stream) override {
    SCEPTRE_RETURN_IF_ERROR(bind_thread());
    return check("cuMemcpyDtoHAsync_v2", api_.cuMemcpyDtoHAsync_v2(dst, dptr(src), bytes, stream_of(stream)));
  }
  Status copy_on_device(void* dst, const void* src, std::size_t bytes, Handle stream) override {
    SCEPTRE_RETURN_IF_ERROR(bind_thread());
    return check("cuMemcpyDtoDAsync_v2", api_.cuMemcpyDtoDAsync_v2(dptr(dst), dptr(src), bytes, stream_of(stream)));
  }

  Result<Handle> create_stream() override {
    SCEPTRE_RETURN_IF_ERROR(bind_thread());
    CUstream s = nullptr;
    SCEPTRE_RETURN_IF_ERROR(check("cuStreamCreate", api_.cuStreamCreate(&s, 0)));
    return static_cast<Handle>(s);
  }
  Status destroy_stream(Handle stream) override {
    return check("cuStreamDestroy_v2", api_.cuStreamDestroy_v2(stream_of(stream)));
  }
  Status synchronize(Handle stream) override {
    SCEPTRE_RETURN_IF_ERROR(bind_thread());
    return check("cuStreamSynchronize", api_.cuStreamSynchronize(stream_of(stream)));
  }

  Result<Handle> create_event() override {
    SCEPTRE_RETURN_IF_ERROR(bind_thread());
    CUevent e = nullptr;
    SCEPTRE_RETURN_IF_ERROR(check("cuEventCreate", api_.cuEventCreate(&e, 0)));
    return static_cast<Handle>(e);
  }
  Status destroy_event(Handle event) override {
    return check("cuEventDestroy_v2", api_.cuEventDestroy_v2(event_of(event)));
  }
  Status record(Handle event, Handle stream) override {
    SCEPTRE_RETURN_IF_ERROR(bind_thread());
    return check("cuEventRecord", api_.cuEventRecord(event_of(event), stream_of(stream)));
  }
  Status wait_event(Handle event) override {
    return check("cuEventSynchronize", api_.cuEventSynchronize(event_of(event)));
  }
  Result<bool> query(Handle event) override {
    const CUresult r = api_.cuEventQuery(event_of(event));
    if (r == kNotReady) return false;
    SCEPTRE_RETURN_IF_ERROR(check("cuEventQuery", r));
    return true;
  }
  Result<float> elapsed_ms(Handle start, Handle end) override {
    float ms = 0;
    auto* fn = api_.cuEventElapsedTime_v2 ? api_.cuEventElapsedTime_v2 : api_.cuEventElapsedTime;
    SCEPTRE_RETURN_IF_ERROR(check("cuEventElapsedTime", fn(&ms, event_of(start), event_of(end))));
    return ms;
  }

  Result<int> export_dmabuf(void* device_ptr, std::size_t bytes) override {
    if (!api_.cuMemGetHandleForAddressRange) {
      return Error(Code::kUnimplemented, "CUDA driver " + origin_.version + " cannot export dmabuf "
                                         "(no cuMemGetHandleForAddressRange)");
    }
    SCEPTRE_RETURN_IF_ERROR(bind_thread());
    int fd = -1;
    SCEPTRE_RETURN_IF_ERROR(check("cuMemGetHandleForAddressRange",
                                  api_.cuMemGetHandleForAddressRange(&fd, dptr(device_ptr), bytes, kDmaBufFd, 0)));
    return fd;
  }

 private:
  Status check(const char* fn, CUresult r) const { return gpu::check(api_, fn, r); }
  struct Device {
    CUdevice handle = 0;
    DeviceInfo info;
  };
  Status check_index(int index) const { return check_device_index("CUDA", index, device_count()); }
  // A thread that never chose a device works on device 0, as with the CUDA runtime.
  Status bind_thread() {
    CUcontext current = nullptr;
    SCEPTRE_RETURN_IF_ERROR(check("cuCtxGetCurrent", api_.cuCtxGetCurrent(&current)));
    return current ? ok_status() : set_device(0);
  }

  const Api api_;
  const Origin origin_;
  std::vector<Device> devices_;       // fixed after discover()
  std::mutex mu_;                     // contexts_
  std::vector<CUcontext> contexts_;   // by device; retained on first use
};

}  // namespace

Result<std::unique_ptr<Runtime>> make_cuda_runtime() {
  auto lib = DynLib::open(library_names("SCEPTRE_CUDA_LIBRARY", "libcuda.so.1"));
  if (!lib) return std::move(lib).error();
  Api api;
#define SCEPTRE_CUDA_BIND(name, type) SCEPTRE_RETURN_IF_ERROR(lib->bind(api.name, #name));
  SCEPTRE_CUDA_FUNCTIONS(SCEPTRE_CUDA_BIND)
#undef SCEPTRE_CUDA_BIND
#define SCEPTRE_CUDA_BIND_OPTIONAL(name, type) lib->bind_optional(api.name, #name);
  SCEPTRE_CUDA_OPTIONAL_FUNCTIONS(SCEPTRE_CUDA_BIND_OPTIONAL)
#undef SCEPTRE_CUDA_BIND_OPTIONAL
  int version = 0;
  SCEPTRE_RETURN_IF_ERROR(check(api, "cuInit", api.cuInit(0)));
  SCEPTRE_RETURN_IF_ERROR(check(api, "cuDriverGetVersion", api.cuDriverGetVersion(&version)));
  Origin origin{Vendor::kCuda, lib->path(),
                std::to_string(version / 1000) + "." + std::to_string(version % 1000 / 10)};
  auto rt = std::make_unique<CudaRuntime>(api, std::move(origin));
  SCEPTRE_RETURN_IF_ERROR(rt->discover());
  return std::unique_ptr<Runtime>(std::move(rt));
}

}  // namespace sceptre::gpu
