#!/usr/bin/env bash
# gpt_seeds.sh GPT NANOGPT_DIR: the loss at step 2000 of nanoGPT's CPU Shakespeare configuration
# (its README's command) over several seeds, trained by tp's example (GPT, a built examples/gpt)
# and by nanoGPT's own train.py (NANOGPT_DIR: a checkout of karpathy/nanoGPT outside this
# project, data/shakespeare_char prepared). Every final checkpoint is scored by
# bench/gpt_peer.py on the same 200 val batches (tp::data::fixed_windows, seed 1338), so the two
# spreads compare on identical windows; each run's own 20-batch estimate is printed beside it.
#
#   bash bench/gpt_seeds.sh build/examples/gpt ~/scratch/nanoGPT
#
# SEEDS ("1337 1 2 3 4 5"), WHO ("tp nanogpt"), THREADS (2), ITERS (2000), WORK
# (/tmp/tp_gpt_seeds). nanoGPT's seed (1337, fixed in its train.py) is set by running train.py
# with torch.manual_seed shifted; its files are not changed.
set -euo pipefail
gpt=$(realpath "$1")
nanogpt=$(realpath "$2")
root=$(cd "$(dirname "$0")/.." && pwd)
text=$(realpath "${TEXT:-$root/../shared/data/tinyshakespeare/input.txt}")
threads=${THREADS:-2}
iters=${ITERS:-2000}
work=${WORK:-/tmp/tp_gpt_seeds}
python=${TP_PYTHON:-/usr/bin/python3}
mkdir -p "$work"
score() {  # CKPT DATA_DIR -> the 200-batch val loss
  "$python" "$root/bench/gpt_peer.py" score "$1" "$2" --eval-iters 200 --batch-size 12 --seed 1337 | grep -o 'val loss [0-9.]*' | cut -d' ' -f3
}
printf "%-8s %6s %12s %12s\n" who seed "20 batches" "200 batches"
for seed in ${SEEDS:-1337 1 2 3 4 5}; do
  for who in ${WHO:-tp nanogpt}; do
    out="$work/${who}_$seed"
    rm -rf "$out"
    if [ "$who" = tp ]; then
      "$gpt" --preset shakespeare-char --data "$text" --out-dir "$out" --device cpu --eval-iters 20 --block-size 64 --batch-size 12 \
        --n-layer 4 --n-head 4 --n-embd 128 --max-iters "$iters" --lr-decay-iters "$iters" --dropout 0.0 --threads "$threads" \
        --seed "$seed" >"$out.log" 2>&1
      data="$out/data"
    else
      (cd "$nanogpt" && OMP_NUM_THREADS=$threads "$python" -c "
import runpy, sys, torch
seed = torch.manual_seed
torch.manual_seed = lambda s: seed(s - 1337 + $seed)
sys.argv = ['train.py', 'config/train_shakespeare_char.py', '--device=cpu', '--compile=False', '--eval_iters=20', '--log_interval=100',
            '--block_size=64', '--batch_size=12', '--n_layer=4', '--n_head=4', '--n_embd=128', '--max_iters=$iters',
            '--lr_decay_iters=$iters', '--dropout=0.0', '--out_dir=$out']
runpy.run_path('train.py', run_name='__main__')") >"$out.log" 2>&1
      data="$nanogpt/data/shakespeare_char"  # the same val.bin as tp's (prepare.py's bytes)
    fi
    last=$(grep -o "step $iters: train loss [0-9.]*, val loss [0-9.]*" "$out.log" | grep -o '[0-9.]*$' || echo "-")
    printf "%-8s %6s %12s %12s\n" "$who" "$seed" "$last" "$(score "$out/ckpt.pt" "$data")"
  done
done
