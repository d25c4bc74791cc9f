#!/usr/bin/env bash
# Builds the unit, actor and app tests with AddressSanitizer and
# UndefinedBehaviorSanitizer into build-asan/ (or $TASKSUP_ASAN_BUILD_DIR) and
# runs them. Any report fails the run, except CAF 0.17's known UBSan report in
# caf/detail/init_fun_factory.hpp (tests/sanitizers/ubsan.supp). The compiler
# is clang-14 ($TASKSUP_ASAN_CXX): it builds the instrumented code in half
# the time g++ takes.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${TASKSUP_ASAN_BUILD_DIR:-$root/build-asan}
cxx=${TASKSUP_ASAN_CXX:-clang++-14}
"$root/scripts/bootstrap.sh"
# A build directory configured with another compiler is made again.
if [[ -f "$build/CMakeCache.txt" ]] &&
  ! grep -q "^CMAKE_CXX_COMPILER:[A-Z]*=.*$cxx\$" "$build/CMakeCache.txt"; then
  rm -rf "$build"
fi
generator=()
[[ -f "$build/CMakeCache.txt" ]] || generator=(-G Ninja)
flags="-fsanitize=address,undefined -fno-omit-frame-pointer"
CXX=$cxx cmake -S "$root" -B "$build" "${generator[@]}" -DCMAKE_BUILD_TYPE=Debug \
  -DTASKSUP_BUILD_BENCH=OFF -DCMAKE_CXX_FLAGS="$flags" \
  -DCMAKE_EXE_LINKER_FLAGS="-fsanitize=address,undefined" \
  -DCMAKE_SHARED_LINKER_FLAGS="-fsanitize=address,undefined" >/dev/null
cmake --build "$build" -j "$(nproc)" --target tasksup tasksup_unit_tests \
  tasksup_actors_tests tasksup_app_tests
export ASAN_OPTIONS=detect_leaks=1:abort_on_error=1:strict_string_checks=1
export LSAN_OPTIONS=suppressions=$root/tests/sanitizers/lsan.supp
export UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1:suppressions=$root/tests/sanitizers/ubsan.supp
cd "$build"
ctest --output-on-failure -j "$(nproc)" -L '^(unit|actors|app)$' "$@"
