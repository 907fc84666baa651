// HostNetwork: lets one machine hold several "hosts" that can be cut off one by one. The
// controller gets a bridge of its own, with the subnet 10.213.N.0/24 (N picked under a lock file
// in /run/sceptre, so concurrent jobs on one machine never share one): the controller is
// 10.213.N.1 there, and host k, an agent in a network namespace of its own (started through
// `unshare --net`), is 10.213.N.(k+2) on a veth pair whose other end, "sc-N-k", is on the bridge.
// Procs inherit their agent's namespace, so everything a host does crosses its veth.
//
// Needs root (CAP_NET_ADMIN) and iproute2's `ip`, util-linux's `unshare` and `nsenter`; what
// fails says which command failed and what it printed. A namespace dies with the last process in
// it, and its veth with it; the bridge goes with the HostNetwork, or, after a controller that was
// killed, with the next job that takes the same N.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "sceptre/core/result.h"

namespace sceptre::host {

// Runs `argv` (argv[0] looked up in PATH) and waits for it; an error names the command, its exit
// status and the end of what it wrote. Stdin is /dev/null.
Status run_command(const std::vector<std::string>& argv);

class HostNetwork {
 public:
  static constexpr std::size_t kMaxHosts = 250;

  // Takes a free N and makes its bridge. kFailedPrecondition when not root, kInternal when a
  // command fails, kResourceExhausted when every N is taken.
  static Result<std::unique_ptr<HostNetwork>> make();
  ~HostNetwork();  // deletes the bridge (the veths of live hosts go with it)
  HostNetwork(const HostNetwork&) = delete;
  HostNetwork& operator=(const HostNetwork&) = delete;

  int subnet() const { return n_; }
  std::string controller_address() const;        // 10.213.N.1
  std::string host_address(std::size_t k) const;  // 10.213.N.(k+2)
  std::string link(std::size_t k) const;          // "sc-N-k": host k's veth, on the bridge side
  std::string bridge() const;                     // "sc-br-N"

  // The command a host agent runs under so that it gets a namespace of its own.
  static std::vector<std::string> wrap() { return {"unshare", "--net", "--"}; }
  // Wires the namespace of `pid` (started under wrap()) as host k: waits until the process has
  // its own namespace (up to `timeout`), then makes the veth pair, its address and routes.
  Status attach(pid_t pid, std::size_t k, std::chrono::milliseconds timeout);

 private:
  HostNetwork(int n, int lock_fd) : n_(n), lock_fd_(lock_fd) {}
  const int n_;
  const int lock_fd_;
};

}  // namespace sceptre::host
