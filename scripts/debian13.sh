#!/usr/bin/env bash
# make test-debian13: the suite again on Debian 13 (trixie), with its LibTorch 2.6, g++ 14
# and CMake 3.31, in a root made with debootstrap and entered with chroot. Debian 13's LibTorch
# needs a newer C library than Debian 12's, so it cannot be installed beside the host's.
#
# The root is kept in a cache folder ($TP_CACHE_DIR, default ~/.cache/tp/debian13), so a machine
# that has made it once only brings it up to date (scripts/setup.sh inside it installs what the
# project needs, as on the host). Only a complete root is kept: an interrupted debootstrap is
# started again. The source tree is bind-mounted at /tp; the build goes to build-debian13.
#
# In it, the suite with g++ 14 (build-debian13; its long examples run on the host only, see
# below), then clang 19's compile checks
# (build-debian13-clang, make compile-checks): everything builds without warnings and the
# compile-time rules' diagnostics hold for both compilers. The suite does not run a second time
# with clang: what a second compiler finds is at compile time, and the run would cost CI a
# third of its budget.
# The kernel matrix runs on the host only: it varies the CPU's kernels, not LibTorch.
# Debian 12's clang 14 cannot compile LibTorch 1.13's headers as C++20, so the host has no
# clang run, and the libFuzzer targets (make fuzz, clang only) build and run here, last.
#
#   scripts/debian13.sh            (TP_DEBIAN13_STAGES="suite clang fuzz", the default: which to run)
set -euo pipefail
cd "$(dirname "$0")/.."
source=$PWD
[ "$(id -u)" -eq 0 ] || { echo "test-debian13: debootstrap and chroot need root (run it with sudo)" >&2; exit 1; }
cache=${TP_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/tp}
root=$cache/debian13
mirror=${TP_DEBIAN_MIRROR:-http://deb.debian.org/debian}

if [ ! -e "$root/.tp-root-complete" ]; then
  if ! command -v debootstrap >/dev/null; then
    echo "test-debian13: installing debootstrap"
    DEBIAN_FRONTEND=noninteractive apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends debootstrap >/dev/null
  fi
  echo "test-debian13: making a Debian 13 root in $root (once; it is kept)"
  rm -rf "$root.partial"
  mkdir -p "$cache"
  bash scripts/timed.sh "Debian 13 root (debootstrap)" debootstrap --variant=minbase trixie "$root.partial" "$mirror" > "$cache/debootstrap.log" 2>&1 ||
    { tail -20 "$cache/debootstrap.log"; echo "test-debian13: debootstrap failed (log: $cache/debootstrap.log)" >&2; exit 1; }
  touch "$root.partial/.tp-root-complete"
  mv "$root.partial" "$root"
fi

# What the suite needs from the host: processes, devices, sysfs, name resolution, the sources.
mounted=()
cleanup() {
  local i
  for ((i = ${#mounted[@]} - 1; i >= 0; i--)); do umount -l "${mounted[i]}" 2>/dev/null || true; done
}
trap cleanup EXIT
mount_at() {  # mount_at <inside the root> <mount arguments...>
  mkdir -p "$root$1"
  mount "${@:2}" "$root$1"
  mounted+=("$root$1")
}
mount_at / --bind "$root"   # a mount point of its own: ip netns (the two-host test) remounts /
mount_at /proc -t proc proc
mount_at /sys --rbind /sys
mount_at /dev --rbind /dev
mount_at /tp --bind "$source"
# The CUDA and NCCL headers, where the host has them: the CUDA syntax test type-checks tp's GPU
# paths against LibTorch 2.6's c10d too.
[ -d /usr/local/cuda/include ] && mount_at /usr/local/cuda --bind /usr/local/cuda
cp -L /etc/resolv.conf "$root/etc/resolv.conf"

# A clean environment, as a new user's, keeping what CI and the BLAS kernels need.
pass=(HOME=/root PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin LANG=C.UTF-8 TERM=dumb)
for name in CI JOBS OPENBLAS_CORETYPE OPENBLAS_L2_SIZE FUZZ_RUNS FUZZ_TARGETS FUZZ_SECONDS FUZZ_JOBS; do
  [ -n "${!name:-}" ] && pass+=("$name=${!name}")
done
# Stage times (scripts/timed.sh), where the log is in the source tree that the root sees at /tp.
case "${TP_STAGE_LOG:-}" in "$source"/*) pass+=("TP_STAGE_LOG=/tp/${TP_STAGE_LOG#"$source"/}") ;; esac
case "${TP_TEST_TIMES:-}" in "$source"/*) pass+=("TP_TEST_TIMES=/tp/${TP_TEST_TIMES#"$source"/}") ;; esac
echo "test-debian13: Debian 13 with $(chroot "$root" dpkg-query -W -f='libtorch-dev ${Version}' libtorch-dev 2>/dev/null || echo 'LibTorch not installed yet')"
in_root() { chroot "$root" /usr/bin/env -i "${pass[@]}" "$@"; }
bash scripts/timed.sh "Debian 13 set-up" chroot "$root" /usr/bin/env -i "${pass[@]}" bash /tp/scripts/setup.sh   # a new root has no make yet
# clang, and libFuzzer's runtime for the fuzz targets.
in_root sh -c 'for p in clang libclang-rt-dev; do dpkg-query -W -f="\${Status}" $p 2>/dev/null | grep -q "install ok installed" ||
               { echo "test-debian13: installing $p"; DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $p >/dev/null; }; done'
stages=" ${TP_DEBIAN13_STAGES:-suite clang fuzz} "
# -O1: the suite's time is in LibTorch, and -O1 compiles in less time than Release's -O3. The
# compile-time rules run with g++ 12 on the host and with clang 19 below.
# One intra-op thread per test: two tests side by side with two threads each oversubscribe the
# 2 cores, and LibTorch 2.6 suffers it much more than the host's 1.13 (example.gan_2d took 177 s
# in CI against 15 s alone; image_folder.list_file 101 s against 58 s with one thread each,
# and four of the longest examples 186 s against 146 s). Two threads' results are checked on
# the host (the kernel matrix), and tests about the thread count set it themselves.
# The long examples (label long_example: the example models trained again in other
# configurations, whose LibTorch calls the unit tests make) run on the host only; here the unit
# tests and the examples that cross a version border (checkpoints, TorchScript, Python) run.
# Label debian12: docs.readme_commands runs the README's commands, written for Debian 12, and
# docs.reference builds the API reference, the same on every platform.
# Everything is built at -O1, so the tests need no precompiled header of their own.
if [[ $stages == *" suite "* ]]; then
  echo "== test-debian13: the suite with g++"
  in_root env OMP_NUM_THREADS=1 make -C /tp BUILD=build-debian13 CMAKE_ARGS="-DCMAKE_CXX_FLAGS_RELEASE=-O1 -DTP_TEST_OPTIMIZATION=" \
    CTEST_ARGS='-LE "compile_time|long_example|debian12"' suite
fi
if [[ $stages == *" clang "* ]]; then
  echo "== test-debian13: the compile checks with clang"
  in_root CXX=clang++ make -C /tp BUILD=build-debian13-clang compile-checks
fi
if [[ $stages == *" fuzz "* ]]; then
  echo "== test-debian13: the fuzz targets with clang"
  in_root make -C /tp BUILD=build-debian13 fuzz
fi
