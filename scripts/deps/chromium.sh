#!/usr/bin/env bash
# The dashboard's end-to-end test (crates/bourse/tests/demo.rs) drives Debian's
# Chromium headless through playwright-core (browser downloads are blocked here, so
# Playwright's own browsers are never fetched).
set -euo pipefail
source "$(dirname "$0")/lib-apt.bash"
need_apt chromium chromium
