#!/usr/bin/env bash
# For a machine with an NVIDIA GPU, the CUDA toolkit (cuda.h), CMake and a C++20 compiler;
# no LLVM needed. Builds the runtime and gpu_bench only (TILEC_RUNTIME_ONLY=ON), then runs the
# example host program and gpu_bench over modules compiled elsewhere by
# scripts/build_gpu_modules.sh, and writes everything into one folder, in about 5 minutes at most.
#
#   scripts/gpu_check.sh [MODULES_DIR] [RESULTS_DIR]     (defaults: gpu_modules gpu_results)
#
# RESULTS_DIR gets: gpu_check.log (everything), environment.txt, build.log, launch_module.txt,
# gpu_bench.jsonl (one JSON object per module: ok, errors, median/min/max ms, GB/s),
# gpu_bench.log and summary.txt. Exit 0 only when every step passed.
set -uo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
modules=$(realpath -m "${1:-gpu_modules}")
results=$(realpath -m "${2:-gpu_results}")
build=${TILEC_GPU_BUILD_DIR:-$root/build-gpu}
cuda_home=${CUDA_HOME:-${CUDA_PATH:-/usr/local/cuda}}
start=$SECONDS
failed=()

mkdir -p "$results" || { echo "gpu_check: error: cannot create $results" >&2; exit 1; }
rm -f "$results"/*.jsonl "$results"/*.log "$results"/*.txt
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

step "checking the machine"
[ -d "$modules" ] || die "$modules: no such folder; run scripts/build_gpu_modules.sh on a machine with LLVM and copy its output here"
ls "$modules"/sm_* >/dev/null 2>&1 || die "$modules has no sm_* folders; rebuild it with scripts/build_gpu_modules.sh"
command -v cmake >/dev/null || die "cmake not found (3.25 or newer: apt-get install cmake, or pip install cmake)"
cxx=${CXX:-$(command -v c++ || command -v g++ || command -v clang++)}
[ -n "$cxx" ] || die "no C++ compiler found (set CXX)"
[ -f "$cuda_home/include/cuda.h" ] || die "$cuda_home/include/cuda.h not found; set CUDA_HOME to the CUDA toolkit"
{
  echo "date: $(date -u +%FT%TZ)"
  echo "host: $(hostname)"
  echo "tilec: $(git -C "$root" rev-parse HEAD 2>/dev/null || echo unknown)"
  echo "cmake: $(cmake --version | head -n 1)"
  echo "compiler: $("$cxx" --version | head -n 1)"
  echo "cuda: $cuda_home $("$cuda_home/bin/nvcc" --version 2>/dev/null | tail -n 1)"
  nvidia-smi --query-gpu=name,compute_cap,driver_version,memory.total,clocks.max.sm --format=csv 2>&1 || echo "nvidia-smi: not available"
  echo "modules: $modules ($(find "$modules" -name '*.toml' | wc -l) manifests)"
} >"$results/environment.txt"
cat "$results/environment.txt"
cp "$modules/compile.jsonl" "$results/compile.jsonl" 2>/dev/null || true

step "building the runtime and gpu_bench (TILEC_RUNTIME_ONLY=ON, no LLVM) in $build"
generator=()
command -v ninja >/dev/null && generator=(-G Ninja)
if ! run configure 120 cmake "${generator[@]}" -S "$root" -B "$build" -DTILEC_RUNTIME_ONLY=ON \
    -DCMAKE_BUILD_TYPE=Release -DCMAKE_CXX_COMPILER="$cxx" -DTILEC_CUDA_INCLUDE="$cuda_home/include" \
    -DTILEC_DEPS_INCLUDE="$modules/deps/include" >"$results/build.log" 2>&1; then
  tail -n 30 "$results/build.log"
  die "cmake configure failed (see $results/build.log)"
fi
if ! run build 180 cmake --build "$build" --target gpu_bench launch_module -j "$(nproc)" >>"$results/build.log" 2>&1; then
  tail -n 30 "$results/build.log"
  die "build failed (see $results/build.log)"
fi

step "the example host program: examples/vector_add (hand-written PTX) through the runtime"
run launch_module 30 "$build/examples/launch_module" "$root/examples/vector_add/manifest.toml" 16777216 \
  >"$results/launch_module.txt" 2>&1
cat "$results/launch_module.txt"

step "gpu_bench: every module, checked against a CPU reference and timed"
remaining=$((290 - (SECONDS - start)))
[ $remaining -gt 30 ] || remaining=30
run gpu_bench "$remaining" "$build/bench/gpu_bench" "$modules" --repeats 50 --out "$results/gpu_bench.jsonl" \
  2>"$results/gpu_bench.log" >/dev/null
cat "$results/gpu_bench.log"

{
  echo "gpu_check: $(grep -c '"ok":true' "$results/gpu_bench.jsonl" 2>/dev/null || echo 0) of" \
    "$(wc -l <"$results/gpu_bench.jsonl" 2>/dev/null || echo 0) modules ok in $((SECONDS - start))s"
  for f in "${failed[@]}"; do echo "FAILED: $f"; done
} | tee "$results/summary.txt"
if [ ${#failed[@]} -gt 0 ]; then
  echo "gpu_check: FAILED (results in $results)"
  exit 1
fi
echo "gpu_check: all passed (results in $results)"
