#!/usr/bin/env bash
# How long a user's training program takes to compile with tp (issue 24): the minimal trainer
# (compile_time/tp_trainer.cpp, through <tp/tp.hpp>) against the same loop written against
# LibTorch alone (compile_time/plain_loop.cpp), with g++ -O2 -std=c++20 as a user's build would
# (no precompiled header). Each is compiled RUNS times, interleaved, so that a change in the
# machine's load falls on both alike; the script prints each time, the medians and their ratio.
# Target: at most 1.2.
#
#   bench/compile_time.sh [RUNS]      (default 5; CXX picks the compiler)
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
runs=${1:-5}
cxx=${CXX:-g++}
flags=(-std=c++20 -O2 -c -o /dev/null -I"$here/../include" -isystem /usr/include/torch/csrc/api/include
       -DUSE_C10D_GLOO -DUSE_DISTRIBUTED -D_GLIBCXX_USE_CXX11_ABI=1)
seconds() {  # wall seconds of one compile
  local start end
  start=$(date +%s.%N)
  "$cxx" "${flags[@]}" "$1" || { echo "compile_time.sh: $1 does not compile" >&2; kill -TERM $$; }
  end=$(date +%s.%N)
  awk -v a="$start" -v b="$end" 'BEGIN { print b - a }'
}
median() { printf '%s\n' "$@" | sort -g | awk '{ a[NR] = $1 } END { print (NR % 2) ? a[(NR + 1) / 2] : (a[NR / 2] + a[NR / 2 + 1]) / 2 }'; }
tp_times=() plain_times=()
for ((i = 1; i <= runs; i++)); do
  if ((i % 2)); then
    tp_times+=("$(seconds "$here/compile_time/tp_trainer.cpp")")
    plain_times+=("$(seconds "$here/compile_time/plain_loop.cpp")")
  else
    plain_times+=("$(seconds "$here/compile_time/plain_loop.cpp")")
    tp_times+=("$(seconds "$here/compile_time/tp_trainer.cpp")")
  fi
  printf 'run %d: tp %.2f s, LibTorch alone %.2f s\n' "$i" "${tp_times[-1]}" "${plain_times[-1]}"
done
tp=$(median "${tp_times[@]}") plain=$(median "${plain_times[@]}")
printf 'median: tp %.2f s, LibTorch alone %.2f s; ratio %.3f (target <= 1.2)\n' "$tp" "$plain" "$(awk -v a="$tp" -v b="$plain" 'BEGIN { print a / b }')"
