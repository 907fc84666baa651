#!/usr/bin/env bash
# The main job: set up, build, and run the fault-tolerant trainer on this host with its embedded
# defaults (4 replicas, a replica killed every 4 s and one frozen every 9 s).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
cmake --preset default >/dev/null
cmake --build --preset default --target ft_train -- -j"${SCEPTRE_JOBS:-2}"
exec build/default/examples/ft_train --out build/default/ft_train.out "$@"
