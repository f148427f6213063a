#!/usr/bin/env bash
# The long form of the suite's slowest sweeps (a nightly check): the Catch2 tests with
# TILEC_TEST_FULL=1, which runs every variant of every case where the suite runs each case in
# one variant, the variants in turn (tests/templates/test_util.h, full_sweeps). Needs a build
# (scripts/setup.sh); extra arguments go to ctest (-R REGEX, ...).
set -euo pipefail
cd "$(dirname "$0")/.."
build=${TILEC_BUILD_DIR:-build}
[ -f "$build/CTestTestfile.cmake" ] || { echo "test_full.sh: no build in $build; run scripts/setup.sh first" >&2; exit 1; }
TILEC_TEST_FULL=1 ctest --test-dir "$build" --output-on-failure -j2 "$@"
