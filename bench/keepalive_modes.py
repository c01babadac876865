#!/usr/bin/env python3
"""What decides a keep-alive run's mode (issue 48): many short keep-alive runs (wrk -t2 -c64, as
bench/bench.py) against HAProxy, hairpin and direct nginx (PROXY v1), the order rotating, with
the same nginx, HAProxy and hairpin setup as bench/bench.py. For each run it prints the
throughput and the state the run drew:

  nginx      connections on each nginx worker (its socket descriptors, halfway through)
  hairpin    connections on each hairpin worker (`hairpin_dataplane_worker_connections`)
  cpu        each proxy thread's (or nginx worker's, for direct) share of the target's CPU
  mig        CPU migrations of those threads (/proc/PID/task/TID/sched)
  vsw, isw   their voluntary and involuntary context switches per request
  one-cpu    share of samples (every 20 ms) in which the two busiest threads sat on one CPU
  idle       the machine's idle share over the run (a thread that serializes leaves CPUs idle)

and then, per variable, its correlation with the run's throughput relative to the median of
its target's runs (which removes the difference between the targets). Run it on a quiet
machine; under load the load's own swings decide. --nginx-shared-listener makes nginx's
workers share one listening socket (before issue 48's keep-alive finding) instead of one
`reuseport` socket each.

Usage: bench/keepalive_modes.py --hairpin PATH [--runs N] [--duration S] [--nginx-shared-listener]
Not part of scripts/test.sh: it measures, it does not test."""
import argparse
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bench as B  # noqa: E402


def thread_state(pid, tid):
    """(name, utime + stime ticks, CPU last run on, migrations, voluntary, involuntary switches)."""
    try:
        with open(f"/proc/{pid}/task/{tid}/stat") as f:
            text = f.read()
        with open(f"/proc/{pid}/task/{tid}/sched") as f:
            sched = f.read()
    except OSError:
        return None
    name = text[text.index("(") + 1:text.rindex(")")]
    fields = text.rpartition(")")[2].split()

    def count(key):
        match = re.search(rf"{key}\s+:\s+(\d+)", sched)
        return int(match.group(1)) if match else 0

    return (name, int(fields[11]) + int(fields[12]), int(fields[36]), count("se.nr_migrations"),
            count("nr_voluntary_switches"), count("nr_involuntary_switches"))


def threads(pids):
    """Every (pid, tid) of the processes."""
    out = []
    for pid in pids:
        try:
            out += [(pid, int(tid)) for tid in os.listdir(f"/proc/{pid}/task")]
        except OSError:
            pass
    return out


def hairpin_split(admin_port):
    """Connections per hairpin worker, from its admin metrics."""
    try:
        text = urllib.request.urlopen(f"http://127.0.0.1:{admin_port}/metrics", timeout=1).read().decode()
    except OSError:
        return []
    found = re.findall(r'^\w*worker_connections\{worker="(\d+)"\} (\d+)', text, re.M)
    return [n for _, n in sorted((int(w), int(n)) for w, n in found)]


def one_run(port, pids, duration, sample):
    """One wrk run: (req/s, {thread: deltas}, share of samples with the two busiest threads on one
    CPU, machine idle %, what `sample` returned halfway)."""
    before = {t: thread_state(*t) for t in threads(pids)}
    idle0 = B.machine_idle()
    wrk = subprocess.Popen(["wrk", "-t2", "-c64", f"-d{duration}s", "--timeout", "10s",
                            f"http://127.0.0.1:{port}/small"], stdout=subprocess.PIPE, text=True)
    start, placements, sampled = time.time(), [], None
    while wrk.poll() is None:
        time.sleep(0.02)
        elapsed = time.time() - start
        if 0.3 < elapsed < duration - 0.2:
            placements.append({t: (s[2], s[1]) for t in before if (s := thread_state(*t))})
        if sampled is None and elapsed > duration / 2:
            sampled = sample()
    out = wrk.stdout.read()
    idle1 = B.machine_idle()
    rps = float(re.search(r"Requests/sec:\s+([\d.]+)", out).group(1))
    deltas = {}
    for t, a in before.items():
        b = thread_state(*t)
        if a and b and b[1] > a[1]:
            deltas[t] = (b[0], b[1] - a[1], b[3] - a[3], b[4] - a[4], b[5] - a[5])
    busiest = sorted(deltas, key=lambda t: -deltas[t][1])[:2]
    together = [p for p in placements if all(t in p for t in busiest)]
    one_cpu = sum(1 for p in together if len({p[t][0] for t in busiest}) == 1) / max(len(together), 1)
    idle = 100 * (idle1[0] - idle0[0]) / max(idle1[1] - idle0[1], 1)
    return rps, deltas, one_cpu if len(busiest) == 2 else float("nan"), idle, sampled or ([], [])


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--hairpin", required=True, help="the hairpin binary")
    parser.add_argument("--runs", type=int, default=15, help="runs of each target (default 15)")
    parser.add_argument("--duration", type=int, default=2, help="seconds per run (default 2)")
    parser.add_argument("--nginx-shared-listener", action="store_true",
                        help="nginx's workers share one listening socket instead of one `reuseport` socket each")
    args = parser.parse_args()
    os.environ["PATH"] += ":/usr/sbin:/sbin"
    B.raise_own_fd_limit()
    work = tempfile.mkdtemp(prefix="hairpin-kamodes-")
    procs = {}
    try:
        ports = {name: B.free_port() for name in ("nginx_pp", "nginx_direct", "hap_v1", "hap_v2", "hp_v1", "hp_v2",
                                                  "hp_admin", "base_v1", "base_v2", "base_admin")}
        B.write_configs(work, ports, 2, 8000, not args.nginx_shared_listener)

        def start(name, cmd, port):
            log = open(os.path.join(work, f"{name}.log"), "w")
            procs[name] = subprocess.Popen(cmd, stdout=log, stderr=log, stdin=subprocess.DEVNULL)
            B.wait_port(port, procs[name], name)

        start("nginx", ["nginx", "-p", work, "-c", os.path.join(work, "nginx.conf"),
                        "-e", os.path.join(work, "nginx-error.log")], ports["nginx_pp"])
        start("haproxy", ["haproxy", "-db", "-f", os.path.join(work, "haproxy.cfg")], ports["hap_v1"])
        start("hairpin", [args.hairpin, "proxy", "--routes-file", os.path.join(work, "routes-hp.json"),
                          "--workers", "2", "--connect-timeout", "5s", "--idle-timeout", "600s",
                          "--max-connections", "8000", "--shutdown-delay", "0s",
                          "--admin-addr", f"127.0.0.1:{ports['hp_admin']}", "--log-level", "warn"], ports["hp_v1"])
        time.sleep(0.5)
        workers = [p for p in B.process_tree(procs["nginx"].pid) if p != procs["nginx"].pid]
        idle_fds = {pid: B.socket_fds(pid) for pid in workers}
        targets = [("haproxy", ports["hap_v1"], [procs["haproxy"].pid]),
                   ("hairpin", ports["hp_v1"], [procs["hairpin"].pid]),
                   ("direct", ports["nginx_direct"], workers)]
        for _, port, _ in targets:
            B.run_wrk(port, "keepalive", 1)
        load = os.getloadavg()
        print(f"host: {B.cpu_model()}, {os.cpu_count()} CPUs, kernel {os.uname().release}; "
              f"load average before: {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}; nginx listeners: "
              + ("one shared socket" if args.nginx_shared_listener else "reuseport"))
        print(f"{'target':<8} {'req/s':>7}  {'nginx':>6} {'hairpin':>7} {'cpu':>9} {'mig':>4} {'vsw':>6} {'isw':>6}"
              f" {'one-cpu':>7} {'idle%':>6}")
        records = []
        for i in range(args.runs):
            for name, port, pids in targets[i % 3:] + targets[:i % 3]:
                def sample(name=name):
                    return (B.nginx_split(workers, idle_fds), hairpin_split(ports["hp_admin"]) if name == "hairpin" else [])
                rps, deltas, one_cpu, idle, (nginx, hairpin) = one_run(port, pids, args.duration, sample)
                busy = sorted((d for d in deltas.values() if d[0] != "wrk"), key=lambda d: -d[1])[:2]
                total = sum(d[1] for d in busy) or 1
                requests = rps * args.duration
                record = {
                    "target": name, "rps": rps,
                    "nginx busier share": max(nginx) / max(sum(nginx), 1) if nginx else float("nan"),
                    "busier thread CPU share": busy[0][1] / total if busy else float("nan"),
                    "migrations": sum(d[2] for d in busy),
                    "voluntary switches/req": sum(d[3] for d in busy) / max(requests, 1),
                    "involuntary switches/req": sum(d[4] for d in busy) / max(requests, 1),
                    "two threads on one CPU": one_cpu, "machine idle %": idle,
                }
                records.append(record)
                print(f"{name:<8} {rps:7.0f}  {'/'.join(map(str, nginx)):>6} {'/'.join(map(str, hairpin)) or '-':>7}"
                      f" {'/'.join(str(d[1]) for d in busy):>9} {record['migrations']:4d}"
                      f" {record['voluntary switches/req']:6.3f} {record['involuntary switches/req']:6.3f}"
                      f" {one_cpu:7.2f} {idle:6.1f}", flush=True)
        print()
        print("correlation with the run's req/s over its target's median (all targets' runs together)")
        medians = {name: statistics.median(r["rps"] for r in records if r["target"] == name) for name, _, _ in targets}
        relative = [r["rps"] / medians[r["target"]] for r in records]
        for key in ("nginx busier share", "busier thread CPU share", "migrations", "voluntary switches/req",
                    "involuntary switches/req", "two threads on one CPU", "machine idle %"):
            pairs = [(r[key], rel) for r, rel in zip(records, relative) if r[key] == r[key]]
            try:
                corr = statistics.correlation([p[0] for p in pairs], [p[1] for p in pairs])
                print(f"  {key:<26} {corr:+.2f}  ({len(pairs)} runs)")
            except (statistics.StatisticsError, ValueError):
                print(f"  {key:<26}   n/a (constant or too few runs)")
        for name, _, _ in targets:
            runs = [r["rps"] for r in records if r["target"] == name]
            print(f"  {name:<8} req/s median {medians[name]:7.0f}, slowest/fastest {min(runs) / max(runs):.2f}")
    finally:
        B.stop_all(procs.values())
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
