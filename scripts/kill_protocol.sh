#!/usr/bin/env bash
# kill_protocol.sh BUILD_DIR [KILLS]: the kill safety of a multi-process run, tried as a user's
# worst day would be. examples/gpt on 2 ranks (tp-run), dropout 0.1, --shard parameters, a
# checkpoint every 10 steps: the run is killed with SIGKILL (tp-run and every rank at once) at a
# random moment KILLS times (20 by default), started again each time, then left to finish. It
# must end with the weights of a run never killed, bit for bit, and leave no temporary file.
# Prints each kill (after how long, whether a checkpoint was being written), what the resumes
# said, and the verdict. Too long for CI (several minutes); run by hand:
#
#   scripts/kill_protocol.sh build 20
set -euo pipefail
build=$(cd "$1" && pwd)
kills=${2:-20}
gpt=$build/examples/gpt tp_run=$build/tp-run
[ -x "$gpt" ] && [ -x "$tp_run" ] || { echo "kill_protocol.sh: build gpt and tp-run first" >&2; exit 1; }
root=$(cd "$(dirname "$0")/.." && pwd)
python=${TP_PYTHON:-/usr/bin/python3}
scratch=$(mktemp -d)
trap 'pkill -9 -f -- "--out-dir $scratch/" 2>/dev/null || true; rm -rf "$scratch"' EXIT
args=(--data "$root/README.md" --n-layer 4 --n-head 4 --n-embd 128 --block-size 32 --batch-size 8 --gradient-accumulation-steps 2
      --eval-interval 10 --eval-iters 2 --learning-rate 3e-3 --min-lr 3e-4 --warmup-iters 20 --threads 1 --max-iters 200
      --lr-decay-iters 200 --dropout 0.1 --shard parameters)

# The last checkpoint's weights, joined from the ranks' parts by tp-export, as one hash.
weights_hash() {
  "$build/tp-export" "$1/model-0000000200.ckpt" --state-dict "$1/final.pt" >/dev/null
  "$python" -c "
import hashlib, sys, torch
state = torch.load(sys.argv[1], map_location='cpu')
h = hashlib.sha256()
for k in sorted(state): h.update(k.encode()); h.update(state[k].numpy().tobytes())
print(h.hexdigest())" "$1/final.pt"
}

start=$(date +%s)
"$tp_run" -n 2 "$gpt" "${args[@]}" --out-dir "$scratch/whole" >"$scratch/whole.log" 2>&1 || { cat "$scratch/whole.log"; exit 1; }
whole_s=$(($(date +%s) - start))
echo "kill_protocol: the uninterrupted run took ${whole_s} s"

during_write=0
for ((k = 1; k <= kills; k++)); do
  "$tp_run" -n 2 "$gpt" "${args[@]}" --out-dir "$scratch/killed" >"$scratch/run.$k.log" 2>&1 &
  pid=$!
  # Somewhere in the first 60% of a run, in ms: resumed runs pass their checkpoints by.
  sleep "$(awk -v r="$RANDOM" -v s="$whole_s" 'BEGIN { printf "%.3f", 1 + (r / 32768) * s * 0.6 }')"
  writing=$(find "$scratch/killed" -name "*.tmp.*" 2>/dev/null | wc -l)
  { pkill -9 -f -- "--out-dir $scratch/killed"; kill -9 "$pid"; wait "$pid"; } 2>/dev/null || true  # quiet: no "Killed" line
  if grep -q "best val loss" "$scratch/run.$k.log"; then echo "kill $k: the run had finished; starting over" && rm -rf "$scratch/killed" && ((k--)) && continue; fi
  [ "$writing" -gt 0 ] && during_write=$((during_write + 1))
  said=$(grep -hoE "resumed from [^ ]*|renamed it to [^ ;]*|is not whole[^;]*|cannot be opened" "$scratch/run.$k.log" | sed 's|'"$scratch"'/||' | sort -u | tr '\n' ';' || true)
  echo "kill $k: $( [ "$writing" -gt 0 ] && echo "during a write ($writing temporary files)" || echo "between writes"); ${said:-nothing resumed}"
done
"$tp_run" -n 2 "$gpt" "${args[@]}" --out-dir "$scratch/killed" >"$scratch/final.log" 2>&1 || { cat "$scratch/final.log"; exit 1; }
grep -h "resumed from" "$scratch/final.log" | sed 's|'"$scratch"'/||' | head -1
left=$(find "$scratch/killed" -name "*.tmp.*" | wc -l)  # before tp-export writes anything there
a=$(weights_hash "$scratch/whole") b=$(weights_hash "$scratch/killed")
echo "kill_protocol: $kills kills, $during_write during a write; temporary files left: $left"
echo "kill_protocol: weights $( [ "$a" = "$b" ] && echo "bitwise equal to the uninterrupted run's" || echo "DIFFER from the uninterrupted run's")"
[ "$a" = "$b" ] && [ "$left" -eq 0 ]
