#!/bin/bash
# What sharding saves on each rank: examples/fashion_mnist (its CNN, Adam) under tp-run with 1, 2
# and 4 ranks, unsharded and with --shard optimizer and gradients, 30 steps each. It prints the
# model summary's "optimizer state after the first step" (rank 0's) and the peak resident memory
# of the largest rank (GNU time's maximum over tp-run's children), e.g.
#
#   2 ranks, --shard optimizer: optimizer state 1.30 MiB (0.50 of unsharded), peak RSS 310 MiB
#
#   bench/sharding.sh BUILD_DIR
set -euo pipefail
build=$(cd "$1" && pwd)
example=$build/examples/fashion_mnist run=$build/tp-run worker=$build/tests/mp_worker
[ -x "$example" ] && [ -x "$run" ] || { echo "sharding.sh: build fashion_mnist and tp-run first" >&2; exit 1; }
[ -x /usr/bin/time ] || { echo "sharding.sh: needs GNU time (apt-get install time)" >&2; exit 1; }
scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT
for n in 1 2 4; do
  plain=""
  for shard in none optimizer gradients; do
    log=$scratch/$n-$shard.log
    TP_LOGDIR_ACTION=remove /usr/bin/time -f "peak %M KB" "$run" -n "$n" "$example" --epochs 1 --steps-per-epoch 30 --threads 1 \
      --shard "$shard" --logdir "$scratch/logs" > "$log" 2>&1 || { cat "$log" >&2; exit 1; }
    python3 - "$n" "$shard" "$log" "$plain" <<'PY'
import re, sys
n, shard, log, plain = sys.argv[1:]
text = open(log).read()
state = re.search(r"optimizer state after the first step: ([0-9.]+) (KiB|MiB|GiB|B)", text)
unit = {"B": 1, "KiB": 1024, "MiB": 1024**2, "GiB": 1024**3}[state.group(2)]
size = float(state.group(1)) * unit
peak = int(re.search(r"peak ([0-9]+) KB", text).group(1)) / 1024
ratio = f" ({size / float(plain):.2f} of unsharded)" if plain else ""
print(f"{n} rank{'s' if n != '1' else ''}, --shard {shard}: optimizer state {size / 1024**2:.2f} MiB{ratio}, peak RSS {peak:.0f} MiB")
open(log + ".size", "w").write(str(size))
PY
    [ "$shard" = none ] && plain=$(cat "$log.size")
  done
done
[ -x "$worker" ] || { echo "sharding.sh: build mp_worker first" >&2; exit 1; }
port=$((30000 + RANDOM % 20000))
for shard in none optimizer gradients; do
  port=$((port + 1))
  for r in 0 1; do
    # A fixed mmap threshold: glibc's sliding one keeps freed tensors in its arenas, which makes
    # the peak depend on the order of frees more than on what is alive.
    MALLOC_MMAP_THRESHOLD_=131072 RANK=$r WORLD_SIZE=2 LOCAL_RANK=$r MASTER_ADDR=127.0.0.1 MASTER_PORT=$port /usr/bin/time -f "peak %M KB" "$worker" --steps 3 --batch 8 \
      --optimizer adam --hidden 4000000 --shard "$shard" --out "$scratch/big" > "$scratch/big.$shard.$r" 2>&1 &
  done
  wait
  state=$(grep -o "optimizer state [0-9]*" "$scratch/big.$shard.0" | grep -o "[0-9]*$")
  peak=$(grep -o "peak [0-9]*" "$scratch/big.$shard.0" | grep -o "[0-9]*$")
  grads=$(grep -o "gradient buffers [0-9]*" "$scratch/big.$shard.0" | grep -o "[0-9]*$")
  echo "32 M parameters, 2 ranks, --shard $shard: rank 0's Adam state $((state / 1048576)) MiB, gradient buffers $((grads / 1048576)) MiB, peak RSS $((peak / 1024)) MiB"
done
