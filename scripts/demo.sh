#!/usr/bin/env bash
# `make demo`: the engine benchmark, then a replicated exchange (three `bourse node`
# processes running Raft) under load that survives the loss of its leader, and that you
# can trade on. Everything is on loopback and in a temporary data directory.
set -euo pipefail
cd "$(dirname "$0")/.."

bourse=./target/release/bourse
data=$(mktemp -d -t bourse-demo-XXXXXX)
nodes=127.0.0.1:7401,127.0.0.1:7402,127.0.0.1:7403
cleanup() {
  if [ -f "$data/cluster.json" ]; then "$bourse" cluster down --data "$data" >/dev/null 2>&1 || true; fi
  rm -rf "$data"
}
trap cleanup EXIT

leader_of() {  # prints "id pid" of the current leader
  "$bourse" cluster status --data "$data" | awk '$4 == "leader" { print $1, $2 }'
}

echo "== 1. The matching engine alone: exchange-core's 2020 mix, one thread, risk checks on"
"$bourse" bench engine --workload ec2020 --cycles 3 --rates 1000000

echo
echo "== 2. A replicated exchange: three nodes, Raft, each with its own journal in $data"
"$bourse" cluster up --nodes 3 --data "$data" --base-port 7400

echo
echo "== 3. Load over all three addresses; an ack means a majority has the command on disk."
echo "      Two seconds in, the leader is killed with SIGKILL: the load fails over and goes on."
"$bourse" load --target "$nodes" --seconds 8 --connections 8 2>/dev/null &
load_pid=$!
sleep 2
read -r leader_id leader_pid < <(leader_of)
echo "   (killing the leader, node $leader_id, pid $leader_pid)"
kill -KILL "$leader_pid"
wait "$load_pid"
sleep 0.5
echo
echo "   The new leader: node $(leader_of | cut -d' ' -f1). Node $leader_id starts again on its data and catches up:"
"$bourse" cluster restart --data "$data" --id "$leader_id"
sleep 2
"$bourse" cluster status --data "$data"

echo
echo "== 4. The market it left behind (read with a linearizable query: the leader confirms"
echo "      its leadership with a quorum first)"
"$bourse" markets --node "$nodes" --linearizable
"$bourse" book LOAD/USD --levels 5 --node "$nodes" --linearizable
"$bourse" balances 0 --node "$nodes"

if [ -t 0 ] && [ -t 1 ]; then
  echo
  echo "== 5. The exchange keeps running. In another terminal, try for example:"
  echo "   $bourse account-create --node $nodes"
  echo "   $bourse deposit 0 USD 100000 --node $nodes"
  echo "   $bourse place 0 LOAD/USD buy 10 --px 99990 --node $nodes"
  echo "   $bourse trades LOAD/USD --node $nodes"
  echo "   $bourse cluster status --node $nodes"
  echo "   $bourse cluster transfer-leader --to 2 --node $nodes"
  echo "Press Ctrl-C to stop it."
  trap 'echo' INT
  sleep infinity || true
  trap - INT
fi

echo
echo "== 6. Stopping the cluster (SIGTERM: each node finishes its batch and exits), then"
echo "      replaying each node's snapshot and committed log: same index, same state hash"
"$bourse" cluster down --data "$data"
for node in 1 2 3; do
  printf 'node %s: ' "$node"
  "$bourse" replay "$data/node$node" 2>/dev/null | tr '\n' ' '
  echo
done
