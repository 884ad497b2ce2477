#!/usr/bin/env bash
# `make demo`: the engine benchmark, then a local durable exchange under load that you
# can trade on. Everything is on loopback and in a temporary data directory.
set -euo pipefail
cd "$(dirname "$0")/.."

bourse=./target/release/bourse
listen=127.0.0.1:7400
metrics=127.0.0.1:7401
data=$(mktemp -d -t bourse-demo-XXXXXX)
node_pid=

stop_node() {
  if [ -n "$node_pid" ] && kill -0 "$node_pid" 2>/dev/null; then
    kill -TERM "$node_pid"
    wait "$node_pid" || true
  fi
  node_pid=
}
trap 'stop_node; rm -rf "$data" "$data.log"' EXIT

echo "== 1. The matching engine alone: exchange-core's 2020 mix, one thread, risk checks on"
"$bourse" bench engine --workload ec2020 --cycles 3 --rates 1000000

echo
echo "== 2. A durable node: journal with group commit, gRPC on $listen, metrics on $metrics"
"$bourse" serve --data "$data" --listen "$listen" --metrics-listen "$metrics" 2>"$data.log" &
node_pid=$!
for _ in $(seq 1 100); do
  if "$bourse" markets --node "$listen" >/dev/null 2>&1; then break; fi
  sleep 0.1
done

echo
echo "== 3. Load: 4 order-entry sessions, seeded order flow, acks only after fdatasync"
"$bourse" load --target "$listen" --seconds 5 --connections 4 2>/dev/null

echo
echo "== 4. The market it left behind"
"$bourse" markets --node "$listen"
"$bourse" book LOAD/USD --levels 5 --node "$listen"
"$bourse" balances 0 --node "$listen"
echo
echo "Some of the node's metrics:"
curl -s "http://$metrics/metrics" 2>/dev/null | grep -E '^bourse_(commands_applied_total|batches_total|durable_index|fsyncs_total|fsync_seconds\{quantile="0.5"\})' || true

if [ -t 0 ] && [ -t 1 ]; then
  echo
  echo "== 5. The exchange keeps running. In another terminal, try for example:"
  echo "   $bourse account-create --node $listen"
  echo "   $bourse deposit 0 USD 100000 --node $listen"
  echo "   $bourse place 0 LOAD/USD buy 10 --px 99990 --node $listen"
  echo "   $bourse trades LOAD/USD --node $listen"
  echo "Press Ctrl-C to stop it (it shuts down cleanly and the journal is replayed below)."
  trap 'echo' INT
  wait "$node_pid" || true
  trap - INT
fi

stop_node
echo
echo "== 6. Stopped cleanly; the node's last words, then a replay of its journal (same index and hash):"
grep -o 'core stopped.*' "$data.log" || true
"$bourse" replay "$data" 2>/dev/null
