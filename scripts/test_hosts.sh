#!/usr/bin/env bash
# Hosts in other languages on the emulator, from the folder the ctest fixture `hosts_deploy`
# exports (tests/hosts/make_deploy.sh; made here when missing): the Python package's tests
# (python/tests, pytest against a NumPy reference) and the Rust example (examples/rust-host,
# the seed's PagedAttn conventions). The C host is a ctest entry (c_abi_paged_attention).
# Installs what is missing (python3, pip, numpy, pytest, ml_dtypes, cargo) and nothing when all is there.
# Usage: scripts/test_hosts.sh [BUILD_DIR]
set -euo pipefail
cd "$(dirname "$0")/.."
build=$(cd "${1:-${TILEC_BUILD_DIR:-build}}" && pwd)
deploy=$build/hosts_deploy
[ -f "$deploy/paged_attention.kernel.toml" ] || tests/hosts/make_deploy.sh "$build/tools/tilec" "$deploy" >/dev/null

command -v python3 >/dev/null || ./scripts/install_packages.sh python3
python3 -m pip --version >/dev/null 2>&1 || ./scripts/install_packages.sh python3-pip
# Debian's own python3 refuses installs outside a virtual environment (PEP 668) unless told.
pip_install() { python3 -m pip install --quiet "$@" || python3 -m pip install --quiet --break-system-packages "$@"; }
python3 -c 'import numpy' 2>/dev/null || pip_install numpy
python3 -c 'import pytest' 2>/dev/null || pip_install pytest
# python/tests/test_host_types.py's bf16 and fp8 arrays (the package's optional dependency).
python3 -c 'import ml_dtypes' 2>/dev/null || pip_install ml_dtypes
echo "--> python/tests (pytest, the package from python/ over $build/libtilec.so)"
TILEC_LIBRARY=$build/libtilec.so TILEC_DEPLOY=$deploy PYTHONPATH=$PWD/python \
  python3 -m pytest -q -p no:cacheprovider python/tests

command -v cargo >/dev/null || ./scripts/install_packages.sh cargo
echo "--> examples/rust-host (cargo build --offline, then run)"
CARGO_TARGET_DIR=$build/rust-host TILEC_LIB_DIR=$build \
  cargo build --offline --quiet --manifest-path examples/rust-host/Cargo.toml
"$build/rust-host/debug/tilec-rust-host" "$deploy"
