#!/usr/bin/env bash
# What `make test` needs beyond Cargo: every script in scripts/deps/ runs in name order
# and installs its part if it is missing (Debian packages, npm, Maven artifacts). Each
# is idempotent and quick when everything is already there, so `make test` on a fresh
# machine and on a warm one run the same commands.
set -euo pipefail
cd "$(dirname "$0")/.."
for script in scripts/deps/*.sh; do
  [ -e "$script" ] || continue
  echo "deps: $script"
  bash "$script"
done
