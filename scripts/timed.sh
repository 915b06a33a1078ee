#!/usr/bin/env bash
# Runs a command as a named stage and, when TP_STAGE_LOG names a file, appends the stage's name,
# wall time and exit status to it: .ci/run prints them as a table at the end, so that a change
# to CI's budget (issue 24: within 45 minutes on 2 cores) is seen stage by stage.
#
#   scripts/timed.sh NAME COMMAND [ARGS...]
set -uo pipefail
name=${1:?usage: scripts/timed.sh NAME COMMAND [ARGS...]}
shift
start=$(date +%s)
"$@"
status=$?
if [ -n "${TP_STAGE_LOG:-}" ]; then
  printf '%s\t%d\t%d\n' "$name" $(($(date +%s) - start)) "$status" >> "$TP_STAGE_LOG"
fi
exit $status
