#!/usr/bin/env bash
# Installs what is missing (Debian 12, as root or with sudo), then configures
# and builds tilec in ./build. Idempotent: a second run installs nothing.
set -euo pipefail
cd "$(dirname "$0")/.."

./scripts/install_packages.sh g++ cmake ninja-build ccache pkg-config llvm-19-dev libtomlplusplus-dev catch2 libcli11-dev libfmt-dev

build_dir=${TILEC_BUILD_DIR:-build}
echo "==> configuring $build_dir"
cmake -G Ninja -B "$build_dir" -S . -DCMAKE_BUILD_TYPE=Release -DTILEC_WERROR=ON >/dev/null
echo "==> building"
ninja -C "$build_dir" --quiet
