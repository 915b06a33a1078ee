#!/usr/bin/env bash
# The example's weights across the Python border, both ways:
#  1. fashion_mnist trains a short epoch; Python builds the same CNN, loads the checkpoint's
#     state_dict with strict=True and gets the test accuracy tp reported;
#  2. tp-export writes the checkpoint's weights as a state_dict file, which Python scores the same;
#  3. fashion_mnist --init-from that file starts from those weights: after one more step it is
#     already far above what a fresh network reaches in one step.
#
#   python_interop.sh FASHION_MNIST TP_EXPORT LOGDIR
set -euo pipefail
fashion_mnist=$1 tp_export=$2 logdir=$3
here=$(dirname "$0")
rm -rf "$logdir" "$logdir.init"
"$fashion_mnist" --epochs 1 --steps-per-epoch 150 --logdir "$logdir" > "$logdir.train.log"
tp_accuracy=$(sed -n 's/^final test accuracy: //p' "$logdir.train.log")
checkpoint=$(ls "$logdir"/model-*.ckpt | tail -1)
same() {  # same <what> <python's output>
  python3 -c 'import sys
tp, python = float(sys.argv[2]), float(sys.argv[3].split()[-1])
assert abs(tp - python) <= 1e-5, f"{sys.argv[1]}: Python scores {python}, tp reported {tp}"
print(f"{sys.argv[1]}: Python scores {python}, as tp reported ({tp})")' "$1" "$tp_accuracy" "$2"
}
same "the checkpoint in Python" "$(/usr/bin/python3 "$here/fashion_mnist_state_dict.py" "$checkpoint")"
"$tp_export" "$checkpoint" --state-dict "$logdir/weights.pt"
same "tp-export's state_dict in Python" "$(/usr/bin/python3 "$here/fashion_mnist_state_dict.py" "$logdir/weights.pt")"
"$fashion_mnist" --init-from "$logdir/weights.pt" --epochs 1 --steps-per-epoch 1 --min-accuracy 0.7 --logdir "$logdir.init" > "$logdir.init.log"
grep -q "^weights start from $logdir/weights.pt" "$logdir.init.log" || { cat "$logdir.init.log" >&2; exit 1; }
# A state_dict of another model is refused before training, naming what does not fit.
/usr/bin/python3 -c 'import torch, sys; torch.save(torch.nn.Linear(3, 2).state_dict(), sys.argv[1])' "$logdir/other.pt"
if "$fashion_mnist" --init-from "$logdir/other.pt" --epochs 1 --steps-per-epoch 1 --logdir "$logdir.init" 2> "$logdir.error"; then
  echo "fashion_mnist trained from another model's weights" >&2; exit 1
fi
grep -q "other.pt does not fit this model (nothing was loaded):.*missing keys: conv1.weight" "$logdir.error" || { cat "$logdir.error" >&2; exit 1; }
echo "python_interop: ok"
