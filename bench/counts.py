#!/usr/bin/env python3
"""Counts per request that the machine's load does not move (issue 48), for HAProxy and hairpin
(and a --baseline hairpin), PROXY v1 and v2, on keep-alive and new connections, with the same
nginx, HAProxy and hairpin setup as bench/bench.py:

  default     `perf stat` of each proxy over one wrk run per target: syscalls by name, context
              switches, CPU-migrations, task-clock (µs; this one does move with the load), each
              thread's share of the CPU (which thread runs what), hairpin's connections per
              worker read mid-run, nginx's own syscalls and context switches per request (what
              the proxy costs its upstream), and the machine's idle share; then `epoll_wait`
              returns per request and events per return (wake-ups, `perf record` of
              syscalls:sys_exit_epoll_wait).
  --callgrind both proxies under valgrind's callgrind: user-space instructions per request
              (counted from zero after the warm-up, over one wrk run).

Usage: bench/counts.py --hairpin PATH [--baseline PATH] [--duration S] [--rounds N]
                       [--workloads keepalive,newconn] [--callgrind]
Needs perf (and root, or kernel.perf_event_paranoid <= 1), wrk, nginx, haproxy; valgrind for
--callgrind. Not part of scripts/test.sh: it measures, it does not test."""
import argparse, os, re, subprocess, sys, tempfile, time, shutil, statistics
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bench as B

SYS = ("sendto", "write", "writev", "sendmsg", "recvfrom", "read", "readv", "recvmsg",
       "epoll_wait", "epoll_pwait", "epoll_ctl", "accept4", "connect", "socket", "setsockopt",
       "getsockopt", "getsockname", "getpeername", "shutdown", "close", "futex", "splice", "fcntl", "ioctl")

# TCP counters of the network namespace (/proc/net/snmp, /proc/net/netstat) counted per request:
# segments sent (4 per keep-alive request through a proxy: request and response on each side;
# more are pure ACKs or split writes), delayed and quick ACKs, autocorking. Meaningful only
# when nothing else talks in the namespace: run with --netns (a namespace of its own).
TCP_COUNTERS = ("Tcp:OutSegs", "Tcp:InSegs", "TcpExt:DelayedACKs", "TcpExt:TCPPureAcks", "TcpExt:TCPHPAcks",
                "TcpExt:TCPAutoCorking", "TcpExt:TCPHPHits", "TcpExt:TCPBacklogCoalesce", "TcpExt:TCPDelivered" )

def tcp_counters():
    out = {}
    for path in ("/proc/net/snmp", "/proc/net/netstat"):
        with open(path) as f:
            lines = f.read().splitlines()
        for names, values in zip(lines[::2], lines[1::2]):
            prefix, names = names.split(":", 1)
            for name, value in zip(names.split(), values.split(":", 1)[1].split()):
                out[f"{prefix}:{name}"] = int(value)
    return out

def switches(pid):
    """Voluntary (the thread slept: epoll_wait with nothing ready) and involuntary (preempted)
    context switches, summed over the process's threads."""
    vol = invol = 0
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            with open(f"/proc/{pid}/task/{tid}/status") as f:
                for line in f:
                    if line.startswith("voluntary_ctxt_switches"):
                        vol += int(line.split()[1])
                    elif line.startswith("nonvoluntary_ctxt_switches"):
                        invol += int(line.split()[1])
        except OSError:
            pass
    return vol, invol

def perf_stat(pids, duration, per_thread=False):
    ev = ["task-clock", "context-switches", "cpu-migrations", "raw_syscalls:sys_enter",
          *(f"syscalls:sys_enter_{n}" for n in SYS)]
    cmd = ["perf", "stat", "-x", ",", "-e", ",".join(ev), "-p", ",".join(map(str, pids))]
    if per_thread:
        cmd.append("--per-thread")
    return subprocess.Popen(cmd + ["--", "sleep", str(duration)], stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, text=True)

def parse(err, per_thread=False):
    out = {}
    for line in err.splitlines():
        f = line.split(",")
        if per_thread:
            if len(f) < 4: continue
            thread, f = f[0], f[1:]
        else:
            thread = "all"
        try:
            v = float(f[0])
        except ValueError:
            continue
        name = f[2].removeprefix("syscalls:sys_enter_").removeprefix("raw_syscalls:sys_enter") or "all syscalls"
        out.setdefault(thread, {})[name] = out.setdefault(thread, {}).get(name, 0) + v
    return out

def epoll_events(pid, port, workload, duration, work):
    data = os.path.join(work, f"ep-{pid}.data")
    rec = subprocess.Popen(["perf", "record", "-q", "-e", "syscalls:sys_exit_epoll_wait", "-p", str(pid), "-o", data,
                            "--", "sleep", str(duration)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    time.sleep(0.3)
    _, _, _, req = B.run_wrk(port, workload, duration - 1)
    rec.wait()
    s = subprocess.run(["perf", "script", "-i", data, "-F", "tid,trace"], capture_output=True, text=True).stdout
    rets = [int(m.group(1), 16) for m in re.finditer(r"0x([0-9a-f]+)", s)]
    return req, rets

def cg_total(pid, work):
    subprocess.run(["callgrind_control", "-d", str(pid)], capture_output=True)
    time.sleep(1)
    files = sorted((f for f in os.listdir(work) if f.startswith(f"cg.{pid}")), key=lambda f: os.path.getmtime(os.path.join(work, f)))
    text = open(os.path.join(work, files[-1])).read()
    m = re.search(r"^(?:summary|totals): (\d+)", text, re.M)
    return int(m.group(1))

def callgrind(args, procs, targets, work):
    print(f"callgrind: user-space instructions per request; load {os.getloadavg()}")
    for workload in args.workloads.split(","):
        for r in range(args.rounds):
            for name, (proc, port) in targets.items():
                pid = procs[proc].pid
                subprocess.run(["callgrind_control", "-z", str(pid)], capture_output=True)
                _, _, _, req = B.run_wrk(port, workload, args.duration)
                ir = cg_total(pid, work)
                print(f"  {workload:10} {name:12} requests {req:8.0f}  Ir/request {ir/req:10.0f}", flush=True)
    return

def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--hairpin", required=True)
    ap.add_argument("--baseline")
    ap.add_argument("--duration", type=int, default=3)
    ap.add_argument("--workloads", default="keepalive,newconn")
    ap.add_argument("--rounds", type=int, default=1)
    ap.add_argument("--targets", default="")
    ap.add_argument("--callgrind", action="store_true")
    ap.add_argument("--netns", action="store_true",
                    help="run in a network namespace of its own (root), so that the TCP counters are this run's alone")
    args = ap.parse_args()
    if args.netns:
        argv = [a for a in sys.argv[1:] if a != "--netns"]
        script = os.path.abspath(__file__)
        os.execvp("unshare", ["unshare", "-n", "sh", "-c", 'ip link set lo up && exec "$0" "$@"',
                              sys.executable, script, *argv])
    B.raise_own_fd_limit()
    work = tempfile.mkdtemp(prefix="hairpin-counts-")
    procs = {}
    ports = {n: B.free_port() for n in ("nginx_pp", "nginx_direct", "hap_v1", "hap_v2", "hp_v1", "hp_v2", "hp_admin", "base_v1", "base_v2", "base_admin")}
    try:
        with open(os.path.join(work, "big.bin"), "wb") as f:
            f.write(os.urandom(B.BIG_BYTES))
        B.write_configs(work, ports, 2, 8000)
        def start(name, cmd, port):
            log = open(os.path.join(work, f"{name}.log"), "w")
            procs[name] = subprocess.Popen(cmd, stdout=log, stderr=log, stdin=subprocess.DEVNULL)
            B.wait_port(port, procs[name], name)
        start("nginx", ["nginx", "-p", work, "-c", os.path.join(work, "nginx.conf"), "-e", os.path.join(work, "nginx-error.log")], ports["nginx_pp"])
        vg = ["valgrind", "--tool=callgrind", "--dump-instr=no", f"--callgrind-out-file={work}/cg.%p"] if args.callgrind else []
        start("haproxy", vg + ["haproxy", "-db", "-f", os.path.join(work, "haproxy.cfg")], ports["hap_v1"])
        hp = {"hairpin": (args.hairpin, "hp")}
        if args.baseline:
            hp["baseline"] = (args.baseline, "base")
        for proxy, (path, prefix) in hp.items():
            start(proxy, vg + [path, "proxy", "--routes-file", os.path.join(work, f"routes-{prefix}.json"), "--workers", "2",
                          "--connect-timeout", "5s", "--idle-timeout", "600s", "--max-connections", "8000", "--shutdown-delay", "0s",
                          "--admin-addr", f"127.0.0.1:{ports[prefix + '_admin']}", "--log-level", "warn"], ports[prefix + "_v1"])
        targets = {"haproxy-v1": ("haproxy", ports["hap_v1"]), "haproxy-v2": ("haproxy", ports["hap_v2"]),
                   "hairpin-v1": ("hairpin", ports["hp_v1"]), "hairpin-v2": ("hairpin", ports["hp_v2"])}
        if args.baseline:
            targets.update({"baseline-v1": ("baseline", ports["base_v1"]), "baseline-v2": ("baseline", ports["base_v2"])})
        if args.targets:
            targets = {k: v for k, v in targets.items() if k in args.targets.split(",")}
        for name, (_, port) in targets.items():
            B.run_wrk(port, "keepalive", 1)
        nginx_pids = B.process_tree(procs["nginx"].pid)
        if args.callgrind:
            return callgrind(args, procs, targets, work)
        print(f"host: {B.cpu_model()}, kernel {os.uname().release}, load {os.getloadavg()}")
        for workload in args.workloads.split(","):
            unit = "MiB" if B.WORKLOADS[workload][3] == "MiB/s" else "req"
            for r in range(args.rounds):
                rows = {}
                for name, (proc, port) in targets.items():
                    pid = procs[proc].pid
                    ps = perf_stat([pid], args.duration + 1, per_thread=True)
                    ns = perf_stat(nginx_pids, args.duration + 1)
                    time.sleep(0.3)
                    i0 = B.machine_idle()
                    c0 = B.cpu_times(pid)
                    t0 = tcp_counters()
                    s0 = switches(pid)
                    import threading, urllib.request
                    split = []
                    def scrape():
                        time.sleep(args.duration / 2)
                        try:
                            admin = ports["hp_admin" if proc == "hairpin" else "base_admin"]
                            text = urllib.request.urlopen(f"http://127.0.0.1:{admin}/metrics", timeout=2).read().decode()
                            split.extend(re.findall(r"worker_connections\{[^}]*\} (\d+)", text))
                        except Exception as e:
                            split.append(str(e))
                    def handoffs():
                        admin = ports["hp_admin" if proc == "hairpin" else "base_admin"]
                        text = urllib.request.urlopen(f"http://127.0.0.1:{admin}/metrics", timeout=2).read().decode()
                        return sum(int(n) for n in re.findall(r"worker_handoffs_total (\d+)", text))
                    th = threading.Thread(target=scrape)
                    if proc != "haproxy":
                        h0 = handoffs()
                        th.start()
                    _, _, _, req = B.run_wrk(port, workload, args.duration)
                    if proc != "haproxy":
                        th.join()
                        print(f"  {name} hand-overs to the other worker per request: {(handoffs() - h0) / req:.4f}")
                        print(f"  {name} worker connections mid-run: {split}")
                    c1 = B.cpu_times(pid)
                    t1 = tcp_counters()
                    tcp = {k: t1.get(k, 0) - t0.get(k, 0) for k in TCP_COUNTERS}
                    s1 = switches(pid)
                    tcp["voluntary switches"] = s1[0] - s0[0]
                    tcp["involuntary switches"] = s1[1] - s0[1]
                    i1 = B.machine_idle()
                    _, perr = ps.communicate(); _, nerr = ns.communicate()
                    threads = parse(perr, per_thread=True)
                    tot = {}
                    for t, d in threads.items():
                        for k, v in d.items():
                            tot[k] = tot.get(k, 0) + v
                    ng = parse(nerr)["all"]
                    idle = 100 * (i1[0] - i0[0]) / max(i1[1] - i0[1], 1)
                    rows[name] = (req, tot, threads, ng, idle, (sum(c1) - sum(c0)) * 1e6 / req, tcp)
                print(f"\n== {workload} round {r+1}: per {unit} (proxy process; nginx beside)")
                names = list(rows)
                print(f"{'':22}" + "".join(f"{n:>13}" for n in names))
                print(f"{'work units':22}" + "".join(f"{rows[n][0]:13.0f}" for n in names))
                print(f"{'machine idle %':22}" + "".join(f"{rows[n][4]:13.1f}" for n in names))
                print(f"{'proc cpu us (/proc)':22}" + "".join(f"{rows[n][5]:13.2f}" for n in names))
                keys = ["task-clock", "context-switches", "cpu-migrations", "all syscalls", *SYS]
                for k in keys:
                    vals = [rows[n][1].get(k, 0) / rows[n][0] * (1e3 if k == "task-clock" else 1) for n in names]
                    if any(vals):
                        print(f"{k + (' µs' if k == 'task-clock' else ''):22}" + "".join(f"{v:13.3f}" for v in vals))
                for k in ("task-clock", "context-switches", "all syscalls", "epoll_wait", "recvfrom", "sendto", "writev", "read", "write", "accept4"):
                    vals = [rows[n][3].get(k, 0) / rows[n][0] * (1e3 if k == "task-clock" else 1) for n in names]
                    if any(vals):
                        print(f"{'nginx ' + k:22}" + "".join(f"{v:13.3f}" for v in vals))
                for k in (*TCP_COUNTERS, "voluntary switches", "involuntary switches"):
                    vals = [rows[n][6][k] / rows[n][0] for n in names]
                    if any(vals):
                        print(f"{k.split(':')[-1]:22}" + "".join(f"{v:13.3f}" for v in vals))
                print("threads (task-clock share %, syscalls/unit):")
                for n in names:
                    th = rows[n][2]
                    total = sum(d.get("task-clock", 0) for d in th.values()) or 1
                    parts = [f"{t}: {100*d.get('task-clock',0)/total:.0f}% {d.get('all syscalls',0)/rows[n][0]:.2f}" for t, d in sorted(th.items()) if d.get("task-clock", 0) > 0.005 * total]
                    print(f"  {n:12} " + "  ".join(parts))
        print("\nepoll_wait returns: events per return (mean), returns per request, share of 0-event returns")
        for workload in args.workloads.split(","):
            for name, (proc, port) in targets.items():
                req, rets = epoll_events(procs[proc].pid, port, workload, args.duration + 1, work)
                if rets:
                    print(f"  {workload:10} {name:12} returns/req {len(rets)/req:.3f}  events/return {statistics.mean(rets):.2f}  zero {100*sum(1 for x in rets if x==0)/len(rets):.1f}%")
    finally:
        B.stop_all(procs.values())
        shutil.rmtree(work, ignore_errors=True)

main()
