#!/usr/bin/env bash
# Builds a build folder and holds it to a quiet build (issue 24): tp's headers, tests, examples
# and benchmarks compile without a warning under -Wall -Wextra (LibTorch and the other
# dependencies are system headers, so their warnings are not shown). The compiler's output is
# kept in BUILD.build.log; a compiler warning fails the build when CI is set (CI=true), and is
# reported otherwise (a newer compiler than CI's may warn where CI's does not). Only what this
# build compiles is seen: CI builds every folder from scratch.
#
#   scripts/build_quiet.sh BUILD [JOBS]
set -uo pipefail
build=${1:?usage: scripts/build_quiet.sh BUILD [JOBS]}
jobs=${2:-}
: "${jobs:=$(nproc)}"
log=$build.build.log
cmake --build "$build" -j "$jobs" 2>&1 | tee "$log"
statuses=("${PIPESTATUS[@]}")
[ "${statuses[0]}" -eq 0 ] || exit "${statuses[0]}"
[ "${statuses[1]}" -eq 0 ] && [ -r "$log" ] || { echo "build_quiet: could not write $log" >&2; exit 1; }
# The compiler's warnings (FILE:LINE:COLUMN: warning:), not the linker's about LibTorch's libraries.
pattern='^[^ :]+:[0-9]+:[0-9]+: warning:'
warnings=$(grep -cE "$pattern" "$log" || true)
if [ "${warnings:-0}" -gt 0 ]; then
  echo "build_quiet: $warnings warning(s) in the build of $build (the list: grep warning: $log):"
  grep -E "$pattern" "$log" | sort | uniq -c | sort -rn | head -20
  if [ -n "${CI:-}" ] && [ "$CI" != "false" ]; then
    echo "build_quiet: CI holds tp to a build without warnings; fix them (or, for a false positive, silence it where it is and say why)"
    exit 1
  fi
fi
exit 0
