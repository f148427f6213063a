#!/usr/bin/env bash
# Sets up and builds tilec, then runs every test: the Catch2 suite (ctest) in the plain
# build, the GPU check's dry run (scripts/gpu_check.sh --dry-run, on the CPU emulator), a
# short libFuzzer run of each input reader (scripts/fuzz_inputs.sh, clang-19) and the suite
# again built with AddressSanitizer and UBSan (scripts/sanitize.sh, in ./build-asan), that
# second time with the emulator's threads in reverse order running the GPU's own nvptx
# lowering rewritten for the CPU. So every test runs in both thread orders and on both
# lowerings, once each, and under the sanitizers once. After the first ctest pass it runs the
# hosts in Python and Rust (scripts/test_hosts.sh) and counts the decode loop's SASS
# (scripts/sass_check.py).
# With TILEC_REQUIRE_PTXAS=1 (CI sets it) a missing ptxas fails the run instead of
# skipping the PTX checks. TILEC_QUICK=1 runs the plain suite only, in both orders (for a
# fast local loop).
set -euo pipefail
cd "$(dirname "$0")/.."
start=$SECONDS
./scripts/setup.sh
if [ "${TILEC_REQUIRE_PTXAS:-0}" = 1 ]; then
  if ! command -v ptxas >/dev/null && [ ! -x /usr/local/cuda/bin/ptxas ]; then
    echo "error: ptxas not found (PATH or /usr/local/cuda/bin) and TILEC_REQUIRE_PTXAS=1" >&2
    exit 1
  fi
fi
build=${TILEC_BUILD_DIR:-build}
elapsed() { echo "    ($((SECONDS - start)) s so far)"; }
echo "==> testing"
ctest --test-dir "$build" --output-on-failure -j2
elapsed
# Every planted bug of the mutation test still applies to the code (a refactoring that moves a
# snippet must move its mutant too); the mutants themselves run in scripts/mutation_test.py.
echo "==> the mutation test's snippets (scripts/mutation_test.py --check-snippets)"
python3 scripts/mutation_test.py --check-snippets
# Hosts in other languages through the C ABI (runtime/tilec.h): the Python package's tests and
# the Rust example, on the folder ctest's hosts_deploy fixture exported (the C host ran in ctest).
echo "==> hosts: the Python package (pytest) and the Rust example (scripts/test_hosts.sh)"
./scripts/test_hosts.sh "$build"
elapsed
# The decode loop in SASS (the cubin through nvdisasm; pip's nvidia-cuda-nvdisasm when the
# toolkit has none): at most 340 instructions and 8 barriers a trip. Needs ptxas for the cubin.
if command -v ptxas >/dev/null || [ -x /usr/local/cuda/bin/ptxas ]; then
  echo "==> the decode loop in SASS (scripts/sass_check.py)"
  rc=0
  python3 scripts/sass_check.py --tilec "$build/tools/tilec" || rc=$?
  if [ "$rc" = 2 ]; then # set-up: no nvdisasm yet
    python3 -m pip install --quiet nvidia-cuda-nvdisasm 2>/dev/null ||
      python3 -m pip install --quiet --break-system-packages nvidia-cuda-nvdisasm || true
    python3 scripts/sass_check.py --tilec "$build/tools/tilec"
  elif [ "$rc" != 0 ]; then
    exit "$rc"
  fi
  elapsed
fi
# The emulator running a block's threads in reverse order (a missing barrier that one order
# hides shows in the other; the shared-memory race check catches it in both), and every
# emulated kernel built from the nvptx lowering, so the GPU's own target code (shuffle
# operands, conversions, address spaces) runs here too.
reverse=(env TILEC_EMU_SCHEDULE=reverse TILEC_EMU_LOWERING=nvptx)
if [ "${TILEC_QUICK:-0}" = 1 ]; then
  echo "==> testing again: threads in reverse order, the nvptx lowering on the emulator"
  "${reverse[@]}" ctest --test-dir "$build" --output-on-failure -j2
  echo "==> TILEC_QUICK=1: skipped the GPU check's dry run, input fuzzing and the sanitizer build"
  exit 0
fi
# The GPU check's CPU side, so the script cannot rot: the same steps on the CPU emulator,
# including the runtime-only build a GPU machine without LLVM makes.
echo "==> the GPU check, dry run (scripts/gpu_check.sh --dry-run)"
python3 -c 'import numpy' 2>/dev/null || python3 -m pip install --quiet numpy
TILEC="$build/tools/tilec" ./scripts/build_gpu_modules.sh --dry-run "$build/gpu_modules_dry"
./scripts/gpu_check.sh --dry-run "$build/gpu_modules_dry" "$build/gpu_results_dry"
elapsed
echo "==> input fuzzing (short runs)"
./scripts/fuzz_inputs.sh
elapsed
echo "==> the test suite under AddressSanitizer and UBSan, threads in reverse order, the nvptx lowering"
# The install test is a packaging check (it installs and builds a project against the
# install): the plain pass ran it; the sanitizer pass leaves it out.
"${reverse[@]}" TILEC_CTEST_EXCLUDE=install_and_build_example ./scripts/sanitize.sh
elapsed
