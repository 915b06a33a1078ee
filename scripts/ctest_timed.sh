#!/usr/bin/env bash
# Runs CTest in BUILD_DIR and, when TP_TEST_TIMES names a folder, keeps what each test cost there:
# RUN.xml (CTest's JUnit report: each test's time) and RUN.json (the tests and their labels).
# .ci/run prints the ten slowest tests and the time per label from them (tools/test_times.py),
# so that whoever adds a test sees what it costs CI's budget.
#
#   scripts/ctest_timed.sh RUN BUILD_DIR [CTEST ARGUMENTS...]
set -euo pipefail
run=${1:?usage: scripts/ctest_timed.sh RUN BUILD_DIR [CTEST ARGUMENTS...]}
build=${2:?usage: scripts/ctest_timed.sh RUN BUILD_DIR [CTEST ARGUMENTS...]}
shift 2
report=()
if [ -n "${TP_TEST_TIMES:-}" ]; then
  mkdir -p "$TP_TEST_TIMES"
  ctest --test-dir "$build" --show-only=json-v1 > "$TP_TEST_TIMES/$run.json"
  report=(--output-junit "$TP_TEST_TIMES/$run.xml")
fi
exec ctest --test-dir "$build" "${report[@]}" "$@"
