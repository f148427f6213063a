#!/usr/bin/env bash
# Writes the folder the host tests run from: `tilec autotune paged_attention --export OUT` on
# the emulator for four keys (f32, f32 with ALiBi, f32 with sinks, f16), each tuned to split-KV
# (tests/hosts/space.toml). Usage: make_deploy.sh TILEC OUT
set -euo pipefail
tilec=$1
out=$2
here=$(cd "$(dirname "$0")" && pwd)
rm -rf "$out"
mkdir -p "$out"
common="batch=3 hq=8 hkv=2 sq=1 head_dim=32 block_size=8 max_blocks=8 ctx=64"
"$tilec" autotune paged_attention --space "$here/space.toml" --backend emulate \
  --shape $common dtype=f32 alibi=0 \
  --shape $common dtype=f32 alibi=1 \
  --shape $common dtype=f32 alibi=0 sinks=1 \
  --shape $common dtype=f16 alibi=0 \
  -o "$out/db.toml" --export "$out"
test -f "$out/paged_attention.kernel.toml"
grep -q '^\[\[run.launch\]\]' "$out/paged_attention.kernel.toml"
echo "deploy folder: $out"
