#!/usr/bin/env bash
# gpt_checks.sh CHECK GPT TP_RUN DIR: the GPT example's tests, each on a small model trained
# on the project's own README (a UTF-8 text any clone has) in DIR, emptied first.
#
#   learn        trains 300 steps: the best val loss must be below 3.2 nats (a model of the
#                characters' frequencies alone pays 3.63 on this text's last tenth, and the
#                run reaches 3.0); then samples 40
#                characters; then Python (bench/gpt_peer.py) loads ckpt.pt into a GPT with
#                nanoGPT's names, strict, and its val loss on tp's val windows equals tp's
#                within 1e-4; then --init-from starts a run from that ckpt.pt; a ckpt.pt
#                whose model_args do not fit its weights, or a folder in its place, is named.
#   killed       a run killed with SIGKILL mid-epoch resumes, and ends with the same weights,
#                bit for bit, as a run never interrupted (dropout on: the generators resume too)
#   ranks        2 processes train the first 200 steps, 1 process the rest: it says what
#                changed of the layout, and its train loss at step 300 is an uninterrupted
#                one-process run's within 2e-3 (the same windows; sums in another order)
#   sharded      --shard parameters (each block's parameters sharded, tp::Sharded): 2 processes
#                train the first 100 steps, 4 the rest; the 4 resume from the 2's checkpoint,
#                the best val loss is below 3.4 nats, and Python's val loss of the ckpt.pt the
#                ranks wrote (gathered whole) equals tp's within 1e-4
#   bad_input    each bad input fails with its own message, before training
set -euo pipefail
check=$1 gpt=$2 tp_run=$3 dir=$4
root=$(cd "$(dirname "$0")/.." && pwd)
python=${TP_PYTHON:-/usr/bin/python3}
rm -rf "$dir"
mkdir -p "$dir"
text=$root/README.md
model=(--n-layer 2 --n-head 2 --n-embd 64 --block-size 32 --batch-size 16 --eval-interval 100 --eval-iters 10 --learning-rate 3e-3
       --min-lr 3e-4 --warmup-iters 20 --threads 1)
small=("${model[@]}" --gradient-accumulation-steps 2)
fail() { echo "gpt_checks $check: $*" >&2; exit 1; }

# The weights of a tp checkpoint, as one hash (torch.load reads tp's checkpoints).
weights_hash() {
  "$python" -c "
import hashlib, sys, torch
state = torch.load(sys.argv[1], map_location='cpu')['state_dict']
h = hashlib.sha256()
for k in sorted(state): h.update(k.encode()); h.update(state[k].numpy().tobytes())
print(h.hexdigest())" "$1"
}

case $check in
learn)
  "$gpt" --data "$text" --out-dir "$dir/run" "${small[@]}" --max-iters 300 --lr-decay-iters 300 --max-val-loss 3.2 | tee "$dir/train.log"
  grep -q "^step 300: train loss" "$dir/train.log" || fail "no evaluation line for step 300"
  "$gpt" --sample 40 --out-dir "$dir/run" --start "The " | tee "$dir/sample.log"
  [ "$(head -c 4 "$dir/sample.log")" = "The " ] || fail "the sample does not start with --start"
  tp_loss=$("$python" -c "import json,sys; print(min(r['val_loss'] for r in json.load(open(sys.argv[1])) if 'val_loss' in r))" "$dir/run/stats.json")
  py_loss=$("$python" "$root/bench/gpt_peer.py" score "$dir/run/ckpt.pt" "$dir/run/data" --eval-iters 10 --batch-size 16 --seed 1337 | tee /dev/stderr | cut -d' ' -f3)
  "$python" -c "import sys; a, b = map(float, sys.argv[1:]); sys.exit(0 if abs(a - b) < 1e-4 else 1)" "$tp_loss" "$py_loss" ||
    fail "Python's val loss $py_loss differs from tp's $tp_loss"
  "$gpt" --data "$text" --out-dir "$dir/again" "${small[@]}" --max-iters 100 --lr-decay-iters 100 --init-from "$dir/run" --max-val-loss 3.2 | tee "$dir/again.log"
  # A damaged ckpt.pt is named, not an allocation failure: model_args that ask for a model a
  # trillion wide, and a folder in its place.
  mkdir -p "$dir/wide" "$dir/folder/ckpt.pt"
  cp -r "$dir/run/data" "$dir/wide/"
  "$python" -c "
import sys, torch
c = torch.load(sys.argv[1], map_location='cpu')
c['model_args']['n_embd'] = 10**12
torch.save(c, sys.argv[2])" "$dir/run/ckpt.pt" "$dir/wide/ckpt.pt"
  if "$gpt" --sample 5 --out-dir "$dir/wide" >"$dir/wide.log" 2>&1; then fail "a ckpt.pt a trillion wide was sampled from"; fi
  grep -q "model_args says 'transformer.wte.weight' is \[[0-9]*, 1000000000000\] but the weight is" "$dir/wide.log" || { cat "$dir/wide.log"; fail "the wide model_args were not named"; }
  if "$gpt" --sample 5 --out-dir "$dir/folder" >"$dir/folder.log" 2>&1; then fail "a folder was sampled from"; fi
  grep -q "ckpt.pt is a folder, not a torch.save file" "$dir/folder.log" || { cat "$dir/folder.log"; fail "the folder was not named"; }
  ;;
killed)
  run=("$gpt" --data "$text" "${small[@]}" --max-iters 400 --lr-decay-iters 400 --dropout 0.1)
  "${run[@]}" --out-dir "$dir/whole" >"$dir/whole.log"
  "${run[@]}" --out-dir "$dir/killed" >"$dir/killed.log" &
  pid=$!
  for _ in $(seq 600); do [ -f "$dir/killed/model-0000000200.ckpt" ] && break; sleep 0.05; done
  sleep 0.2
  kill -9 "$pid" 2>/dev/null || fail "the run ended before it could be killed"
  wait "$pid" || true
  "${run[@]}" --out-dir "$dir/killed" 2>&1 | tee "$dir/resumed.log"
  grep -q "resumed from" "$dir/resumed.log" || fail "the second run did not resume"
  [ "$(weights_hash "$dir/whole/model-0000000400.ckpt")" = "$(weights_hash "$dir/killed/model-0000000400.ckpt")" ] ||
    fail "the killed and resumed run ends with other weights than the whole run"
  ;;
ranks)
  run=(--data "$text" "${small[@]}" --max-iters 300 --lr-decay-iters 300)
  "$tp_run" -n 2 "$gpt" "${run[@]}" --out-dir "$dir/two" --max-iters 200 >"$dir/two.log" 2>&1 || { cat "$dir/two.log"; fail "tp-run -n 2 failed"; }
  "$gpt" "${run[@]}" --out-dir "$dir/two" 2>&1 | tee "$dir/one.log"
  grep -q "resumed from" "$dir/one.log" || fail "the one-process run did not resume"
  grep -q "from a checkpoint of 2 processes x 1 batch of 16 per step: global batch 32 -> 32" "$dir/one.log" || fail "the resume does not say how the layout changed"
  "$gpt" "${run[@]}" --out-dir "$dir/whole" >"$dir/whole.log" 2>&1
  # The same windows, so the same losses but for the order of the sums across the ranks.
  "$python" -c "
import re, sys
a, b = (float(re.search(r'step 300: train loss ([0-9.]+)', open(f).read()).group(1)) for f in sys.argv[1:])
sys.exit(0 if abs(a - b) < 2e-3 else 1)" "$dir/one.log" "$dir/whole.log" || fail "the train loss at step 300 differs from an uninterrupted run's"
  ;;
sharded)
  run=(--data "$text" "${model[@]}" --gradient-accumulation-steps 4 --max-iters 200 --lr-decay-iters 200 --shard parameters)
  "$tp_run" -n 2 "$gpt" "${run[@]}" --out-dir "$dir/run" --max-iters 100 >"$dir/two.log" 2>&1 || { cat "$dir/two.log"; fail "tp-run -n 2 failed"; }
  "$tp_run" -n 4 "$gpt" "${run[@]}" --out-dir "$dir/run" --max-val-loss 3.4 2>&1 | tee "$dir/four.log" || fail "tp-run -n 4 failed"
  grep -q "from a checkpoint of 2 processes" "$dir/four.log" || fail "the 4 processes did not resume from the 2's checkpoint"
  tp_loss=$("$python" -c "import json,sys; print(min(r['val_loss'] for r in json.load(open(sys.argv[1])) if 'val_loss' in r))" "$dir/run/stats.json")
  py_loss=$("$python" "$root/bench/gpt_peer.py" score "$dir/run/ckpt.pt" "$dir/run/data" --eval-iters 10 --batch-size 16 --seed 1337 | tee /dev/stderr | cut -d' ' -f3)
  "$python" -c "import sys; a, b = map(float, sys.argv[1:]); sys.exit(0 if abs(a - b) < 1e-4 else 1)" "$tp_loss" "$py_loss" ||
    fail "Python's val loss $py_loss of the sharded run's ckpt.pt differs from tp's $tp_loss"
  ;;
bad_input)
  expect() {  # MESSAGE ARGS...: the run fails and says MESSAGE
    local message=$1
    shift
    if "$gpt" "$@" --out-dir "$dir/bad" >"$dir/out.log" 2>&1; then fail "$* succeeded"; fi
    grep -qF "$message" "$dir/out.log" || { cat "$dir/out.log"; fail "$* did not say: $message"; }
  }
  expect "no such file" --data "$dir/missing.txt"
  expect "did you mean --max-iters for --max-iter?" --data "$text" --max-iter 5
  printf 'abc' >"$dir/train.bin"
  cp "$dir/train.bin" "$dir/val.bin"
  expect "an odd number" --data "$dir/train.bin"
  printf '\x01\x00\x50\x00' >"$dir/train.bin"
  echo '{"vocab_size": 3, "chars": ["a", "b", "c"]}' >"$dir/vocab.json"
  expect "beyond the vocabulary of 3" --data "$dir/train.bin"
  printf '\x01\x00\x02\x00' >"$dir/train.bin"
  expect "fewer than one window" --data "$dir/train.bin" --block-size 8
  expect "must divide --max-iters" --data "$text" --max-iters 250 --eval-interval 100
  : >"$dir/empty.txt"
  expect "is empty" --data "$dir/empty.txt"
  ;;
*) fail "unknown check (learn, killed, ranks, sharded, bad_input)" ;;
esac
echo "gpt_checks $check: passed"
