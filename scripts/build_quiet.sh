#!/usr/bin/env bash
# Builds a build folder and holds it to a quiet build (issue 24): tp's headers, tests, examples
# and benchmarks compile without a warning under -Wall -Wextra (LibTorch and the other
# dependencies are system headers, so their warnings are not shown). The compiler's output is
# kept in BUILD.build.log; a warning fails the build when CI is set (CI=true), and is reported
# otherwise (a newer compiler than CI's may warn where CI's does not).
#
#   scripts/build_quiet.sh BUILD [JOBS]
set -uo pipefail
build=${1:?usage: scripts/build_quiet.sh BUILD [JOBS]}
jobs=${2:-$(nproc)}
log=$build.build.log
cmake --build "$build" -j "$jobs" 2>&1 | tee "$log"
status=${PIPESTATUS[0]}
[ "$status" -eq 0 ] || exit "$status"
warnings=$(grep -c 'warning:' "$log")
if [ "$warnings" -gt 0 ]; then
  echo "build_quiet: $warnings warning(s) in the build of $build (the list: grep warning: $log):"
  grep 'warning:' "$log" | sort | uniq -c | sort -rn | head -20
  if [ -n "${CI:-}" ] && [ "${CI}" != "false" ]; then
    echo "build_quiet: CI holds tp to a build without warnings; fix them (or, for a false positive in LibTorch's inline code, say why where it is silenced)"
    exit 1
  fi
fi
exit 0
