// The NCCL communicator (sceptre/collective/communicator.h) against the fake NCCL and RCCL
// (tests/gpu/fake/fake_nccl.cc) and the fake GPU runtimes, found through LD_LIBRARY_PATH as the
// real ones would be; members are threads of this process, each on a GPU of its own
// (gpu_proc_test has members that are procs).
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <future>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "gpu/scoped_env.h"
#include "sceptre/collective/communicator.h"
#include "sceptre/gpu/runtime.h"

namespace sceptre::collective {
namespace {

using namespace std::chrono_literals;
using testing::ScopedEnv;

class NcclTest : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    for (const char* v : {"SCEPTRE_NCCL_LIBRARY", "SCEPTRE_RCCL_LIBRARY", "SCEPTRE_FAKE_NCCL_HANG_RANK",
                          "SCEPTRE_FAKE_GPU_COUNT", "CUDA_VISIBLE_DEVICES", "HIP_VISIBLE_DEVICES", "ROCR_VISIBLE_DEVICES"}) {
      env_.set(v, std::nullopt);
    }
    char tmpl[] = "/tmp/sceptre-nccl-XXXXXX";  // the fake NCCL's communicators (files)
    dir_ = ::mkdtemp(tmpl);
    env_.set("SCEPTRE_FAKE_NCCL_DIR", dir_);
    auto rt = gpu::load(GetParam());
    ASSERT_TRUE(rt.ok()) << rt.error().to_string();
    gpu_ = std::move(*rt);
  }
  CommOptions options(std::chrono::milliseconds timeout) {
    CommOptions o;
    o.prefix = "test-" + std::to_string(++prefixes_);
    o.timeout = timeout;
    o.rendezvous_timeout = 60s;  // generous: threads of busy sanitizer builds
    return o;
  }
  // Connects `n` members, each a thread on GPU `rank`.
  std::vector<std::unique_ptr<Communicator>> connect(std::size_t n, const CommOptions& o) {
    std::vector<std::future<Result<std::unique_ptr<Communicator>>>> f;
    for (std::size_t r = 0; r < n; ++r) {
      f.push_back(std::async(std::launch::async, [&, r] { return connect_nccl(store_, r, n, o, *gpu_, static_cast<int>(r)); }));
    }
    std::vector<std::unique_ptr<Communicator>> out;
    for (auto& x : f) {
      auto c = x.get();
      if (!c) ADD_FAILURE() << c.error().to_string();
      out.push_back(c ? std::move(*c) : nullptr);
    }
    return out;
  }
  // Each member's buffer on its GPU, filled with `value(rank, i)`.
  std::vector<float*> buffers(std::size_t n, std::size_t count) {
    std::vector<float*> out;
    for (std::size_t r = 0; r < n; ++r) {
      EXPECT_TRUE(gpu_->set_device(static_cast<int>(r)).ok());
      auto p = gpu_->allocate(count * sizeof(float));
      EXPECT_TRUE(p.ok());
      std::vector<float> host(count);
      for (std::size_t i = 0; i < count; ++i) host[i] = static_cast<float>(r * 100 + i);
      EXPECT_TRUE(gpu_->copy_to_device(*p, host.data(), count * sizeof(float), nullptr).ok());
      out.push_back(static_cast<float*>(*p));
      allocated_.push_back(*p);
    }
    return out;
  }
  void TearDown() override {
    for (void* p : allocated_) EXPECT_TRUE(gpu_->free(p).ok());
    std::filesystem::remove_all(dir_);
  }
  // Every member's allreduce at once, on threads; their results by rank.
  std::vector<Status> allreduce_all(std::vector<std::unique_ptr<Communicator>>& comms, std::vector<float*>& bufs,
                                    std::size_t count) {
    std::vector<std::future<Status>> f;
    for (std::size_t r = 0; r < comms.size(); ++r) {
      f.push_back(std::async(std::launch::async, [&, r] { return comms[r]->allreduce_sum(std::span(bufs[r], count)); }));
    }
    std::vector<Status> out;
    for (auto& x : f) out.push_back(x.get());
    return out;
  }

  ScopedEnv env_;
  std::unique_ptr<gpu::Runtime> gpu_;
  MemoryStore store_;
  int prefixes_ = 0;
  std::vector<void*> allocated_;  // freed after each test
  std::string dir_;
};

TEST_P(NcclTest, AllreduceSumsDeviceMemoryOverTheMembers) {
  constexpr std::size_t kN = 4, kCount = 1000;
  auto comms = connect(kN, options(30s));
  ASSERT_EQ(comms.size(), kN);
  for (auto& c : comms) ASSERT_TRUE(c);
  EXPECT_EQ(comms[0]->backend(), GetParam() == "cuda" ? "nccl" : "rccl");
  EXPECT_EQ(comms[2]->rank(), 2u);
  EXPECT_EQ(comms[2]->size(), kN);
  auto bufs = buffers(kN, kCount);
  for (int round = 0; round < 2; ++round) {
    for (const auto& s : allreduce_all(comms, bufs, kCount)) ASSERT_TRUE(s.ok()) << s.error().to_string();
  }
  for (std::size_t r = 0; r < kN; ++r) {
    std::vector<float> host(kCount);
    ASSERT_TRUE(gpu_->copy_to_host(host.data(), bufs[r], kCount * sizeof(float), nullptr).ok());
    for (std::size_t i = 0; i < kCount; i += 97) {
      // Round 1: sum over r of (100 r + i) = 600 + 4 i; round 2 sums four copies of that.
      EXPECT_EQ(host[i], 4.0f * (600.0f + 4.0f * static_cast<float>(i))) << "rank " << r << " element " << i;
    }
  }
}

TEST_P(NcclTest, AMemberThatHangsFailsEveryCollectiveByTheDeadline) {
  env_.set("SCEPTRE_FAKE_NCCL_HANG_RANK", "3");
  auto comms = connect(4, options(300ms));
  for (auto& c : comms) ASSERT_TRUE(c);
  auto bufs = buffers(4, 16);
  const auto t0 = std::chrono::steady_clock::now();
  auto results = allreduce_all(comms, bufs, 16);
  EXPECT_LT(std::chrono::steady_clock::now() - t0, 30s);  // bounded: the deadline, not a hang
  for (std::size_t r = 0; r < 4; ++r) {
    ASSERT_FALSE(results[r].ok()) << "rank " << r;
    const Code c = results[r].error().code();
    // Its own deadline, or a peer's abort after its deadline reached it first.
    EXPECT_TRUE(c == Code::kDeadlineExceeded || c == Code::kUnavailable) << results[r].error().to_string();
  }
  // A communicator that failed is done with: make a new one.
  auto again = comms[0]->allreduce_sum(std::span(bufs[0], 16));
  ASSERT_FALSE(again.ok());
  EXPECT_EQ(again.error().code(), Code::kAborted);
}

TEST_P(NcclTest, AbortFromAnotherThreadEndsACollectiveAtOnce) {
  env_.set("SCEPTRE_FAKE_NCCL_HANG_RANK", "3");
  auto comms = connect(4, options(10min));
  for (auto& c : comms) ASSERT_TRUE(c);
  auto bufs = buffers(4, 16);
  std::vector<std::future<Status>> f;
  for (std::size_t r = 0; r < 3; ++r) {
    f.push_back(std::async(std::launch::async, [&, r] { return comms[r]->allreduce_sum(std::span(bufs[r], 16)); }));
  }
  std::this_thread::sleep_for(100ms);
  comms[0]->abort("rank 3 is gone");  // as the trainer does when supervision reports a replica lost
  for (std::size_t r = 0; r < 3; ++r) {
    ASSERT_EQ(f[r].wait_for(60s), std::future_status::ready) << "rank " << r << " still waits";
    Status s = f[r].get();
    ASSERT_FALSE(s.ok());
    if (r == 0) {
      EXPECT_EQ(s.error().code(), Code::kAborted);
      EXPECT_NE(s.error().message().find("rank 3 is gone"), std::string::npos) << s.error().message();
    } else {
      EXPECT_EQ(s.error().code(), Code::kUnavailable) << s.error().to_string();  // a peer aborted
    }
  }
  comms[3]->abort("done");
}

// NCCL's asynchronous errors are polled while a collective waits, from its first poll: an error
// that came while the communicator was idle (a peer aborted between steps) fails the next
// collective at once, not at its deadline.
TEST_P(NcclTest, APeerAbortedWhileThisOneWasIdleFailsItsNextCollectiveAtOnce) {
  auto comms = connect(3, options(10min));
  for (auto& c : comms) ASSERT_TRUE(c);
  auto bufs = buffers(3, 16);
  for (const auto& s : allreduce_all(comms, bufs, 16)) ASSERT_TRUE(s.ok()) << s.error().to_string();
  comms[2]->abort("replica 2 left");
  const auto t0 = std::chrono::steady_clock::now();
  for (std::size_t r = 0; r < 2; ++r) {
    Status s = comms[r]->allreduce_sum(std::span(bufs[r], 16));
    ASSERT_FALSE(s.ok()) << "rank " << r;
    EXPECT_EQ(s.error().code(), Code::kUnavailable) << s.error().to_string();
  }
  EXPECT_LT(std::chrono::steady_clock::now() - t0, 60s);  // not the 10 minutes of the deadline
}

TEST_P(NcclTest, AMemberThatNeverJoinsFailsTheJoinByTheDeadline) {
  CommOptions o = options(300ms);
  o.rendezvous_timeout = 300ms;
  auto c = connect_nccl(store_, 0, 2, o, *gpu_, 0);  // rank 1 never comes
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.error().code(), Code::kDeadlineExceeded) << c.error().to_string();
  o = options(300ms);
  o.rendezvous_timeout = 300ms;
  auto late = connect_nccl(store_, 1, 2, o, *gpu_, 1);  // no id published under its prefix
  ASSERT_FALSE(late.ok());
  EXPECT_EQ(late.error().code(), Code::kDeadlineExceeded) << late.error().to_string();
}

TEST_P(NcclTest, ALibraryThatIsNotViableSaysWhy) {
  env_.set(GetParam() == "cuda" ? "SCEPTRE_NCCL_LIBRARY" : "SCEPTRE_RCCL_LIBRARY", "/nonexistent/libnccl.so.2");
  auto c = connect_nccl(store_, 0, 1, options(1s), *gpu_, 0);
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.error().code(), Code::kUnavailable);
  EXPECT_NE(c.error().message().find("/nonexistent/libnccl.so.2"), std::string::npos) << c.error().message();
  auto none = gpu::load("none");
  ASSERT_TRUE(none.ok());
  EXPECT_EQ(connect_nccl(store_, 0, 1, options(1s), **none, 0).error().code(), Code::kFailedPrecondition);
}

INSTANTIATE_TEST_SUITE_P(Vendors, NcclTest, ::testing::Values("cuda", "hip"),
                         [](const auto& info) { return info.param; });

}  // namespace
}  // namespace sceptre::collective
