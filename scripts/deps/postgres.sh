#!/usr/bin/env bash
# The history store's tests and benchmark start their own PostgreSQL server (initdb into
# a temporary directory, a free port): they need the server binaries, which the Debian
# `postgresql` package puts in /usr/lib/postgresql/<version>/bin (not on the PATH).
set -euo pipefail
source "$(dirname "$0")/lib-apt.bash"
if ! ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1; then
  # need_apt checks the PATH; initdb is not on it, so ask for a program that never is.
  need_apt bourse-postgres-server-missing postgresql
fi
