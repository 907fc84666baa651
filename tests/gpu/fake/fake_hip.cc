// A fake libamdhip64.so: the HIP functions the HIP backend binds (src/gpu/hip/hip_api.h), over
// the simulated devices of fake_gpus.h, like ROCm 5 (no dmabuf export). ROCR_VISIBLE_DEVICES
// filters the host's devices, then HIP_VISIBLE_DEVICES (or CUDA_VISIBLE_DEVICES) what is left.
#include <cstring>
#include <memory>

#include "gpu/fake/fake_gpus.h"
#include "gpu/hip/hip_api.h"

using namespace sceptre::gpu::hip;
using sceptre::gpu::fake::Devices;
using sceptre::gpu::fake::devices;
namespace fake = sceptre::gpu::fake;

struct sceptre::gpu::hip::ihipStream_t {};
struct sceptre::gpu::hip::ihipEvent_t {
  std::int64_t ns = -1;
};

namespace {
thread_local int current = 0;

std::vector<int> visible(int host_count) {
  std::vector<int> all;
  for (int i = 0; i < host_count; ++i) all.push_back(i);
  all = fake::filter("ROCR_VISIBLE_DEVICES", all);
  return fake::filter(std::getenv("HIP_VISIBLE_DEVICES") ? "HIP_VISIBLE_DEVICES" : "CUDA_VISIBLE_DEVICES", all);
}
int ready() { return devices().ready() ? fake::kOk : fake::kNotInitialized; }
}  // namespace

extern "C" {

hipError_t hipInit(unsigned int) { return devices().init(visible); }
hipError_t hipDriverGetVersion(int* v) {
  *v = 50221153;
  return fake::kOk;
}
hipError_t hipRuntimeGetVersion(int* v) {
  *v = 50221153;  // 5.2.21153, Debian 12's
  return fake::kOk;
}
const char* hipGetErrorName(hipError_t r) {
  const char* s = Devices::error_name(r, true);
  return s ? s : "hipErrorUnknown";
}
const char* hipGetErrorString(hipError_t r) {
  const char* s = Devices::error_text(r);
  return s ? s : "unknown error";
}
hipError_t hipGetDeviceCount(int* n) {
  if (int r = ready()) return r;
  *n = devices().count();
  return fake::kOk;
}
hipError_t hipDeviceGet(hipDevice_t* d, int i) {
  if (!devices().valid(i)) return fake::kInvalidDevice;
  *d = i;
  return fake::kOk;
}
hipError_t hipDeviceGetName(char* name, int len, hipDevice_t d) {
  if (!devices().valid(d)) return fake::kInvalidDevice;
  std::snprintf(name, len, "%s", devices().name(d).c_str());
  return fake::kOk;
}
hipError_t hipDeviceTotalMem(std::size_t* bytes, hipDevice_t d) {
  if (!devices().valid(d)) return fake::kInvalidDevice;
  *bytes = devices().memory();
  return fake::kOk;
}
hipError_t hipDeviceGetPCIBusId(char* bus, int len, int d) {
  if (!devices().valid(d)) return fake::kInvalidDevice;
  std::snprintf(bus, len, "%s", devices().bus_id(d).c_str());
  return fake::kOk;
}
hipError_t hipSetDevice(int d) {
  if (!devices().valid(d)) return fake::kInvalidDevice;
  current = d;
  return fake::kOk;
}
hipError_t hipMalloc(void** p, std::size_t bytes) {
  if (int r = ready()) return r;
  return devices().allocate(current, bytes, p);
}
hipError_t hipFree(void* p) { return p ? devices().free(p) : fake::kOk; }
hipError_t hipMemcpyAsync(void* dst, const void* src, std::size_t n, hipMemcpyKind kind, hipStream_t) {
  if (kind != kDeviceToHost && kind != kDeviceToDevice && kind != kHostToDevice) {
    return fake::kInvalidValue;
  }
  if (kind != kDeviceToHost) {
    if (int r = devices().check_range(dst, n)) return r;
  }
  if (kind != kHostToDevice) {
    if (int r = devices().check_range(src, n)) return r;
  }
  std::memmove(dst, src, n);
  return fake::kOk;
}
hipError_t hipStreamCreate(hipStream_t* s) {
  if (int r = ready()) return r;
  *s = std::make_unique<ihipStream_t>().release();
  return fake::kOk;
}
hipError_t hipStreamDestroy(hipStream_t s) {
  if (!s) return fake::kInvalidValue;
  std::unique_ptr<ihipStream_t> gone(s);
  return fake::kOk;
}
hipError_t hipStreamSynchronize(hipStream_t) { return ready(); }
hipError_t hipEventCreate(hipEvent_t* e) {
  if (int r = ready()) return r;
  *e = std::make_unique<ihipEvent_t>().release();
  return fake::kOk;
}
hipError_t hipEventRecord(hipEvent_t e, hipStream_t) {
  if (!e) return fake::kInvalidValue;
  e->ns = Devices::now_ns();
  return fake::kOk;
}
hipError_t hipEventSynchronize(hipEvent_t e) { return e ? fake::kOk : fake::kInvalidValue; }
hipError_t hipEventQuery(hipEvent_t e) { return e ? fake::kOk : fake::kInvalidValue; }  // work is done when enqueued
hipError_t hipEventDestroy(hipEvent_t e) {
  if (!e) return fake::kInvalidValue;
  std::unique_ptr<ihipEvent_t> gone(e);
  return fake::kOk;
}
hipError_t hipEventElapsedTime(float* ms, hipEvent_t a, hipEvent_t b) {
  if (!a || !b || a->ns < 0 || b->ns < 0) return fake::kInvalidValue;
  *ms = static_cast<float>(b->ns - a->ns) / 1e6f;
  return fake::kOk;
}

}  // extern "C"
