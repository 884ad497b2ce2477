#!/usr/bin/env bash
# Alternates builds of `bourse` on the durable flat-out run and prints, per run,
# throughput and the CPU seconds of node and load driver (the host is noisy: compare
# builds within one invocation), as recorded in docs/BENCHMARKS.md.
# Usage: scripts/bench-node-ab.sh ROUNDS SECONDS BINARY...
set -euo pipefail
cd "$(dirname "$0")/.."
rounds=$1
seconds=$2
shift 2
cpu_ticks() { awk '{print $14 + $15}' "/proc/$1/stat"; }
for _ in $(seq 1 "$rounds"); do
  for bourse in "$@"; do
    data=$(mktemp -d -p "${BENCH_DIR:-$PWD/target}" bourse-bench-ab-XXXXXX)
    "$bourse" serve --data "$data" --listen 127.0.0.1:7410 --metrics-listen 127.0.0.1:7411 --history "${BOURSE_HISTORY:-none}" 2>"$data.log" &
    node=$!
    for _ in $(seq 1 100); do "$bourse" markets --node 127.0.0.1:7410 >/dev/null 2>&1 && break; sleep 0.1; done
    node_before=$(cpu_ticks $node)
    steal_before=$(awk '/^cpu /{print $9}' /proc/stat)
    # The driver's CPU time, exactly: python runs it and reads its children's usage.
    load_ticks=$(python3 -c "
import resource, subprocess, sys
with open(sys.argv[2], 'w') as out:
    subprocess.run([sys.argv[1], 'load', '--target', '127.0.0.1:7410', '--seconds', sys.argv[3], '--connections', '32',
                    '--batch', '128', '--json'], stdout=out, stderr=subprocess.DEVNULL, check=True)
usage = resource.getrusage(resource.RUSAGE_CHILDREN)
print(round((usage.ru_utime + usage.ru_stime) * 100))
" "$bourse" "$data.out" "$seconds")
    node_after=$(cpu_ticks $node)
    steal_after=$(awk '/^cpu /{print $9}' /proc/stat)
    kill -TERM $node
    wait $node 2>/dev/null || true
    python3 -c "
import json, sys
bourse, out, node, load, steal = sys.argv[1:]
d = json.loads(open(out).read().strip().splitlines()[-1])
node, load = int(node) / 100, int(load) / 100
print(f'{bourse:32s} {d[\"throughput\"]/1e3:7.0f} k/s  p50 {d[\"latency_us\"][\"p50\"]:6d} us  node {node:5.2f} s  load {load:5.2f} s  steal {steal} ticks')
" "$bourse" "$data.out" $((node_after - node_before)) "$load_ticks" $((steal_after - steal_before))
    rm -rf "$data" "$data.log" "$data.out"
  done
done
