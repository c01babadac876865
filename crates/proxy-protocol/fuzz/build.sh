#!/usr/bin/env bash
# Builds the fuzz targets on stable Rust (libFuzzer linked, no coverage instrumentation), so CI
# notices when they stop compiling. This crate is not a member of the main workspace (its own
# `[workspace]` and Cargo.lock).
#
# To fuzz for real (coverage-guided, with AddressSanitizer), from crates/proxy-protocol:
#   cargo install cargo-fuzz
#   RUSTC_BOOTSTRAP=1 cargo fuzz run -O decode -- -max_total_time=60
# Targets: decode, decode_v1, decode_v2, roundtrip.
set -euo pipefail
cd "$(dirname "$0")"
cargo build --locked --manifest-path Cargo.toml --bins "$@"
