#!/usr/bin/env bash
# gpt.sh GPT [NANOGPT_DIR]: nanoGPT's CPU configuration of its Shakespeare model (its README's
# command) trained by tp's example (GPT, a built examples/gpt) in fp32 and bf16, by the Python
# peer (bench/gpt_peer.py, the same model and recipe on Debian's python3-torch) and, given
# NANOGPT_DIR (a checkout of karpathy/nanoGPT outside this project, with data/shakespeare_char
# prepared), by nanoGPT's own train.py (its seed is its own, 1337), all with THREADS intra-op
# threads.
#
# Noise cannot decide: ROUNDS rounds, each running every program once, in an order that turns by
# one from round to round (a neighbour's burst falls on each in turn). Every program prints each
# step's time (`iter N: ... time Yms`); a run is summed up by its median step time, which an
# evaluation or a stall does not move, beside its spread (10th-90th percentile), its wall time
# and its CPU time. Each ratio is taken within a round, and the median over rounds is printed
# with its range.
#
#   bash bench/gpt.sh build/examples/gpt ~/scratch/nanoGPT
#
# TEXT (default ../shared/data/tinyshakespeare/input.txt), ITERS (2000), THREADS (2), ROUNDS (5),
# SEED (1337), EVAL_ITERS (20), PRECISIONS ("fp32 bf16": tp's runs). Work goes to WORK
# (default /tmp/tp_gpt_bench), one log per run.
set -euo pipefail
gpt=$(realpath "$1")
nanogpt=${2:-}
root=$(cd "$(dirname "$0")/.." && pwd)
text=$(realpath "${TEXT:-$root/../shared/data/tinyshakespeare/input.txt}")
iters=${ITERS:-2000}
threads=${THREADS:-2}
rounds=${ROUNDS:-5}
seed=${SEED:-1337}
eval_iters=${EVAL_ITERS:-20}
work=${WORK:-/tmp/tp_gpt_bench}
python=${TP_PYTHON:-/usr/bin/python3}
rm -rf "$work" && mkdir -p "$work"
model=(--block-size 64 --batch-size 12 --n-layer 4 --n-head 4 --n-embd 128 --max-iters "$iters" --lr-decay-iters "$iters" --dropout 0.0)

programs=()
for precision in ${PRECISIONS:-fp32 bf16}; do programs+=("tp_$precision"); done
programs+=(peer)
[ -n "$nanogpt" ] && programs+=(nanogpt)

run() {  # PROGRAM ROUND: one run, its log in $work/ROUND.PROGRAM.log, its times in ....time
  local name=$1 round=$2 log=$work/$2.$1.log
  local timed=(/usr/bin/time -f "%e %U %S" -o "$work/$round.$name.time")
  case $name in
    tp_*)
      rm -rf "$work/out_$name"
      "${timed[@]}" "$gpt" --preset shakespeare-char --data "$text" --out-dir "$work/out_$name" --device cpu --eval-iters "$eval_iters" "${model[@]}" \
        --log-interval 1 --threads "$threads" --precision "${name#tp_}" --seed "$seed" >"$log" 2>&1 ;;
    peer)
      OMP_NUM_THREADS=$threads "${timed[@]}" "$python" "$root/bench/gpt_peer.py" train "$work/prepared/data" --iters "$iters" --lr-decay-iters "$iters" \
        --seed "$seed" >"$log" 2>&1 ;;
    nanogpt)
      (cd "$nanogpt" && OMP_NUM_THREADS=$threads "${timed[@]}" "$python" train.py config/train_shakespeare_char.py --device=cpu --compile=False \
        --eval_iters="$eval_iters" --log_interval=1 --block_size=64 --batch_size=12 --n_layer=4 --n_head=4 --n_embd=128 \
        --max_iters="$iters" --lr_decay_iters="$iters" --dropout=0.0 --out_dir="$work/out_nanogpt") >"$log" 2>&1 ;;
  esac
}

# The peer reads the tokens tp prepares from the text (train.bin, val.bin): one step makes them.
"$gpt" --preset shakespeare-char --data "$text" --out-dir "$work/prepared" --device cpu "${model[@]}" --max-iters 1 --eval-interval 1 \
  --eval-iters 1 >"$work/prepared.log" 2>&1 || { cat "$work/prepared.log"; exit 1; }
count=${#programs[@]}
for round in $(seq "$rounds"); do
  order=()
  for i in $(seq 0 $((count - 1))); do order+=("${programs[$(((i + round - 1) % count))]}"); done
  echo "== round $round of $rounds ($iters steps, $threads threads, seed $seed): ${order[*]}"
  for name in "${order[@]}"; do run "$name" "$round"; done
done

"$python" - "$work" "$rounds" "${programs[@]}" <<'EOF'
import re, statistics, sys
work, rounds, programs = sys.argv[1], int(sys.argv[2]), sys.argv[3:]
runs = {}  # (program, round) -> (median ms, p10, p90, wall, cpu, val loss)
for p in programs:
    for r in range(1, rounds + 1):
        text = open(f"{work}/{r}.{p}.log").read()
        ms = sorted(float(m) for m in re.findall(r"^iter \d+: .*time ([0-9.]+)ms", text, re.M))
        if not ms:
            sys.exit(f"gpt.sh: {work}/{r}.{p}.log has no step times: the run failed, see its log")
        wall, user, system = map(float, open(f"{work}/{r}.{p}.time").read().split()[-3:])
        val = re.findall(r"val loss ([0-9.]+)", text)
        runs[p, r] = (statistics.median(ms), ms[len(ms) // 10], ms[len(ms) * 9 // 10], wall, user + system, val[-1] if val else "-")
print(f"{'run':10} {'median step':>12} {'p10-p90 (ms)':>16} {'wall s':>8} {'CPU s':>8}  val loss   (median over {rounds} rounds; rounds' range)")
for p in programs:
    col = lambda i: [runs[p, r][i] for r in range(1, rounds + 1)]
    med = col(0)
    print(f"{p:10} {statistics.median(med):9.2f} ms {statistics.median(col(1)):7.2f}-{statistics.median(col(2)):<8.2f}"
          f"{statistics.median(col(3)):8.1f} {statistics.median(col(4)):8.1f}  {runs[p, rounds][5]:8}   "
          f"medians {min(med):.2f}-{max(med):.2f} ms")
print("ratios of median step times, each within a round (median over rounds, range):")
for p in [q for q in programs if q.startswith("tp_")]:
    for other in [q for q in programs if not q.startswith("tp_")]:
        ratios = [runs[p, r][0] / runs[other, r][0] for r in range(1, rounds + 1)]
        walls = [runs[p, r][3] / runs[other, r][3] for r in range(1, rounds + 1)]
        print(f"  {p} / {other}: {statistics.median(ratios):.3f} ({min(ratios):.3f}-{max(ratios):.3f}); "
              f"wall {statistics.median(walls):.3f} ({min(walls):.3f}-{max(walls):.3f})")
EOF
