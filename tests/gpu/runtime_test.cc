// gpu::Runtime against the fake vendor libraries (tests/gpu/fake), found by dlopen through
// LD_LIBRARY_PATH exactly as the real ones would be (real_libraries_test.cc has the real ones). The conformance tests run once per backend.
#include <sys/stat.h>
#include <unistd.h>

#include <cstring>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "gpu/scoped_env.h"
#include "sceptre/gpu/runtime.h"

namespace sceptre::gpu {
namespace {

using testing::ScopedEnv;

// Every variable the fakes and the backends read, cleared so that each test starts alike.
void clean(ScopedEnv& env) {
  for (const char* v : {"SCEPTRE_GPU", "SCEPTRE_CUDA_LIBRARY", "SCEPTRE_HIP_LIBRARY", "SCEPTRE_FAKE_GPU_COUNT",
                        "SCEPTRE_FAKE_GPU_MEMORY", "SCEPTRE_FAKE_GPU_INIT", "CUDA_VISIBLE_DEVICES",
                        "HIP_VISIBLE_DEVICES", "ROCR_VISIBLE_DEVICES"}) {
    env.set(v, std::nullopt);
  }
}

std::unique_ptr<Runtime> must_load(std::string_view which) {
  auto rt = load(which);
  if (!rt) ADD_FAILURE() << "load(" << which << "): " << rt.error().to_string();
  return rt ? std::move(*rt) : nullptr;
}

class BackendTest : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override { clean(env_); }
  Vendor vendor() const { return GetParam() == "cuda" ? Vendor::kCuda : Vendor::kHip; }
  ScopedEnv env_;
};

TEST_P(BackendTest, FindsTheDevicesOfTheHostWithTheirProperties) {
  auto rt = must_load(GetParam());
  ASSERT_TRUE(rt);
  EXPECT_EQ(rt->vendor(), vendor());
  EXPECT_NE(rt->origin().library.find("/gpu/fake/"), std::string::npos) << rt->origin().library;
  EXPECT_EQ(rt->origin().version, vendor() == Vendor::kCuda ? "12.4" : "5.2.21153");
  ASSERT_EQ(rt->device_count(), 8);
  for (int i = 0; i < 8; ++i) {
    auto d = rt->device(i);
    ASSERT_TRUE(d.ok());
    EXPECT_EQ(d->index, i);
    EXPECT_EQ(d->name, "Fake GPU " + std::to_string(i));
    char bus[16];
    std::snprintf(bus, sizeof bus, "0000:%02x:00.0", 0x10 + i);
    EXPECT_EQ(d->pci_bus_id, bus);  // lower case, whatever the vendor writes
    EXPECT_EQ(d->memory, 80ull << 30);
    EXPECT_EQ(d->visible_id, std::to_string(i));
  }
  EXPECT_EQ(rt->device(8).error().code(), Code::kInvalidArgument);
  EXPECT_EQ(rt->set_device(-1).error().code(), Code::kInvalidArgument);
}

TEST_P(BackendTest, MemoryRoundTripsThroughCopiesOnAStreamTimedByEvents) {
  auto rt = must_load(GetParam());
  ASSERT_TRUE(rt);
  ASSERT_TRUE(rt->set_device(2).ok());
  constexpr std::size_t kBytes = 1 << 20;
  std::vector<unsigned char> in(kBytes), out(kBytes, 0);
  for (std::size_t i = 0; i < kBytes; ++i) in[i] = static_cast<unsigned char>(i * 7 + 3);
  auto a = rt->allocate(kBytes), b = rt->allocate(kBytes);
  ASSERT_TRUE(a.ok() && b.ok());
  auto stream = rt->create_stream();
  auto start = rt->create_event(), end = rt->create_event();
  ASSERT_TRUE(stream.ok() && start.ok() && end.ok());
  ASSERT_TRUE(rt->record(*start, *stream).ok());
  ASSERT_TRUE(rt->copy_to_device(*a, in.data(), kBytes, *stream).ok());
  ASSERT_TRUE(rt->copy_on_device(*b, *a, kBytes, *stream).ok());
  ASSERT_TRUE(rt->copy_to_host(out.data(), *b, kBytes, *stream).ok());
  ASSERT_TRUE(rt->record(*end, *stream).ok());
  ASSERT_TRUE(rt->synchronize(*stream).ok());
  ASSERT_TRUE(rt->wait_event(*end).ok());
  auto done = rt->query(*end);
  ASSERT_TRUE(done.ok());
  EXPECT_TRUE(*done);
  EXPECT_EQ(std::memcmp(in.data(), out.data(), kBytes), 0);
  auto ms = rt->elapsed_ms(*start, *end);
  ASSERT_TRUE(ms.ok());
  EXPECT_GE(*ms, 0.0f);
  // A copy past the end of an allocation is the vendor's error, not a crash.
  EXPECT_EQ(rt->copy_to_device(*a, in.data(), 2 * kBytes, *stream).error().code(), Code::kInvalidArgument);
  EXPECT_TRUE(rt->destroy_event(*start).ok());
  EXPECT_TRUE(rt->destroy_event(*end).ok());
  EXPECT_TRUE(rt->destroy_stream(*stream).ok());
  EXPECT_TRUE(rt->free(*a).ok());
  EXPECT_TRUE(rt->free(*b).ok());
}

TEST_P(BackendTest, VendorErrorsBecomeErrorsInTheVendorsWords) {
  env_.set("SCEPTRE_FAKE_GPU_MEMORY", std::to_string(1 << 20));
  auto rt = must_load(GetParam());
  ASSERT_TRUE(rt);
  auto big = rt->allocate(2 << 20);
  ASSERT_FALSE(big.ok());
  EXPECT_EQ(big.error().code(), Code::kResourceExhausted);
  const std::string oom = vendor() == Vendor::kCuda ? "cuMemAlloc_v2: CUDA_ERROR_OUT_OF_MEMORY: out of memory"
                                                    : "hipMalloc: hipErrorOutOfMemory: out of memory";
  EXPECT_EQ(big.error().message(), oom);
  int not_device_memory = 0;
  auto bad = rt->free(&not_device_memory);
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.error().code(), Code::kInvalidArgument);
  EXPECT_NE(bad.error().message().find("invalid argument"), std::string::npos) << bad.error().message();
}

TEST_P(BackendTest, EachThreadWorksOnTheDeviceItBound) {
  // Each device holds one MiB: a second MiB fits only on another device.
  env_.set("SCEPTRE_FAKE_GPU_MEMORY", std::to_string(1 << 20));
  auto rt = must_load(GetParam());
  ASSERT_TRUE(rt);
  auto first = rt->allocate(1 << 20);  // device 0: this thread never bound one
  ASSERT_TRUE(first.ok()) << first.error().to_string();
  EXPECT_EQ(rt->allocate(1 << 20).error().code(), Code::kResourceExhausted);
  Status other;
  void* on_five = nullptr;
  std::thread([&] {
    other = rt->set_device(5);
    if (other.ok()) {
      auto p = rt->allocate(1 << 20);
      if (p.ok()) on_five = *p;
      else other = std::move(p).error();
    }
  }).join();
  ASSERT_TRUE(other.ok()) << other.error().to_string();
  EXPECT_TRUE(rt->free(on_five).ok());
  EXPECT_TRUE(rt->free(*first).ok());
}

TEST_P(BackendTest, VisibleDevicesNarrowWhatTheProcessSees) {
  if (vendor() == Vendor::kCuda) {
    env_.set("CUDA_VISIBLE_DEVICES", "3,5");
  } else {
    env_.set("ROCR_VISIBLE_DEVICES", "2,4,6").set("HIP_VISIBLE_DEVICES", "1,2");
  }
  auto rt = must_load(GetParam());
  ASSERT_TRUE(rt);
  ASSERT_EQ(rt->device_count(), 2);
  const int first = vendor() == Vendor::kCuda ? 3 : 4, second = vendor() == Vendor::kCuda ? 5 : 6;
  char bus[16];
  std::snprintf(bus, sizeof bus, "0000:%02x:00.0", 0x10 + second);
  EXPECT_EQ(rt->device(1)->pci_bus_id, bus);
  // What names each device in a child's list: the host's number for it.
  EXPECT_EQ(rt->device(0)->visible_id, std::to_string(first));
  EXPECT_EQ(rt->device(1)->visible_id, std::to_string(second));
}

TEST_P(BackendTest, DeviceMemoryExportsAsDmabufWhereTheDriverCan) {
  auto rt = must_load(GetParam());
  ASSERT_TRUE(rt);
  auto p = rt->allocate(1 << 16);
  ASSERT_TRUE(p.ok());
  auto fd = rt->export_dmabuf(*p, 1 << 16);
  if (vendor() == Vendor::kCuda) {
    ASSERT_TRUE(fd.ok()) << fd.error().to_string();
    struct stat st {};
    ASSERT_EQ(::fstat(*fd, &st), 0);
    EXPECT_EQ(st.st_size, 1 << 16);
    ::close(*fd);
    EXPECT_EQ(rt->export_dmabuf(*p, 1 << 20).error().code(), Code::kInvalidArgument);
  } else {  // the fake is ROCm 5, which cannot
    ASSERT_FALSE(fd.ok());
    EXPECT_EQ(fd.error().code(), Code::kUnimplemented);
    EXPECT_NE(fd.error().message().find("5.2.21153"), std::string::npos) << fd.error().message();
  }
  EXPECT_TRUE(rt->free(*p).ok());
}

TEST_P(BackendTest, ABackendThatIsNotViableSaysWhy) {
  const std::string var = vendor() == Vendor::kCuda ? "SCEPTRE_CUDA_LIBRARY" : "SCEPTRE_HIP_LIBRARY";
  {
    ScopedEnv e;
    e.set(var, "/nonexistent/libvendor.so");
    auto rt = load(GetParam());
    ASSERT_FALSE(rt.ok());
    EXPECT_EQ(rt.error().code(), Code::kUnavailable);
    EXPECT_NE(rt.error().message().find("/nonexistent/libvendor.so"), std::string::npos) << rt.error().message();
  }
  {
    ScopedEnv e;  // the other vendor's library: it lacks this one's first symbol
    e.set(var, vendor() == Vendor::kCuda ? "libamdhip64.so" : "libcuda.so.1");
    auto rt = load(GetParam());
    ASSERT_FALSE(rt.ok());
    const std::string first = vendor() == Vendor::kCuda ? "does not export cuInit" : "does not export hipInit";
    EXPECT_NE(rt.error().message().find(first), std::string::npos) << rt.error().message();
  }
  {
    ScopedEnv e;
    e.set("SCEPTRE_FAKE_GPU_INIT", "999");
    auto rt = load(GetParam());
    ASSERT_FALSE(rt.ok());
    EXPECT_EQ(rt.error().code(), Code::kUnavailable);
    EXPECT_NE(rt.error().message().find("Init: "), std::string::npos) << rt.error().message();
  }
  {
    ScopedEnv e;
    e.set("SCEPTRE_FAKE_GPU_COUNT", "0");
    auto rt = load(GetParam());
    ASSERT_FALSE(rt.ok());
    EXPECT_NE(rt.error().message().find(vendor() == Vendor::kCuda ? "CUDA_ERROR_NO_DEVICE" : "hipErrorNoDevice"),
              std::string::npos)
        << rt.error().message();
  }
}

INSTANTIATE_TEST_SUITE_P(Vendors, BackendTest, ::testing::Values("cuda", "hip"),
                         [](const auto& info) { return info.param; });

// --- choosing ------------------------------------------------------------------------------------

class ChoiceTest : public ::testing::Test {
 protected:
  void SetUp() override { clean(env_); }
  ScopedEnv env_;
};

TEST_F(ChoiceTest, AutoTakesTheFirstViableVendor) {
  auto rt = must_load("auto");
  ASSERT_TRUE(rt);
  EXPECT_EQ(rt->vendor(), Vendor::kCuda);
  env_.set("CUDA_VISIBLE_DEVICES", "");  // CUDA sees nothing; HIP reads the same variable ...
  env_.set("HIP_VISIBLE_DEVICES", "0,1");  // ... unless its own is set
  rt = must_load("");
  ASSERT_TRUE(rt);
  EXPECT_EQ(rt->vendor(), Vendor::kHip);
  EXPECT_EQ(rt->device_count(), 2);
}

TEST_F(ChoiceTest, AutoOnAHostWithoutGpusIsNoneAndSaysWhy) {
  env_.set("SCEPTRE_FAKE_GPU_COUNT", "0");
  auto rt = must_load("auto");
  ASSERT_TRUE(rt);
  EXPECT_EQ(rt->vendor(), Vendor::kNone);
  EXPECT_EQ(rt->device_count(), 0);
  auto p = rt->allocate(16);
  ASSERT_FALSE(p.ok());
  EXPECT_EQ(p.error().code(), Code::kFailedPrecondition);
  EXPECT_NE(p.error().message().find("cuda: cuInit: CUDA_ERROR_NO_DEVICE"), std::string::npos) << p.error().message();
  EXPECT_NE(p.error().message().find("hip: hipInit: hipErrorNoDevice"), std::string::npos) << p.error().message();
}

TEST_F(ChoiceTest, TheEnvironmentOverridesAndABadNameIsAnError) {
  env_.set("SCEPTRE_GPU", "none");
  auto rt = load();
  ASSERT_TRUE(rt.ok());
  EXPECT_EQ((*rt)->vendor(), Vendor::kNone);
  env_.set("SCEPTRE_GPU", "hip");
  rt = load();
  ASSERT_TRUE(rt.ok());
  EXPECT_EQ((*rt)->vendor(), Vendor::kHip);
  env_.set("SCEPTRE_GPU", "rocm");
  rt = load();
  ASSERT_FALSE(rt.ok());
  EXPECT_EQ(rt.error().code(), Code::kInvalidArgument);
  EXPECT_NE(rt.error().message().find("auto, cuda, hip or none"), std::string::npos);
}

TEST_F(ChoiceTest, TheProcessRuntimeAndItsInventory) {
  // runtime() is loaded once per process: with the fakes on the library path it is CUDA's.
  Runtime& rt = runtime();
  EXPECT_EQ(&rt, &runtime());
  const Inventory inv = inventory();
  EXPECT_EQ(inv.origin.vendor, rt.vendor());
  EXPECT_EQ(static_cast<int>(inv.devices.size()), rt.device_count());
  if (inv.devices.empty()) EXPECT_FALSE(inv.note.empty());
  else EXPECT_TRUE(inv.note.empty());
}

}  // namespace
}  // namespace sceptre::gpu
