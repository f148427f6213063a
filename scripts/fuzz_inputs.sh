#!/usr/bin/env bash
# Input fuzzing of tilec's readers (docs/TESTING.md "Input fuzzing"): builds the libFuzzer targets
# of fuzz/targets/ with clang-19, AddressSanitizer and UBSan, then runs each over its seed
# corpus (fuzz/corpus/<target>/) for RUNS inputs.
#
#   scripts/fuzz_inputs.sh [RUNS [TARGET...]]
#
# RUNS defaults to 20000 per target (the short run of the test suite); the targets are
# ir_parser space_toml tuning_db_toml manifest_toml npy. Installs clang-19 and its
# sanitizer runtimes when missing (Debian 12, as root or with sudo). The build lives in
# ${TILEC_FUZZ_BUILD_DIR:-build-fuzz}; inputs libFuzzer finds new go to a temporary folder,
# never to the committed corpus. A finding (crash, undefined behaviour, leak, timeout, a
# reader error of the wrong type or a broken round trip) fails the script; its input is
# kept in <build>/findings/ and shown, with the command that replays it.
set -euo pipefail
cd "$(dirname "$0")/.."

runs=${1:-20000}
shift || true
all_targets=(ir_parser space_toml tuning_db_toml manifest_toml npy op_prepare)
targets=("$@")
((${#targets[@]})) || targets=("${all_targets[@]}")
for t in "${targets[@]}"; do
  [[ " ${all_targets[*]} " == *" $t "* ]] || { echo "fuzz_inputs.sh: unknown target '$t' (${all_targets[*]})" >&2; exit 2; }
done
[[ $runs =~ ^[0-9]+$ ]] || { echo "fuzz_inputs.sh: RUNS must be a number, got '$runs'" >&2; exit 2; }

./scripts/install_packages.sh clang-19 libclang-rt-19-dev cmake ninja-build libfmt-dev libtomlplusplus-dev

build_dir=${TILEC_FUZZ_BUILD_DIR:-build-fuzz}
echo "==> building the input fuzz targets in $build_dir"
# -O1 with line tables only: what a finding's stack trace needs, in about half the compile time
# of -O2 -g (the readers run fast enough at -O1 for 20,000 inputs).
cmake -G Ninja -S fuzz/targets -B "$build_dir" -DCMAKE_CXX_COMPILER=clang++-19 \
  -DCMAKE_BUILD_TYPE=RelWithDebInfo "-DCMAKE_CXX_FLAGS_RELWITHDEBINFO=-O1 -gline-tables-only -DNDEBUG" \
  -DTILEC_WERROR=ON >/dev/null
ninja -C "$build_dir" --quiet -j "${TILEC_FUZZ_JOBS:-$(nproc)}" "${targets[@]/#/fuzz_}"

# Longest input per target: the seeds fit (printed paged attention is about 11 KB).
declare -A max_len=([ir_parser]=16384 [space_toml]=4096 [tuning_db_toml]=8192 [manifest_toml]=4096 [npy]=4096 [op_prepare]=1024)

work=$(mktemp -d "${TMPDIR:-/tmp}/tilec-fuzz.XXXXXX")
trap 'rm -rf "$work"' EXIT
findings="$build_dir/findings"
mkdir -p "$findings"
failed=()
start=$SECONDS
# Each target runs single-threaded: up to TILEC_FUZZ_PARALLEL (default: the cores) at once.
parallel=${TILEC_FUZZ_PARALLEL:-$(nproc)}
fuzz_one() { # target: runs it, leaving its log, exit status and seconds in $work
  local t=$1 t0=$SECONDS status=0 dict=()
  mkdir -p "$work/$t"
  [ -f "fuzz/targets/$t.dict" ] && dict=("-dict=fuzz/targets/$t.dict")
  # New inputs go to $work/$t (first folder); the committed corpus is only read. Scratch
  # files (the npy target's) go to $work too, so an aborted run leaves none behind.
  TMPDIR="$work" "$build_dir/fuzz_$t" -runs="$runs" -max_len="${max_len[$t]}" -timeout=10 -rss_limit_mb=2048 \
    -artifact_prefix="$findings/$t-" -print_final_stats=1 "${dict[@]}" \
    "$work/$t" "fuzz/corpus/$t" >"$work/$t.log" 2>&1 || status=$?
  echo "$status $((SECONDS - t0))" >"$work/$t.status"
}
for t in "${targets[@]}"; do
  while (($(jobs -rp | wc -l) >= parallel)); do wait -n || true; done
  fuzz_one "$t" &
done
wait
for t in "${targets[@]}"; do
  read -r status secs <"$work/$t.status"
  done_line=$(grep -E '^Done [0-9]+ runs' "$work/$t.log" | tail -1 || true)
  if ((status == 0)); then
    echo "==> $t: ${done_line:-done} ($secs s)"
    continue
  fi
  failed+=("$t")
  echo "==> $t: FINDING (exit $status after $secs s); the fuzzer's report:" >&2
  # The report without libFuzzer's progress lines and its dumps of the input (shown below).
  grep -v -E '^(#[0-9]+|INFO:|MS:|Base64:|0x[0-9a-f]+,|\s*$)' "$work/$t.log" | tail -60 >&2 || true
  for f in $(grep -oE "Test unit written to \S+" "$work/$t.log" | awk '{print $5}'); do
    echo "==> reproducer $f ($(stat -c %s "$f") bytes); replay: $build_dir/fuzz_$t $f" >&2
    head -c 512 "$f" | od -A d -c | head -20 >&2
  done
done
echo "==> input fuzzing: ${#targets[@]} targets x $runs runs in $((SECONDS - start)) s"
if ((${#failed[@]})); then
  echo "==> findings in: ${failed[*]} (reproducers in $findings/; add each to fuzz/corpus/<target>/ once fixed)" >&2
  exit 1
fi
