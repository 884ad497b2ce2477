#!/usr/bin/env bash
# The day-trading tests (crates/daytrading/tests) validate every DUMPLOG output against
# the project's copy of the audit log schema with xmllint (Debian's libxml2-utils).
set -euo pipefail
source "$(dirname "$0")/lib-apt.bash"
need_apt xmllint libxml2-utils
