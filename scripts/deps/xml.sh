#!/usr/bin/env bash
# The XML protocol's interop test (crates/xml/tests/python_peer.rs) runs a client
# written with Python 3's standard library only: it needs python3, nothing from PyPI.
set -euo pipefail
source "$(dirname "$0")/lib-apt.bash"
need_apt python3 python3
