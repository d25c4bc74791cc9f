#!/usr/bin/env bash
# Configures and builds tasksup into build/ (or $TASKSUP_BUILD_DIR).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${TASKSUP_BUILD_DIR:-$root/build}
"$root/scripts/bootstrap.sh"
generator=()
[[ -f "$build/CMakeCache.txt" ]] || generator=(-G Ninja)
cmake -S "$root" -B "$build" "${generator[@]}" -DTASKSUP_WERROR=ON >/dev/null
cmake --build "$build" -j "$(nproc)"
