#!/usr/bin/env bash
# Day-trading workload throughput, as recorded in docs/BENCHMARKS.md: for each workload
# given (default: every file of the course folder, the 2019 final included), a fresh
# `bourse serve` (its history sink on: the audit log, SQLite in the data directory), a
# gateway with the day-trading service (trigger poller on, emulator quotes), then
# `bourse workload` replays the file and prints its report (JSON last line).
# Usage: scripts/bench-daytrading.sh [WORKLOAD…]
# Environment: BOURSE_DT_LATENCY (emulator latency: none, fixed:MS or legacy; default
# none), BOURSE_DT_WINDOW (commands in flight per user; default 1, the spec's per-user
# mode), BOURSE_DT_STREAMS (driver streams; default 4), BOURSE_DT_SESSIONS (the service's
# upstream sessions; default 8), BOURSE_DT_DATA (where the node's data goes; default a
# temporary directory under /tmp).
set -euo pipefail
cd "$(dirname "$0")/.."
bourse=./target/release/bourse
folder=/work/shared/workloads/seng462
if [ $# -eq 0 ]; then
  set -- "$folder/1userWorkLoad" "$folder/2userWorkLoad" "$folder/10User_testWorkLoad" \
    "$folder/45User_testWorkLoad" "$folder/100User_testWorkLoad" "$folder/_final_workload_2019.tar.gz"
fi
latency=${BOURSE_DT_LATENCY:-none}
window=${BOURSE_DT_WINDOW:-1}
streams=${BOURSE_DT_STREAMS:-4}
sessions=${BOURSE_DT_SESSIONS:-8}
for workload in "$@"; do
  data=$(mktemp -d "${BOURSE_DT_DATA:-/tmp}/bourse-bench-dt-XXXXXX")
  "$bourse" serve --data "$data/node" --listen 127.0.0.1:7420 2>"$data/node.log" &
  node=$!
  for _ in $(seq 1 100); do "$bourse" markets --node 127.0.0.1:7420 >/dev/null 2>&1 && break; sleep 0.1; done
  "$bourse" gateway run --id 1 --open --listen 127.0.0.1:7421 --cluster 127.0.0.1:7420 --hold-us 0 \
    --rate-per-sec 10000000 --burst 1000000 --day-trading 127.0.0.1:7422 --dt-latency "$latency" \
    --dt-sessions "$sessions" --dt-history "$data/node/history.sqlite" --dt-dump-dir "$data/dumps" \
    >"$data/gateway.out" 2>"$data/gateway.log" &
  gateway=$!
  for _ in $(seq 1 100); do grep -q "day-trading service on" "$data/gateway.out" 2>/dev/null && break; sleep 0.1; done
  echo "== $(basename "$workload") (latency $latency, window $window, $(nproc) cores; uptime:$(uptime | sed 's/.*load average//'))"
  "$bourse" workload "$workload" --target 127.0.0.1:7422 --streams "$streams" --window "$window" --json \
    2> >(grep -v '^[0-9]*/[0-9]* commands' >&2) | tee "$data/report.json" | tail -1
  kill -TERM $gateway $node 2>/dev/null || true
  wait $gateway $node 2>/dev/null || true
  rm -rf "$data"
done
