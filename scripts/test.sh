#!/usr/bin/env bash
# Installs what is missing, builds, prepares the Docker Engine, the local
# busybox test image and the real agent CLIs, then runs every test (unit,
# actors, integration, docker, end-to-end) with ctest. Run without arguments
# (as CI does) it then also runs the unit, actor and app tests under
# ASan+UBSan (scripts/sanitize.sh) and each fuzz target for
# $TASKSUP_FUZZ_SECONDS (default 60) seconds (scripts/fuzz.sh);
# TASKSUP_SANITIZE=0 or TASKSUP_FUZZ_SECONDS=0 skip them. Arguments are passed
# to ctest and run just the main suite.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${TASKSUP_BUILD_DIR:-$root/build}
export TASKSUP_WITH_DOCKER=1
# Runs one step and says how long it took (the whole run takes minutes).
step() {
  local name=$1 started=$SECONDS
  shift
  echo "== $name" >&2
  "$@"
  echo "== $name: done in $((SECONDS - started)) s" >&2
}
step build "$root/scripts/build.sh"
step docker "$root/scripts/docker-setup.sh"
# The real agent CLIs (pinned, from npm, into the build tree); without npm or
# the registry the tests that run them skip with a message.
step "agent CLIs" env TASKSUP_BUILD_DIR="$build" "$root/scripts/agent-clis.sh"
step tests bash -c 'cd "$1" && shift && ctest --output-on-failure -j "$(nproc)" "$@"' \
  ctest "$build" "$@"
if (($# == 0)); then
  if [[ "${TASKSUP_SANITIZE:-1}" != 0 ]]; then
    step "sanitizers" "$root/scripts/sanitize.sh"
  fi
  if [[ "${TASKSUP_FUZZ_SECONDS:-60}" != 0 ]]; then
    step fuzz "$root/scripts/fuzz.sh"
  fi
fi
