#!/usr/bin/env bash
# The numerics-sensitive tests again under other BLAS kernels and intra-op thread counts.
#
# OpenBLAS picks its kernels by CPU (Sandybridge, Haswell, SkylakeX, Cooperlake, Zen, ...) and
# each rounds differently in the last bits, as do different numbers of intra-op threads. A test
# that checks learning must hold on all of them, and a bitwise test (resume, tower equivalence)
# must compare two runs made on the same kernels. The tests labelled `numerics` (learning
# checks, bitwise resume, tower and process equivalence) run once per kernel this CPU can
# execute. The thread counts alternate between kernels (1, 2, 1, ...) rather than multiplying
# them: the suite itself has just run on the CPU's own kernel with tp's default threads, so every
# kernel and both thread counts are covered at half the cost of the full product (CI's budget,
# issue 24). TP_KERNEL_MATRIX=full runs every kernel with 1 and 2 threads.
#
# A run that would repeat the suite's own arithmetic is left out: the same kernels (OpenBLAS's
# Zen target uses the Haswell kernels: the same bits for products and convolutions, checked
# with 1 and 2 threads on a 2-core AMD EPYC) with the suite's thread count (tp's default, one
# per physical core).
#
#   scripts/kernel_matrix.sh BUILD_DIR        (make test runs it after the whole suite)
set -euo pipefail
build=${1:?usage: scripts/kernel_matrix.sh BUILD_DIR}
jobs=${JOBS:-$(nproc)}

kernels=(Sandybridge Haswell)
grep -qw avx512f /proc/cpuinfo && kernels+=(SkylakeX)   # AVX-512 kernels need an AVX-512 CPU

runs=()
for i in "${!kernels[@]}"; do
  if [ "${TP_KERNEL_MATRIX:-}" = full ]; then runs+=("${kernels[i]}:1" "${kernels[i]}:2")
  else runs+=("${kernels[i]}:$((i % 2 + 1))"); fi
done

# The suite's run: the kernels OpenBLAS picked (or OPENBLAS_CORETYPE forced), and tp's default
# threads. Unknown (no OpenBLAS found): nothing is left out.
own_kernel=$(/usr/bin/python3 -c 'import ctypes
f = ctypes.CDLL("libblas.so.3").openblas_get_corename
f.restype = ctypes.c_char_p
print(f().decode())' 2>/dev/null || true)
own_name=$own_kernel
[ "$own_kernel" = Zen ] && own_kernel=Haswell
own_threads=$(lscpu -p=core,socket 2>/dev/null | grep -v '^#' | sort -u | wc -l)

failed=()
for run in "${runs[@]}"; do
  kernel=${run%:*} threads=${run#*:}
  if [ "$kernel" = "$own_kernel" ] && [ "$threads" = "$own_threads" ]; then
    echo "== kernel matrix: OPENBLAS_CORETYPE=$kernel with $threads intra-op thread(s) is the suite's own run (it ran on OpenBLAS's $own_name kernels): not repeated"
    continue
  fi
  echo "== kernel matrix: OPENBLAS_CORETYPE=$kernel, $threads intra-op thread(s)"
  # OMP_NUM_THREADS sets LibTorch's intra-op threads; OpenBLAS's own pool follows it too.
  # Passive waiting: with tests running side by side, more threads than cores are busy, and
  # OpenMP's spinning threads then starve the others (example.gan_2d went from 10 s to over
  # 300 s with two threads while a build ran). It changes when threads sleep, not the results.
  if ! OPENBLAS_CORETYPE=$kernel OMP_NUM_THREADS=$threads OPENBLAS_NUM_THREADS=$threads OMP_WAIT_POLICY=passive \
       bash "$(dirname "$0")/ctest_timed.sh" "$(basename "$build").$kernel-$threads" "$build" -L numerics -j "$jobs" --output-on-failure; then
    failed+=("OPENBLAS_CORETYPE=$kernel OMP_NUM_THREADS=$threads")
  fi
done
if [ ${#failed[@]} -gt 0 ]; then
  printf 'kernel matrix: failed under %s\n' "${failed[@]}" >&2
  exit 1
fi
