#!/usr/bin/env bash
# Compiles every template kernel and a set of paged-attention configs, for sm_80 and sm_90,
# into one folder to carry to a GPU machine, where scripts/gpu_check.sh runs them. Also copies
# the fmt and toml++ headers there, so that machine needs neither package (nor LLVM).
#
#   scripts/build_gpu_modules.sh [OUT_DIR]      (default: gpu_modules)
#
# TILEC names the tilec binary (default: build/tools/tilec). The layout is
# OUT_DIR/<arch>/<name>/<kernel>.{toml,ptx,cubin}, plus compile.jsonl (tilec compile --json).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
out=${1:-gpu_modules}
tilec=${TILEC:-$root/build/tools/tilec}

die() { echo "build_gpu_modules: error: $*" >&2; exit 1; }
[ -x "$tilec" ] || die "$tilec not found: build tilec first (scripts/setup.sh) or set TILEC=/path/to/tilec"
if ! command -v ptxas >/dev/null && [ ! -x /usr/local/cuda/bin/ptxas ]; then
  echo "build_gpu_modules: warning: no ptxas here: modules carry PTX only and the driver JIT-compiles it" >&2
fi
for h in /usr/include/fmt/format.h /usr/include/toml++/toml.h; do
  [ -f "$h" ] || die "$h missing (apt-get install libfmt-dev libtomlplusplus-dev)"
done

rm -rf "$out"
mkdir -p "$out/deps/include"
cp -r /usr/include/fmt /usr/include/toml++ "$out/deps/include/"

count=0
# compile NAME KERNEL [tilec compile options...]: one module per arch.
compile() {
  local name=$1 kernel=$2
  shift 2
  for arch in sm_80 sm_90; do
    if ! "$tilec" compile "$kernel" "$@" --arch "$arch" -o "$out/$arch/$name" --json \
        >"$out/.last.log" 2>&1; then
      cat "$out/.last.log" >&2
      die "tilec compile $kernel $* --arch $arch failed"
    fi
    tail -n 1 "$out/.last.log" | sed "s/^{/{\"module\":\"$arch\/$name\",/" >>"$out/compile.jsonl"
    count=$((count + 1))
  done
  echo "  $name"
}

echo "==> compiling modules into $out"
compile vector_add vector_add --shape n=16777216
compile vector_add_b256 vector_add --set block=256 --shape n=16777216
compile softmax softmax --shape rows=4096 --shape cols=1000
compile softmax_4096 softmax --set block=4096 --set num_warps=8 --shape rows=4096 --shape cols=4096
compile matmul matmul --shape m=512 --shape n=512 --shape k=512
compile matmul_64x64 matmul --set block_m=64 --set block_n=64 --set block_k=32 --shape m=1024 --shape n=1024 --shape k=1024

# Paged attention decode (one split; every sequence ctx tokens long).
pa() { compile "paged_attention_$1" paged_attention "${@:2}"; }
pa f32_small --shape batch=8 --shape hq=8 --shape hkv=2 --shape head_dim=64 --shape ctx=1000
pa f16_mha_d128 --shape batch=32 --shape hq=32 --shape hkv=32 --shape head_dim=128 --shape ctx=2048 --shape dtype=f16
pa f16_gqa8_d128 --shape batch=16 --shape hq=64 --shape hkv=8 --shape head_dim=128 --shape ctx=4096 --shape dtype=f16
pa f16_gqa8_d128_n64_w8 --set block_n=64 --set num_warps=8 --shape batch=16 --shape hq=64 --shape hkv=8 \
  --shape head_dim=128 --shape ctx=4096 --shape dtype=f16
pa f16_gqa4_d128_hg2 --set head_group=2 --shape batch=32 --shape hq=32 --shape hkv=8 --shape head_dim=128 \
  --shape ctx=2048 --shape dtype=f16
pa bf16_alibi_d128 --shape batch=16 --shape hq=16 --shape hkv=16 --shape head_dim=128 --shape ctx=1024 \
  --shape dtype=bf16 --shape alibi=1
pa f16_page32_sq4 --shape batch=8 --shape hq=32 --shape hkv=8 --shape sq=4 --shape head_dim=128 \
  --shape block_size=32 --shape ctx=2048 --shape dtype=f16
rm -f "$out/.last.log"
echo "==> $count modules in $out; copy the folder to the GPU machine and run scripts/gpu_check.sh $out"
