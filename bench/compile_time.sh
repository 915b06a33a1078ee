#!/usr/bin/env bash
# How long a user's training program takes to compile with tp (issue 24): the minimal trainer
# (compile_time/tp_trainer.cpp, through <tp/tp.hpp>) against the same loop written against
# LibTorch alone (compile_time/plain_loop.cpp), with g++ -O2 -std=c++20 as a user's build would
# (no precompiled header). The trainer is compiled in both of tp's modes: header-only, and with
# the compiled part (TP_SEPARATE_COMPILATION, as a program that links tp::compiled; the part
# itself is built once per program, like any library, and is not timed). The three compiles
# run RUNS times, rotated, so that a change in the machine's load falls on each alike; the
# script prints each time, the medians and the ratios. Target: at most 1.2.
#
#   bench/compile_time.sh [RUNS]      (default 5; CXX picks the compiler)
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
runs=${1:-5}
cxx=${CXX:-g++}
flags=(-std=c++20 -O2 -c -o /dev/null -I"$here/../include" -isystem /usr/include/torch/csrc/api/include
       -DUSE_C10D_GLOO -DUSE_DISTRIBUTED -D_GLIBCXX_USE_CXX11_ABI=1)
seconds() {  # wall seconds of one compile: seconds FILE [FLAG...]
  local start end file=$1
  shift
  start=$(date +%s.%N)
  "$cxx" "${flags[@]}" "$@" "$file" || { echo "compile_time.sh: $file does not compile" >&2; kill -TERM $$; }
  end=$(date +%s.%N)
  awk -v a="$start" -v b="$end" 'BEGIN { print b - a }'
}
median() { printf '%s\n' "$@" | sort -g | awk '{ a[NR] = $1 } END { print (NR % 2) ? a[(NR + 1) / 2] : (a[NR / 2] + a[NR / 2 + 1]) / 2 }'; }
plain_times=() header_only_times=() compiled_times=()
compile() {
  case $1 in
    plain) plain_times+=("$(seconds "$here/compile_time/plain_loop.cpp")") ;;
    header_only) header_only_times+=("$(seconds "$here/compile_time/tp_trainer.cpp")") ;;
    compiled) compiled_times+=("$(seconds "$here/compile_time/tp_trainer.cpp" -DTP_SEPARATE_COMPILATION)") ;;
  esac
}
order=(plain header_only compiled)
for ((i = 1; i <= runs; i++)); do
  for ((k = 0; k < 3; k++)); do compile "${order[(i + k) % 3]}"; done
  printf 'run %d: LibTorch alone %.2f s, tp header-only %.2f s, tp with tp::compiled %.2f s\n' "$i" \
    "${plain_times[-1]}" "${header_only_times[-1]}" "${compiled_times[-1]}"
done
plain=$(median "${plain_times[@]}")
header_only=$(median "${header_only_times[@]}")
compiled=$(median "${compiled_times[@]}")
ratio() { awk -v a="$1" -v b="$plain" 'BEGIN { printf "%.3f", a / b }'; }
printf 'median: LibTorch alone %.2f s; tp header-only %.2f s, ratio %s; tp with tp::compiled %.2f s, ratio %s (target <= 1.2)\n' \
  "$plain" "$header_only" "$(ratio "$header_only")" "$compiled" "$(ratio "$compiled")"
