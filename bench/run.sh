#!/usr/bin/env bash
# hairpin proxy vs HAProxy 2.6 vs direct nginx on loopback (see bench/bench.py for the method).
#   bench/run.sh            full run (builds the image's binary first, cargo profile `image`; ~4 minutes of wrk)
#   bench/run.sh --release  the same with the release build instead
#   bench/run.sh --smoke    one short round, to check the harness
#   ROUNDS=9 bench/run.sh   nine interleaved rounds (medians over them; default 5)
#   bench/run.sh --no-planner   without the planner figures (scale and memory_10k examples)
# Not part of scripts/test.sh: it measures, it does not test.
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="$PATH:/usr/sbin:/sbin"
exec python3 bench/bench.py "$@"
