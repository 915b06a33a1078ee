#!/usr/bin/env bash
# Trains fashion_mnist for a short epoch with --profile-steps and a hyper.txt, then checks what
# a user looks at: the model summary and the hyper.txt change in the output, the Chrome trace
# (JSON, with tp's phases), and the TensorBoard file's histograms, filter image and config text.
#
#   see_inside.sh FASHION_MNIST LOGDIR
set -euo pipefail
fashion_mnist=$1 logdir=$2
rm -rf "$logdir"
mkdir -p "$logdir"
echo "learning_rate: 0.0005  # set by hand" > "$logdir/hyper.txt"
"$fashion_mnist" --epochs 1 --steps-per-epoch 60 --profile-steps 20:24 --logdir "$logdir" > "$logdir.log" 2>&1 || { cat "$logdir.log"; exit 1; }
fail() { echo "see_inside: $*" >&2; cat "$logdir.log" >&2; exit 1; }
grep -q "^tp: the model" "$logdir.log" || fail "no model summary"
grep -q "^conv1  *torch::nn::Conv2dImpl  *\[32, 1, 3, 3\] \[32\]  *320 " "$logdir.log" || fail "no conv1 row in the summary"
grep -q "^tp: optimizer state after the first step: " "$logdir.log" || fail "no optimizer state size"
grep -q "learning_rate = 0.0005 from .*hyper.txt" "$logdir.log" || fail "hyper.txt was not applied"
python3 - "$logdir/trace-steps-20-24.json" <<'PY' || fail "bad trace"
import json, sys
events = json.load(open(sys.argv[1]))
names = {e["name"] for e in events}
for phase in ["tp::input_wait", "tp::tower_forward", "tp::tower_backward", "tp::optimizer_step", "aten::conv2d"]:
    assert phase in names, f"{phase} not in the trace"
forwards = sum(e["name"] == "tp::tower_forward" for e in events)
assert forwards == 5, f"{forwards} forward passes in a trace of steps 20 to 24"
print(f"see_inside: the trace holds {len(events)} events, tp's phases among them")
PY
events=$(ls "$logdir"/events.out.tfevents.*)
for tag in param/conv1.weight grad/fc2.bias filters/conv1.weight config; do
  grep -qa "$tag" "$events" || fail "no $tag in $events"
done
grep -qa "IHDR" "$events" || fail "no PNG in $events"
echo "see_inside: ok"
