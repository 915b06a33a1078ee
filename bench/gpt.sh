#!/usr/bin/env bash
# gpt.sh GPT [NANOGPT_DIR]: nanoGPT's CPU configuration of its Shakespeare model (its README's
# command) trained by tp's example (GPT, a built examples/gpt), by the Python peer
# (bench/gpt_peer.py, the same model and recipe on Debian's python3-torch) and, given
# NANOGPT_DIR (a checkout of karpathy/nanoGPT outside this project, with
# data/shakespeare_char prepared), by nanoGPT's own train.py (its seed is its own, 1337): one after another, ROUNDS times,
# all with THREADS intra-op threads. Prints each run's wall time, steps/s and final val loss, and
# tp's time as a ratio of the others' from the same round.
#
#   bash bench/gpt.sh build/examples/gpt ~/scratch/nanoGPT
#
# TEXT (default ../shared/data/tinyshakespeare/input.txt), ITERS (2000), THREADS (2), ROUNDS (1),
# SEED (1337), EVAL_ITERS (20), PRECISIONS ("fp32 bf16": tp's runs). Work goes to WORK
# (default /tmp/tp_gpt_bench).
set -euo pipefail
gpt=$(realpath "$1")
nanogpt=${2:-}
root=$(cd "$(dirname "$0")/.." && pwd)
text=$(realpath "${TEXT:-$root/../shared/data/tinyshakespeare/input.txt}")
iters=${ITERS:-2000}
threads=${THREADS:-2}
rounds=${ROUNDS:-1}
seed=${SEED:-1337}
eval_iters=${EVAL_ITERS:-20}
work=${WORK:-/tmp/tp_gpt_bench}
python=${TP_PYTHON:-/usr/bin/python3}
mkdir -p "$work"
model=(--block-size 64 --batch-size 12 --n-layer 4 --n-head 4 --n-embd 128 --max-iters "$iters" --lr-decay-iters "$iters" --dropout 0.0)

now() { date +%s.%N; }
report() {  # NAME SECONDS VAL_LOSS
  printf "%-26s %8.1f s %7.2f steps/s  val loss %s\n" "$1" "$2" "$(echo "$iters / $2" | bc -l)" "$3"
}
for round in $(seq "$rounds"); do
  echo "== round $round ($iters steps, $threads threads, seed $seed)"
  declare -A took=()
  for precision in ${PRECISIONS:-fp32 bf16}; do
    rm -rf "$work/tp_$precision"
    start=$(now)
    "$gpt" --preset shakespeare-char --data "$text" --out-dir "$work/tp_$precision" --device cpu --eval-iters "$eval_iters" "${model[@]}" \
      --threads "$threads" --precision "$precision" --seed "$seed" >"$work/tp_$precision.log" 2>&1
    took[tp_$precision]=$(echo "$(now) - $start" | bc -l)
    report "tp $precision" "${took[tp_$precision]}" "$(grep -o 'val loss [0-9.]*' "$work/tp_$precision.log" | tail -1 | cut -d' ' -f3)"
  done
  start=$(now)
  OMP_NUM_THREADS=$threads "$python" "$root/bench/gpt_peer.py" train "$work/tp_fp32/data" --iters "$iters" --lr-decay-iters "$iters" --seed "$seed" \
    >"$work/peer.log" 2>&1
  took[peer]=$(echo "$(now) - $start" | bc -l)
  report "python peer (no evals)" "${took[peer]}" "-"
  if [ -n "$nanogpt" ]; then
    start=$(now)
    (cd "$nanogpt" && OMP_NUM_THREADS=$threads "$python" train.py config/train_shakespeare_char.py --device=cpu --compile=False \
      --eval_iters="$eval_iters" --log_interval=1 --block_size=64 --batch_size=12 --n_layer=4 --n_head=4 --n_embd=128 \
      --max_iters="$iters" --lr_decay_iters="$iters" --dropout=0.0 --out_dir="$work/nanogpt_out") >"$work/nanogpt.log" 2>&1 || true
    took[nanogpt]=$(echo "$(now) - $start" | bc -l)
    report "nanoGPT train.py" "${took[nanogpt]}" "$(grep -o 'val loss [0-9.]*' "$work/nanogpt.log" | tail -1 | cut -d' ' -f3)"
  fi
  for other in peer ${nanogpt:+nanogpt}; do
    for precision in ${PRECISIONS:-fp32 bf16}; do
      printf "  tp %s / %s: %.2f\n" "$precision" "$other" "$(echo "${took[tp_$precision]} / ${took[$other]}" | bc -l)"
    done
  done
done
