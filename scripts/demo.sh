#!/usr/bin/env bash
# `make demo`: the engine benchmark, then a replicated exchange (three `bourse node`
# processes running Raft) under load that survives the loss of its leader, two gateways
# in front of it (API keys, fair sequencing, held market data), the fairness benchmark,
# and an exchange you can trade on. Everything is on loopback and in a temporary data
# directory.
set -euo pipefail
cd "$(dirname "$0")/.."

bourse=./target/release/bourse
data=$(mktemp -d -t bourse-demo-XXXXXX)
nodes=127.0.0.1:7401,127.0.0.1:7402,127.0.0.1:7403
gw1=127.0.0.1:7601
gw2=127.0.0.1:7602
gateway_pids=()
history_pid=
cleanup() {
  for pid in "${gateway_pids[@]}"; do kill "$pid" 2>/dev/null || true; done
  if [ -n "$history_pid" ]; then kill "$history_pid" 2>/dev/null || true; fi
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
echo "   and a history sink following the cluster into $data/history.sqlite (bourse history run)"
"$bourse" history run --node "$nodes" --db "sqlite:$data/history.sqlite" 2>"$data/history.log" >/dev/null &
history_pid=$!

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
sleep 1
echo "   The history store, written through the failover: the first trade of LOAD/USD, from SQLite"
"$bourse" history trades LOAD/USD --db "$data/history.sqlite" --limit 1

echo
echo "== 5. Two gateways in front of the cluster. Sessions need an API key (the key file keeps"
echo "      only hashes); each order is stamped on arrival and the leader sequences gateway"
echo "      orders by stamp (d_s = 1 ms); market data is held until t_m + 3 ms and then"
echo "      released by every gateway at the same instant."
keys="$data/keys.toml"
ops_key=$("$bourse" gateway key-add --keys "$keys" --name ops --admin 2>/dev/null)
alice_key=$("$bourse" gateway key-add --keys "$keys" --name alice --account 0,1 2>/dev/null)
"$bourse" gateway run --id 1 --listen "$gw1" --cluster "$nodes" --keys "$keys" --release-priority 10 2>"$data/gateway1.log" &
gateway_pids+=($!)
"$bourse" gateway run --id 2 --listen "$gw2" --cluster "$nodes" --keys "$keys" --release-priority 10 2>"$data/gateway2.log" &
gateway_pids+=($!)
sleep 1
echo "   alice follows trades on gateway 2 and trades between her accounts 0 and 1 on gateway 1:"
"$bourse" trades LOAD/USD --node "$gw2" --api-key "$alice_key" --count 1 &
follow_pid=$!
sleep 0.5
"$bourse" place 0 LOAD/USD sell 3 --px 100000 --node "$gw1" --api-key "$alice_key"
"$bourse" place 1 LOAD/USD buy 3 --px 100000 --node "$gw1" --api-key "$alice_key"
wait "$follow_pid"
echo "   an order for account 2, which her key does not own, is refused at the gateway:"
"$bourse" place 2 LOAD/USD buy 1 --px 99000 --node "$gw1" --api-key "$alice_key" || true
echo "   load through gateway 1 with the operator's key (its sessions' orders are stamped and sequenced fairly):"
"$bourse" load --target "$gw1" --api-key "$ops_key" --seconds 3 --connections 4 2>/dev/null


if [ -t 0 ] && [ -t 1 ]; then
  echo
  echo "== 6. The exchange keeps running. In another terminal, try for example:"
  echo "   $bourse account-create --node $nodes"
  echo "   $bourse deposit 0 USD 100000 --node $nodes"
  echo "   $bourse place 0 LOAD/USD buy 10 --px 99990 --node $nodes"
  echo "   $bourse trades LOAD/USD --node $nodes"
  echo "   $bourse cluster status --node $nodes"
  echo "   $bourse cluster transfer-leader --to 2 --node $nodes"
  echo "   $bourse book LOAD/USD --node $gw2 --api-key $alice_key      # through a gateway"
  echo "Press Ctrl-C to stop it."
  trap 'echo' INT
  sleep infinity || true
  trap - INT
fi

echo
echo "== 7. Stopping the gateways and the cluster (SIGTERM: each node finishes its batch and exits), then"
echo "      replaying each node's snapshot and committed log: same index, same state hash"
for pid in "${gateway_pids[@]}"; do kill "$pid" 2>/dev/null || true; wait "$pid" 2>/dev/null || true; done
gateway_pids=()
kill "$history_pid" 2>/dev/null || true
wait "$history_pid" 2>/dev/null || true
history_pid=
"$bourse" cluster down --data "$data"
for node in 1 2 3; do
  printf 'node %s: ' "$node"
  "$bourse" replay "$data/node$node" 2>/dev/null | tr '\n' ' '
  echo
done

echo
echo "== 8. Fairness, measured (with the cluster gone, so it has the machine): one node, four"
echo "      gateways with injected delays (CloudEx's 0/400/200 µs spikes) and clock error,"
echo "      eight traders; without the sequencer and hold-and-release, then with them"
"$bourse" bench fairness --seconds 2 --d-s 0,1000 --d-h 0,3000 2>/dev/null
