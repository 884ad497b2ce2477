#!/usr/bin/env bash
# Alternates builds of `bourse`, and history settings, on the durable flat-out run and
# prints, per run, throughput, ack latency and the CPU seconds of node and load driver
# (the host is noisy: compare within one invocation), as recorded in docs/BENCHMARKS.md.
# Usage: scripts/bench-node-ab.sh ROUNDS SECONDS BINARY...
# Environment: BOURSE_HISTORIES, the history settings to alternate within each round
# (default "none"): `none` (--history none), `default` (no --history flag: the node's
# own SQLite history, as `bourse serve` runs by default), `normal` (the same at ordinary
# CPU priority: --history-priority normal) or a URL. With a history, the
# run also reports how far the history was behind when the load stopped and how long
# it took to catch up.
set -euo pipefail
# Loopback benchmarks of the node itself: plaintext gRPC (`serve` runs mutual TLS by
# default since issue 23; builds before it know no --plaintext and serve plaintext).
plaintext() { "$1" serve --help 2>/dev/null | grep -q -- '--plaintext' && echo --plaintext || true; }
cd "$(dirname "$0")/.."
rounds=$1
seconds=$2
shift 2
cpu_ticks() { awk '{print $14 + $15}' "/proc/$1/stat"; }
metric() { curl -s http://127.0.0.1:7411/metrics | awk -v name="$1" '$1 == name {print $2}'; }
for _ in $(seq 1 "$rounds"); do
  for bourse in "$@"; do
    for history in ${BOURSE_HISTORIES:-none}; do
      data=$(mktemp -d -p "${BENCH_DIR:-$PWD/target}" bourse-bench-ab-XXXXXX)
      flags=(--history "$history")
      [ "$history" = default ] && flags=()
      [ "$history" = normal ] && flags=(--history-priority normal)
      "$bourse" serve $(plaintext "$bourse") --data "$data" --listen 127.0.0.1:7410 --metrics-listen 127.0.0.1:7411 "${flags[@]}" 2>"$data.log" &
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
      catch_up=""
      if [ "$history" != none ]; then
        lag=$(metric bourse_history_lag_entries)
        started=$(date +%s.%N)
        while [ "$(metric bourse_history_lag_entries)" != 0 ]; do sleep 0.05; done
        catch_up=$(python3 -c "import sys; print(f'history lag at the end {int(sys.argv[1]):>9,} entries, caught up in {float(sys.argv[2]) - float(sys.argv[3]):5.1f} s')" "${lag:-0}" "$(date +%s.%N)" "$started")
      fi
      kill -TERM $node
      wait $node 2>/dev/null || true
      python3 -c "
import json, sys
bourse, history, out, node, load, steal, catch_up = sys.argv[1:]
d = json.loads(open(out).read().strip().splitlines()[-1])
node, load = int(node) / 100, int(load) / 100
l = d['latency_us']
print(f'{bourse:28s} {history:8s} {d[\"throughput\"]/1e3:7.0f} k/s  p50 {l[\"p50\"]:6d} us  p99 {l[\"p99\"]:6d} us  node {node:5.2f} s  load {load:5.2f} s  steal {steal} ticks  {catch_up}')
" "$bourse" "$history" "$data.out" $((node_after - node_before)) "$load_ticks" $((steal_after - steal_before)) "$catch_up"
      rm -rf "$data" "$data.log" "$data.out"
    done
  done
done
