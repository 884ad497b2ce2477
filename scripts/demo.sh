#!/usr/bin/env bash
# `make demo`: a living market to watch in a browser, then the engine and fairness
# benchmarks in brief.
#
# 1. `bourse demo`: a replicated exchange (three `bourse node` processes running Raft,
#    data in a temporary directory), four gateways with CloudEx's injected delays, 48
#    simulated traders (CloudEx's population: a market maker, 43 random traders, 4
#    mean-reversion traders over 10 stocks), the REST + WebSocket API and the dashboard
#    at https://127.0.0.1:8080/ (a kill button per node: watch the failover), and a
#    trading page at /trade.html (with the account's statement from a history sink that
#    follows the cluster into DATA/history.sqlite) and a day-trading page at
#    /daytrading.html. From a terminal it runs until Ctrl-C; otherwise for
#    DEMO_SECONDS (60). On the way out it replays every replica: same index, same hash.
# 2. The matching engine alone on exchange-core's 2020 mix, and the fairness benchmark.
#
# Everything is on loopback. DEMO_ARGS passes flags to `bourse demo` (e.g.
# "--scenario mixed --http 127.0.0.1:9090").
set -euo pipefail
cd "$(dirname "$0")/.."

bourse=./target/release/bourse
# The dashboard: npm packages and web/dist, built when missing or older than web/.
./scripts/deps/web.sh

echo "== 1. A living market: three nodes, four gateways, 48 simulated traders, the dashboard"
if [ -t 0 ] && [ -t 1 ]; then
  echo "   (Ctrl-C stops it; the benchmarks follow, and a second Ctrl-C skips them)"
  # Ctrl-C reaches bourse demo, which shuts down cleanly; this script goes on.
  trap 'true' INT
  # shellcheck disable=SC2086
  "$bourse" demo ${DEMO_ARGS:-}
  trap - INT
else
  # shellcheck disable=SC2086
  "$bourse" demo --seconds "${DEMO_SECONDS:-60}" ${DEMO_ARGS:-}
fi

echo
echo "== 2. The matching engine alone: exchange-core's 2020 mix, one thread, risk checks on"
"$bourse" bench engine --workload ec2020 --cycles 1 --rates 1000000

echo
echo "== 3. Fairness, measured: one node, four gateways with injected delays (CloudEx's"
echo "      0/400/200 µs spikes) and clock error, eight traders; without the sequencer and"
echo "      hold-and-release, then with them"
"$bourse" bench fairness --seconds 2 --d-s 0,1000 --d-h 0,3000 2>/dev/null
