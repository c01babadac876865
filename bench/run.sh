#!/usr/bin/env bash
# hairpin proxy vs HAProxy 2.6 vs direct nginx on loopback (see bench/bench.py for the method),
# then the DNS tax: hairpin's Corefile lines in real CoreDNS at 1,000 and 20,000 names, cluster
# and external names, as ratios (see bench/dns_tax.py).
#   bench/run.sh            full run (builds the image's binary first, cargo profile `image`; ~4 minutes of wrk)
#   bench/run.sh --release  the same with the release build instead
#   bench/run.sh --smoke    one short round, to check the harness
#   ROUNDS=9 bench/run.sh   nine interleaved rounds (medians over them; default 5)
#   bench/run.sh --no-planner   without the planner figures (scale and memory_10k examples)
#   NO_DNS=1 bench/run.sh   without the DNS tax; DNS_ONLY=1 bench/run.sh: only the DNS tax
#   DNS_ARGS="--instructions --rounds 10" bench/run.sh   more arguments for bench/dns_tax.py (here:
#                           also callgrind's instructions per query, the figure the host's load
#                           does not move, and ten timing rounds instead of six)
# Not part of scripts/test.sh: it measures, it does not test.
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="$PATH:/usr/sbin:/sbin"
if [ -z "${DNS_ONLY:-}" ]; then
    python3 bench/bench.py "$@"
fi
if [ -z "${NO_DNS:-}" ]; then
    # DNS_ARGS: split on spaces on purpose (a list of flags).
    # shellcheck disable=SC2206
    dns_args=(${DNS_ARGS:-})
    for a in "$@"; do
        [ "$a" = --smoke ] && dns_args+=(--rounds 1 --duration 1 --ns 1000)
    done
    python3 bench/dns_tax.py "${dns_args[@]}"
fi
