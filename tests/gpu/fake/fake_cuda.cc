// A fake libcuda.so.1: the driver API functions the CUDA backend binds (src/gpu/cuda/cuda_api.h),
// over the simulated devices of fake_gpus.h. CUDA_VISIBLE_DEVICES is honoured (numbers only).
#include <sys/mman.h>
#include <unistd.h>

#include <cstring>
#include <memory>

#include "gpu/cuda/cuda_api.h"
#include "gpu/fake/fake_gpus.h"

using namespace sceptre::gpu::cuda;
using sceptre::gpu::fake::Devices;
using sceptre::gpu::fake::devices;
namespace fake = sceptre::gpu::fake;

struct sceptre::gpu::cuda::CUctx_st {
  int device;
};
struct sceptre::gpu::cuda::CUstream_st {};
struct sceptre::gpu::cuda::CUevent_st {
  std::int64_t ns = -1;
};

namespace {
CUctx_st contexts[256];
thread_local CUctx_st* current = nullptr;

std::vector<int> visible(int host_count) {
  std::vector<int> all;
  for (int i = 0; i < host_count; ++i) all.push_back(i);
  return fake::filter("CUDA_VISIBLE_DEVICES", all);
}
// The device a call works on: the current context's (CUDA_ERROR_INVALID_CONTEXT = 201 without).
int device_of_thread(int* out) {
  if (!devices().ready()) return fake::kNotInitialized;
  if (!current) return 201;
  *out = current->device;
  return fake::kOk;
}
void* ptr(CUdeviceptr p) { return reinterpret_cast<void*>(p); }
}  // namespace

extern "C" {

CUresult cuInit(unsigned int) { return devices().init(visible); }
CUresult cuDriverGetVersion(int* v) {
  *v = 12040;
  return fake::kOk;
}
CUresult cuGetErrorName(CUresult r, const char** s) {
  *s = Devices::error_name(r, false);
  return *s ? fake::kOk : fake::kInvalidValue;
}
CUresult cuGetErrorString(CUresult r, const char** s) {
  *s = Devices::error_text(r);
  return *s ? fake::kOk : fake::kInvalidValue;
}
CUresult cuDeviceGetCount(int* n) {
  if (!devices().ready()) return fake::kNotInitialized;
  *n = devices().count();
  return fake::kOk;
}
CUresult cuDeviceGet(CUdevice* d, int i) {
  if (!devices().valid(i)) return fake::kInvalidDevice;
  *d = i;
  return fake::kOk;
}
CUresult cuDeviceGetName(char* name, int len, CUdevice d) {
  if (!devices().valid(d)) return fake::kInvalidDevice;
  std::snprintf(name, len, "%s", devices().name(d).c_str());
  return fake::kOk;
}
CUresult cuDeviceTotalMem_v2(std::size_t* bytes, CUdevice d) {
  if (!devices().valid(d)) return fake::kInvalidDevice;
  *bytes = devices().memory();
  return fake::kOk;
}
CUresult cuDeviceGetPCIBusId(char* bus, int len, CUdevice d) {
  if (!devices().valid(d)) return fake::kInvalidDevice;
  std::snprintf(bus, len, "%s", devices().bus_id(d).c_str());
  return fake::kOk;
}
CUresult cuDevicePrimaryCtxRetain(CUcontext* ctx, CUdevice d) {
  if (!devices().valid(d)) return fake::kInvalidDevice;
  contexts[d].device = d;
  *ctx = &contexts[d];
  return fake::kOk;
}
CUresult cuDevicePrimaryCtxRelease_v2(CUdevice d) { return devices().valid(d) ? fake::kOk : fake::kInvalidDevice; }
CUresult cuCtxSetCurrent(CUcontext ctx) {
  current = ctx;
  return fake::kOk;
}
CUresult cuCtxGetCurrent(CUcontext* ctx) {
  *ctx = current;
  return fake::kOk;
}
CUresult cuMemAlloc_v2(CUdeviceptr* p, std::size_t bytes) {
  int d = 0;
  if (int r = device_of_thread(&d)) return r;
  void* out = nullptr;
  if (int r = devices().allocate(d, bytes, &out)) return r;
  *p = reinterpret_cast<CUdeviceptr>(out);
  return fake::kOk;
}
CUresult cuMemFree_v2(CUdeviceptr p) { return devices().free(ptr(p)); }

CUresult cuMemcpyHtoDAsync_v2(CUdeviceptr dst, const void* src, std::size_t n, CUstream) {
  if (int r = devices().check_range(ptr(dst), n)) return r;
  std::memcpy(ptr(dst), src, n);
  return fake::kOk;
}
CUresult cuMemcpyDtoHAsync_v2(void* dst, CUdeviceptr src, std::size_t n, CUstream) {
  if (int r = devices().check_range(ptr(src), n)) return r;
  std::memcpy(dst, ptr(src), n);
  return fake::kOk;
}
CUresult cuMemcpyDtoDAsync_v2(CUdeviceptr dst, CUdeviceptr src, std::size_t n, CUstream) {
  if (int r = devices().check_range(ptr(dst), n)) return r;
  if (int r = devices().check_range(ptr(src), n)) return r;
  std::memmove(ptr(dst), ptr(src), n);
  return fake::kOk;
}

CUresult cuStreamCreate(CUstream* s, unsigned int) {
  int d = 0;
  if (int r = device_of_thread(&d)) return r;
  *s = std::make_unique<CUstream_st>().release();
  return fake::kOk;
}
CUresult cuStreamDestroy_v2(CUstream s) {
  if (!s) return fake::kInvalidValue;
  std::unique_ptr<CUstream_st> gone(s);
  return fake::kOk;
}
CUresult cuStreamSynchronize(CUstream) { return fake::kOk; }

CUresult cuEventCreate(CUevent* e, unsigned int) {
  int d = 0;
  if (int r = device_of_thread(&d)) return r;
  *e = std::make_unique<CUevent_st>().release();
  return fake::kOk;
}
CUresult cuEventRecord(CUevent e, CUstream) {
  if (!e) return fake::kInvalidValue;
  e->ns = Devices::now_ns();
  return fake::kOk;
}
CUresult cuEventSynchronize(CUevent e) { return e ? fake::kOk : fake::kInvalidValue; }
CUresult cuEventQuery(CUevent e) { return e ? fake::kOk : fake::kInvalidValue; }  // work is done when enqueued
CUresult cuEventDestroy_v2(CUevent e) {
  if (!e) return fake::kInvalidValue;
  std::unique_ptr<CUevent_st> gone(e);
  return fake::kOk;
}
CUresult cuEventElapsedTime(float* ms, CUevent a, CUevent b) {
  if (!a || !b || a->ns < 0 || b->ns < 0) return fake::kInvalidValue;
  *ms = static_cast<float>(b->ns - a->ns) / 1e6f;
  return fake::kOk;
}

// dmabuf: a memfd of the range's size stands for the exported buffer.
CUresult cuMemGetHandleForAddressRange(void* handle, CUdeviceptr p, std::size_t n, CUmemRangeHandleType type,
                                       unsigned long long) {
  if (type != kDmaBufFd) return 801;
  if (int r = devices().check_range(ptr(p), n)) return r;
  const int fd = ::memfd_create("fake-dmabuf", MFD_CLOEXEC);
  if (fd < 0 || ::ftruncate(fd, static_cast<off_t>(n)) != 0) return fake::kOutOfMemory;
  *static_cast<int*>(handle) = fd;
  return fake::kOk;
}

}  // extern "C"
