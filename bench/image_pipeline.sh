#!/usr/bin/env bash
# image_pipeline.sh [BENCH_BINARY]: images per second for decode + augment + collate (batches of
# 64) on Fashion-MNIST JPEGs at 28 x 28 (RandomResizedCrop(28)) and at 256 x 256 RGB
# (RandomResizedCrop(224)), 10,000 files each, with 1 and 2 threads (THREADS="1 2 4 8" for others;
# SETS="fm256" for one image size; fm256_2k and fm512 below), for
#   decode  libjpeg-turbo alone on the same files (read + full decode to RGB): the limit
#   tp      image_folder | shuffle | decode_images(transforms, THREADS) | batch(64)
#   tp_uint8  the same without normalize: uint8 batches, normalization left to the device (as
#           FFCV and DALI do it; a quarter of the bytes to write and to copy to a GPU)
#   peer    torchvision's ImageFolder + DataLoader(num_workers=THREADS), same transforms as tp
# interleaved (every configuration once per round, REPS rounds), each run SECS seconds after
# its first batch; it prints the medians and the ratios tp / decode and tp / peer, the same ratios
# paired (the median of each round's own), then each set's in-thread measure (microseconds per
# image, bench_image_pipeline overhead).
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
# Each set: its files' size, the crop's size and the number of training files. A pass of fm256's
# 10,000 files is 156 batches; fm256_2k's 2,000 (this script's fm256 until 2026-11-27) are 31, so
# with 8 threads a pass ends every 4 batches per thread, and the time the workers wait at a pass's
# end (the last batches finish one by one) shows in its figures. fm512: 2,000 files of 512 x 512.
set_args() {
  case $1 in
    fm28) echo "28 28 10000" ;;
    fm256) echo "256 224 10000" ;;
    fm256_2k) echo "256 224 2000" ;;
    fm512) echo "512 224 2000" ;;
    *) return 1 ;;
  esac
}
for name in $sets; do  # every name checked before any data is touched
  set_args "$name" >/dev/null || { echo "image_pipeline.sh: unknown set '$name' (fm28, fm256, fm256_2k or fm512)" >&2; exit 2; }
done
for name in $sets; do
  read -r side size count <<<"$(set_args "$name")"
  [ "$(find "$data/$name/train" -type f 2>/dev/null | wc -l)" -eq "$count" ] && continue
  rm -rf "${data:?}/$name"
  shape=(--mode L)  # Fashion-MNIST's own 28 x 28 grey, or enlarged to RGB
  [ "$side" = 28 ] || shape=(--size "$side" --mode RGB)
  "$python" "$root/scripts/write_image_folder.py" "$data/$name" --format jpeg "${shape[@]}" --limit "$count"
done

results=$(mktemp)
trap 'rm -f "$results"' EXIT
for rep in $(seq "$reps"); do
  for name in $sets; do
    read -r _ size _ <<<"$(set_args "$name")"
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
# Paired: each round's runs of one configuration follow each other, so a round's ratios share
# its load; their median moves less than the ratio of medians where the machine's speed drifts
# between rounds (a shared host's neighbours).
for (name, threads), by in sorted(runs.items()):
    paired = lambda who: statistics.median(t / d for t, d in zip(by[who], by['decode']))
    print(f"{name} threads={threads} paired (median of the rounds' ratios): tp/decode {paired('tp'):.2f} "
          f"uint8/decode {paired('tp_uint8'):.2f} tp/torchvision {statistics.median(t / p for t, p in zip(by['tp'], by['peer'])):.2f}")
PY

# Then, per set, the same work in this one thread on 256 files held in memory (bench_image_pipeline
# overhead): microseconds per image for tp (float, uint8) and the decode, without threads, queues
# or file reads, the least noisy of the measures.
for name in $sets; do
  read -r _ size _ <<<"$(set_args "$name")"
  echo "$name in one thread: $(flock /tmp/tp_build.lock "$bin" overhead "$data/$name/train" 1 3 "$size")"
done
