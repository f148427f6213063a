#!/usr/bin/env bash
# Compiles what scripts/gpu_check.sh runs on a GPU machine, into one folder to carry there:
# every template kernel and a set of paged-attention configs for sm_80 and sm_90, the GEMM
# step's bf16 matmul configs for sm_90 (gemm/, one folder each), the prefill step's causal
# paged-attention config (prefill/), the plan of
# the check's paged-decode problems (tilec autotune --prepare over configs/gpu_check.toml, for
# tilec-measure to time there), the list of those problems, and the fmt and toml++ headers
# (so that machine needs neither package, nor LLVM).
#
#   scripts/build_gpu_modules.sh [--dry-run] [OUT_DIR]      (default: gpu_modules)
#
# --dry-run builds the same kinds of things for this machine's CPU emulator instead, at sizes
# it runs in seconds (what `scripts/gpu_check.sh --dry-run` and CI run): host/ modules, a plan
# of small problems, each candidate checked on the emulator.
#
# TILEC names the tilec binary (default: build/tools/tilec). The layout is
# OUT_DIR/<arch>/<name>/<kernel>.{toml,ptx,cubin} (host: .so), OUT_DIR/plan/ (measure/plan.h),
# OUT_DIR/problems.txt (one problem per line: NAME then its --shape values, in the plan's
# order) and compile.jsonl (tilec compile --json).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
dry=0
if [ "${1:-}" = --dry-run ]; then
  dry=1
  shift
fi
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
archs=(sm_80 sm_90)
[ $dry = 1 ] && archs=(host)
# compile NAME KERNEL [tilec compile options...]: one module per arch.
compile() {
  local name=$1 kernel=$2
  shift 2
  for arch in "${archs[@]}"; do
    local target=(--arch "$arch")
    [ "$arch" = host ] && target=(--target emu)
    if ! "$tilec" compile "$kernel" "$@" "${target[@]}" -o "$out/$arch/$name" --json \
        >"$out/.last.log" 2>&1; then
      cat "$out/.last.log" >&2
      die "tilec compile $kernel $* ${target[*]} failed"
    fi
    tail -n 1 "$out/.last.log" | sed "s/^{/{\"module\":\"$arch\/$name\",/" >>"$out/compile.jsonl"
    count=$((count + 1))
  done
  echo "  $name"
}

echo "==> compiling modules into $out"
pa() { compile "paged_attention_$1" paged_attention "${@:2}"; }
if [ $dry = 1 ]; then
  compile vector_add vector_add --shape n=5000
  compile softmax softmax --shape rows=16 --shape cols=300
  compile matmul matmul --shape m=64 --shape n=64 --shape k=64
  pa f16_gqa4_d64 --shape batch=2 --shape hq=8 --shape hkv=2 --shape head_dim=64 --shape ctx=100 --shape dtype=f16
  pa bf16_split --set num_splits=2 --set block_n=16 --shape batch=1 --shape hq=4 --shape hkv=1 --shape head_dim=64 \
    --shape ctx=90 --shape dtype=bf16
else
  compile vector_add vector_add --shape n=16777216
  compile vector_add_b256 vector_add --set block=256 --shape n=16777216
  compile softmax softmax --shape rows=4096 --shape cols=1000
  compile softmax_4096 softmax --set block=4096 --set num_warps=8 --shape rows=4096 --shape cols=4096
  compile matmul matmul --shape m=512 --shape n=512 --shape k=512
  compile matmul_64x64 matmul --set block_m=64 --set block_n=64 --set block_k=32 --shape m=1024 --shape n=1024 --shape k=1024

  # Paged attention decode (one split; every sequence ctx tokens long).
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
fi
rm -f "$out/.last.log"

# The GEMM step's matmul configs (tiles of configs/matmul_sm90.toml, bf16, wgmma on sm_90): one
# folder each, a module and its kernel card, which bench/gpu_gemm.py loads through python/tilec.
# Fields: block_m block_n block_k num_warps num_stages warp_specialize. The pinned tile
# (128x128x64, 4 warps, 3 stages) comes twice, without and with warp specialization (a producer
# warpgroup issuing the TMA copies; folder suffix _ws), so the check times the two side by side;
# the dry run pairs its 64x64x32 tile the same way.
echo "==> compiling the GEMM step's matmul configs into $out/gemm"
if [ $dry = 1 ]; then
  gemm_size=256
  gemm_target=(--target emu)
  gemm_cfgs=("128 128 64 4 2 0" "64 64 32 4 2 0" "64 64 32 4 2 1")
else
  gemm_size=4096
  gemm_target=(--arch sm_90)
  gemm_cfgs=("128 128 64 4 3 0" "128 128 64 4 3 1" "128 256 32 8 3 0" "128 128 64 8 4 0" "64 256 64 4 3 0")
fi
mkdir -p "$out/gemm"
echo "$gemm_size" >"$out/gemm/size"
for cfg in "${gemm_cfgs[@]}"; do
  read -r bm bn bk w st ws <<<"$cfg"
  name=${bm}x${bn}x${bk}_w${w}_s${st}
  [ "$ws" = 1 ] && name+=_ws
  dir=$out/gemm/$name
  if ! "$tilec" compile matmul --set block_m="$bm" block_n="$bn" block_k="$bk" num_warps="$w" num_stages="$st" \
      warp_specialize="$ws" --shape m="$gemm_size" n="$gemm_size" k="$gemm_size" dtype=bf16 "${gemm_target[@]}" -o "$dir" --json \
      >"$out/.last.log" 2>&1; then
    cat "$out/.last.log" >&2
    die "tilec compile matmul ($cfg) failed"
  fi
  tail -n 1 "$out/.last.log" | sed "s/^{/{\"module\":\"gemm\/$name\",/" >>"$out/compile.jsonl"
  count=$((count + 1))
  echo "  gemm ${bm}x${bn}x${bk} num_warps=$w num_stages=$st warp_specialize=$ws"
done
rm -f "$out/.last.log"

# The prefill step's paged-attention config (causal, Sq = ctx; the 128-row tile, both dots on
# wgmma on sm_90), one folder each way, which bench/gpu_prefill.py loads through python/tilec.
echo "==> compiling the prefill step's paged-attention config into $out/prefill"
if [ $dry = 1 ]; then
  prefill_sizes=(batch=1 hq=8 hkv=2 sq=64 head_dim=64)
  prefill_set=(--set block_n=32 num_warps=4 block_m=64 head_group=4)
else
  prefill_sizes=(batch=1 hq=32 hkv=8 sq=2048 head_dim=128)
  prefill_set=(--set block_n=64 num_warps=8 block_m=128 head_group=4)
fi
prefill_sq=${prefill_sizes[3]#sq=}
# The same tile with the rotated walk (overlap=1: on sm_90 the softmax runs behind the P.V
# wgmma group), in prefill_overlap/: the check times both.
for variant in prefill prefill_overlap; do
  extra=()
  [ "$variant" = prefill_overlap ] && extra=(overlap=1)
  if ! "$tilec" compile paged_attention "${prefill_set[@]}" "${extra[@]}" --shape "${prefill_sizes[@]}" block_size=16 \
      ctx="$prefill_sq" dtype=bf16 causal=1 "${gemm_target[@]}" -o "$out/$variant" --json >"$out/.last.log" 2>&1; then
    cat "$out/.last.log" >&2
    die "tilec compile paged_attention ($variant) failed"
  fi
  tail -n 1 "$out/.last.log" | sed "s/^{/{\"module\":\"$variant\",/" >>"$out/compile.jsonl"
  echo "${prefill_sizes[*]}" >"$out/$variant/sizes"
  count=$((count + 1))
done
rm -f "$out/.last.log"

# The paged-decode problems the check compares tilec with its peers on: NAME, then --shape values.
if [ $dry = 1 ]; then
  cat >"$out/problems.txt" <<'PROBLEMS'
llama3_8b batch=2 hq=32 hkv=8 head_dim=128 ctx=64 block_size=16 dtype=bf16
llama3_70b batch=2 hq=64 hkv=8 head_dim=128 ctx=48 block_size=16 dtype=bf16
long_ctx batch=1 hq=32 hkv=8 head_dim=128 ctx=256 block_size=16 dtype=bf16
PROBLEMS
else
  cat >"$out/problems.txt" <<'PROBLEMS'
llama3_8b batch=64 hq=32 hkv=8 head_dim=128 ctx=4096 block_size=16 dtype=bf16
llama3_70b batch=64 hq=64 hkv=8 head_dim=128 ctx=4096 block_size=16 dtype=bf16
long_ctx batch=1 hq=32 hkv=8 head_dim=128 ctx=65536 block_size=16 dtype=bf16
PROBLEMS
fi
shapes=()
while read -r name values; do
  shapes+=(--shape $values)
done <"$out/problems.txt"
echo "==> preparing the plan of $(wc -l <"$out/problems.txt") paged-decode problems (configs/gpu_check.toml)"
space=$root/configs/gpu_check.toml
plan_args=(--arch sm_90)
if [ $dry = 1 ]; then
  # A corner of the space, each candidate timed once: the emulator takes a second a run.
  space=$out/gpu_check_dry.toml
  sed -e 's/^block_n = .*/block_n = [32]/' -e 's/^num_warps = .*/num_warps = [4]/' -e 's/^num_splits = .*/num_splits = [1, 8]/' \
    -e 's/^num_stages = .*/num_stages = [2]/' -e 's/^warmup = .*/warmup = 0/' -e 's/^repeats = .*/repeats = 1/' \
    "$root/configs/gpu_check.toml" >"$space"
else
  plan_args+=(--no-check) # the GPU machine checks each against the host's reference
fi
if ! "$tilec" autotune paged_attention --space "$space" "${shapes[@]}" "${plan_args[@]}" \
    --prepare "$out/plan" >"$out/plan.log" 2>&1; then
  tail -n 20 "$out/plan.log" >&2
  die "tilec autotune --prepare failed (log: $out/plan.log)"
fi
tail -n 1 "$out/plan.log"
echo "==> $count modules and a plan in $out; copy the folder to the GPU machine and run scripts/gpu_check.sh $out"
