#!/usr/bin/env bash
# image_pipeline.sh [BENCH_BINARY]: images per second for decode + augment + collate (batches of
# 64) on Fashion-MNIST JPEGs at 28 x 28 (RandomResizedCrop(28)) and at 256 x 256 RGB
# (RandomResizedCrop(224)), with 1 and 2 threads (THREADS="1 2 4 8" for others; SETS="fm256" for
# one image size), for
#   decode  libjpeg-turbo alone on the same files (read + full decode to RGB): the limit
#   tp      image_folder | shuffle | decode_images(transforms, THREADS) | batch(64)
#   tp_uint8  the same without normalize: uint8 batches, normalization left to the device (as
#           FFCV and DALI do it; a quarter of the bytes to write and to copy to a GPU)
#   peer    torchvision's ImageFolder + DataLoader(num_workers=THREADS), same transforms as tp
# interleaved (every configuration once per round, REPS rounds), each run SECS seconds after
# its first batch; it prints the medians and the ratios tp / decode and tp / peer.
#
# The data is written once by scripts/write_image_folder.py under $TP_IMAGE_BENCH_DATA
# (default /tmp/tp_image_bench). Each run holds /tmp/tp_build.lock, so that no compile of the
# shared machine runs beside it.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(dirname "$here")
bin=${1:-$root/build/bench/bench_image_pipeline}
data=${TP_IMAGE_BENCH_DATA:-/tmp/tp_image_bench}
reps=${REPS:-5}
secs=${SECS:-3}
python=${TP_PYTHON:-/usr/bin/python3}
thread_counts=${THREADS:-1 2}
sets=${SETS:-fm28 fm256}

[ -x "$bin" ] || { echo "image_pipeline.sh: no benchmark program at $bin (build the target bench_image_pipeline)" >&2; exit 2; }
[ -d "$data/fm28/train" ] || "$python" "$root/scripts/write_image_folder.py" "$data/fm28" --format jpeg --limit 10000
[ -d "$data/fm256/train" ] || "$python" "$root/scripts/write_image_folder.py" "$data/fm256" --format jpeg --size 256 --mode RGB --limit 2000

results=$(mktemp)
trap 'rm -f "$results"' EXIT
for rep in $(seq "$reps"); do
  for name in $sets; do
    size=$([ "$name" = fm28 ] && echo 28 || echo 224)
    for threads in $thread_counts; do
      for who in decode tp tp_uint8 peer; do
        if [ "$who" = peer ]; then
          out=$(flock /tmp/tp_build.lock "$python" "$here/image_pipeline_peer.py" "$data/$name/train" "$threads" "$secs" "$size")
        else
          out=$(flock /tmp/tp_build.lock "$bin" "$who" "$data/$name/train" "$threads" "$secs" "$size")
        fi
        echo "round $rep: $name threads=$threads $who ${out#images_per_s }" >&2
        echo "$name $threads $who ${out#images_per_s }" >>"$results"
      done
    done
  done
done

"$python" - "$results" <<'PY'
import statistics, sys
runs = {}
for line in open(sys.argv[1]):
    name, threads, who, value = line.split()
    runs.setdefault((name, int(threads)), {}).setdefault(who, []).append(float(value))
print(f"{'images':8} {'threads':>7} {'decode/s':>10} {'tp/s':>10} {'uint8/s':>10} {'torchvision/s':>14} {'tp/decode':>10} {'uint8/decode':>13} {'tp/torchvision':>15}")
for (name, threads), by in sorted(runs.items()):
    m = {who: statistics.median(v) for who, v in by.items()}
    print(f"{name:8} {threads:7d} {m['decode']:10.0f} {m['tp']:10.0f} {m['tp_uint8']:10.0f} {m['peer']:14.0f} {m['tp'] / m['decode']:10.2f} "
          f"{m['tp_uint8'] / m['decode']:13.2f} {m['tp'] / m['peer']:15.2f}")
PY
