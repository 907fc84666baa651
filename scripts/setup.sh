#!/usr/bin/env bash
# Installs everything sceptre needs to build and test on Debian 12. Idempotent and
# non-interactive: packages already present are not touched, so a second run takes seconds.
set -euo pipefail

packages=(
  build-essential cmake ninja-build pkg-config git
  clang-14 libclang-rt-14-dev             # libFuzzer and sanitizer runtimes
  libasio-dev libcereal-dev               # I/O (asio, with C++20 coroutines); serialization
  libspdlog-dev libfmt-dev libcli11-dev   # logs; formatting; command lines
  libssl-dev                              # OpenSSL libcrypto: HMAC for channel authentication
  libgtest-dev libgmock-dev libbenchmark-dev
  libzmq3-dev                             # ZeroMQ: the peer the channel benchmark compares with
  libcaf-dev                              # CAF (C++ Actor Framework): a peer of the actor benchmark
  libgrpc++-dev protobuf-compiler-grpc    # gRPC: the other peer of the actor benchmark ...
  libprotobuf-dev protobuf-compiler       # ... and the protobuf it generates its stubs with
  procps                                  # pgrep: the resume test finds the trainer's replica procs
  iproute2 util-linux                     # taskset for pinned benchmarks; ip, unshare, nsenter for hosts in namespaces
  nftables                                # one-way packet drops in the chaos suite
  nlohmann-json3-dev                      # JSON: configuration files
  openmpi-bin libopenmpi-dev              # Open MPI: the reference of the mesh benchmark
  python3-torch                           # torch.distributed.elastic: the supervision benchmark's peer
  stress-ng                               # CPU load for the supervision benchmark's soak
  libgloo-dev                             # Gloo: the CPU collective backend (collective layer)
  libtorch-dev                            # libtorch (CPU): the train layer
  libxxhash-dev                           # xxHash: checksums of checkpoint shards
  libgoogle-perftools-dev                 # tcmalloc: the allocator of the programs that train
  gnuplot-nox                             # the example trainer's plot of loss and live replicas
  fio                                     # the floor the checkpoint benchmark's persist is compared with
  hipcc libamdhip64-dev                   # HIP (ROCm 5.2): the AMD toolchain check and the HIP headers the backend mirrors
  librocm-smi-dev                         # ROCm SMI: the header the AMD health monitor mirrors, and the real library
)

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done

if ((${#missing[@]})); then
  echo "setup: installing ${missing[*]}"
  sudo=""
  [ "$(id -u)" -eq 0 ] || sudo="sudo"
  export DEBIAN_FRONTEND=noninteractive
  $sudo apt-get update -qq
  $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}"
else
  echo "setup: all packages present"
fi
