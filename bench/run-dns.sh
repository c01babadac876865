#!/usr/bin/env bash
# The DNS tax: what hairpin's Corefile rules cost every cluster DNS query, in real CoreDNS
# (see bench/dns.py for the method). Needs dnsperf and ../shared/peers/coredns/coredns.
#   bench/run-dns.sh                      full run (~12 minutes)
#   bench/run-dns.sh --repeats 1 --duration 2 --ns 0,1000   a quick look
# Not part of scripts/test.sh: it measures, it does not test.
set -euo pipefail
cd "$(dirname "$0")/.."
exec python3 bench/dns.py "$@"
