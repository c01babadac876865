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
# Every test that returns without checking anything appends a line to the skip log
# (crates/testkit/src/skip.rs; under CI=true a missing peer, privilege or fixture fails the test
# instead). The run ends with how many skipped and why, then the whole run's counts in cargo's
# `test result:` form (scripts/test-summary.py), last, also when a test failed.
work=$(mktemp -d)
export HAIRPIN_TEST_SKIP_LOG="$work/skips"
: >"$HAIRPIN_TEST_SKIP_LOG"
trap 'status=$?; python3 scripts/test-summary.py "$work/output" "$HAIRPIN_TEST_SKIP_LOG" "$status"; rm -rf "$work"' EXIT
cargo test --locked --all-targets "$@" | tee -a "$work/output"
cargo test --locked --doc "$@" | tee -a "$work/output"
