#!/usr/bin/env bash
# Sets up and builds tilec, then runs every test: the Catch2 suite (ctest) in the plain
# build, the GPU check's dry run (scripts/gpu_check.sh --dry-run, on the CPU emulator), a
# short libFuzzer run of each input reader (scripts/fuzz_inputs.sh, clang-19) and the suite
# again built with AddressSanitizer and UBSan (scripts/sanitize.sh, in ./build-asan), that
# second time with the emulator's threads in reverse order running the GPU's own nvptx
# lowering rewritten for the CPU. So every test runs in both thread orders and on both
# lowerings, once each, and under the sanitizers once. After the first ctest pass it runs the
# hosts in Python and Rust (scripts/test_hosts.sh; then as a user installs them, from
# `pip wheel ./python` and `cmake --install`: tests/install/test_hosts_installed.sh) and counts
# the decode loop's SASS (scripts/sass_check.py).
# Each stage prints its time, and the run ends (pass or fail) with a table of them.
# With TILEC_REQUIRE_PTXAS=1 (CI sets it) a missing ptxas fails the run instead of
# skipping the PTX checks. TILEC_QUICK=1 runs the plain suite only, in both orders (for a
# fast local loop).
set -euo pipefail
cd "$(dirname "$0")/.."
start=$SECONDS
build=${TILEC_BUILD_DIR:-build}

# stage NAME COMMAND...: runs COMMAND (a command or a function of this script) as one timed
# stage of the run, in a subshell with -e in force (it would not be in `cmd || ...`).
stage_names=()
stage_secs=()
stage() {
  local name=$1 t0=$SECONDS rc
  shift
  echo "==> $name"
  set +e
  (
    set -e
    "$@"
  )
  rc=$?
  set -e
  stage_names+=("$name")
  stage_secs+=($((SECONDS - t0)))
  echo "    ($name: $((SECONDS - t0)) s; $((SECONDS - start)) s so far)"
  return "$rc"
}
report() {
  local rc=$?
  ((${#stage_names[@]})) || return 0
  echo "==> stage times ($( ((rc == 0)) && echo passed || echo "FAILED, exit $rc"))"
  for i in "${!stage_names[@]}"; do
    printf '    %5d s  %s\n' "${stage_secs[$i]}" "${stage_names[$i]}"
  done
  printf '    %5d s  total\n' $((SECONDS - start))
}
trap report EXIT

if [ "${TILEC_REQUIRE_PTXAS:-0}" = 1 ]; then
  if ! command -v ptxas >/dev/null && [ ! -x /usr/local/cuda/bin/ptxas ]; then
    echo "error: ptxas not found (PATH or /usr/local/cuda/bin) and TILEC_REQUIRE_PTXAS=1" >&2
    exit 1
  fi
fi
have_ptxas() { command -v ptxas >/dev/null || [ -x /usr/local/cuda/bin/ptxas ]; }

stage "set-up and build (scripts/setup.sh)" ./scripts/setup.sh

# What the later stages install (clang-19 for the fuzzers, cargo, Python packages, nvdisasm)
# downloads while the suite runs, in the background; each stage still installs what is missing
# itself, so this only saves waiting. Its log is kept for a failing run.
prefetch_log=$build/prefetch.log
prefetch() {
  ./scripts/install_packages.sh clang-19 libclang-rt-19-dev cargo python3-pip
  pip_install() { python3 -m pip install --quiet "$@" || python3 -m pip install --quiet --break-system-packages "$@"; }
  python3 -c 'import numpy, pytest' 2>/dev/null || pip_install numpy pytest
  if have_ptxas && ! command -v nvdisasm >/dev/null && [ ! -x /usr/local/cuda/bin/nvdisasm ]; then
    python3 -c 'import nvidia.cuda_nvdisasm' 2>/dev/null || pip_install nvidia-cuda-nvdisasm
  fi
}
prefetch_pid=
if [ "${TILEC_QUICK:-0}" != 1 ]; then
  prefetch >"$prefetch_log" 2>&1 &
  prefetch_pid=$!
fi
wait_prefetch() {
  [ -n "$prefetch_pid" ] || return 0
  wait "$prefetch_pid" || { echo "warning: the background installs failed (see $prefetch_log); the stages retry them" >&2; }
  prefetch_pid=
}

stage "the suite (ctest)" ctest --test-dir "$build" --output-on-failure -j2

# Every planted bug of the mutation test still applies to the code (a refactoring that moves a
# snippet must move its mutant too); the mutants themselves run in scripts/mutation_test.py.
stage "the mutation test's snippets (scripts/mutation_test.py --check-snippets)" \
  python3 scripts/mutation_test.py --check-snippets

# The emulator running a block's threads in reverse order (a missing barrier that one order
# hides shows in the other; the shared-memory race check catches it in both), and every
# emulated kernel built from the nvptx lowering, so the GPU's own target code (shuffle
# operands, conversions, address spaces) runs here too.
reverse=(env TILEC_EMU_SCHEDULE=reverse TILEC_EMU_LOWERING=nvptx)
if [ "${TILEC_QUICK:-0}" = 1 ]; then
  stage "the suite again: threads in reverse order, the nvptx lowering on the emulator" \
    "${reverse[@]}" ctest --test-dir "$build" --output-on-failure -j2
  echo "==> TILEC_QUICK=1: skipped the hosts, the SASS count, the GPU check's dry run, input fuzzing and the sanitizer build"
  exit 0
fi
wait_prefetch

# Hosts in other languages through the C ABI (runtime/tilec.h): the Python package's tests and
# the Rust example, on the folder ctest's hosts_deploy fixture exported (the C host ran in ctest).
stage "hosts: the Python package (pytest) and the Rust example (scripts/test_hosts.sh)" \
  ./scripts/test_hosts.sh "$build"
# The same hosts as a user installs them, no build tree on their paths: `pip wheel ./python`
# (the package builds and carries libtilec.so; ccache serves its compiles) imported from a
# scratch folder, and the Rust example linking `cmake --install`'s libtilec.so via pkg-config.
stage "hosts from an install: pip wheel ./python, Rust over pkg-config (tests/install/test_hosts_installed.sh)" \
  ./tests/install/test_hosts_installed.sh "$build"

# The decode loop in SASS (the cubin through nvdisasm; pip's nvidia-cuda-nvdisasm when the
# toolkit has none): at most 340 instructions and 8 barriers a trip. Needs ptxas for the cubin.
sass_check() {
  local rc=0
  python3 scripts/sass_check.py --tilec "$build/tools/tilec" || rc=$?
  if [ "$rc" = 2 ]; then # set-up: no nvdisasm yet
    python3 -m pip install --quiet nvidia-cuda-nvdisasm 2>/dev/null ||
      python3 -m pip install --quiet --break-system-packages nvidia-cuda-nvdisasm || true
    python3 scripts/sass_check.py --tilec "$build/tools/tilec"
  else
    return "$rc"
  fi
}
if have_ptxas; then
  stage "the decode loop in SASS (scripts/sass_check.py)" sass_check
fi

# The GPU check's CPU side, so the script cannot rot: the same steps on the CPU emulator,
# including the runtime-only build a GPU machine without LLVM makes.
gpu_dry_run() {
  python3 -c 'import numpy' 2>/dev/null || python3 -m pip install --quiet numpy
  TILEC="$build/tools/tilec" ./scripts/build_gpu_modules.sh --dry-run "$build/gpu_modules_dry"
  ./scripts/gpu_check.sh --dry-run "$build/gpu_modules_dry" "$build/gpu_results_dry"
}
stage "the GPU check, dry run (scripts/gpu_check.sh --dry-run)" gpu_dry_run

stage "input fuzzing, short runs (scripts/fuzz_inputs.sh)" ./scripts/fuzz_inputs.sh

# The sanitizer pass leaves out the install test (a packaging check: it installs and builds a
# project against the install, which the plain pass did) and the tests that only compile to
# PTX and count what ptxas reports: they run no emulated kernel and no instrumented code, so
# thread order, lowering and sanitizers cannot change them.
compile_only='compiles without spills|holds without spills|compiles with zero spills|compiles to the same PTX|gives PTX no larger|warpgroups along N, no spills'
# The longest emulated sweeps (of paged attention, and of every dtype through the elementwise,
# reduce and wgmma kernels) run their second pass (reverse order, the nvptx lowering) in the
# plain build, where the emulator is not instrumented and they take a fifth of the time: every
# test still runs in both orders and on both lowerings, and the sanitizers still watch the
# emulator and the runtime through every other emulated test.
slow_sweeps='every config of every shipped search space|public models|models served in 2026|over an fp8 KV cache matches|causal query rows and a sliding window matches|query tiles matches the reference at every Sq|head dims between powers of two|split by size matches the reference on ragged|planned, a fixed grid of programs|tunes every model layer|over the config grid|follows the scores. magnitude|stays within the traffic budget|MLA and separate V head dims match|load only the triangle|attention sinks match the reference on both paths|chunked local attention matches|bit for bit the same alone|overlap=1 matches the reference and overlap=0|with overlap=1 .the rotated walk.|FlashMLA.s tile: the emulator matches|share the pieces by cost|elementwise, cast and reduce kernels agree with the interpreter when emulated|wgmma: the emulator agrees with the interpreter bit for bit|reductions over each axis, every reducible dtype|elementwise ops on every dtype|kv_tma=1 keeps every feature|K and V come by TMA, a box per page|the GEMM runs on the emulator in both lowerings'
stage "the slowest sweeps again: threads in reverse order, the nvptx lowering (plain build)" \
  "${reverse[@]}" ctest --test-dir "$build" --output-on-failure -j2 -R "$slow_sweeps"
stage "the sanitizer build (scripts/sanitize.sh --build)" ./scripts/sanitize.sh --build
stage "the suite under AddressSanitizer and UBSan, threads in reverse order, the nvptx lowering" \
  "${reverse[@]}" TILEC_CTEST_EXCLUDE="install_and_build_example|$compile_only|$slow_sweeps" ./scripts/sanitize.sh --test
