// The GPU layer against the vendors' real libraries where this host has them (Debian's
// libamdhip64 and ROCm SMI, which CI installs; NVIDIA's driver, NVML and NCCL on a GPU machine),
// through the same path as the fakes: on a host without the GPU each is not viable, in its own
// words; on one with, it works. scripts/gpu-check runs it on a GPU machine.
// A binary of its own, without the fakes: a library loaded once stands for its SONAME in the
// whole process.
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <span>
#include <vector>

#include <gtest/gtest.h>

#include "gpu/scoped_env.h"
#include "sceptre/collective/communicator.h"
#include "sceptre/gpu/health.h"
#include "sceptre/gpu/runtime.h"

// LeakSanitizer (the asan preset): what the vendors' own libraries keep until the process ends
// is theirs, not a leak of ours.
extern "C" const char* __lsan_default_suppressions() {
  return "leak:libamdhip64.so\nleak:libhsa-runtime64.so\nleak:librocm_smi64.so\n";
}

namespace sceptre::gpu {
namespace {

using testing::ScopedEnv;

// Debian's real HIP runtime (libamdhip64-dev, which CI installs), through the same path: on a
// host without an AMD GPU it is not viable, in its own words; on one with, it finds them.
TEST(RealLibraries, TheRealHipRuntimeLoadsThroughTheSamePath) {
  ScopedEnv env;
  env.set("SCEPTRE_HIP_LIBRARY", "libamdhip64.so.5");
  auto rt = load("hip");
  if (rt.ok()) {
    EXPECT_GT((*rt)->device_count(), 0);
    EXPECT_EQ((*rt)->origin().library.find("/gpu/fake/"), std::string::npos);
    return;
  }
  if (rt.error().message().find("libamdhip64.so.5: cannot open") != std::string::npos) {
    GTEST_SKIP() << "no ROCm HIP runtime on this host: " << rt.error().message();
  }
  EXPECT_EQ(rt.error().code(), Code::kUnavailable);
  // hipInit refused, or it found no device: either way in the runtime's words, named "hip: ".
  EXPECT_EQ(rt.error().message().rfind("hip: ", 0), 0u) << rt.error().message();
}

// Debian's real ROCm SMI (librocm-smi-dev, which CI installs), through the same path: on a host
// without an AMD GPU it is not viable, in its own words.
TEST(RealLibraries, TheRealRocmSmiLoadsThroughTheSamePath) {
  ScopedEnv e;
  e.set("SCEPTRE_ROCM_SMI_LIBRARY", "/usr/lib/librocm_smi64.so.1");
  auto m = load_health(Vendor::kHip);
  if (m.ok()) {
    EXPECT_EQ((*m)->library().find("/gpu/fake/"), std::string::npos);
    return;
  }
  if (m.error().message().find("cannot open") != std::string::npos) GTEST_SKIP() << m.error().message();
  EXPECT_EQ(m.error().code(), Code::kUnavailable);
  EXPECT_EQ(m.error().message().rfind("rocm-smi: rsmi_init: ", 0), 0u) << m.error().message();
}


// On a host with NVIDIA's driver (a GPU machine; skipped elsewhere): the real runtime through the
// same interface — a round trip of device memory on a stream, events, dmabuf where the driver
// can — then NVML's view of that GPU, and an NCCL communicator of one member.
TEST(RealLibraries, OnAnNvidiaHostTheDriverNvmlAndNcclWork) {
  auto rt = load("cuda");
  if (!rt.ok()) GTEST_SKIP() << "no NVIDIA GPU here: " << rt.error().message();
  Runtime& gpu = **rt;
  ASSERT_GT(gpu.device_count(), 0);
  auto d = gpu.device(0);
  ASSERT_TRUE(d.ok());
  std::printf("cuda %s (%s): %d devices; device 0: %s, %s, %.1f GiB\n", gpu.origin().version.c_str(),
              gpu.origin().library.c_str(), gpu.device_count(), d->name.c_str(), d->pci_bus_id.c_str(),
              static_cast<double>(d->memory) / (1 << 30));
  constexpr std::size_t kCount = 1 << 20;
  std::vector<float> in(kCount), out(kCount);
  for (std::size_t i = 0; i < kCount; ++i) in[i] = static_cast<float>(i);
  auto a = gpu.allocate(kCount * sizeof(float));
  ASSERT_TRUE(a.ok()) << a.error().to_string();
  auto stream = gpu.create_stream();
  auto start = gpu.create_event(), end = gpu.create_event();
  ASSERT_TRUE(stream.ok() && start.ok() && end.ok());
  ASSERT_TRUE(gpu.record(*start, *stream).ok());
  ASSERT_TRUE(gpu.copy_to_device(*a, in.data(), kCount * sizeof(float), *stream).ok());
  ASSERT_TRUE(gpu.copy_to_host(out.data(), *a, kCount * sizeof(float), *stream).ok());
  ASSERT_TRUE(gpu.record(*end, *stream).ok());
  ASSERT_TRUE(gpu.synchronize(*stream).ok());
  EXPECT_EQ(in, out);
  auto ms = gpu.elapsed_ms(*start, *end);
  ASSERT_TRUE(ms.ok());
  std::printf("8 MiB there and back: %.3f ms\n", *ms);
  auto fd = gpu.export_dmabuf(*a, kCount * sizeof(float));
  std::printf("dmabuf: %s\n", fd.ok() ? "exported" : fd.error().to_string().c_str());
  if (fd.ok()) ::close(*fd);

  auto health = load_health(Vendor::kCuda);
  if (health.ok()) {
    auto faults = (*health)->poll({d->pci_bus_id});
    for (const auto& f : faults) std::printf("NVML: %s: %s\n", f.pci_bus_id.c_str(), f.what.c_str());
    EXPECT_TRUE(faults.empty());
  } else {
    std::printf("NVML: %s\n", health.error().to_string().c_str());
  }

  collective::MemoryStore store;
  collective::CommOptions o;
  o.prefix = "real";
  o.timeout = std::chrono::seconds(60);
  auto comm = collective::connect_nccl(store, 0, 1, o, gpu, 0);
  if (!comm.ok()) {
    std::printf("NCCL: %s\n", comm.error().to_string().c_str());
  } else {
    auto s = (*comm)->allreduce_sum(std::span(static_cast<float*>(*a), kCount));
    EXPECT_TRUE(s.ok()) << s.error().to_string();
    ASSERT_TRUE(gpu.copy_to_host(out.data(), *a, kCount * sizeof(float), nullptr).ok());
    ASSERT_TRUE(gpu.synchronize(nullptr).ok());
    EXPECT_EQ(in, out);  // the sum over one member
  }
  comm = Error(Code::kCancelled, "done");
  EXPECT_TRUE(gpu.destroy_event(*start).ok());
  EXPECT_TRUE(gpu.destroy_event(*end).ok());
  EXPECT_TRUE(gpu.destroy_stream(*stream).ok());
  EXPECT_TRUE(gpu.free(*a).ok());
}

}  // namespace
}  // namespace sceptre::gpu
