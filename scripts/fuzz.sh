#!/bin/bash
# Runs each libFuzzer target of BUILD_DIR/fuzz (make fuzz builds them) for RUNS inputs, starting
# from its seed corpus (fuzz/corpus/<target>), after running every regression input once
# (fuzz/regressions/<target>: inputs that once crashed a target). New inputs go to a scratch
# corpus; a crash leaves its input in BUILD_DIR/fuzz-crashes and fails. Prints, per target, the
# inputs executed and the coverage libFuzzer reached (edges, features).
#
#   scripts/fuzz.sh BUILD_DIR [RUNS]
set -euo pipefail
build=$1 runs=${2:-20000}
source_dir=$(cd "$(dirname "$0")/.." && pwd)
crashes=$build/fuzz-crashes
mkdir -p "$crashes"
scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT
export ASAN_OPTIONS="detect_leaks=1:allocator_may_return_null=1" UBSAN_OPTIONS="print_stacktrace=1"
for target in ${FUZZ_TARGETS:-pickle checkpoint tar jpeg png}; do
  program=$build/fuzz/fuzz_$target
  regressions=$source_dir/fuzz/regressions/$target
  if [ -d "$regressions" ] && [ -n "$(ls -A "$regressions")" ]; then
    "$program" "$regressions"/* > "$scratch/$target.regressions.log" 2>&1 || { cat "$scratch/$target.regressions.log"; echo "fuzz: $target fails on a regression input" >&2; exit 1; }
  fi
  mkdir -p "$scratch/$target"
  if ! "$program" -runs="$runs" -seed=1 -max_len=65536 -timeout=20 -rss_limit_mb=4096 -artifact_prefix="$crashes/$target-" \
       "$scratch/$target" "$source_dir/fuzz/corpus/$target" > "$scratch/$target.log" 2>&1; then
    tail -60 "$scratch/$target.log"
    echo "fuzz: $target crashed; its input is in $crashes" >&2
    exit 1
  fi
  done_line=$(grep -E "^#[0-9]+[[:space:]]+DONE" "$scratch/$target.log" | tail -1)
  echo "fuzz_$target: $(echo "$done_line" | grep -oE "^#[0-9]+" | tr -d '#') inputs, $(echo "$done_line" | grep -oE "cov: [0-9]+ ft: [0-9]+")"
done
