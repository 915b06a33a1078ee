#!/usr/bin/env bash
# Installs the Debian packages tp needs to build, test and run its demo. Idempotent: it says
# what it installs, and prints nothing when everything is there.
set -euo pipefail

packages=(
  cmake ninja-build g++ make
  libtorch-dev          # LibTorch (CPU)
  libopenblas0-pthread  # without it Debian's LibTorch runs on the reference BLAS, ~20x slower
  libgloo-dev           # c10d's Gloo backend
  librange-v3-dev       # dataflows
  libboost-dev          # Boost.Hana
  zlib1g-dev            # gzip IDX files
  nlohmann-json3-dev    # stats.json
  libcli11-dev          # the flags of tp-run and the examples
  googletest libgtest-dev libgmock-dev
  libbenchmark-dev
  dataset-fashion-mnist
  protobuf-compiler     # protoc --decode_raw checks the TensorBoard files in the tests
  python3               # json.load checks stats.json in the tests
  iproute2              # ip netns: the two-host multi-process test
)

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
[ ${#missing[@]} -eq 0 ] && exit 0

echo "setup: installing ${missing[*]}"
sudo=""
if [ "$(id -u)" -ne 0 ]; then
  command -v sudo >/dev/null || { echo "setup: run as root, or install: ${missing[*]}" >&2; exit 1; }
  sudo=sudo
fi
export DEBIAN_FRONTEND=noninteractive
$sudo apt-get update -qq
$sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
echo "setup: done"
