#!/usr/bin/env bash
# The loop's overhead in instructions (issue 23): bench_loop_overhead's two loops (the
# hand-written step and tp::Trainer with 16 empty callbacks), 500 steps each after a warm-up,
# counted by callgrind. Unlike the timed ratio, the count does not move with the load on a
# shared machine: a ratio above 1 is work tp's loop adds per step.
#
#   bench/loop_instructions.sh BUILD_DIR     (needs valgrind; builds the target if missing)
set -euo pipefail
build=${1:?usage: bench/loop_instructions.sh BUILD_DIR}
command -v valgrind > /dev/null || { echo "loop_instructions.sh: needs valgrind (apt-get install valgrind)" >&2; exit 1; }
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
cmake --build "$build" --target bench_loop_overhead > "$out/build.log" 2>&1 || { cat "$out/build.log" >&2; exit 1; }
count() {  # count tp|hand: instructions in the marked steps
  OMP_NUM_THREADS=1 valgrind --tool=callgrind --instr-atstart=no --callgrind-out-file="$out/$1" \
    "$build/bench/bench_loop_overhead" --only "$1" 2> "$out/$1.log" ||
    { cat "$out/$1.log" >&2; exit 1; }
  sed -n 's/^totals: //p' "$out/$1"
}
# One assignment each: in `a=$(f) b=$(g)` the status is g's alone, and set -e would miss f failing.
hand=$(count hand)
tp=$(count tp)
awk -v h="$hand" -v t="$tp" 'BEGIN {
  printf "instructions per step: hand-written %.0f, tp::Trainer %.0f; ratio %.4f\n", h / 500, t / 500, t / h }'
