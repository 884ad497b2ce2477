#!/usr/bin/env bash
# The FIX interop test (crates/fix/tests/quickfixj.rs) builds a QuickFIX/J client with
# Maven, offline. This resolves its artifacts (quickfixj-core 2.3.2 and its FIX 4.4
# messages, the build plugins) into the local repository once; afterwards it only checks.
set -euo pipefail
cd "$(dirname "$0")/../.."
source scripts/deps/lib-apt.bash
need_apt java openjdk-17-jdk-headless
need_apt mvn maven
pom=crates/fix/interop/pom.xml
stamp="${HOME}/.m2/bourse-fix-interop.$(sha256sum "$pom" | cut -c1-16)"
if [ -e "$stamp" ]; then
  exit 0
fi
build=$(mktemp -d)
trap 'rm -rf "$build"' EXIT
# A full offline-ready build: compile, package and copy the runtime classpath, exactly
# what the test later runs with -o.
mvn -B -q -f "$pom" -Dinterop.build="$build" package dependency:copy-dependencies dependency:resolve-plugins
mkdir -p "$(dirname "$stamp")"
touch "$stamp"
