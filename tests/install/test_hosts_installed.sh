#!/usr/bin/env bash
# The hosts as a user installs them, with no build tree on any path:
#   1. `pip wheel ./python` from a copy of the checkout holding only what git tracks (a fresh
#      clone, uncommitted edits included): the wheel carries libtilec.so, built by the package
#      itself (python/CMakeLists.txt: the runtime-only configuration, no LLVM), and the build
#      writes nothing into the checkout;
#   2. the wheel installed into a virtual environment, `import tilec` from a scratch folder with
#      TILEC_LIBRARY and PYTHONPATH unset: the package's own libtilec.so, an error that comes
#      back from C, the exported folder opened, then python/tests run over it, and the
#      tutorial's Python host (examples/rmsnorm/host.py) over the rmsnorm folder ctest's
#      install_and_build_example exported (BUILD_DIR/rmsnorm_deploy);
#   3. the Rust example (examples/rust-host) built against `cmake --install`'s libtilec.so through
#      pkg-config (TILEC_LIB_DIR unset) and run: paged attention, and the tutorial's rmsnorm from
#      the same exported folder as the Python host.
# The tests that export modules themselves use the installed tilec CLI; the folder of exported
# paged attention is ctest's hosts_deploy (tests/hosts/make_deploy.sh; made here when missing).
# Every check fails the test; nothing is skipped. Needs PyPI for the wheel's build requirements
# (scikit-build-core, nvidia-cuda-runtime-cu12 for cuda.h; cmake and ninja too where the
# machine's are missing), and installs what else is missing (python3-venv, numpy, pytest, ml_dtypes,
# cargo).
#
#   tests/install/test_hosts_installed.sh BUILD_DIR
set -euo pipefail

if [[ $# -ne 1 ]]; then
  echo "usage: $0 BUILD_DIR" >&2
  exit 2
fi
src=$(cd "$(dirname "$0")/../.." && pwd)
build=$(realpath "$1")
tmp=$(mktemp -d "${TMPDIR:-/tmp}/tilec-hosts-installed.XXXXXX")
# Kept on failure (and with TILEC_INSTALL_TEST_KEEP=1), for a look at what went wrong.
cleanup() {
  local rc=$?
  if [[ $rc -eq 0 && -z ${TILEC_INSTALL_TEST_KEEP:-} ]]; then rm -rf "$tmp"; else echo "exit $rc; files kept in $tmp" >&2; fi
}
trap cleanup EXIT

start=$SECONDS
step() { echo; echo "== [$((SECONDS - start))s] $*"; }
fail() { echo "FAIL: $*" >&2; exit 1; }
pip_install() { python3 -m pip install --quiet "$@" || python3 -m pip install --quiet --break-system-packages "$@"; }

deploy=$build/hosts_deploy
[[ -f $deploy/paged_attention.kernel.toml ]] || "$src/tests/hosts/make_deploy.sh" "$build/tools/tilec" "$deploy" >/dev/null
python3 -c 'import numpy, pytest, ml_dtypes' 2>/dev/null || pip_install numpy pytest ml_dtypes

step "cmake --install $build into $tmp/prefix"
cmake --install "$build" --prefix "$tmp/prefix" >"$tmp/install.log" 2>&1 ||
  { cat "$tmp/install.log"; fail "cmake --install $build"; }
lib=$(sed -n 's/^CMAKE_INSTALL_LIBDIR:PATH=//p' "$build/CMakeCache.txt")

step "a copy of the checkout as git has it (tracked files, and new ones not ignored)"
# At a fixed path, so that ccache (which the build uses when present) serves the next run.
copy=$build/python_wheel_src
rm -rf "$copy"
mkdir -p "$copy"
# (Files deleted in the work tree but still in git's index are left out.)
git -C "$src" ls-files -z --cached --others --exclude-standard |
  while IFS= read -r -d '' f; do [[ ! -f $src/$f ]] || printf '%s\0' "$f"; done |
  tar -C "$src" --null -T - -cf - | tar -C "$copy" -xf -
[[ -f $copy/python/pyproject.toml && -f $copy/runtime/tilec.h ]] || fail "the copy of the checkout is incomplete"
[[ ! -e $copy/build ]] || fail "the copy holds a build folder"

step "pip wheel ./python (builds libtilec.so itself, in a temporary folder)"
# Debian's python3 makes one only with python3-venv installed.
if ! python3 -m venv --system-site-packages "$tmp/venv" >"$tmp/venv.log" 2>&1; then
  rm -rf "$tmp/venv"
  "$src/scripts/install_packages.sh" python3-venv
  python3 -m venv --system-site-packages "$tmp/venv" || fail "python3 -m venv"
fi
py=$tmp/venv/bin/python
touch "$tmp/stamp"
sleep 1 # the stamp is older than anything the build could write
(cd "$copy" && "$py" -m pip wheel --quiet --no-deps -w "$tmp/wheels" ./python) >"$tmp/wheel.log" 2>&1 ||
  { tail -40 "$tmp/wheel.log"; fail "pip wheel ./python"; }
wheel=$(compgen -G "$tmp/wheels/tilec-*.whl") || fail "pip wheel wrote no tilec wheel"
echo "$wheel"
if find "$copy" -newer "$tmp/stamp" | grep .; then fail "pip wheel ./python wrote into the checkout"; fi
"$py" -m zipfile -l "$wheel" | tee "$tmp/wheel.txt"
grep -q '^tilec/libtilec\.so ' "$tmp/wheel.txt" || fail "the wheel carries no tilec/libtilec.so"
grep -q '^tilec/__init__\.py ' "$tmp/wheel.txt" || fail "the wheel carries no tilec/__init__.py"
if grep -E '^(tests|python)/' "$tmp/wheel.txt"; then fail "the wheel carries more than the package"; fi
version=$(sed -n 's/^#define TILEC_VERSION "\([0-9.]*\)"$/\1/p' "$src/abi/version.h")
[[ $(basename "$wheel") == tilec-$version-* ]] || fail "the wheel's version is not tilec's, $version"

step "pip install the wheel into a virtual environment; import tilec from a scratch folder"
"$py" -m pip install --quiet --no-deps --no-index "$wheel" || fail "pip install $wheel"
mkdir -p "$tmp/scratch"
site=$("$py" -c 'import sysconfig; print(sysconfig.get_paths()["platlib"])')
readelf -d "$site/tilec/libtilec.so" >"$tmp/libtilec.dyn"
grep NEEDED "$tmp/libtilec.dyn"
# The bundled library stands alone: no LLVM, and fmt and toml++ compiled in.
if grep -Ei 'NEEDED.*(llvm|fmt|toml)' "$tmp/libtilec.dyn"; then fail "the bundled libtilec.so needs another library"; fi
cat >"$tmp/scratch/check.py" <<'EOF'
import os, sys
import pytest
import tilec

venv, deploy = sys.argv[1], sys.argv[2]
assert "TILEC_LIBRARY" not in os.environ and "PYTHONPATH" not in os.environ
assert tilec.__file__.startswith(venv), f"tilec imported from {tilec.__file__}, not the virtual environment"
beside = os.path.join(os.path.dirname(tilec.__file__), "libtilec.so")
lib = tilec._library()
assert lib._name == beside, f"tilec loaded {lib._name}, not the library it carries ({beside})"
try:
    tilec.load(os.path.join(deploy, "no-such-folder"), backend="emulate")
    raise AssertionError("a missing folder opened")
except tilec.NotFoundError as e:  # the C runtime's message, through the C ABI
    assert "no-such-folder" in str(e), e
    print("error from C:", e)
store = tilec.load(deploy, backend="emulate")
print(store)
assert "paged_attention" in repr(store), store
# python/tests over the bundled library (this process has imported it: the tests use that);
# the tests that export modules themselves run the installed tilec ($TILEC_BINARY).
sys.exit(pytest.main(["-q", "-p", "no:cacheprovider", sys.argv[3]]))
EOF
(cd "$tmp/scratch" && env -u TILEC_LIBRARY -u PYTHONPATH TILEC_DEPLOY="$deploy" TILEC_BINARY="$tmp/prefix/bin/tilec" \
  "$py" check.py "$tmp/venv" "$deploy" "$src/python/tests") || fail "import tilec from the installed wheel"

step "the tutorial's Python host (examples/rmsnorm/host.py): a user's kernel by name, the installed wheel, a scratch folder"
[[ -f $build/rmsnorm_deploy/rmsnorm.kernel.toml ]] ||
  fail "$build/rmsnorm_deploy is missing: ctest's install_and_build_example (tests/install/test_install.sh) writes it"
(cd "$tmp/scratch" && env -u TILEC_LIBRARY -u PYTHONPATH "$py" "$src/examples/rmsnorm/host.py" "$build/rmsnorm_deploy" 32 300 &&
  env -u TILEC_LIBRARY -u PYTHONPATH "$py" "$src/examples/rmsnorm/host.py" "$build/rmsnorm_deploy" 7 300) ||
  fail "examples/rmsnorm/host.py on the exported rmsnorm"

step "the Rust example against an installed libtilec.so, through pkg-config"
command -v cargo >/dev/null || "$src/scripts/install_packages.sh" cargo
command -v pkg-config >/dev/null || "$src/scripts/install_packages.sh" pkg-config
(env -u TILEC_LIB_DIR PKG_CONFIG_PATH="$tmp/prefix/$lib/pkgconfig" CARGO_TARGET_DIR="$tmp/rust" \
  cargo build --offline --quiet --manifest-path "$src/examples/rust-host/Cargo.toml") || fail "cargo build against the install"
ldd "$tmp/rust/debug/tilec-rust-host" >"$tmp/rust.ldd"
grep libtilec "$tmp/rust.ldd"
grep -q "libtilec\.so\.[0-9.]* => $tmp/prefix/$lib/" "$tmp/rust.ldd" || fail "the Rust example does not load the installed libtilec.so"
"$tmp/rust/debug/tilec-rust-host" "$deploy" || fail "the Rust example over the installed libtilec.so"
step "the tutorial's kernel from Rust: rmsnorm by name over the installed libtilec.so"
("$tmp/rust/debug/tilec-rust-host" --rmsnorm "$build/rmsnorm_deploy" 32 300 &&
  "$tmp/rust/debug/tilec-rust-host" --rmsnorm "$build/rmsnorm_deploy" 7 300) || fail "the Rust example's rmsnorm"

echo
echo "hosts from an install passed in $((SECONDS - start))s"
