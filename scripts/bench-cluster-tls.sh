#!/usr/bin/env bash
# The 3-node cluster's durable throughput with both node ports over mutual TLS (what
# `bourse cluster up` runs by default: Raft between the members, gRPC from the load
# driver, which dials as gateway:1 from the cluster's CA) and in plaintext
# (`--plaintext`), alternated in one sitting, as recorded in docs/BENCHMARKS.md.
# Usage: scripts/bench-cluster-tls.sh [ROUNDS] [SECONDS] [CONNECTIONS]
set -euo pipefail
cd "$(dirname "$0")/.."
rounds=${1:-3}
seconds=${2:-8}
connections=${3:-32}
bourse=${BOURSE_BIN:-./target/release/bourse}
nodes=127.0.0.1:7401,127.0.0.1:7402,127.0.0.1:7403
for _ in $(seq 1 "$rounds"); do
  for mode in tls plaintext; do
    data=$(mktemp -d -p "${BENCH_DIR:-$PWD/target}" bourse-bench-tls-XXXXXX)
    flags=()
    client=()
    [ "$mode" = plaintext ] && flags=(--plaintext)
    [ "$mode" = tls ] && client=(--pki "$data/pki" --as gateway:1)
    "$bourse" cluster up --nodes 3 --data "$data" "${flags[@]}" >/dev/null
    out=$("$bourse" "${client[@]}" load --target "$nodes" --seconds "$seconds" --connections "$connections" --batch 128 --json 2>/dev/null | tail -1)
    "$bourse" cluster down --data "$data" >/dev/null
    rm -rf "$data"
    python3 -c "
import json, sys
d = json.loads(sys.argv[2]); l = d['latency_us']
print(f'{sys.argv[1]:10s} {d[\"throughput\"]/1e3:7.0f} k/s  p50 {l[\"p50\"]:6d} us  p99 {l[\"p99\"]:6d} us')
" "$mode" "$out"
  done
done
