// gpu::Runtime: vendor-neutral access to the GPUs of this host, loaded at run time.
//
// One build serves NVIDIA, AMD and CPU hosts. load() looks for the vendor's library — NVIDIA's
// driver (libcuda.so.1) or AMD's HIP runtime (libamdhip64.so) — with dlopen, and returns the
// Runtime of the first that is there and sees at least one device; on a host with neither it
// returns the `none` runtime, which has no devices. SCEPTRE_GPU=cuda|hip|none overrides the
// choice (auto, the default, probes cuda then hip); a vendor named that way and not viable is an
// error that says why (the library is missing, a symbol is missing, the driver refused).
//
// Nothing here includes a vendor header: device memory, streams and events are opaque handles,
// and every vendor error becomes an Error carrying the vendor's own name and text for it
// ("cuMemAlloc_v2: CUDA_ERROR_OUT_OF_MEMORY: out of memory").
//
// Threads: a Runtime may be used from any thread. set_device() binds the calling thread (as both
// vendors do); every other call acts on the device the calling thread is bound to (device 0
// until it binds another).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "sceptre/core/result.h"

namespace sceptre::gpu {

enum class Vendor : std::uint8_t { kNone = 0, kCuda = 1, kHip = 2 };
std::string_view vendor_name(Vendor vendor);  // "none", "cuda", "hip"

struct DeviceInfo {
  int index = 0;               // as this process sees it (after *_VISIBLE_DEVICES)
  std::string name;            // "NVIDIA H100 80GB HBM3"
  std::string pci_bus_id;      // "0000:1b:00.0", lower case
  std::uint64_t memory = 0;    // total, bytes
  // What selects this device in a child process's *_VISIBLE_DEVICES: its entry in this process's
  // own list when one is set, else its index.
  std::string visible_id;
};

// What a Runtime was loaded from, for reports.
struct Origin {
  Vendor vendor = Vendor::kNone;
  std::string library;  // the path dlopen resolved ("" for none)
  std::string version;  // the driver's or runtime's version, as the vendor reports it
};

class Runtime {
 public:
  using Handle = void*;  // a stream or an event; nullptr is the default stream

  virtual ~Runtime() = default;
  virtual const Origin& origin() const = 0;
  Vendor vendor() const { return origin().vendor; }

  virtual int device_count() const = 0;
  virtual Result<DeviceInfo> device(int index) const = 0;
  virtual Status set_device(int index) = 0;

  // Device memory on the calling thread's device: kResourceExhausted when there is not enough.
  virtual Result<void*> allocate(std::size_t bytes) = 0;
  virtual Status free(void* device_ptr) = 0;
  // Copies, ordered on `stream` (nullptr: the default stream); they return once enqueued.
  virtual Status copy_to_device(void* dst, const void* host_src, std::size_t bytes, Handle stream) = 0;
  virtual Status copy_to_host(void* host_dst, const void* src, std::size_t bytes, Handle stream) = 0;
  virtual Status copy_on_device(void* dst, const void* src, std::size_t bytes, Handle stream) = 0;

  virtual Result<Handle> create_stream() = 0;
  virtual Status destroy_stream(Handle stream) = 0;
  virtual Status synchronize(Handle stream) = 0;  // waits for all the stream's work

  virtual Result<Handle> create_event() = 0;
  virtual Status destroy_event(Handle event) = 0;
  virtual Status record(Handle event, Handle stream) = 0;
  virtual Status wait_event(Handle event) = 0;  // host waits for it
  // Whether the work before the event's record is done; never blocks.
  virtual Result<bool> query(Handle event) = 0;
  virtual Result<float> elapsed_ms(Handle start, Handle end) = 0;

  // A dmabuf file descriptor for [device_ptr, device_ptr + bytes), to register the memory with
  // an RDMA NIC (the caller owns and closes it). kUnimplemented when the driver cannot export.
  virtual Result<int> export_dmabuf(void* device_ptr, std::size_t bytes) = 0;
};

// Loads the runtime SCEPTRE_GPU names (auto when unset or empty). Not cached: each call loads
// again (the library itself stays loaded). Errors: kInvalidArgument for an unknown name;
// kUnavailable (with each vendor's reason) for a vendor named and not viable.
Result<std::unique_ptr<Runtime>> load();
Result<std::unique_ptr<Runtime>> load(std::string_view which);

// The runtime of this process, loaded on first use with load(); never fails: when loading fails
// it is the none runtime and why() says so. Thread-safe.
Runtime& runtime();
// Why runtime() is the none runtime: each vendor's reason, or the load error ("" otherwise).
const std::string& why_none();
// The error load() gave for runtime() — SCEPTRE_GPU named a vendor that is not viable here, or
// no runtime at all — else ok. runtime() is then the none runtime, although one was asked for.
const Status& load_status();

// The devices this host offers its procs, as a host agent reports them.
struct Inventory {
  Origin origin;
  std::vector<DeviceInfo> devices;
  std::string note;  // why there are none, when there are none
};
Inventory inventory(Runtime& runtime);
// This process's: inventory(runtime()), with why_none() as its note.
Inventory inventory();

}  // namespace sceptre::gpu
