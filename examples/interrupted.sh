#!/bin/bash
# Ctrl-C in the middle of fashion_mnist: the run ends after the current step, saying where it
# stopped and what to do, with exit status 130 (128 + SIGINT); the same command then resumes
# from that step and finishes.
#
#   interrupted.sh <fashion_mnist> <logdir>
set -u
unset TP_LOGDIR_ACTION  # the second run must keep the first run's folder to resume from it
example=$1 logdir=$2
rm -rf "$logdir"
command=("$example" --epochs 3 --steps-per-epoch 40 --logdir "$logdir")
fifo=$(mktemp -u) && mkfifo "$fifo" || exit 1
trap 'rm -f "$fifo"' EXIT
# Job control on: without it a script's background job starts with SIGINT ignored, and tp
# leaves an ignored signal ignored.
set -m
stdbuf -oL "${command[@]}" >"$fifo" 2>&1 &
pid=$!
set +m
exec 3<"$fifo"
# Once epoch 1 has its test error, Ctrl-C: the signal lands at its end or in epoch 2.
while IFS= read -r line <&3; do
  echo "$line"
  [[ $line == "[epoch 1] test_error"* ]] && break
done
kill -INT "$pid"
output=$(cat <&3)
echo "$output"
wait "$pid"
status=$?
fail() { echo "FAILED: $*"; exit 1; }
[[ $status == 130 ]] || fail "exit status $status after SIGINT, not 130"
[[ $output =~ interrupted\ at\ global\ step\ ([0-9]+)\;\ run\ the\ same\ command\ to\ resume ]] || fail "no 'interrupted at global step N' line"
step=${BASH_REMATCH[1]}
((step >= 40 && step < 120)) || fail "stopped at step $step, not at the end of epoch 1 or in epoch 2"
[[ -f $logdir/$(printf 'model-%010d.ckpt' "$step") ]] || fail "no checkpoint of step $step in $logdir"
echo "--- the same command again"
again=$("${command[@]}" 2>&1)
status=$?
echo "$again"
[[ $status == 0 ]] || fail "the resumed run exited with status $status"
[[ $again == *"resumed from $logdir/$(printf 'model-%010d.ckpt' "$step") (global step $step)"* ]] || fail "it did not resume from step $step"
[[ $again == *"final test accuracy"* ]] || fail "the resumed run did not finish"
echo "interrupted at step $step with status 130, then resumed from it and finished"
