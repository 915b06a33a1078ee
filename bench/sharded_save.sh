#!/bin/bash
# What a save costs rank 0's memory in a sharded run: tests/mp_worker's MLP of 32 M parameters
# (Adam, --shard gradients) on 2 and 4 ranks, 5 steps, once without a checkpoint and once with
# ModelSaver saving after step 5 (in the background, its default). It prints rank 0's peak
# resident memory both ways, the difference, and rank 0's shard of the Adam state, e.g.
#
#   4 ranks: rank 0's peak 1101 MiB training, 1355 MiB saving (+254 MiB); its Adam shard 61 MiB
#
#   bench/sharded_save.sh BUILD_DIR [MP_WORKER]   (another build's mp_worker, to compare)
set -euo pipefail
build=$(cd "$1" && pwd)
worker=${2:-$build/tests/mp_worker}
[ -x "$worker" ] || { echo "sharded_save.sh: build mp_worker first" >&2; exit 1; }
[ -x /usr/bin/time ] || { echo "sharded_save.sh: needs GNU time (apt-get install time)" >&2; exit 1; }
scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT
port=$((30000 + RANDOM % 20000))
# rank 0's peak RSS in KB, and its Adam state in bytes, for `world` ranks and extra flags.
run() {
  local world=$1; shift
  port=$((port + 1))
  for ((r = 0; r < world; r++)); do
    # A fixed mmap threshold: glibc's sliding one keeps freed tensors in its arenas, which makes
    # the peak depend on the order of frees more than on what is alive.
    MALLOC_MMAP_THRESHOLD_=131072 RANK=$r WORLD_SIZE=$world LOCAL_RANK=$r MASTER_ADDR=127.0.0.1 MASTER_PORT=$port \
      /usr/bin/time -f "peak %M KB" "$worker" --steps 5 --batch 8 --optimizer adam --hidden 4000000 --shard gradients \
      --out "$scratch/w" "$@" > "$scratch/out.$r" 2>&1 &
  done
  wait
  echo "$(grep -o "peak [0-9]*" "$scratch/out.0" | grep -o "[0-9]*$") $(grep -o "optimizer state [0-9]*" "$scratch/out.0" | grep -o "[0-9]*$")"
}
for world in 2 4; do
  read -r plain state < <(run "$world")
  rm -rf "$scratch/ckpt"
  read -r saving _ < <(run "$world" --logdir "$scratch/ckpt" --save-every 100)
  ls "$scratch/ckpt" | grep -q "model-0000000005" || { echo "sharded_save.sh: no checkpoint was written" >&2; exit 1; }
  echo "$world ranks: rank 0's peak $((plain / 1024)) MiB training, $((saving / 1024)) MiB saving (+$(((saving - plain) / 1024)) MiB); its Adam shard $((state / 1048576)) MiB"
done
