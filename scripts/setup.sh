#!/usr/bin/env bash
# Installs the Debian packages tp needs to build, test and run its demo. Idempotent: it says
# what it installs, and prints nothing when everything is there.
set -euo pipefail

packages=(
  cmake ninja-build g++ make
  ccache                # the compiler cache CMakeLists.txt uses when present
  libtorch-dev          # LibTorch (CPU)
  libopenblas0-openmp   # without it Debian's LibTorch runs on the reference BLAS, ~20x slower
  libgloo-dev           # c10d's Gloo backend
  librange-v3-dev       # dataflows
  zlib1g-dev            # gzip IDX files
  libpng-dev            # TensorBoard images, PNG decoding
  libjpeg62-turbo-dev   # JPEG decoding (<tp/images.hpp>)
  libarchive-dev        # tar shards (<tp/images.hpp>)
  python3-pil           # decodes those images in the tests
  nlohmann-json3-dev    # stats.json
  libcli11-dev          # the flags of tp-run and the examples
  googletest libgtest-dev libgmock-dev
  libbenchmark-dev
  dataset-fashion-mnist
  protobuf-compiler     # protoc --decode_raw checks the TensorBoard files in the tests
  python3               # json.load checks stats.json in the tests
  python3-torch         # torch.optim.NAdam and RAdam: the reference trajectories of tp::optim
  python3-torchvision   # ImageFolder's listing, which image_folder's test compares with; bench/image_pipeline.sh's peer
  iproute2              # ip netns: the two-host multi-process test
  doxygen               # the API reference: make docs, and the docs.reference test
)

# LibTorch's intra-op threads are OpenMP's. OpenBLAS built for OpenMP shares that pool; the
# pthread build (Debian's default where both are installed) brings threads of its own that
# fight LibTorch's spinning ones for the cores: on 2 cores, LibTorch 2.6 ran the GAN example's
# small steps 60x slower with it, and 1.13 2.4x slower.
blas_alternatives() {  # the alternatives not yet on the OpenMP build, once it is installed
  local dir arch n
  for dir in /usr/lib/*/openblas-openmp; do
    [ -d "$dir" ] || continue
    arch=$(basename "$(dirname "$dir")")
    for n in libblas.so.3 liblapack.so.3 libopenblas.so.0; do
      [ "$(readlink "/etc/alternatives/$n-$arch")" = "$dir/$n" ] || echo "$n-$arch $dir/$n"
    done
  done
}

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
[ ${#missing[@]} -eq 0 ] && [ -z "$(blas_alternatives)" ] && exit 0

sudo=""
if [ "$(id -u)" -ne 0 ]; then
  command -v sudo >/dev/null || { echo "setup: run as root, or install: ${missing[*]} (and select OpenBLAS's OpenMP build)" >&2; exit 1; }
  sudo=sudo
fi
if [ ${#missing[@]} -gt 0 ]; then
  echo "setup: installing ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  $sudo apt-get update -qq
  $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi
blas_alternatives | while read -r name path; do
  echo "setup: BLAS: $name -> $path"
  $sudo update-alternatives --quiet --set "$name" "$path"
done
echo "setup: done"
