#!/usr/bin/env python3
"""What hairpin's Corefile rules cost every cluster DNS query ("the DNS tax"), in real CoreDNS.

For N = 0, 1, 100, 1,000, 5,000 and 20,000 hostnames (plus N/4 one-label wildcards) on one PROXY
load balancer, `hairpin plan`'s own rendering (crates/planner/examples/dns_corefile.rs: the
steady state, the hairpin Service has its ClusterIP) of the kubeadm Corefile
(../shared/fixtures/corefiles/kubeadm.Corefile) runs in the CoreDNS 1.12.2 test peer
(../shared/peers/coredns/coredns), pinned to one core (`taskset -c 1`, GOMAXPROCS=1), with
the cache removed (every query pays: the uncached cost) and with kubeadm's cache (`cache 30`,
which does not cache cluster.local). dnsperf (on the other core) saturates it with one query
mix at a time:

  cluster   names the kubernetes stand-in answers (30 Services)
  nxdomain  search-path expansions of external names (x.com.default.svc.cluster.local...)
  external  names outside the cluster, forwarded to a second local CoreDNS (the upstream,
            on the other core; nothing leaves the machine)
  exact     hairpinned exact names
  wildcard  names under hairpinned wildcards

and the script prints, per mix, CoreDNS's CPU time per query (utime + stime from
/proc/<pid>/stat over the run, divided by the queries answered), the queries per second and
the p99 latency (dnsperf -v, in a second run at --rate: by default half the max qps the
Corefile without hairpin's rules reached with that mix in the same repeat, a load at which the
queue, and so the latency, grows with the cost per query; at saturation the latency is only the
queue's, and at a few thousand queries/s only the machine's wakeups), each as a ratio to N = 0
with the same mix; the hairpinned mixes are compared with the `cluster` mix at N = 0 (a
kubernetes-plugin answer) and, in a table of their own, with the `cluster` mix at the same N
(a kubernetes-plugin answer in the same Corefile). Medians of
--repeats runs; every N runs at once (idle when not asked), and each repeat measures
them all in turn, so that the machine's load drifts over all of them alike.

Usage: bench/run-dns.sh [--ns 0,1,100,1000,5000,20000] [--repeats 3] [--duration 3] [--rate 50%]
                        [--mixes cluster,nxdomain,external,exact,wildcard] [--cache off,on]
                        [--corefile PATH] [--keep DIR]
Run by hand (not in CI). The stand-in kubernetes plugin reads its records file on every
lookup, so the records stay few (see the peer's README).
"""

import argparse
import os
import re
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CLUSTER_IP = "10.96.200.10"
WORDS = ["api", "app", "auth", "www", "shop", "blog", "mail", "cdn", "docs", "status",
         "portal", "admin", "grafana", "git", "ci", "login", "pay", "search", "static", "m"]
TLDS = ["com", "de", "io", "net", "org"]


def find_up(rel):
    d = ROOT
    while True:
        p = os.path.join(d, rel)
        if os.path.exists(p):
            return p
        if os.path.dirname(d) == d:
            return None
        d = os.path.dirname(d)


def names_for(n):
    """N exact names (20 first labels per domain) and N/4 one-label wildcards."""
    exact = [f"{WORDS[i % 20]}.acme{i // 20}.{TLDS[(i // 20) % 5]}" for i in range(n)]
    wild = [f"*.env{j}.tenant{j // 4}.{TLDS[j % 5]}" for j in range(n // 4)]
    return exact, wild


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    p = s.getsockname()[1]
    s.close()
    return p


DROPPED = {"health", "ready", "prometheus", "loop", "bind"}


def localize(corefile, port, upstream, cache):
    """The Corefile on 127.0.0.1:port, forwarding to the upstream; cache removed unless `cache`.
    (The same rewriting as hairpin_testkit::coredns::localize.)"""
    out, depth, skipping = [], 0, None
    for line in corefile.splitlines():
        code = line.split("#", 1)[0] if '"' not in line else line
        opens, closes = code.count("{"), code.count("}")
        t = code.strip()
        first = t.split()[0] if t else ""
        after = depth + opens - closes
        if skipping is not None:
            depth = after
            if depth <= skipping:
                skipping = None
            continue
        if depth == 0 and opens and not t.startswith(("{", "(")) and first != "import":
            keys = []
            for k in t.rstrip("{").split():
                for k in filter(None, k.split(",")):
                    zone = k.rsplit(":", 1)[0] if ":" in k.split("://")[-1] else k
                    keys.append(f"{zone}:{port}")
            out.append(" ".join(keys) + " {")
            out.append("    bind 127.0.0.1")
            depth = after
            continue
        if depth == 1 and (first in DROPPED or (first == "cache" and not cache)):
            if after > depth:
                skipping = depth
            depth = after
            continue
        if depth == 1 and first == "forward":
            frm = t.split()[1]
            indent = line[: len(line) - len(line.lstrip())]
            out.append(f"{indent}forward {frm} 127.0.0.1:{upstream}" + (" {" if opens > closes else ""))
            depth = after
            continue
        out.append(line)
        depth = after
    return "\n".join(out) + "\n"


UPSTREAM = """.:{port} {{
    bind 127.0.0.1
    template IN ANY invalid {{
        rcode NXDOMAIN
    }}
    template IN A {{
        answer "{{{{ .Name }}}} 60 IN A 192.0.2.53"
    }}
    template IN AAAA {{
        answer "{{{{ .Name }}}} 60 IN AAAA 2001:db8::53"
    }}
}}
"""


def cpu_ticks(pid):
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return int(fields[11]) + int(fields[12])  # utime, stime (fields 14 and 15)


class CoreDns:
    def __init__(self, binary, corefile, workdir, cpu, records, wrap=()):
        self.dir = tempfile.mkdtemp(prefix="coredns-", dir=workdir)
        with open(os.path.join(self.dir, "Corefile"), "w") as f:
            f.write(corefile)
        with open(os.path.join(self.dir, "records"), "w") as f:
            f.write("".join(f"{n} {ip}\n" for n, ip in records))
        env = dict(os.environ, GOMAXPROCS="1", HP_RECORDS=os.path.join(self.dir, "records"))
        if wrap:
            # valgrind cannot follow Go's asynchronous preemption signals
            env["GODEBUG"] = "asyncpreemptoff=1"
        self.log = open(os.path.join(self.dir, "log"), "w")
        self.proc = subprocess.Popen(
            ["taskset", "-c", str(cpu), *wrap, binary, "-conf", "Corefile", "-quiet"],
            cwd=self.dir, env=env, stdout=self.log, stderr=subprocess.STDOUT)

    def wait(self, port, timeout=60):
        deadline = time.time() + timeout
        while time.time() < deadline:
            if self.proc.poll() is not None:
                raise SystemExit(f"CoreDNS exited:\n{open(self.log.name).read()[-3000:]}")
            try:
                socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
                return
            except OSError:
                time.sleep(0.05)
        raise SystemExit("CoreDNS did not start")

    def stop(self):
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(5)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


def dnsperf(port, queries, duration, pid, rate):
    """Saturation run (CPU per query, max qps), then a run at `rate` queries/s for the p99
    (`rate`: a function of the saturation run's qps giving the paced rate, 0 for none)."""
    hz = os.sysconf("SC_CLK_TCK")
    cmd = ["taskset", "-c", "0", "dnsperf", "-s", "127.0.0.1", "-p", str(port), "-d", queries, "-q", "100"]
    before = cpu_ticks(pid)
    out = subprocess.run(cmd + ["-l", str(duration)], capture_output=True, text=True).stdout
    after = cpu_ticks(pid)
    completed = int(re.search(r"Queries completed:\s+(\d+)", out).group(1))
    qps = float(re.search(r"Queries per second:\s+([\d.]+)", out).group(1))
    codes = re.search(r"Response codes:\s+(.*)", out).group(1)
    cpu_us = (after - before) / hz / max(completed, 1) * 1e6
    p99 = float("nan")
    rate = rate(qps)
    if rate:
        paced = cmd[:-2] + ["-q", "10"]  # few outstanding: no bursts of 100 at once
        out = subprocess.run(paced + ["-l", str(duration), "-Q", str(int(rate)), "-v"],
                             capture_output=True, text=True).stdout
        lat = sorted(float(l.rsplit(None, 1)[1]) for l in out.splitlines() if l.startswith("> "))
        p99 = lat[int(len(lat) * 0.99)] if lat else float("nan")
    return cpu_us, qps, p99 * 1e6, codes


def write_queries(path, lines):
    with open(path, "w") as f:
        f.write("\n".join(lines) + "\n")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--ns", default="0,1,100,1000,5000,20000",
                    help="numbers of hostnames; N = 1 is one `exact` rule, the least any rendering in "
                         "the rewrite plugin costs (the plugin's own share of the tax)")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--duration", type=float, default=3)
    ap.add_argument("--rate", default="50%",
                    help="queries/s of the p99 run: a number, or a percentage of the max qps the "
                         "Corefile without hairpin's rules reached with the same mix in the same "
                         "repeat (the `cluster` mix for the hairpinned ones); 0: no p99 run")
    ap.add_argument("--mixes", default="cluster,nxdomain,external,exact,wildcard")
    ap.add_argument("--cache", default="off,on")
    ap.add_argument("--corefile", default=find_up("shared/fixtures/corefiles/kubeadm.Corefile"))
    ap.add_argument("--coredns", default=find_up("shared/peers/coredns/coredns"))
    ap.add_argument("--keep", help="keep the rendered Corefiles in this directory")
    ap.add_argument("--corefiles", help="use the Corefiles a --keep run left in this directory "
                    "(Corefile-N) instead of rendering them: to measure an older rendering")
    args = ap.parse_args()
    if not args.coredns or not os.path.exists(args.coredns):
        raise SystemExit("the CoreDNS test peer (../shared/peers/coredns/coredns) is absent")
    ns = [int(n) for n in args.ns.split(",")]
    ns = [0] + [n for n in ns if n != 0]  # N = 0 first: the reference of each repeat
    mixes = args.mixes.split(",")
    caches = args.cache.split(",")
    share = float(args.rate[:-1]) / 100 if args.rate.endswith("%") else None
    fixed = 0 if share else float(args.rate)
    load = os.getloadavg()
    work = tempfile.mkdtemp(prefix="hairpin-dns-bench-")
    base = open(args.corefile).read()

    if not args.corefiles:
        print("building the renderer (cargo build -p hairpin-planner --example dns_corefile)...",
              file=sys.stderr)
        target = os.environ.get("CARGO_TARGET_DIR", os.path.join(ROOT, "target"))
        subprocess.run(["cargo", "build", "-q", "-p", "hairpin-planner", "--example", "dns_corefile"],
                       cwd=ROOT, check=True)
        render = os.path.join(target, "debug", "examples", "dns_corefile")

    records = [(f"svc{k}.ns{k % 5}.svc.cluster.local", f"10.96.1.{k + 1}") for k in range(30)]
    queries = {
        "cluster": [f"{n} A" for n, _ in records],
        "nxdomain": [f"www.site{k}.com.{s} A" for k in range(40)
                     for s in ("ns0.svc.cluster.local", "svc.cluster.local", "cluster.local")],
        "external": [f"www.site{k}.com {t}" for k in range(100) for t in ("A", "AAAA")],
    }
    corefiles = {}
    for n in ns:
        exact, wild = names_for(n)
        if n == 0:
            corefiles[n] = base
            continue
        if args.corefiles:
            text = open(os.path.join(args.corefiles, f"Corefile-{n}")).read()
        else:
            names = os.path.join(work, f"names-{n}")
            write_queries(names, exact + wild)
            text = subprocess.run([render, args.corefile, names, CLUSTER_IP], capture_output=True,
                                  text=True, check=True).stdout
        corefiles[n] = text
        if args.keep:
            os.makedirs(args.keep, exist_ok=True)
            open(os.path.join(args.keep, f"Corefile-{n}"), "w").write(text)
        print(f"N={n}: Corefile {len(text) / 1024:.0f} KiB, {text.count('rewrite ')} rewrite rules, "
              f"{text.count(chr(10) + '    ' * 2 + CLUSTER_IP)} hosts lines", file=sys.stderr)

    upstream_port = free_port()
    upstream = CoreDns(args.coredns, UPSTREAM.format(port=upstream_port), work, 0, [])
    upstream.wait(upstream_port)
    results = {}  # (cache, n, mix) -> [(cpu, qps, p99)]
    try:
        for cache in caches:
            # Every N at once (an idle CoreDNS costs nothing), measured in turns within each
            # repeat, so that the machine's load drifts over all of them alike.
            running = {}
            try:
                for n in ns:
                    exact, wild = names_for(n)
                    qs = dict(queries)
                    if n:
                        step = max(1, len(exact) // 200)
                        qs["exact"] = [f"{h} A" for h in exact[::step]]
                        qs["wildcard"] = [f"x{k}.{w[2:]} A" for k, w in enumerate(wild[::max(1, len(wild) // 200)])]
                    port = free_port()
                    text = localize(corefiles[n], port, upstream_port, cache == "on")
                    # The hairpin Service the rewrite rules name resolves like any Service.
                    targets = set(re.findall(r"rewrite stop name \S+ \S+ (\S+)", text)) - set(exact)
                    dns = CoreDns(args.coredns, text, work, 1,
                                  records + [(t, CLUSTER_IP) for t in sorted(targets)])
                    dns.wait(port)
                    paths = {}
                    for mix in mixes:
                        if qs.get(mix):  # N = 1 has no wildcard
                            paths[mix] = os.path.join(work, f"q-{mix}-{n}")
                            write_queries(paths[mix], qs[mix])
                    running[n] = (dns, port, paths)
                for n, (dns, port, paths) in running.items():
                    for path in paths.values():
                        # warm-up (cache fill, lazily built paths)
                        dnsperf(port, path, 0.5, dns.proc.pid, lambda _: 0)
                for r in range(args.repeats):
                    base_qps = {}  # mix -> max qps at N = 0 in this repeat (N = 0 runs first)
                    for n, (dns, port, paths) in running.items():
                        for mix, path in paths.items():
                            ref = mix if mix in queries else "cluster"
                            # At N = 0 (no base yet in this repeat) the run's own max qps.
                            rate = (lambda qps: share * base_qps.get(ref, qps)) if share else (lambda _: fixed)
                            cpu, qps, p99, codes = dnsperf(port, path, args.duration, dns.proc.pid, rate)
                            if n == 0:
                                base_qps[mix] = qps
                            results.setdefault((cache, n, mix), []).append((cpu, qps, p99))
                            print(f"cache {cache} N={n} {mix} run {r + 1}: {cpu:.1f} us/q, {qps:.0f} qps, "
                                  f"p99 {p99:.0f} us [{codes}]", file=sys.stderr)
            finally:
                for dns, _, _ in running.values():
                    dns.stop()
    finally:
        upstream.stop()

    def med(key, i):
        v = results.get(key)
        return statistics.median(x[i] for x in v) if v else None

    print()
    print(f"CoreDNS 1.12.2 on one core, kubeadm Corefile, {args.repeats} x {args.duration:g} s per cell (medians).")
    at = (f"{args.rate} of the max qps without hairpin's rules (same mix; `cluster` for exact, wildcard)"
          if args.rate.endswith("%") else f"{args.rate} queries/s")
    print(f"CPU = CoreDNS CPU time per query (us); qps = max queries/s (dnsperf -q 100); "
          f"p99 = latency (us) at {at}.")
    print(f"Load average before the run {load[0]:.2f}, after {os.getloadavg()[0]:.2f}.")
    print("Ratios: against N = 0 with the same mix (exact, wildcard: against `cluster` at N = 0).")
    for cache in caches:
        print()
        print(f"### cache {cache}")
        print()
        print("| N | Corefile KiB | mix | CPU us/q | x N=0 | qps | x N=0 | p99 us | x N=0 |")
        print("|---|---|---|---|---|---|---|---|---|")
        for n in ns:
            for mix in mixes:
                key = (cache, n, mix)
                if key not in results:
                    continue
                ref = (cache, 0, mix if mix in queries else "cluster")
                c, q, p = med(key, 0), med(key, 1), med(key, 2)
                rc, rq, rp = med(ref, 0), med(ref, 1), med(ref, 2)
                print(f"| {n:,} | {len(corefiles[n]) / 1024:.0f} | {mix} | {c:.1f} | {c / rc:.2f} | "
                      f"{q:,.0f} | {q / rq:.2f} | {p:.0f} | {p / rp:.2f} |")
        hairpinned = [(n, mix) for n in ns for mix in ("exact", "wildcard")
                      if (cache, n, mix) in results and (cache, n, "cluster") in results]
        if hairpinned:
            print()
            print("Hairpinned names against a `kubernetes`-plugin answer in the same Corefile "
                  "(the `cluster` mix at the same N):")
            print()
            print("| N | mix | CPU us/q | cluster CPU us/q | x cluster |")
            print("|---|---|---|---|---|")
            for n, mix in hairpinned:
                c, rc = med((cache, n, mix), 0), med((cache, n, "cluster"), 0)
                print(f"| {n:,} | {mix} | {c:.1f} | {rc:.1f} | {c / rc:.2f} |")


if __name__ == "__main__":
    main()
