#!/usr/bin/env bash
# The main job: set up, build, and run the template kernels against their
# references on the best backend this build has, with a short summary.
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/setup.sh
tilec=${TILEC_BUILD_DIR:-build}/tools/tilec
echo "==> running the template kernels"
status=0
for kernel in vector_add softmax matmul; do
  "$tilec" run "$kernel" --backend auto || status=1
done
exit $status
