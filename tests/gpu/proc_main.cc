// The GPU proc tests' main: it makes the fake host's files, then the Runtime, which becomes a
// proc when spawn_procs re-executes the binary.
#include <sys/stat.h>

#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <vector>

#include <gtest/gtest.h>

#include "gpu/gpu_probe.h"

namespace sceptre::testing {
std::string faults_file() { return std::getenv("SCEPTRE_FAKE_GPU_FAULTS"); }
}  // namespace sceptre::testing

namespace {

std::string bus(int host_device) {
  char b[16];
  std::snprintf(b, sizeof b, "0000:%02x:00.0", 0x10 + host_device);
  return b;
}

// A sysfs tree in which host device d sits near CPU d % 2 (this machine's cores are 0 and 1).
std::string make_sysfs() {
  char tmpl[] = "/tmp/sceptre-sysfs-XXXXXX";
  const std::string root = ::mkdtemp(tmpl);
  for (int d = 0; d < 8; ++d) {
    std::string dir = root;
    for (const std::string& part : std::vector<std::string>{"/bus", "/pci", "/devices", "/" + bus(d)}) {
      dir += part;
      ::mkdir(dir.c_str(), 0755);
    }
    std::ofstream(dir + "/local_cpulist") << (d % 2) << "\n";
  }
  return root;
}

}  // namespace

int main(int argc, char** argv) {
  // Before the Runtime: procs inherit it (the controller's own runtime is loaded on first use).
  std::string sysfs;
  for (int i = 1; i < argc; ++i) {  // --gpu=cuda|hip: the vendor to test (procs inherit it)
    if (std::strncmp(argv[i], "--gpu=", 6) == 0) ::setenv("SCEPTRE_GPU", argv[i] + 6, 1);
  }
  if (!std::getenv("SCEPTRE_ROLE")) {
    sysfs = make_sysfs();
    ::setenv("SCEPTRE_SYSFS", sysfs.c_str(), 1);
    ::setenv("SCEPTRE_FAKE_GPU_FAULTS", (sysfs + "/faults").c_str(), 1);
    std::ofstream(sysfs + "/faults").flush();  // no faults yet
    ::setenv("SCEPTRE_FAKE_NCCL_DIR", (sysfs + "/nccl").c_str(), 1);  // the fake NCCL's files
    ::mkdir((sysfs + "/nccl").c_str(), 0755);
    // Polled often, so that the health tests are quick; still every poll of a real interval.
    if (!std::getenv("SCEPTRE_GPU_HEALTH_INTERVAL")) ::setenv("SCEPTRE_GPU_HEALTH_INTERVAL", "100ms", 1);
  }
  int rc = 0;
  {
    sceptre::Runtime runtime(argc, argv);
    ::testing::InitGoogleTest(&argc, argv);
    rc = RUN_ALL_TESTS();
  }
  if (!sysfs.empty()) std::filesystem::remove_all(sysfs);
  return rc;
}
