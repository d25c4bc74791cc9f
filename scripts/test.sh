#!/usr/bin/env bash
# Installs what is missing, builds, prepares the Docker Engine and the local
# busybox test image, then runs every test (unit, actors, integration, docker,
# end-to-end) with ctest.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${TASKSUP_BUILD_DIR:-$root/build}
export TASKSUP_WITH_DOCKER=1
"$root/scripts/build.sh"
"$root/scripts/docker-setup.sh"
cd "$build"
ctest --output-on-failure -j "$(nproc)" "$@"
