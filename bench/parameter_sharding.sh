#!/bin/bash
# What parameter sharding (--shard parameters, ZeRO stage 3) leaves on each rank, against stage
# 2 and unsharded: examples/gpt at 25 M parameters (8 blocks of 512, each block a tp::Sharded
# unit of 3.1 M) on 4 ranks, Adam, 4 steps each on the project's README. It prints, for rank 0,
# the state the first step left (Adam's moments, the gradients kept between steps, the units'
# rows and the most of them whole at once, from the summary line the trainer prints), what the
# unsharded state would be, and the largest rank's peak resident memory (GNU time's maximum over
# tp-run's children):
#
#   --shard parameters: Adam 48.2 MiB, gradients kept 56.0 MiB, parameters 24.0 MiB + whole units at most 24.0 MiB; peak RSS 990 MiB
#
#   bench/parameter_sharding.sh BUILD_DIR [RANKS]
set -euo pipefail
build=$(cd "$1" && pwd)
ranks=${2:-4}
root=$(cd "$(dirname "$0")/.." && pwd)
gpt=$build/examples/gpt run=$build/tp-run
[ -x "$gpt" ] && [ -x "$run" ] || { echo "parameter_sharding.sh: build gpt and tp-run first" >&2; exit 1; }
[ -x /usr/bin/time ] || { echo "parameter_sharding.sh: needs GNU time (apt-get install time)" >&2; exit 1; }
scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT
model=(--n-layer 8 --n-head 8 --n-embd 512 --block-size 64 --batch-size 4 --gradient-accumulation-steps "$ranks" --max-iters 4
       --eval-interval 4 --eval-iters 1 --threads 1 --data "$root/README.md")
for shard in none gradients parameters; do
  log=$scratch/$shard.log
  # A fixed mmap threshold: glibc's sliding one keeps freed tensors in its arenas (bench/sharding.sh).
  MALLOC_MMAP_THRESHOLD_=131072 /usr/bin/time -f "peak %M KB" "$run" -n "$ranks" "$gpt" "${model[@]}" --shard "$shard" --out-dir "$scratch/$shard" \
    >"$log" 2>&1 || { cat "$log" >&2; exit 1; }
  python3 - "$shard" "$log" <<'PY'
import re, sys
shard, log = sys.argv[1:]
text = open(log).read()
unit = {"B": 1, "KiB": 1024, "MiB": 1024**2, "GiB": 1024**3}
def mib(pattern):
    m = re.search(pattern + r" ([0-9.]+) (B|KiB|MiB|GiB)", text)
    return float(m.group(1)) * unit[m.group(2)] / 1024**2 if m else None
params = re.search(r"\] total +([0-9,]+)", text).group(1).replace(",", "")
whole = int(params) * 4 / 1024**2
adam = mib("optimizer state after the first step:")
line = f"--shard {shard}: Adam {adam:.1f} MiB"
if shard == "none":
    line += f", gradients {whole:.1f} MiB, parameters {whole:.1f} MiB ({2 * whole + adam:.1f} MiB in all)"
else:
    line += f", gradients kept {mib('gradients kept'):.1f} MiB"
    rows = mib("its rows")
    line += f", parameters {rows:.1f} MiB + whole units at most {mib('units whole at most'):.1f} MiB" if rows is not None else f", parameters {whole:.1f} MiB"
peak = int(re.search(r"peak ([0-9]+) KB", text).group(1)) / 1024
print(f"{line}; peak RSS {peak:.0f} MiB")
PY
done
