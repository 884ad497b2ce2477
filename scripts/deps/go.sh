#!/usr/bin/env bash
# The cluster tests check their clients' history for linearizability with Porcupine, a
# Go module (tools/lincheck): a Go toolchain (Debian's golang-go when none is on the
# PATH or in /usr/local/go) and the module, fetched from the Go module proxy.
set -euo pipefail
source "$(dirname "$0")/lib-apt.bash"
[ -x /usr/local/go/bin/go ] && export PATH="$PATH:/usr/local/go/bin"
need_apt go golang-go
cd "$(dirname "$0")/../../tools/lincheck"
go mod download
