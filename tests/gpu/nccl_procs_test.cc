// The NCCL communicator with members that are real procs, each bound to its own (fake) GPU by
// spawn_procs: an allreduce over them, and a member that hangs — the others' collectives end by
// their deadline and NCCL is aborted, end to end. The fake NCCL rendezvouses through files
// (tests/gpu/fake/fake_nccl.cc); the unique id goes through a store of files too. CTest runs it
// once per vendor (NCCL, RCCL).
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>

#include <gtest/gtest.h>

#include "gpu/gpu_probe.h"
#include "sceptre/collective/communicator.h"

namespace sceptre::testing {

// A rendezvous store that is a folder the procs of one host share.
class FileStore final : public collective::KeyValue {
 public:
  explicit FileStore(std::string dir) : dir_(std::move(dir)) { ::mkdir(dir_.c_str(), 0755); }
  Result<void> set(const std::string& key, std::string value) override {
    const std::string path = file(key);
    {
      std::ofstream(path + ".tmp") << value;
    }
    if (std::rename((path + ".tmp").c_str(), path.c_str()) != 0) return Error(Code::kInternal, "store: rename failed");
    return ok_status();
  }
  Result<std::string> get(const std::string& key, std::chrono::milliseconds timeout) override {
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    for (;;) {
      std::ifstream in(file(key));
      if (in) {
        std::stringstream s;
        s << in.rdbuf();
        return s.str();
      }
      if (std::chrono::steady_clock::now() >= deadline) return Error(Code::kDeadlineExceeded, "store: no " + key);
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
    }
  }

 private:
  std::string file(std::string key) const {
    for (char& c : key) {
      if (c == '/') c = '_';
    }
    return dir_ + "/" + key;
  }
  std::string dir_;
};

class NcclMember : public Actor {
 public:
  static constexpr bool kOwnThread = true;  // collectives block
  // Joins communicator `prefix` of `size` members as this proc's rank, its collectives with a
  // deadline of `timeout_ms`; "" or the error.
  std::string join(std::string prefix, std::int64_t size, std::int64_t timeout_ms) {
    FileStore store(std::string(std::getenv("SCEPTRE_FAKE_NCCL_DIR")) + "/store");
    collective::CommOptions o;
    o.prefix = prefix;
    o.timeout = std::chrono::milliseconds(timeout_ms);
    o.rendezvous_timeout = std::chrono::seconds(60);  // generous: procs of busy sanitizer builds
    auto c = collective::connect_nccl(store, cast_point()->rank(), static_cast<std::size_t>(size), o, gpu::runtime(), 0);
    if (!c) return c.error().to_string();
    comm_ = std::move(*c);
    return "";
  }
  // Allreduces `count` floats of rank + 1 on its GPU; "" when every one is the sum, else why not.
  std::string allreduce(std::int64_t count) {
    if (!comm_) return "not joined";
    gpu::Runtime& rt = gpu::runtime();
    const std::size_t bytes = static_cast<std::size_t>(count) * sizeof(float);
    auto p = rt.allocate(bytes);
    if (!p) return p.error().to_string();
    std::vector<float> host(static_cast<std::size_t>(count), static_cast<float>(comm_->rank() + 1));
    std::string out;
    if (auto s = rt.copy_to_device(*p, host.data(), bytes, nullptr); !s.ok()) out = s.error().to_string();
    if (out.empty()) {
      if (auto s = comm_->allreduce_sum(std::span(static_cast<float*>(*p), host.size())); !s.ok()) out = s.error().to_string();
    }
    if (out.empty()) {
      (void)rt.copy_to_host(host.data(), *p, bytes, nullptr);
      const float want = static_cast<float>(comm_->size() * (comm_->size() + 1) / 2);
      for (float v : host) {
        if (v != want) out = "got " + std::to_string(v) + ", want " + std::to_string(want);
      }
    }
    (void)rt.free(*p);
    return out;
  }

 private:
  std::unique_ptr<collective::Communicator> comm_;
};
SCEPTRE_ACTOR(NcclMember, join, allreduce);

}  // namespace sceptre::testing

namespace {

using namespace std::chrono_literals;
using sceptre::testing::NcclMember;
constexpr auto kWait = 120s;

void expect_all_ok(const sceptre::ValueMesh<std::string>& answers) {
  ASSERT_EQ(answers.size(), 4u);
  for (std::size_t r = 0; r < answers.size(); ++r) EXPECT_EQ(answers.at(r), "") << "rank " << r;
}

TEST(NcclProcs, AllreduceSumsOverProcsEachOnItsGpu) {
  auto procs = sceptre::this_host().spawn_procs({{"gpus", 4}}, "nccl");
  auto members = procs.spawn<NcclMember>("member");
  expect_all_ok(members.call<&NcclMember::join>(std::string("sum"), std::int64_t{4}, std::int64_t{60'000}).get(kWait));
  for (int round = 0; round < 3; ++round) {
    expect_all_ok(members.call<&NcclMember::allreduce>(std::int64_t{4096}).get(kWait));
  }
}

TEST(NcclProcs, AMemberThatHangsIsAbortedByTheDeadlineAndSoAreTheOthers) {
  ::setenv("SCEPTRE_FAKE_NCCL_HANG_RANK", "3", 1);  // the procs inherit it
  auto procs = sceptre::this_host().spawn_procs({{"gpus", 4}}, "nccl-hang");
  ::unsetenv("SCEPTRE_FAKE_NCCL_HANG_RANK");
  auto members = procs.spawn<NcclMember>("member");
  expect_all_ok(members.call<&NcclMember::join>(std::string("hang"), std::int64_t{4}, std::int64_t{500}).get(kWait));
  const auto t0 = std::chrono::steady_clock::now();
  auto results = members.call<&NcclMember::allreduce>(std::int64_t{64}).get(kWait);
  EXPECT_LT(std::chrono::steady_clock::now() - t0, 60s);  // bounded by the deadline, not a hang
  ASSERT_EQ(results.size(), 4u);
  for (std::size_t r = 0; r < 4; ++r) {
    const std::string& e = results.at(r);
    // Its own deadline, or a peer's abort that reached it first.
    EXPECT_TRUE(e.rfind("DEADLINE_EXCEEDED", 0) == 0 || e.rfind("UNAVAILABLE", 0) == 0) << "rank " << r << ": " << e;
  }
}

}  // namespace
