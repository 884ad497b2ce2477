#!/usr/bin/env bash
# Day-trading workload throughput, as recorded in docs/BENCHMARKS.md: for each workload
# given (default: every file of the course folder, the 2019 final included), a fresh
# `bourse serve` (its history sink on: the audit log, SQLite in the data directory) with
# a gateway and the day-trading service (trigger poller on, emulator quotes) in its
# process, then `bourse workload` replays the file and prints its report (JSON last line).
# Usage: scripts/bench-daytrading.sh [WORKLOAD…]
# Environment: BOURSE_DT_WORKLOADS (the course folder the default list is read from;
# default ../shared/workloads/seng462, beside the project), BOURSE_DT_LATENCY (emulator latency: none, fixed:MS or legacy; default
# none), BOURSE_DT_WINDOW (commands in flight per user; default 1, the spec's per-user
# mode), BOURSE_DT_STREAMS (driver streams; default 4), BOURSE_DT_SESSIONS (the service's
# upstream sessions; default 64), BOURSE_DT_DATA (where the node's data goes; default a
# temporary directory under /tmp), BOURSE_BIN (the binary; default ./target/release/bourse), BOURSE_DT_PORT (the first of the
# three loopback ports the node, gateway and service listen on; default 7420),
# BOURSE_DT_LAYOUT (one: the gateway and service in the node's process, the default;
# two: in a `bourse gateway run` process of their own, linked to the node over gRPC).
set -euo pipefail
# Loopback benchmarks of the node itself: plaintext gRPC (`serve` runs mutual TLS by
# default since issue 23; builds before it know no --plaintext and serve plaintext).
plaintext() { "$1" serve --help 2>/dev/null | grep -q -- '--plaintext' && echo --plaintext || true; }
cd "$(dirname "$0")/.."
bourse=${BOURSE_BIN:-./target/release/bourse}
folder=${BOURSE_DT_WORKLOADS:-../shared/workloads/seng462}
if [ $# -eq 0 ]; then
  [ -d "$folder" ] || { echo "no workload folder at $folder (set BOURSE_DT_WORKLOADS, or name the files)" >&2; exit 2; }
  set -- "$folder/1userWorkLoad" "$folder/2userWorkLoad" "$folder/10User_testWorkLoad" \
    "$folder/45User_testWorkLoad" "$folder/100User_testWorkLoad" "$folder/_final_workload_2019.tar.gz"
fi
latency=${BOURSE_DT_LATENCY:-none}
window=${BOURSE_DT_WINDOW:-1}
streams=${BOURSE_DT_STREAMS:-4}
sessions=${BOURSE_DT_SESSIONS:-64}
port=${BOURSE_DT_PORT:-7420}
layout=${BOURSE_DT_LAYOUT:-one}
node_at=127.0.0.1:$port gateway_at=127.0.0.1:$((port + 1)) service_at=127.0.0.1:$((port + 2))
cpu_ticks() { awk '{print $14 + $15}' "/proc/$1/stat"; }
# CPU ticks (1/100 s) of a process's threads, summed by thread name: "name ticks" lines.
thread_ticks() {
  for t in /proc/"$1"/task/*; do
    printf '%s %s\n' "$(tr ' ' '_' <"$t/comm")" "$(awk '{print $14 + $15}' "$t/stat" 2>/dev/null || echo 0)"
  done | awk '{s[$1] += $2} END {for (k in s) print k, s[k]}' | sort
}
# What changed between two thread_ticks listings, largest first, in seconds.
thread_delta() {
  join -a 2 -e 0 -o 0,1.2,2.2 "$1" "$2" | awk '$3 - $2 > 0 {printf "%s %.2f\n", $1, ($3 - $2) / 100}' | sort -k2 -rn | head -8 | tr '\n' ' '
}
for workload in "$@"; do
  data=$(mktemp -d "${BOURSE_DT_DATA:-/tmp}/bourse-bench-dt-XXXXXX")
  service_flags=(--day-trading "$service_at" --dt-latency "$latency" --dt-sessions "$sessions"
    --dt-history "$data/node/history.sqlite" --dt-dump-dir "$data/dumps")
  if [ "$layout" = one ]; then
    "$bourse" serve $(plaintext "$bourse") --data "$data/node" --listen "$node_at" --gateway "$gateway_at" --open --hold-us 0 \
      "${service_flags[@]}" >"$data/gateway.out" 2>"$data/node.log" &
    node=$!
    gateway=$node
  else
    "$bourse" serve $(plaintext "$bourse") --data "$data/node" --listen "$node_at" 2>"$data/node.log" &
    node=$!
    for _ in $(seq 1 100); do "$bourse" markets --node "$node_at" >/dev/null 2>&1 && break; sleep 0.1; done
    "$bourse" gateway run --id 1 --open --listen "$gateway_at" --cluster "$node_at" --hold-us 0 \
      --rate-per-sec 10000000 --burst 1000000 "${service_flags[@]}" >"$data/gateway.out" 2>"$data/gateway.log" &
    gateway=$!
  fi
  for _ in $(seq 1 100); do grep -q "day-trading service on" "$data/gateway.out" 2>/dev/null && break; sleep 0.1; done
  echo "== $(basename "$workload") (layout $layout, latency $latency, window $window, $(nproc) cores; uptime:$(uptime | sed 's/.*load average//'))"
  node_before=$(cpu_ticks $node)
  gateway_before=$(cpu_ticks $gateway)
  thread_ticks $node >"$data/node.threads.0"
  thread_ticks $gateway >"$data/gateway.threads.0"
  /usr/bin/time -f '%U %S' -o "$data/driver.cpu" "$bourse" workload "$workload" --target "$service_at" \
    --streams "$streams" --window "$window" --json 2> >(grep -v '^[0-9]*/[0-9]* commands' >&2) \
    | tee "$data/report.json" | tail -1
  thread_ticks $node >"$data/node.threads.1"
  thread_ticks $gateway >"$data/gateway.threads.1"
  driver_cpu=$(awk '{print $1 + $2}' "$data/driver.cpu")
  if [ "$layout" = one ]; then
    echo "threads: $(thread_delta "$data/node.threads.0" "$data/node.threads.1")"
    echo "cpu seconds: node+sink+gateway+service $(( ($(cpu_ticks $node) - node_before) ))e-2, driver $driver_cpu"
  else
    echo "node threads: $(thread_delta "$data/node.threads.0" "$data/node.threads.1")"
    echo "gateway threads: $(thread_delta "$data/gateway.threads.0" "$data/gateway.threads.1")"
    # CPU seconds each process spent during the run (the node's includes its history sink).
    echo "cpu seconds: node+sink $(( ($(cpu_ticks $node) - node_before) ))e-2, gateway+service $(( ($(cpu_ticks $gateway) - gateway_before) ))e-2, driver $driver_cpu"
  fi
  kill -TERM $gateway $node 2>/dev/null || true
  wait $gateway $node 2>/dev/null || true
  rm -rf "$data"
done
