#!/usr/bin/env bash
# Installs what is missing, builds, prepares the Docker Engine, the local
# busybox test image and the real agent CLIs, then runs every test (unit,
# actors, integration, docker, end-to-end) with ctest.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${TASKSUP_BUILD_DIR:-$root/build}
export TASKSUP_WITH_DOCKER=1
"$root/scripts/build.sh"
"$root/scripts/docker-setup.sh"
# The real agent CLIs (pinned, from npm, into the build tree); without npm or
# the registry the tests that run them skip with a message.
TASKSUP_BUILD_DIR="$build" "$root/scripts/agent-clis.sh"
cd "$build"
ctest --output-on-failure -j "$(nproc)" "$@"
