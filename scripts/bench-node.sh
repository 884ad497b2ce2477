#!/usr/bin/env bash
# Durable throughput and ack latency of one node over loopback, as recorded in
# docs/BENCHMARKS.md: a fresh node, `bourse load` flat out, then open loop at half the
# rate it reached, then the node's own fdatasync figures from /metrics.
# Usage: scripts/bench-node.sh [CONNECTIONS] [SECONDS]
# The node runs without its history sink (figures comparable with earlier ones);
# BOURSE_HISTORY=sqlite measures it with one, in the fresh data directory (serve's
# default); BOURSE_HISTORY=postgres://… writes into that database, which must be empty
# (a history ahead of the fresh node's log is refused).
set -euo pipefail
# Loopback benchmarks of the node itself: plaintext gRPC (`serve` runs mutual TLS by
# default since issue 23; builds before it know no --plaintext and serve plaintext).
plaintext() { "$1" serve --help 2>/dev/null | grep -q -- '--plaintext' && echo --plaintext || true; }
cd "$(dirname "$0")/.."
connections=${1:-32}
seconds=${2:-10}
bourse=./target/release/bourse
data=$(mktemp -d -t bourse-bench-node-XXXXXX)
history=(--history "${BOURSE_HISTORY:-none}")
[ "${BOURSE_HISTORY:-}" = sqlite ] && history=()
"$bourse" serve $(plaintext "$bourse") --data "$data" --listen 127.0.0.1:7410 --metrics-listen 127.0.0.1:7411 "${history[@]}" 2>"$data.log" &
node=$!
trap 'kill -TERM $node 2>/dev/null; wait $node 2>/dev/null; rm -rf "$data" "$data.log"' EXIT
for _ in $(seq 1 100); do "$bourse" markets --node 127.0.0.1:7410 >/dev/null 2>&1 && break; sleep 0.1; done

flat=$("$bourse" load --target 127.0.0.1:7410 --seconds "$seconds" --connections "$connections" --batch 128 --json 2>/dev/null | tail -1)
echo "flat out, $connections connections: $flat"
half=$(python3 -c "import json,sys; print(int(json.loads(sys.argv[1])['throughput'] / 2))" "$flat")
open=$("$bourse" load --target 127.0.0.1:7410 --seconds "$seconds" --connections "$connections" --batch 128 --rate "$half" --json 2>/dev/null | tail -1)
echo "open loop at $half/s: $open"
echo "node metrics after both runs:"
curl -s http://127.0.0.1:7411/metrics | grep -E '^bourse_(fsync_seconds|fsyncs_total|group_commit_entries|batch_commands)' | grep -v '_count'
echo "node resident memory: $(ps -o rss= -p $node) KiB"
