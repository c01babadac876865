#!/usr/bin/env bash
# The whole test suite: unit, property, golden, interop (real nginx and HAProxy on loopback),
# fake-API-server controller tests and the network-namespace lab. Installs missing system
# packages first. Extra arguments go to `cargo test` (e.g. `scripts/test.sh -p hairpin-planner`).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-test-deps.sh
export PATH="$PATH:/usr/sbin:/sbin"
if [ $# -eq 0 ]; then
  set -- --workspace
fi
cargo test --locked --all-targets "$@"
cargo test --locked --doc "$@"
