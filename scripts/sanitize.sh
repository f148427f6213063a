#!/usr/bin/env bash
# Builds tilec and its test suite with AddressSanitizer and UndefinedBehaviorSanitizer in
# ${TILEC_ASAN_BUILD_DIR:-build-asan} and runs every test; any finding fails the run.
# It installs nothing: it needs what scripts/setup.sh installs (scripts/test.sh runs that).
#
#   scripts/sanitize.sh [--build | --test]    (default: both; scripts/test.sh times them apart)
set -euo pipefail
cd "$(dirname "$0")/.."
mode=${1:-all}
case "$mode" in
  all | --build | --test) ;;
  *) echo "sanitize.sh: unknown argument '$mode' (--build, --test or nothing)" >&2; exit 2 ;;
esac

for tool in cmake ninja g++; do
  command -v "$tool" >/dev/null || { echo "error: $tool not found; run scripts/setup.sh first" >&2; exit 1; }
done

build_dir=${TILEC_ASAN_BUILD_DIR:-build-asan}
if [ "$mode" != --test ]; then
  echo "==> configuring $build_dir (AddressSanitizer + UndefinedBehaviorSanitizer)"
  cmake -G Ninja -B "$build_dir" -S . -DCMAKE_BUILD_TYPE=Release -DTILEC_WERROR=ON -DTILEC_SANITIZE=ON >/dev/null
  echo "==> building"
  ninja -C "$build_dir" --quiet
fi
[ "$mode" = --build ] && exit 0
[ -f "$build_dir/CTestTestfile.cmake" ] || { echo "sanitize.sh: no build in $build_dir; run scripts/sanitize.sh --build first" >&2; exit 1; }

# Every process the tests start (tilec, the example host programs) inherits these. A finding
# aborts the process (a signal: the CLI tests check that none ends with one, ctest reports
# any other as failed) rather than exiting 1, which a test might take for "wrong result".
# The emulator's kernel libraries and LLVM are not instrumented; that is fine. LeakSanitizer
# needs no suppressions: nothing leaks, LLVM's shared library included.
export ASAN_OPTIONS="halt_on_error=1:abort_on_error=1:detect_leaks=1:print_stacktrace=1:strict_string_checks=1:check_initialization_order=1"
export UBSAN_OPTIONS="halt_on_error=1:abort_on_error=1:print_stacktrace=1"
echo "==> testing under the sanitizers"
# TILEC_CTEST_EXCLUDE: a ctest -E regex of tests to leave out (scripts/test.sh leaves out the
# install test, which its plain pass ran).
exclude=()
[ -n "${TILEC_CTEST_EXCLUDE:-}" ] && exclude=(-E "$TILEC_CTEST_EXCLUDE")
ctest --test-dir "$build_dir" --output-on-failure -j2 "${exclude[@]}"
