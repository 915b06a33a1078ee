#!/usr/bin/env bash
# Training from image files gives what training from memory gives: fashion_mnist (the IDX files
# in memory) and image_folder (the same images as PNG files, through their list file, in the IDX
# order, with fashion_mnist's model, seeds and schedule) train for the same steps, and their test
# accuracies must agree within 0.5 percentage points. They are not bitwise equal: the two inputs
# reach the same floats by different arithmetic.
#
#   matches_in_memory.sh FASHION_MNIST IMAGE_FOLDER IMAGES LOGDIR
#   (IMAGES: scripts/write_image_folder.py's output, with train.txt and test.txt)
set -euo pipefail
fashion_mnist=$1 image_folder=$2 images=$3 logdir=$4
rm -rf "$logdir"
mkdir -p "$logdir"
steps=(--epochs 1 --steps-per-epoch 300)
accuracy() {  # accuracy <log>: the run's final test accuracy
  sed -n 's/^final test accuracy: //p' "$1" | tail -1
}
"$fashion_mnist" "${steps[@]}" --logdir "$logdir/memory" > "$logdir/memory.log" 2>&1 ||
  { cat "$logdir/memory.log" >&2; exit 1; }
"$image_folder" "$images/train.txt" "$images/test.txt" "${steps[@]}" --logdir "$logdir/files" > "$logdir/files.log" 2>&1 ||
  { cat "$logdir/files.log" >&2; exit 1; }
memory=$(accuracy "$logdir/memory.log") files=$(accuracy "$logdir/files.log")
[ -n "$memory" ] && [ -n "$files" ] || { echo "matches_in_memory: a run printed no final test accuracy (logs in $logdir)" >&2; exit 1; }
python3 -c 'import sys
memory, files = map(float, sys.argv[1:])
ok = abs(memory - files) <= 0.005
verdict = "within" if ok else "more than"
print(f"test accuracy from memory {memory:.4f}, from files {files:.4f}: {verdict} 0.5 points")
sys.exit(0 if ok else 1)' "$memory" "$files"
