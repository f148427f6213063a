#!/usr/bin/env bash
# The GPU check, for a machine with an NVIDIA GPU, the CUDA toolkit (cuda.h), CMake, a C++20
# compiler and Python with PyTorch and Triton; no LLVM and no network needed. In about five
# minutes at most it:
#   1. builds the runtime, libtilec.so, gpu_bench and tilec-measure only (TILEC_RUNTIME_ONLY=ON);
#   2. runs the example host program (hand-written PTX through the runtime);
#   3. measures device-to-device copy bandwidth (the ceiling every figure is held against);
#   4. times the prepared plan (tilec-measure: every candidate of configs/gpu_check.toml for
#      the paged-decode problems, each checked on the device against the host's reference);
#   5. for each problem (Llama-3-8B and -70B shapes at B=64, ctx=4096; B=1, ctx=65536 with
#      split-KV; bf16, page 16): makes one set of inputs, runs tilec's fastest candidate on
#      them (gpu_bench --inputs, checked against the host's reference), then PyTorch's
#      scaled-dot-product attention on K/V gathered from the pages, the repository's own
#      Triton paged-decode kernel and tilec again through its Python package (python/tilec
#      over libtilec.so: store.run on the same torch tensors, from a folder exported from the
#      plan's modules and its measurements) in one process (bench/gpu_peers.py), each
#      checked against an fp32 reference and against the others;
#   6. the GEMM step: bf16 4096^3 (256^3 in the dry run), tilec's matmul configs (wgmma on
#      sm_90, through python/tilec) against torch.matmul and a Triton matmul, TFLOP/s and % of
#      the dense bf16 peak, each checked against an fp32 product (bench/gpu_gemm.py); the
#      pinned 128x128x64 tile runs with warp_specialize=0 and =1 side by side (a line gives
#      the speedup);
#   7. the prefill step: causal paged attention over a 2048-token prompt (64 in the dry run),
#      tilec's 128-row tile (wgmma on sm_90, through python/tilec) against PyTorch's SDPA on
#      dense K/V, TFLOP/s and % of peak, each checked against an fp32 reference
#      (bench/gpu_prefill.py); then the same tile with the rotated walk (overlap=1);
#   8. runs every template module against its reference (gpu_bench);
#   9. prints us, GB/s and % of the copy bandwidth per problem and implementation, and
#      draws them (roofline.svg).
# The modules and the plan come from scripts/build_gpu_modules.sh on a machine with LLVM.
#
#   scripts/gpu_check.sh [--dry-run] [MODULES_DIR] [RESULTS_DIR]   (defaults: gpu_modules gpu_results)
#
# --dry-run is the same script on a machine without a GPU (CI runs it): modules from
# `build_gpu_modules.sh --dry-run` run on the CPU emulator at small sizes, a host memcpy
# stands in for the copy bandwidth, numpy's reference for the peers, and the Python package's
# path runs on NumPy arrays (bench/tilec_py_peer.py); everything else (the runtime-only
# build, libtilec.so, tilec-measure, the winners, the exported folder, gpu_bench --inputs, the
# table, the SVG) is what the GPU run does.
#
# RESULTS_DIR gets: gpu_check.log (everything), environment.txt, build.log, tuning.toml (the
# plan's measurements), deploy/ (the folder the Python package loads), copy.jsonl, decode.jsonl
# (one line per problem and implementation), gemm.jsonl and gemm.txt (the GEMM step),
# prefill.jsonl, prefill.txt and prefill_overlap.txt (the prefill step), gpu_bench.jsonl, roofline.svg, summary.txt, and
# inputs/ and outputs per problem. Exit 0 only
# when every step passed.
set -uo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
dry=0
if [ "${1:-}" = --dry-run ]; then
  dry=1
  shift
fi
modules=$(realpath -m "${1:-gpu_modules}")
results=$(realpath -m "${2:-gpu_results}")
build=${TILEC_GPU_BUILD_DIR:-$root/build-gpu}
[ $dry = 1 ] && build=${TILEC_GPU_BUILD_DIR:-$root/build-gpu-dry}
cuda_home=${CUDA_HOME:-${CUDA_PATH:-/usr/local/cuda}}
python=${PYTHON:-python3}
start=$SECONDS
failed=()

mkdir -p "$results" || { echo "gpu_check: error: cannot create $results" >&2; exit 1; }
rm -rf "$results"/*.jsonl "$results"/*.log "$results"/*.txt "$results"/*.svg "$results"/tuning.toml \
  "$results"/decode "$results"/deploy
exec > >(tee -a "$results/gpu_check.log") 2>&1

die() { echo "gpu_check: FAILED: $*"; echo "FAILED: $*" >>"$results/summary.txt"; exit 1; }
step() { echo "==> [$((SECONDS - start))s] $*"; }
# run NAME SECONDS CMD...: runs with a time limit; a failure is recorded, not fatal.
run() {
  local name=$1 limit=$2
  shift 2
  timeout --kill-after=10 "$limit" "$@"
  local rc=$?
  if [ $rc -eq 124 ] || [ $rc -eq 137 ]; then
    echo "gpu_check: $name: timed out after ${limit}s"
    failed+=("$name (timed out)")
  elif [ $rc -ne 0 ]; then
    echo "gpu_check: $name: exit code $rc"
    failed+=("$name (exit $rc)")
  fi
  return $rc
}

step "checking the machine$([ $dry = 1 ] && echo ' (dry run: the CPU emulator stands in for the GPU)')"
[ -d "$modules" ] || die "$modules: no such folder; run scripts/build_gpu_modules.sh$([ $dry = 1 ] && echo ' --dry-run') on a machine with LLVM and copy its output here"
arch_glob="sm_*"
[ $dry = 1 ] && arch_glob=host
ls -d "$modules"/$arch_glob >/dev/null 2>&1 || die "$modules has no $arch_glob folders; rebuild it with scripts/build_gpu_modules.sh$([ $dry = 1 ] && echo ' --dry-run')"
[ -f "$modules/plan/plan.toml" ] && [ -f "$modules/problems.txt" ] ||
  die "$modules has no plan/ or problems.txt; rebuild it with this checkout's scripts/build_gpu_modules.sh"
command -v cmake >/dev/null || die "cmake not found (3.25 or newer: apt-get install cmake, or pip install cmake)"
cxx=${CXX:-$(command -v c++ || command -v g++ || command -v clang++)}
[ -n "$cxx" ] || die "no C++ compiler found (set CXX)"
[ -f "$cuda_home/include/cuda.h" ] || die "$cuda_home/include/cuda.h not found; set CUDA_HOME to the CUDA toolkit"
"$python" -c 'import numpy' 2>/dev/null || die "$python cannot import numpy (pip install numpy, or set PYTHON)"
if [ $dry = 0 ]; then
  "$python" -c 'import torch, triton; assert torch.cuda.is_available()' 2>/dev/null ||
    die "$python needs PyTorch with CUDA and Triton for the peers (or set PYTHON)"
fi
{
  echo "date: $(date -u +%FT%TZ)"
  echo "host: $(hostname)"
  echo "tilec: $(git -C "$root" rev-parse HEAD 2>/dev/null || echo unknown)"
  echo "cmake: $(cmake --version | head -n 1)"
  echo "compiler: $("$cxx" --version | head -n 1)"
  echo "cuda: $cuda_home $("$cuda_home/bin/nvcc" --version 2>/dev/null | tail -n 1)"
  echo "python: $("$python" --version 2>&1) $("$python" -c 'import torch, triton; print("torch", torch.__version__, "triton", triton.__version__)' 2>/dev/null)"
  nvidia-smi --query-gpu=name,compute_cap,driver_version,memory.total,clocks.max.sm --format=csv 2>&1 || echo "nvidia-smi: not available"
  echo "modules: $modules ($(find "$modules" -name '*.toml' | wc -l) manifests)"
} >"$results/environment.txt"
cat "$results/environment.txt"
cp "$modules/compile.jsonl" "$results/compile.jsonl" 2>/dev/null || true

step "building the runtime, libtilec.so, gpu_bench and tilec-measure (TILEC_RUNTIME_ONLY=ON, no LLVM) in $build"
generator=()
command -v ninja >/dev/null && generator=(-G Ninja)
# The dry run builds with warnings as errors, as scripts/setup.sh's build does: the same
# compile commands, so ccache gives CI the objects that build already made.
[ $dry = 1 ] && generator+=(-DTILEC_WERROR=ON)
if ! run configure 120 cmake "${generator[@]}" -S "$root" -B "$build" -DTILEC_RUNTIME_ONLY=ON \
    -DCMAKE_BUILD_TYPE=Release -DCMAKE_CXX_COMPILER="$cxx" -DTILEC_CUDA_INCLUDE="$cuda_home/include" \
    -DTILEC_DEPS_INCLUDE="$modules/deps/include" >"$results/build.log" 2>&1; then
  tail -n 30 "$results/build.log"
  die "cmake configure failed (see $results/build.log)"
fi
if ! run build 240 cmake --build "$build" --target gpu_bench tilec-measure launch_module tilec_c -j "$(nproc)" \
    >>"$results/build.log" 2>&1; then
  tail -n 30 "$results/build.log"
  die "build failed (see $results/build.log)"
fi
gpu_bench=$build/bench/gpu_bench
measure=$build/measure/tilec-measure
backend=(--backend cuda)
emulate=()
if [ $dry = 1 ]; then
  backend=(--backend emulate)
  emulate=(--emulate)
fi

if [ $dry = 1 ]; then
  step "the example host program: skipped (hand-written PTX needs the GPU)"
else
  step "the example host program: examples/vector_add (hand-written PTX) through the runtime"
  run launch_module 30 "$build/examples/launch_module" "$root/examples/vector_add/manifest.toml" 16777216 \
    >"$results/launch_module.txt" 2>&1
  cat "$results/launch_module.txt"
fi

step "copy bandwidth$([ $dry = 1 ] && echo ' (dry run: host memcpy)')"
if [ $dry = 1 ]; then
  run copybw 60 "$python" "$root/bench/gpu_peers.py" copybw --device cpu --mib 64 --repeats 5 \
    --json-out "$results/copy.jsonl"
else
  run copybw 60 "$python" "$root/bench/gpu_peers.py" copybw --mib 2048 --repeats 20 --json-out "$results/copy.jsonl"
fi

step "the plan: every candidate of $(wc -l <"$modules/problems.txt") paged-decode problems, checked and timed (tilec-measure)"
run measure 150 "$measure" "$modules/plan" "${backend[@]}" -o "$results/tuning.toml"
run winners 30 "$measure" "$modules/plan" --winners "$results/tuning.toml" "${backend[@]}" >"$results/winners.jsonl"
cat "$results/winners.jsonl"

# The folder a serving engine would load (tilec.load): paged attention's kernel card, the plan's
# modules for this machine and the plan's measurements as the tuning database, so the store
# selects the config tilec-measure found fastest.
plan_arch=$(sed -n "s/^arch = '\(.*\)'$/\1/p" "$modules/plan/plan.toml")
[ $dry = 1 ] && plan_arch=host
deploy=$results/deploy
card=$(ls "$modules"/$arch_glob/*/paged_attention.kernel.toml 2>/dev/null | head -n 1)
if [ -z "$card" ] || [ ! -d "$modules/plan/modules/$plan_arch" ] || [ ! -s "$results/tuning.toml" ]; then
  echo "gpu_check: cannot export a folder for python/tilec (kernel card: ${card:-none}," \
    "$modules/plan/modules/$plan_arch, $results/tuning.toml)"
  failed+=("deploy (no folder for the Python package)")
  deploy=
else
  mkdir -p "$deploy/modules"
  cp "$card" "$deploy/"
  cp -r "$modules/plan/modules/$plan_arch/." "$deploy/modules/"
  cp "$results/tuning.toml" "$deploy/db.toml"
  echo "exported $deploy for python/tilec: $(find "$deploy/modules" -name '*.toml' | wc -l) modules ($plan_arch)"
fi
export TILEC_LIBRARY=$build/libtilec.so PYTHONPATH=$root/python${PYTHONPATH:+:$PYTHONPATH}

problem=0
while read -r -u 3 name values; do
  step "$name: $values"
  declare -A v=()
  for kv in $values; do v[${kv%%=*}]=${kv#*=}; done
  dir=$results/decode/$name
  mkdir -p "$dir"
  device=cuda
  [ $dry = 1 ] && device=cpu
  if ! run "$name inputs" 90 "$python" "$root/bench/gpu_peers.py" inputs --out "$dir/inputs" --batch "${v[batch]}" \
      --hq "${v[hq]}" --hkv "${v[hkv]}" --head-dim "${v[head_dim]}" --ctx "${v[ctx]}" \
      --block-size "${v[block_size]}" --dtype "${v[dtype]}" --seed 7 --device $device; then
    problem=$((problem + 1))
    continue
  fi
  winner=$("$python" -c 'import json, sys
for line in open(sys.argv[1]):
    j = json.loads(line)
    if j["problem"] == int(sys.argv[2]):
        print(j["modules"])' "$results/winners.jsonl" "$problem")
  winner_config=$("$python" -c 'import json, sys
for line in open(sys.argv[1]):
    j = json.loads(line)
    if j["problem"] == int(sys.argv[2]):
        print(j["config"])' "$results/winners.jsonl" "$problem")
  if [ -z "$winner" ]; then
    echo "gpu_check: $name: no measured candidate in the plan's results"
    failed+=("$name (no tilec candidate measured)")
  else
    echo "tilec's fastest candidate: $winner"
    run "$name tilec" 90 "$gpu_bench" --module "$winner" "${emulate[@]}" --inputs "$dir/inputs" --repeats 50 \
      --save-output "$dir/out_tilec.npy" --name "$name" --out "$results/decode.jsonl" >/dev/null
  fi
  if [ $dry = 1 ]; then
    run "$name check" 60 "$python" "$root/bench/gpu_peers.py" check-tilec --inputs "$dir/inputs" \
      --tilec-output "$dir/out_tilec.npy"
    # The Python package's path on NumPy arrays on the emulator: what peers --tilec-deploy runs.
    compare=()
    [ -f "$dir/out_tilec.npy" ] && compare=(--tilec-output "$dir/out_tilec.npy")
    [ -n "$deploy" ] && run "$name tilec_py" 60 "$python" "$root/bench/tilec_py_peer.py" --deploy "$deploy" \
      --backend emulate --inputs "$dir/inputs" --repeats 2 --name "$name" --json-out "$results/decode.jsonl" \
      "${compare[@]}" --expect-config "$winner_config" --save-output "$dir/out_tilec_py.npy"
  else
    python_path=()
    [ -n "$deploy" ] && python_path=(--tilec-deploy "$deploy" --tilec-config "$winner_config")
    run "$name peers" 150 "$python" "$root/bench/gpu_peers.py" peers --inputs "$dir/inputs" --out "$dir" \
      --tilec-output "$dir/out_tilec.npy" --name "$name" --json-out "$results/decode.jsonl" --repeats 50 \
      "${python_path[@]}"
  fi
  rm -rf "$dir/inputs" # gigabytes on the GPU run; the seed remakes them
  problem=$((problem + 1))
done 3<"$modules/problems.txt"

gemm_backend=cuda
gemm_repeats=20
[ $dry = 1 ] && gemm_backend=emulate gemm_repeats=1
gemm_dirs=()
for d in "$modules"/gemm/*/; do [ -f "$d/matmul.toml" ] && gemm_dirs+=(--deploy "$d"); done
if [ ${#gemm_dirs[@]} -eq 0 ] || [ ! -f "$modules/gemm/size" ]; then
  echo "gpu_check: $modules has no gemm/ configs; rebuild it with this checkout's scripts/build_gpu_modules.sh"
  failed+=("gemm (no modules)")
else
  gemm_size=$(cat "$modules/gemm/size")
  if ! ls -d "$modules"/gemm/*_ws/ >/dev/null 2>&1; then
    echo "gpu_check: $modules/gemm has no warp-specialized config (*_ws); rebuild it with this checkout's scripts/build_gpu_modules.sh"
    failed+=("gemm (no warp_specialize=1 module)")
  fi
  step "GEMM: bf16 ${gemm_size}^3, tilec's matmul configs (warp_specialize=0 and 1 on one tile)$([ $dry = 0 ] && echo ', torch.matmul and Triton') (bench/gpu_gemm.py)"
  run gemm 150 "$python" "$root/bench/gpu_gemm.py" --backend "$gemm_backend" --size "$gemm_size" \
    --repeats "$gemm_repeats" "${gemm_dirs[@]}" --json-out "$results/gemm.jsonl" >"$results/gemm.txt" 2>&1
  cat "$results/gemm.txt"
fi

for variant in prefill prefill_overlap; do
  if [ ! -f "$modules/$variant/paged_attention.toml" ] || [ ! -f "$modules/$variant/sizes" ]; then
    echo "gpu_check: $modules has no $variant/ config; rebuild it with this checkout's scripts/build_gpu_modules.sh"
    failed+=("$variant (no module)")
    continue
  fi
  declare -A pv=()
  for kv in $(cat "$modules/$variant/sizes"); do pv[${kv%%=*}]=${kv#*=}; done
  step "$variant: causal paged attention, Sq=${pv[sq]}$([ $variant = prefill_overlap ] && echo ', the rotated walk (overlap=1)')$([ $dry = 0 ] && echo ', against PyTorch SDPA') (bench/gpu_prefill.py)"
  run "$variant" 120 "$python" "$root/bench/gpu_prefill.py" --backend "$gemm_backend" --deploy "$modules/$variant" \
    --batch "${pv[batch]}" --hq "${pv[hq]}" --hkv "${pv[hkv]}" --head-dim "${pv[head_dim]}" --sq "${pv[sq]}" \
    --repeats "$gemm_repeats" --json-out "$results/prefill.jsonl" >"$results/$variant.txt" 2>&1
  cat "$results/$variant.txt"
done

step "gpu_bench: every template module, checked against a CPU reference and timed"
remaining=$((290 - (SECONDS - start)))
[ $remaining -gt 30 ] || remaining=30
repeats=50
[ $dry = 1 ] && repeats=2
run gpu_bench "$remaining" "$gpu_bench" "$modules" "${emulate[@]}" --repeats $repeats --out "$results/gpu_bench.jsonl" \
  2>"$results/gpu_bench.log" >/dev/null
cat "$results/gpu_bench.log"

step "summary"
run summary 30 "$python" "$root/bench/gpu_peers.py" summary --results "$results/copy.jsonl" "$results/decode.jsonl" \
  >"$results/summary.txt"
cat "$results/summary.txt"
run roofline 30 "$python" "$root/bench/gpu_peers.py" roofline --results "$results/copy.jsonl" \
  "$results/decode.jsonl" --out "$results/roofline.svg" \
  --title "Paged decode attention$([ $dry = 1 ] && echo ' (dry run on the CPU emulator)'): achieved bandwidth"
{
  echo "gpu_check: $(grep -c '"ok":true' "$results/gpu_bench.jsonl" 2>/dev/null || echo 0) of" \
    "$(wc -l <"$results/gpu_bench.jsonl" 2>/dev/null || echo 0) template modules ok in $((SECONDS - start))s"
  [ -s "$results/gemm.txt" ] && cat "$results/gemm.txt"
  [ -s "$results/prefill.txt" ] && cat "$results/prefill.txt"
  [ -s "$results/prefill_overlap.txt" ] && cat "$results/prefill_overlap.txt"
  for f in "${failed[@]}"; do echo "FAILED: $f"; done
} | tee -a "$results/summary.txt"
if [ ${#failed[@]} -gt 0 ]; then
  echo "gpu_check: FAILED (results in $results)"
  exit 1
fi
echo "gpu_check: all passed (results in $results)"
