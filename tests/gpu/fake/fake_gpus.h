// The devices the fake vendor libraries (fake_cuda.cc, fake_hip.cc) simulate, so the GPU layer
// is tested through the same dlopen path as on a real GPU host, on hosts that have none.
//
// Configured by the environment, read again at each vendor init call (so that one test process
// can try several settings):
//   SCEPTRE_FAKE_GPU_COUNT   devices of the host (default 8); 0 makes init fail with "no device"
//   SCEPTRE_FAKE_GPU_MEMORY  bytes of memory of each (default 80 GiB); allocations beyond fail
//   SCEPTRE_FAKE_GPU_INIT    an error code init returns instead of success (e.g. 999)
//   SCEPTRE_FAKE_GPU_FAULTS  a file the fake NVML and ROCm SMI read at every query: lines
//                            "<host device> ecc <n>" (uncorrectable errors), "<d> pending"
//                            (retired pages), "<d> lost", "<d> throttle" — a test writes it
//                            mid-run to make a GPU fail
// and by the vendor's own *_VISIBLE_DEVICES variables, as the vendor reads them. Device p of the
// host is named "Fake GPU p" and sits on PCI bus 0000:(0x10+p):00.0. Device memory is host
// memory; copies complete before they return.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace sceptre::gpu::fake {

// The vendors' codes (CUDA's and HIP's agree on these).
enum : int { kOk = 0, kInvalidValue = 1, kOutOfMemory = 2, kNotInitialized = 3, kNoDevice = 100, kInvalidDevice = 101 };

// The host's devices `var` leaves visible, in order (entries are host device numbers; the list
// ends at the first entry that is not one, as CUDA's does). `from` is what an earlier filter left.
std::vector<int> filter(const char* var, const std::vector<int>& from);

// The host's device count (SCEPTRE_FAKE_GPU_COUNT), and the host device on PCI bus `bus_id`
// (-1 when there is none).
int host_count();
int host_device_of(const char* bus_id);

// What SCEPTRE_FAKE_GPU_FAULTS says is wrong with host device `d` now.
struct Faults {
  unsigned long long ecc = 0;
  bool pending = false, lost = false, throttle = false;
};
Faults faults_of(int d);

struct Stream {};
struct Event {
  std::int64_t ns = -1;  // when recorded
};

class Devices {
 public:
  // Reads the environment; returns kOk, kNoDevice or SCEPTRE_FAKE_GPU_INIT's code. `visible`
  // maps the process's device numbers to the host's.
  int init(std::vector<int> (*visible)(int host_count));
  bool ready() const { return ready_; }
  int count() const { return static_cast<int>(visible_.size()); }
  bool valid(int index) const { return ready_ && index >= 0 && index < count(); }

  std::string name(int index) const;
  std::string bus_id(int index) const;  // upper case, as the vendors write it
  std::size_t memory() const { return memory_; }

  int allocate(int index, std::size_t bytes, void** out);
  int free(void* p);
  // kOk when [p, p + bytes) lies in one allocation (nullptr with bytes 0 too).
  int check_range(const void* p, std::size_t bytes) const;

  static std::int64_t now_ns();
  static const char* error_name(int code, bool hip);
  static const char* error_text(int code);

 private:
  bool ready_ = false;
  std::vector<int> visible_;
  std::size_t memory_ = 0;
};

Devices& devices();  // the one set of a fake library; guarded by its own lock inside

}  // namespace sceptre::gpu::fake
