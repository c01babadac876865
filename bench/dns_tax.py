#!/usr/bin/env python3
"""The DNS tax, as bench/run.sh prints it: what hairpin's Corefile lines cost a query that is
not hairpin's, in real CoreDNS, as the ratio of CoreDNS's CPU time per query with hairpin's
lines to the same Corefile without them.

For N = 1,000 and 20,000 hostnames (plus N/4 one-label wildcards, bench/dns.py's names) on
one PROXY load balancer, `hairpin plan`'s own rendering of the kubeadm Corefile
(crates/planner/examples/dns_corefile.rs: the steady state, the hairpin Service has its
ClusterIP), cache removed (every query pays), runs in the CoreDNS 1.12.2 test peer
(../shared/peers/coredns/coredns) pinned to core 1 (`taskset -c 1`, GOMAXPROCS=1), beside
the same Corefile without hairpin's block on the same core. The load generator
(crates/planner/examples/dns_load.rs, std only: no dnsperf needed) runs on core 0 with the
upstream (a second CoreDNS answering every external name) and keeps 50 queries in flight.

Mixes: `cluster` (names the `kubernetes` stand-in answers, 30 Services) and `external` (names
outside the cluster, forwarded to the upstream). Each round measures, per N and mix, the
Corefile without the block and the one with it back to back, in alternating order (ABBA), so
that the machine's load drifts over both alike; a round's ratio is with / without, and the
table gives the median ratio over the rounds and their range.

--instructions adds the figure that does not depend on the machine's load: instructions per
query counted by valgrind's callgrind in the same CoreDNS binary (queries one at a time after
a warm-up, with and without the block, over a window of --gc-cycles whole garbage-collector
cycles so that each query pays its share of the collector), the ratio of the two.

Usage: bench/dns_tax.py [--ns 1000,20000] [--rounds 6] [--duration 2] [--mixes cluster,external]
                        [--instructions [--gc-cycles 3]] [--corefiles DIR]
                        [--keep DIR] [--before DIR] [--no-lto]

--no-lto (or HAIRPIN_BENCH_NO_LTO=1 in the environment, also through bench/run.sh) builds the
renderer and the load generator in a release profile without fat LTO (target/bench-nolto): the
Corefiles are the planner's text whatever the profile, so the figures do not change, and the
build takes a few minutes instead of many on a loaded machine.
"""

import argparse
import os
import platform
import re
import socket
import statistics
import struct
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import dns as dnsbench  # noqa: E402  (bench/dns.py: names, Corefile localisation, upstream)

ROOT = dnsbench.ROOT
WINDOW = 50


def cpu_model():
    try:
        for line in open("/proc/cpuinfo"):
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


# --no-lto (or HAIRPIN_BENCH_NO_LTO=1): the release profile without fat LTO, in a profile of its
# own (target/bench-nolto, so that the LTO build in target/release stays as it is). What is
# measured does not depend on it: the Corefile text is the planner's whatever the profile, and
# the load generator runs on the other core. Fat LTO over one codegen unit takes many minutes
# on a loaded 2-core machine.
NO_LTO_PROFILE = [
    "--config", 'profile.bench-nolto.inherits="release"',
    "--config", 'profile.bench-nolto.lto="off"',
    "--config", "profile.bench-nolto.codegen-units=16",
    "--profile", "bench-nolto",
]


def build(render, no_lto=False):
    """The release build of the load generator (and of the renderer with `render`); their
    paths. `no_lto`: the same without fat LTO (NO_LTO_PROFILE)."""
    examples = ["dns_load"] + (["dns_corefile"] if render else [])
    profile = NO_LTO_PROFILE if no_lto else ["--release"]
    print(f"building {', '.join(examples)} (cargo build {' '.join(profile)} -p hairpin-planner)...",
          file=sys.stderr)
    cmd = ["cargo", "build", "-q", *profile, "-p", "hairpin-planner"]
    for ex in examples:
        cmd += ["--example", ex]
    subprocess.run(cmd, cwd=ROOT, check=True)
    target = os.environ.get("CARGO_TARGET_DIR", os.path.join(ROOT, "target"))
    ex = os.path.join(target, "bench-nolto" if no_lto else "release", "examples")
    return os.path.join(ex, "dns_corefile"), os.path.join(ex, "dns_load")


def render(renderer, base_path, n, work):
    exact, wild = dnsbench.names_for(n)
    names = os.path.join(work, f"names-{n}")
    dnsbench.write_queries(names, exact + wild)
    return subprocess.run([renderer, base_path, names, dnsbench.CLUSTER_IP], capture_output=True,
                          text=True, check=True).stdout


def load(loadgen, port, queries, duration, pid):
    """CoreDNS's CPU time per query (us) over one run of the load generator, and the run's
    completed queries."""
    hz = os.sysconf("SC_CLK_TCK")
    before = dnsbench.cpu_ticks(pid)
    out = subprocess.run(["taskset", "-c", "0", loadgen, str(port), queries, str(duration),
                          str(WINDOW)], capture_output=True, text=True, check=True).stdout
    after = dnsbench.cpu_ticks(pid)
    completed = int(re.search(r"completed (\d+)", out).group(1))
    lost = int(re.search(r"lost (\d+)", out).group(1))
    return (after - before) / hz / max(completed, 1) * 1e6, completed, lost


def query(name, qtype, qid):
    out = struct.pack(">HHHHHH", qid, 0x0100, 1, 0, 0, 0)
    for label in name.rstrip(".").split("."):
        out += bytes([len(label)]) + label.encode()
    return out + b"\x00" + struct.pack(">HH", qtype, 1)


def one_by_one(port, lines, count):
    """`count` queries from `lines` (`NAME TYPE`), each after the previous one's answer."""
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.settimeout(10)
    types = {"A": 1, "AAAA": 28}
    for i in range(count):
        name, qtype = lines[i % len(lines)].split()
        qid = i & 0xFFFF
        s.sendto(query(name, types[qtype], qid), ("127.0.0.1", port))
        try:
            while struct.unpack(">H", s.recv(4096)[:2])[0] != qid:
                pass
        except TimeoutError:
            pass
    s.close()


def gc_lines(log):
    """The garbage collector's cycles CoreDNS has logged so far (GODEBUG=gctrace=1)."""
    with open(log) as f:
        return sum(1 for line in f if line.startswith("gc "))


def instructions(args, text, records, upstream_port, mixes, work):
    """Instructions per query of each mix, counted by callgrind in CoreDNS, over a window of
    whole garbage-collector cycles: from the end of one cycle to the end of the
    `args.gc_cycles`-th after it (GODEBUG=gctrace=1 says when each ends). A cycle costs a few
    million instructions and comes every 1,000 to 5,000 queries depending on the live heap, so a
    window of a fixed number of queries counts zero, one or two cycles by chance; a window of
    whole cycles charges each query its share. Returns {mix: (instructions/query, queries)}."""
    port = dnsbench.free_port()
    out = os.path.join(work, f"callgrind-{port}.out")
    wrap = ["env", "GODEBUG=asyncpreemptoff=1,gctrace=1", "valgrind", "--tool=callgrind",
            "--instr-atstart=no", f"--callgrind-out-file={out}"]
    # Without `reload`: its re-read of the Corefile every 30 s would be charged to the few
    # queries valgrind's slowness lets through in that time (both Corefiles alike).
    text = "\n".join(line for line in text.splitlines() if line.strip() != "reload") + "\n"
    dns = dnsbench.CoreDns(args.coredns, dnsbench.localize(text, port, upstream_port, False), work,
                           1, records, wrap=wrap)
    log = dns.log.name
    result = {}
    try:
        dns.wait(port, 900)
        for mix, lines in mixes.items():
            # Warm-up: past the first cycles, which sweep what compiling the patterns left.
            one_by_one(port, lines, 300)
            warm = gc_lines(log)
            while gc_lines(log) < warm + 3:
                one_by_one(port, lines, 50)
            pid = str(dns.proc.pid)
            subprocess.run(["callgrind_control", "-i", "on", pid], capture_output=True)
            # Start at the end of a cycle.
            seen = gc_lines(log)
            while gc_lines(log) == seen:
                one_by_one(port, lines, 20)
            subprocess.run(["callgrind_control", "-z", pid], capture_output=True)
            start, sent = gc_lines(log), 0
            while gc_lines(log) < start + args.gc_cycles:
                one_by_one(port, lines[sent % len(lines):] + lines[:sent % len(lines)], 20)
                sent += 20
            subprocess.run(["callgrind_control", "-d", mix, pid], capture_output=True)
            subprocess.run(["callgrind_control", "-i", "off", pid], capture_output=True)
            dumps = sorted((f for f in os.listdir(work) if f.startswith(os.path.basename(out) + ".")),
                           key=lambda f: os.path.getmtime(os.path.join(work, f)))
            total = None
            for line in open(os.path.join(work, dumps[-1])):
                if line.startswith(("summary:", "totals:")):
                    total = int(line.split()[1])
            result[mix] = (total / sent, sent)
    finally:
        dns.stop()
    return result


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--ns", default="1000,20000")
    ap.add_argument("--rounds", type=int, default=6)
    ap.add_argument("--duration", type=float, default=2)
    ap.add_argument("--mixes", default="cluster,external")
    ap.add_argument("--instructions", action="store_true",
                    help="also count instructions per query with callgrind, over whole GC cycles")
    ap.add_argument("--gc-cycles", type=int, default=3, metavar="C",
                    help="with --instructions: the window spans C garbage-collector cycles")
    ap.add_argument("--corefile", default=dnsbench.find_up("shared/fixtures/corefiles/kubeadm.Corefile"))
    ap.add_argument("--coredns", default=dnsbench.find_up("shared/peers/coredns/coredns"))
    ap.add_argument("--corefiles", help="use the Corefiles a --keep run left in this directory "
                    "(Corefile-N) instead of rendering them: to measure an older rendering")
    ap.add_argument("--keep", help="keep the rendered Corefiles in this directory")
    ap.add_argument("--no-lto", action="store_true",
                    default=os.environ.get("HAIRPIN_BENCH_NO_LTO", "") not in ("", "0"),
                    help="build the renderer and the load generator without fat LTO (also "
                    "HAIRPIN_BENCH_NO_LTO=1): much faster to build; the Corefiles are the same")
    ap.add_argument("--before", help="also measure the Corefiles a --keep run of an older commit "
                    "left in this directory, in the same rounds: before and after side by side")
    args = ap.parse_args()
    if not args.coredns or not os.path.exists(args.coredns):
        print("DNS tax: skipped, the CoreDNS test peer (../shared/peers/coredns/coredns) is absent")
        return
    ns = [int(n) for n in args.ns.split(",") if int(n) > 0]
    mixes = args.mixes.split(",")
    work = tempfile.mkdtemp(prefix="hairpin-dns-tax-")
    # Counting alone (--rounds 0 --corefiles) needs no build.
    renderer, loadgen = build(not args.corefiles, args.no_lto) if args.rounds or not args.corefiles else (None, None)
    base = open(args.corefile).read()
    corefiles = {}
    for n in ns:
        if args.corefiles:
            corefiles[n] = open(os.path.join(args.corefiles, f"Corefile-{n}")).read()
        else:
            corefiles[n] = render(renderer, args.corefile, n, work)
        if args.keep:
            os.makedirs(args.keep, exist_ok=True)
            open(os.path.join(args.keep, f"Corefile-{n}"), "w").write(corefiles[n])
    records = [(f"svc{k}.ns{k % 5}.svc.cluster.local", f"10.96.1.{k + 1}") for k in range(30)]
    # The hairpin Service the rules name resolves like any Service.
    rendered = "".join(corefiles.values())
    if args.before:
        rendered += "".join(open(os.path.join(args.before, f)).read() for f in os.listdir(args.before)
                            if f.startswith("Corefile-"))
    targets = set(re.findall(r"rewrite stop name (?:exact|regex) \S+ (\S+)", rendered))
    hairpin = [(t, dnsbench.CLUSTER_IP) for t in sorted(targets)]
    lines = {
        "cluster": [f"{n} A" for n, _ in records],
        "external": [f"www.site{k}.com {t}" for k in range(100) for t in ("A", "AAAA")],
    }
    paths = {}
    for mix in mixes:
        paths[mix] = os.path.join(work, f"q-{mix}")
        dnsbench.write_queries(paths[mix], lines[mix])

    load_before = os.getloadavg()
    upstream_port = dnsbench.free_port()
    upstream = dnsbench.CoreDns(args.coredns, dnsbench.UPSTREAM.format(port=upstream_port), work, 0, [])
    upstream.wait(upstream_port)
    # 0 (without the block), each N ("now") and with --before each N of the older rendering.
    texts = {(0, "now"): base}
    for n in ns:
        texts[(n, "now")] = corefiles[n]
        if args.before:
            texts[(n, "before")] = open(os.path.join(args.before, f"Corefile-{n}")).read()
    tags = ["before", "now"] if args.before else ["now"]
    servers = {}  # (N, tag) -> (CoreDns, port)
    cells = {}  # (n, tag, mix) -> [(without, with)]
    counted = {}
    try:
        for key, text in texts.items() if args.rounds else ():
            port = dnsbench.free_port()
            dns = dnsbench.CoreDns(args.coredns, dnsbench.localize(text, port, upstream_port, False),
                                   work, 1, records + hairpin)
            dns.wait(port)
            servers[key] = (dns, port)
        for dns, port in servers.values():
            for mix in mixes:
                load(loadgen, port, paths[mix], 0.5, dns.proc.pid)  # warm-up
        for r in range(args.rounds):
            for n in ns:
                for mix in mixes:
                    # Without, then each rendering, in alternating order (ABBA).
                    order = [(0, "now")] + [(n, t) for t in tags]
                    order = order if r % 2 == 0 else order[::-1]
                    got = {}
                    for key in order:
                        dns, port = servers[key]
                        cpu, done, lost = load(loadgen, port, paths[mix], args.duration, dns.proc.pid)
                        got[key] = cpu
                        print(f"round {r + 1} N={key[0]} {key[1]} {mix}: {cpu:.2f} us/q ({done} answered, "
                              f"{lost} lost)", file=sys.stderr)
                    for t in tags:
                        cells.setdefault((n, t, mix), []).append((got[(0, "now")], got[(n, t)]))
    finally:
        for dns, _ in servers.values():
            dns.stop()
        if args.instructions:
            try:
                qs = {mix: lines[mix] for mix in mixes}
                for key, text in texts.items():
                    counted[key] = instructions(args, text, records + hairpin, upstream_port, qs, work)
                    print(f"instructions {key}: {counted[key]}", file=sys.stderr)
            finally:
                upstream.stop()
        else:
            upstream.stop()

    load_after = os.getloadavg()
    print()
    print("## DNS tax (hairpin's Corefile lines against the same Corefile without them)")
    print()
    print(f"CPU: {cpu_model()}; kernel {platform.release()}; CoreDNS 1.12.2 on one core "
          f"(cache off), kubeadm Corefile; load average {load_before[0]:.2f} before, "
          f"{load_after[0]:.2f} after.")
    print(f"{args.rounds} interleaved rounds (ABBA) of {args.duration:g} s per cell; "
          "ratio = CoreDNS CPU time per query with / without.")
    print()
    head = "| N | rendering | Corefile KiB | mix | without us/q | with us/q | ratio (median) | range |"
    if counted:
        head += " instructions/q without | with | ratio |"
    print(head)
    print("|" + "---|" * (head.count("|") - 1))
    for n in ns:
        for mix in mixes:
            for t in tags:
                pairs = cells.get((n, t, mix), [])
                if not pairs and not counted:
                    continue
                row = f"| {n:,} | {t} | {len(texts[(n, t)]) / 1024:.0f} | {mix} | "
                if pairs:
                    ratios = sorted(w / o for o, w in pairs)
                    row += (f"{statistics.median(o for o, _ in pairs):.2f} | "
                            f"{statistics.median(w for _, w in pairs):.2f} | "
                            f"{statistics.median(ratios):.2f}x | {ratios[0]:.2f}-{ratios[-1]:.2f} |")
                else:
                    row += "- | - | - | - |"
                if counted:
                    io, iw = counted[(0, "now")][mix][0], counted[(n, t)][mix][0]
                    row += f" {io:,.0f} | {iw:,.0f} | {iw / io:.2f}x |"
                print(row)


if __name__ == "__main__":
    main()
