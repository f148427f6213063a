#!/usr/bin/env bash
# Prints a SHA-256 of the PTX of every shipped kernel (tilec list) at its default config on
# sm_80 and sm_90, and of a set of paged-attention configs that reach the tensor-core,
# pipelined, split-KV, fp8 and prefill paths. Run it before and after a refactor that should
# not change code generation and compare the two outputs:
#
#   TILEC=/old/build/tools/tilec scripts/ptx_digest.sh > before.txt
#   scripts/ptx_digest.sh > after.txt && diff before.txt after.txt
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
tilec=${TILEC:-$root/build/tools/tilec}
[ -x "$tilec" ] || { echo "ptx_digest: $tilec not found (build tilec or set TILEC)" >&2; exit 1; }
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

digest() { # label, then tilec compile arguments
  local label=$1; shift
  rm -rf "$work/out"
  "$tilec" compile "$@" -o "$work/out" >/dev/null
  for f in "$work"/out/*.ptx; do
    echo "$label $(basename "$f") $(sha256sum <"$f" | cut -c1-16)"
  done
}

for arch in sm_80 sm_90; do
  for k in $("$tilec" list | awk '/^[a-z_0-9]+ / {print $1}'); do
    digest "$arch $k default" "$k" --arch "$arch"
  done
  pa="paged_attention --arch $arch --shape batch=1 hq=32 hkv=8 head_dim=128 block_size=16 dtype=bf16"
  digest "$arch pa bf16 decode" $pa --set block_n=64 head_group=4 num_warps=4 num_stages=2
  digest "$arch pa bf16 splits" $pa --set block_n=32 num_splits=4 num_stages=3 --shape alibi=1 window=64
  digest "$arch pa f16 sq4 causal" paged_attention --arch "$arch" --shape dtype=f16 sq=4 causal=1 --set block_n=64
  digest "$arch pa fp8" paged_attention --arch "$arch" --shape dtype=bf16 kv_dtype=f8e4m3 --set block_n=32
done
