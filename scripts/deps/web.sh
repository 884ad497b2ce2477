#!/usr/bin/env bash
# The browser UI (web/): npm packages from package-lock.json, then web/dist built, each
# only when missing or older than what it is made from. `make test` runs this (the
# dashboard's end-to-end test serves web/dist and drives it with playwright-core), and
# so does `make demo`.
set -euo pipefail
cd "$(dirname "$0")/../../web"
command -v npm >/dev/null || { echo "web.sh: npm (Node.js 20.19 or later) is needed" >&2; exit 1; }
if [ ! -d node_modules ] || [ package-lock.json -nt node_modules/.package-lock.json ]; then
  npm ci --no-audit --no-fund
fi
newest_source=$(find index.html trade.html daytrading.html vite.config.ts tsconfig.json openapi.json package-lock.json src -newer dist/index.html \
  -not -name schema.d.ts 2>/dev/null | head -1 || true)
if [ ! -f dist/index.html ] || [ -n "$newest_source" ]; then
  npm run build
fi
