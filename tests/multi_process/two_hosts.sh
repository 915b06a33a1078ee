#!/bin/bash
# Two hosts on one machine: network namespaces joined by a veth pair (10.77.0.1 and 10.77.0.2),
# one rank in each, training together over Gloo with MASTER_ADDR on the first "host". Their
# weights must equal, bit for bit, those of the same two ranks on the loopback.
#
#   two_hosts.sh <mp_worker> <scratch folder>
# Exits 77 (skipped) where namespaces cannot be made (not root, no CAP_NET_ADMIN).
set -euo pipefail
worker=$1
scratch=$2
a=tpa$$ b=tpb$$
if ! ip netns add "$a" 2>/dev/null; then
  echo "SKIP: cannot create network namespaces here (needs root with CAP_NET_ADMIN)"
  exit 77
fi
cleanup() { ip netns del "$a" 2>/dev/null || true; ip netns del "$b" 2>/dev/null || true; }
trap cleanup EXIT
ip netns add "$b"
ip link add "v$a" type veth peer name "v$b"
ip link set "v$a" netns "$a"
ip link set "v$b" netns "$b"
ip -n "$a" addr add 10.77.0.1/24 dev "v$a"
ip -n "$b" addr add 10.77.0.2/24 dev "v$b"
for ns in "$a" "$b"; do ip -n "$ns" link set lo up; ip -n "$ns" link set "v$ns" up; done

rm -rf "$scratch" && mkdir -p "$scratch"
flags=(--steps 15 --batch 8 --timeout-ms 30000)
ip netns exec "$a" env RANK=0 WORLD_SIZE=2 MASTER_ADDR=10.77.0.1 MASTER_PORT=29611 GLOO_SOCKET_IFNAME="v$a" \
  "$worker" "${flags[@]}" --out "$scratch/hosts" > "$scratch/rank0.log" 2>&1 &
first=$!
ip netns exec "$b" env RANK=1 WORLD_SIZE=2 MASTER_ADDR=10.77.0.1 MASTER_PORT=29611 GLOO_SOCKET_IFNAME="v$b" \
  "$worker" "${flags[@]}" --out "$scratch/hosts" > "$scratch/rank1.log" 2>&1 &
second=$!
status=0
wait $first || status=1
wait $second || status=1
if [ $status != 0 ]; then
  echo "a rank failed:"; cat "$scratch/rank0.log" "$scratch/rank1.log"; exit 1
fi
# The same two ranks on the loopback, for reference.
for r in 0 1; do
  env RANK=$r WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 MASTER_PORT=29612 "$worker" "${flags[@]}" --out "$scratch/local" > "$scratch/local$r.log" 2>&1 &
done
wait
cmp "$scratch/hosts.0" "$scratch/hosts.1"
cmp "$scratch/hosts.0" "$scratch/local.0"
echo "two hosts (10.77.0.1, 10.77.0.2) trained together: $(tail -n 1 "$scratch/rank1.log"), weights equal to the loopback run's"
