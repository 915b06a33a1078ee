#!/bin/bash
# Communication that hides behind compute, between two "hosts": two network namespaces joined by
# a veth pair whose both ends are rate-limited with tc's tbf qdisc (this kernel has tbf and htb
# but not netem, so no delay is added: the links differ from real ones in latency). Each rank is
# pinned to its own core (taskset), so that they do not fight for one.
#
#   bench/two_hosts.sh BUILD_DIR [RATE:BATCH...]     (as root; default: 1gbit:512 10gbit:64)
#
# For each rate, bucket size (1, 4 and 25 MB) and wire type (fp32, fp16), it runs
# bench_multi_process's step benchmark (an MLP of 8.4 MB of gradients, one thread per rank)
# across the link and prints
#
#   link 1gbit, buckets 4 MB, fp32 on the wire: overlap gain: 0.31 (overlapped 120 ms, after backward 157 ms)
#
# where the gain is time after / time overlapped - 1. (The first line is an example of the format.)
# For each rate it then runs the sharded step benchmark (Adam, 4 MB buckets, fp32) and prints
#
#   link 1gbit: sharded step / unsharded: optimizer state 1.02, gradients 1.01 (...)
#
# With TP_TWO_HOSTS_FASHION=1 it then trains
# examples/fashion_mnist for 3 epochs across the first link with fp16 on the wire, and prints
# its test accuracy.
set -euo pipefail
build=$(cd "$1" && pwd)
shift
# A batch per rate such that computing the step takes about as long as sending its gradients.
cases=("$@")
[ $# -eq 0 ] && cases=(1gbit:512 10gbit:64)
bench=$build/bench/bench_multi_process
[ -x "$bench" ] || { echo "two_hosts: build bench_multi_process first ($bench)" >&2; exit 1; }
a=tpba$$ b=tpbb$$
ip netns add "$a" || { echo "two_hosts: cannot create network namespaces (run as root)" >&2; exit 1; }
cleanup() { ip netns del "$a" 2>/dev/null || true; ip netns del "$b" 2>/dev/null || true; }
trap cleanup EXIT
ip netns add "$b"
ip link add "v$a" type veth peer name "v$b"
ip link set "v$a" netns "$a"
ip link set "v$b" netns "$b"
ip -n "$a" addr add 10.79.0.1/24 dev "v$a"
ip -n "$b" addr add 10.79.0.2/24 dev "v$b"
for ns in "$a" "$b"; do ip -n "$ns" link set lo up; ip -n "$ns" link set "v$ns" up; done
cores=$(nproc)
core_b=$((cores > 1 ? 1 : 0))

shape() {  # shape RATE: the same limit on both ends (each direction)
  for ns in "$a" "$b"; do
    ip netns exec "$ns" tc qdisc replace dev "v$ns" root tbf rate "$1" burst 1mb latency 100ms
  done
}
port=29700
run_pair() {  # run_pair OUTFILE VAR=VALUE... -- COMMAND...: rank 0 in $a on core 0, rank 1 in $b on core 1
  local out=$1 vars=()
  shift
  while [ "$1" != "--" ]; do vars+=("$1"); shift; done
  shift
  port=$((port + 10))
  ip netns exec "$a" env RANK=0 WORLD_SIZE=2 MASTER_ADDR=10.79.0.1 MASTER_PORT=$port GLOO_SOCKET_IFNAME="v$a" OMP_NUM_THREADS=1 \
    "${vars[@]}" taskset -c 0 "$@" > "$out" 2>&1 &
  local first=$!
  ip netns exec "$b" env RANK=1 WORLD_SIZE=2 MASTER_ADDR=10.79.0.1 MASTER_PORT=$port GLOO_SOCKET_IFNAME="v$b" OMP_NUM_THREADS=1 \
    "${vars[@]}" taskset -c $core_b "$@" > "$out.rank1" 2>&1 &
  local second=$!
  wait $first && wait $second
}

scratch=$(mktemp -d)
for case in "${cases[@]}"; do
  rate=${case%%:*} batch=${case#*:}
  shape "$rate"
  for mb in ${TP_TWO_HOSTS_BUCKETS-1 4 25}; do  # TP_TWO_HOSTS_BUCKETS="" runs the sharded step alone
    for wire in fp32 fp16; do
      log=$scratch/$rate-$mb-$wire.log
      run_pair "$log" TP_BENCH_BUCKET_BYTES=$((mb << 20)) TP_BENCH_COMPRESS=$wire TP_BENCH_BATCH=$batch -- "$bench" --benchmark_filter=step || true
      line=$(grep "step overlapped" "$log" || true)
      if [ -z "$line" ]; then echo "link $rate, buckets $mb MB, $wire: failed"; cat "$log" "$log.rank1" >&2; continue; fi
      python3 - "$rate, batch $batch" "$mb" "$wire" "$line" <<'PY'
import re, sys
rate, mb, wire, line = sys.argv[1:]
ratio, over, after = map(float, re.search(r"after backward ([0-9.e+-]+) \(([0-9.e+-]+) ms / ([0-9.e+-]+) ms\)", line).groups())
print(f"link {rate}, buckets {mb} MB, {wire} on the wire: overlap gain: {1 / ratio - 1:.2f} (overlapped {over:.0f} ms, after backward {after:.0f} ms)")
PY
    done
  done
  log=$scratch/$rate-sharded.log
  run_pair "$log" TP_BENCH_BUCKET_BYTES=$((4 << 20)) TP_BENCH_BATCH=$batch -- "$bench" --benchmark_filter=sharded_step || true
  line=$(grep -o "sharded step / unsharded.*" "$log" || true)
  if [ -z "$line" ]; then echo "link $rate, sharded: failed"; cat "$log" "$log.rank1" >&2; else echo "link $rate, batch $batch: $line"; fi
done
if [ "${TP_TWO_HOSTS_FASHION:-0}" = 1 ]; then
  rate=${cases[0]%%:*}
  shape "$rate"
  run_pair "$scratch/fashion.log" TP_LOGDIR_ACTION=remove -- "$build/examples/fashion_mnist" --epochs 3 --compress fp16 --threads 1 \
    --logdir "$scratch/fashion" || { cat "$scratch/fashion.log" "$scratch/fashion.log.rank1" >&2; exit 1; }
  echo "fashion_mnist across the $rate link, fp16 on the wire, 3 epochs: $(grep 'final test accuracy' "$scratch/fashion.log")"
fi
rm -rf "$scratch"
