#!/bin/bash
# Runs each libFuzzer target of BUILD_DIR/fuzz (make fuzz builds them) for RUNS inputs, starting
# from its seed corpus (fuzz/corpus/<target>), after running every regression input once
# (fuzz/regressions/<target>: inputs that once crashed or leaked in a target). New inputs go to a
# scratch corpus; a crash or a leak leaves its input in BUILD_DIR/fuzz-crashes and fails.
# Prints, per target, the inputs executed and the coverage libFuzzer reached (edges, features).
#
#   scripts/fuzz.sh BUILD_DIR [RUNS]
#
# FUZZ_TARGETS: which (all five by default). FUZZ_SECONDS: run each for that long instead of
# RUNS inputs. FUZZ_JOBS: targets fuzzed at once (1 by default; each takes one core).
set -euo pipefail
build=$1 runs=${2:-20000}
source_dir=$(cd "$(dirname "$0")/.." && pwd)
crashes=$build/fuzz-crashes
mkdir -p "$crashes"
scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT
export ASAN_OPTIONS="detect_leaks=1:allocator_may_return_null=1" UBSAN_OPTIONS="print_stacktrace=1"
limit=(-runs="$runs")
[ -n "${FUZZ_SECONDS:-}" ] && limit=(-runs=-1 -max_total_time="$FUZZ_SECONDS")

# One target: its regressions, then fuzzing; its line goes to $scratch/<target>.summary.
fuzz_one() {
  local target=$1 program=$build/fuzz/fuzz_$1 regressions=$source_dir/fuzz/regressions/$1
  if [ -d "$regressions" ] && [ -n "$(ls -A "$regressions")" ]; then
    "$program" "$regressions"/* > "$scratch/$target.regressions.log" 2>&1 || { cat "$scratch/$target.regressions.log"; echo "fuzz: $target fails on a regression input" >&2; return 1; }
  fi
  mkdir -p "$scratch/$target"
  if ! "$program" "${limit[@]}" -seed=1 -max_len=65536 -timeout=20 -rss_limit_mb=4096 -artifact_prefix="$crashes/$target-" \
       "$scratch/$target" "$source_dir/fuzz/corpus/$target" > "$scratch/$target.log" 2>&1; then
    tail -60 "$scratch/$target.log"
    echo "fuzz: $target crashed or leaked; its input is in $crashes" >&2
    return 1
  fi
  local done_line
  done_line=$(grep -E "^#[0-9]+[[:space:]]+DONE" "$scratch/$target.log" | tail -1)
  echo "fuzz_$target: $(echo "$done_line" | grep -oE "^#[0-9]+" | tr -d '#') inputs, $(echo "$done_line" | grep -oE "cov: [0-9]+ ft: [0-9]+")" > "$scratch/$target.summary"
}

targets=(${FUZZ_TARGETS:-pickle checkpoint tar jpeg png})
jobs=${FUZZ_JOBS:-1}
failed=0 pids=()
for target in "${targets[@]}"; do
  fuzz_one "$target" &
  pids+=($!)
  if [ "${#pids[@]}" -ge "$jobs" ]; then wait "${pids[0]}" || failed=1; pids=("${pids[@]:1}"); fi
done
for pid in "${pids[@]}"; do wait "$pid" || failed=1; done
for target in "${targets[@]}"; do [ -f "$scratch/$target.summary" ] && cat "$scratch/$target.summary"; done
exit "$failed"
