#!/usr/bin/env bash
# Trains fashion_mnist for a short epoch, then scores its checkpoint with `evaluate`, in one
# process and in two (tp-run): the test error and cost must be those the training run put in
# stats.json for that epoch (within roundings, see check).
#
#   evaluate_checkpoint.sh FASHION_MNIST EVALUATE TP_RUN LOGDIR
set -euo pipefail
fashion_mnist=$1 evaluate=$2 tp_run=$3 logdir=$4
rm -rf "$logdir"
"$fashion_mnist" --epochs 1 --steps-per-epoch 60 --logdir "$logdir" > "$logdir.train.log"
checkpoint=$(ls "$logdir"/model-*.ckpt | tail -1)
recorded=$(python3 -c 'import json, sys
epochs = [e for e in json.load(open(sys.argv[1])) if "test_error" in e]
print(repr(epochs[-1]["test_error"]), repr(epochs[-1]["test_cost"]))' "$logdir/stats.json")
check() {  # check <what> <evaluate output>
  python3 -c 'import sys
want = [float(v) for v in sys.argv[2].split()]
got = dict(line.split()[-2:] for line in sys.argv[3].splitlines() if " test_" in " " + line)  # tp-run prefixes "[rank] "
got = [float(got["test_error"]), float(got["test_cost"])]
# Within roundings: the two runs score the test set in batches of other sizes, and some BLAS
# kernels round the product of a row differently with the size of the batch (the generic Prescott
# kernels of OpenBLAS, its fallback on CPUs it does not know): the cost to 1e-6, the error to one image.
close = abs(got[0] - want[0]) <= 1.5e-4 and abs(got[1] - want[1]) <= 1e-6 * max(1, abs(want[1]))
assert close, f"{sys.argv[1]}: evaluate gave {got}, stats.json has {want}"
print(f"{sys.argv[1]}: test_error {got[0]}, test_cost {got[1]}: as stats.json recorded")' "$1" "$recorded" "$2"
}
check "one process" "$("$evaluate" "$checkpoint" --show 3)"
check "two processes" "$("$tp_run" -n 2 "$evaluate" "$checkpoint")"
# A file that is not a checkpoint is an error that says so.
if "$evaluate" "$logdir/stats.json" 2> "$logdir.error"; then echo "evaluate accepted stats.json as a checkpoint" >&2; exit 1; fi
grep -q "^evaluate: tp: checkpoint .*stats.json " "$logdir.error" || { cat "$logdir.error" >&2; exit 1; }
echo "evaluate_checkpoint: ok"
