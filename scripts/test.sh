#!/usr/bin/env bash
# Sets up and builds tilec, then runs every test (ctest over the Catch2 suite).
# With TILEC_REQUIRE_PTXAS=1 (CI sets it) a missing ptxas fails the run
# instead of skipping the PTX checks.
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/setup.sh
if [ "${TILEC_REQUIRE_PTXAS:-0}" = 1 ]; then
  if ! command -v ptxas >/dev/null && [ ! -x /usr/local/cuda/bin/ptxas ]; then
    echo "error: ptxas not found (PATH or /usr/local/cuda/bin) and TILEC_REQUIRE_PTXAS=1" >&2
    exit 1
  fi
fi
echo "==> testing"
ctest --test-dir "${TILEC_BUILD_DIR:-build}" --output-on-failure -j2
