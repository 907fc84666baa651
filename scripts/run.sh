#!/usr/bin/env bash
# The main job: set up, build, and run the example on this host with its embedded defaults.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
cmake --preset default >/dev/null
cmake --build --preset default --target mesh_demo -- -j"${SCEPTRE_JOBS:-2}"
exec build/default/examples/mesh_demo "$@"
