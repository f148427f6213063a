#!/usr/bin/env bash
# The main job: set up and build, then run paged attention both ways — the
# fused block-table kernel and the seed's primitive decomposition — on the best
# backend available, against the C++ reference, and the template kernels too.
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/setup.sh
tilec=${TILEC_BUILD_DIR:-build}/tools/tilec
backend=${TILEC_BACKEND:-auto}
status=0
echo "==> paged attention (batch=4 hq=16 hkv=4 head_dim=64 block_size=16, random context lengths up to 512, f16)"
shape="batch=4 hq=16 hkv=4 head_dim=64 block_size=16 max_blocks=32 dtype=f16"
for path in fused decompose; do
  "$tilec" run paged_attention --path "$path" --backend "$backend" --shape $shape || status=1
done
echo "==> template kernels"
for kernel in vector_add softmax matmul; do
  "$tilec" run "$kernel" --backend "$backend" || status=1
done
exit $status
