#!/usr/bin/env bash
# Installs what is missing (Debian 12, as root or with sudo), then configures
# and builds tilec in ./build. Idempotent: a second run installs nothing.
set -euo pipefail
cd "$(dirname "$0")/.."

packages=(g++ cmake ninja-build ccache pkg-config llvm-19-dev libtomlplusplus-dev catch2 libcli11-dev libfmt-dev)
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  echo "==> installing: ${missing[*]}"
  sudo=""
  [ "$(id -u)" -eq 0 ] || sudo="sudo"
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

build_dir=${TILEC_BUILD_DIR:-build}
echo "==> configuring $build_dir"
cmake -G Ninja -B "$build_dir" -S . -DCMAKE_BUILD_TYPE=Release -DTILEC_WERROR=ON >/dev/null
echo "==> building"
ninja -C "$build_dir" --quiet
