#!/usr/bin/env bash
# Ack latency while a snapshot prunes a few hundred megabytes of log, as recorded in
# docs/BENCHMARKS.md: a fresh node that snapshots every 4 M commands is filled flat out
# for 8 s (one snapshot), then driven open loop at RATE for 12 s (the second snapshot,
# which prunes what the first covers). Prints throughput and ack latency in ms.
# Usage: scripts/bench-prune.sh [BOURSE_BINARY] [RATE]
set -euo pipefail
# Loopback benchmarks of the node itself: plaintext gRPC (`serve` runs mutual TLS by
# default since issue 23; builds before it know no --plaintext and serve plaintext).
plaintext() { "$1" serve --help 2>/dev/null | grep -q -- '--plaintext' && echo --plaintext || true; }
cd "$(dirname "$0")/.."
bourse=${1:-./target/release/bourse}
rate=${2:-350000}
data=$(mktemp -d -p "${BENCH_DIR:-$PWD/target}" bourse-bench-prune-XXXXXX)
"$bourse" serve $(plaintext "$bourse") --data "$data" --listen 127.0.0.1:7410 --metrics-listen 127.0.0.1:7411 --history "${BOURSE_HISTORY:-none}" \
  --snapshot-every-commands 4000000 2>"$data.log" &
node=$!
trap 'kill -TERM $node 2>/dev/null; wait $node 2>/dev/null; rm -rf "$data" "$data.log"' EXIT
for _ in $(seq 1 100); do "$bourse" markets --node 127.0.0.1:7410 >/dev/null 2>&1 && break; sleep 0.1; done
"$bourse" load --target 127.0.0.1:7410 --seconds 8 --connections 32 --batch 128 >/dev/null 2>&1
out=$("$bourse" load --target 127.0.0.1:7410 --seconds 12 --connections 32 --batch 128 --rate "$rate" --json 2>/dev/null | tail -1)
python3 -c "
import json, sys
d = json.loads(sys.argv[1]); l = d['latency_us']
print(f\"{sys.argv[2]}: {d['throughput']:.0f}/s  ack p50 {l['p50']/1e3:.1f}  p99 {l['p99']/1e3:.1f}  p99.9 {l['p999']/1e3:.1f}  max {l['max']/1e3:.1f} ms\")
" "$out" "$bourse"
echo "snapshots: $(grep -c 'snapshot written' "$data.log")"
