#!/usr/bin/env python3
"""hairpin proxy vs HAProxy vs direct nginx, on loopback.

Starts nginx as the PROXY-protocol-receiving upstream (plus a plain listener for the direct
baseline), HAProxy (send-proxy and send-proxy-v2) and `hairpin proxy` (v1 and v2 routes), then
runs wrk interleaved over several rounds for three workloads:

  keepalive  small responses over kept-alive connections (requests/s)
  newconn    one new connection per request, `Connection: close` (requests/s)
  bulk       10 MiB responses (bytes/s), 8 connections (wrk -t2)
  bulk-c1    the same over 1, 2 and 4 connections from one wrk thread (-t1): few large
  bulk-c2    transfers (an image pull, an upload), where how the connections are spread over
  bulk-c4    the proxy's threads decides

and prints the host's CPU model and kernel, medians, hairpin/HAProxy and hairpin/direct ratios,
p99 latencies, each proxy's CPU time per unit of work, anonymous memory per open connection (see
below) and resident memory after the runs, a summary of every ratio to HAProxy, and then
every target of the proxy as a ratio to HAProxy's with PASS or MISS, followed by the
planner's figures at 10,000 Ingresses and 20,000 hostnames (`crates/planner/examples/scale.rs`,
`crates/controller/examples/memory_10k.rs`) against their absolute targets:

  throughput             >= 1.0   every workload, v1 and v2
  CPU per request        <= 0.85  keepalive and newconn
  CPU per GiB            <= 0.5   bulk (every bulk shape)
  resident memory peak   <= 0.5
  memory per connection  <= 0.5   at 2,000 and 10,000 open connections
  p99 latency            <= 1.0   every workload
  planner desired()      <= 50 ms (thread CPU time, median; the wall time is printed beside)
  Corefile at 20,000     <= 768 KiB (whole names, docs/dns-cost.md; the ConfigMap limit is 1 MiB)
  controller RSS         <= 64 MiB (memory_10k: the controller process's VmRSS in the steady
                                   state, and its VmHWM peak)

Paired rounds: within each round the runs of one PROXY version (HAProxy, hairpin, the
baseline) are back to back, the order rotating from round to round, and the throughput, CPU and
p99 targets are judged on the median of the per-round ratios (printed with their min-max and
the number of rounds in which hairpin was ahead), not on two medians whose runs took place at different moments: on a
shared 2-core machine one run's throughput moves by +-20 % with the load.

Keep-alive's modes (issue 48): every target's keep-alive runs move between a slow and a fast mode
from one run to the next, direct nginx's as much as the proxies' (two quiet runs: each target's
slowest run 0.64-0.79 of its fastest), so five rounds' paired ratio depends on which runs drew
which mode: judge keep-alive on 9 rounds or more (--rounds) and on the paired ratio's median. What
tracks the mode is where the kernel put the threads: in runs whose two worker threads (the proxy's,
or nginx's two workers for direct) sat on one CPU for half the run or more, throughput was
0.74-0.86 of the other runs' for HAProxy, hairpin and direct alike (bench/keepalive_modes.py, 2 x
45 runs at load 7-14; correlation -0.41 to -0.82), and hairpin's threads shared a CPU no more often
than HAProxy's. Hairpin's own state is not the draw: its workers hold 34/30 or 35/29 of the 64
connections (`handoff_limit`), its two threads' CPU 50-58/42-50, its migrations and context
switches per request those of HAProxy. nginx's split was one more draw: its workers shared one
listening socket (EPOLLEXCLUSIVE wakes whichever sits in epoll_wait) and took each run's 64
connections anywhere from 64/0 to 32/32, so nginx listens with `reuseport` (one socket per worker,
the kernel's hash: at most 41/23 seen); --nginx-shared-listener brings back the shared socket. The
keep-alive runs print, per run, nginx's split and the share of samples with the target's worker
threads on one CPU, and each target's median over the runs that shared a CPU and over the others.
--baseline with hairpin's own binary shows how far two runs of one build move apart under the load
of the moment.

Fairness: both proxies get the same number of threads (HAProxy `nbthread`, hairpin `--workers`;
2 unless --threads says otherwise), the same
connect/idle timeouts, no CPU pinning, and HAProxy runs as Debian ships it: no `option splice-*`
(splicing is off unless configured), default `tune.bufsize` (16 KiB).

Which hairpin: by default the binary the container image ships (static glibc, not
position-independent, cargo profile `image`: fat LTO, opt-level "z" except the data path, built
as scripts/image-rootfs.sh builds it), because that is what users run; --release benches the
release build (`cargo build --release`: dynamically linked, position-independent, opt-level 3
throughout) instead, and --hairpin PATH any binary. --baseline PATH runs a second hairpin in the
same interleaved rounds and prints hairpin/baseline ratios, to compare two builds under the same
load (a single run's ratios move with the machine's load, so compare within one run).

Resident memory is printed as VmRSS, VmHWM (the peak, which the target uses), RssAnon (heap and
stacks: what the process allocated) and RssFile (pages of its binary and shared libraries that
are mapped; they belong to the page cache, which every process mapping the same file shares).
Most of hairpin's RssFile is the kernel's fault-around: a page fault on a file mapping maps up
to 16 pages (64 KiB) around it that are already in the page cache, so 200 faults at start map
about 8 MiB of the 16 MiB file. The image binary has no dynamic loader, no shared library and no
relocation to apply at start; the release build maps libc and its loader and rewrites
.data.rel.ro (19,000 relocations), about 0.9 MiB more (measured at load 8-10: image VmHWM
8,836 KiB, RssAnon 984, RssFile 7,852; HAProxy 16,312, 5,272 and 11,040).

Memory per open connection, before the rounds: each proxy in turn gets 2,000 and then 10,000
connections (--connections), each sending half a request (no blank line, so nginx waits for the
rest and the proxy holds an open pair with nothing in flight); once the proxy holds both ends of
every one (its descriptors) and its RssAnon is steady, the growth of RssAnon over its value just
before the first level, divided by the connections, is the figure (KiB). The bench raises its
soft descriptor limit to the hard one; HAProxy's `maxconn` and hairpin's `--max-connections` are
the same, set to fit the levels. Two descriptors per connection: where the hard RLIMIT_NOFILE
does not allow 10,000 (20,000 here, without CAP_SYS_RESOURCE to raise it), the most it allows
is used and a note says so.

--quick: 3 rounds of 1 s runs (bulk 2 s) and no planner figures, every ratio in a few minutes.

With --profile, after the rounds: where each proxy's CPU goes per request on keep-alive and new
connections (PROXY v1), from `perf record -e cpu-clock -g` call chains sorted into kernel paths
(send: the proxy's own TCP transmit, the peer's TCP receive that loopback runs inside the
sender's syscall, waking the peer; recv; epoll_wait; other syscalls; user space), scaled to the
CPU time per request measured from /proc over the same run; then `perf stat` counts per request
over another run of each: syscalls (in all and by name), context switches, and perf's own
task-clock, also per MiB for the bulk shapes (splices, wake-ups, and the machine's idle share:
a proxy that waits rather than works leaves the CPUs idle). Needs `perf` and root (or kernel.perf_event_paranoid <= 1 with readable kernel
symbols).

Usage: bench/run.sh [--smoke | --quick] [--connections N,N] [--rounds N] [--duration S] [--threads N] [--only WORKLOAD]...
                    [--no-build] [--hairpin PATH | --release] [--baseline PATH] [--no-planner]
                    [--profile] [--nginx-shared-listener]
"""

import argparse
import os
import re
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BIG_BYTES = 10 * 1024 * 1024
SMALL_BODY = "hello from nginx\n"

WORKLOADS = {
    # name: (path, wrk connections, extra wrk args, unit, wrk threads)
    "keepalive": ("/small", 64, [], "req/s", 2),
    "newconn": ("/small", 32, ["-H", "Connection: close"], "req/s", 2),
    "bulk": ("/big", 8, [], "MiB/s", 2),
    # Few large connections (issue 32): one wrk thread, as one client streaming an image layer or
    # an upload; with this few connections how they are spread over the proxy's threads decides.
    "bulk-c1": ("/big", 1, [], "MiB/s", 1),
    "bulk-c2": ("/big", 2, [], "MiB/s", 1),
    "bulk-c4": ("/big", 4, [], "MiB/s", 1),
}


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_port(port, proc, name, timeout=10.0):
    deadline = time.time() + timeout
    while time.time() < deadline:
        if proc.poll() is not None:
            raise SystemExit(f"{name} exited with {proc.returncode}")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.2):
                return
        except OSError:
            time.sleep(0.05)
    raise SystemExit(f"{name} does not listen on {port}")


def http_get(port, path):
    with socket.create_connection(("127.0.0.1", port), timeout=5) as s:
        s.sendall(f"GET {path} HTTP/1.0\r\nHost: bench\r\n\r\n".encode())
        data = b""
        while chunk := s.recv(65536):
            data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    return head.split(b"\r\n")[0].decode(errors="replace"), body


def process_tree(pid):
    """The process and its direct children (nginx's workers)."""
    pids = [pid]
    try:
        children = subprocess.run(
            ["ps", "-o", "pid=", "--ppid", str(pid)], capture_output=True, text=True
        ).stdout.split()
        pids += [int(p) for p in children]
    except OSError:
        pass
    return pids


def memory(pid):
    """VmRSS, VmHWM, RssAnon and RssFile in KiB, summed over the process and its children (nginx
    workers). RssAnon is what the process allocated (heap, stacks); RssFile is the pages of its
    binary and shared libraries that it touched, which the page cache shares with every other
    process mapping the same file."""
    fields = {"VmRSS": 0, "VmHWM": 0, "RssAnon": 0, "RssFile": 0}
    for p in process_tree(pid):
        try:
            with open(f"/proc/{p}/status") as f:
                for line in f:
                    key = line.split(":", 1)[0]
                    if key in fields:
                        fields[key] += int(line.split()[1])
        except OSError:
            pass
    return fields["VmRSS"], fields["VmHWM"], fields["RssAnon"], fields["RssFile"]


def cpu_model():
    """The CPU's model name, from /proc/cpuinfo."""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return "unknown CPU"


def open_files(pid):
    """How many descriptors a process has open."""
    try:
        return len(os.listdir(f"/proc/{pid}/fd"))
    except OSError:
        return 0


def connection_capacity():
    """The most connections a proxy can hold here: two descriptors each (client and upstream)
    under the hard RLIMIT_NOFILE the proxies inherit (a process without CAP_SYS_RESOURCE cannot
    raise it), less a reserve for listeners, the runtime's own and the splice pipes."""
    import resource
    hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
    if hard == resource.RLIM_INFINITY:
        return 1 << 20
    return max(0, (hard - 100) // 2)


def raise_own_fd_limit():
    """The soft RLIMIT_NOFILE up to the hard one, for this process (the held connections'
    client ends), nginx and HAProxy (which inherit it; hairpin raises its own)."""
    import resource
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft != hard:
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))


# What each held connection sends: half a request (no blank line), so that the upstream waits
# for the rest and the proxy holds the connection with nothing in flight.
HALF_REQUEST = b"GET /small HTTP/1.1\r\nHost: bench\r\nUser-Agent: bench"


def anon_per_connection(pid, port, count, idle_anon):
    """Opens `count` connections through the proxy at `port`, each sending half a request, waits
    until the proxy holds both ends of each (its descriptors) and its memory is steady, and
    returns (KiB of RssAnon per connection over `idle_anon`, RssAnon, problem or None). The
    connections are then reset (no TIME_WAIT) and the proxy's descriptors awaited."""
    import struct
    base_fds = open_files(pid)
    held, problem = [], None
    try:
        for i in range(count):
            s = socket.socket()
            s.setblocking(False)
            try:
                s.connect(("127.0.0.1", port))
            except BlockingIOError:
                pass
            held.append(s)
            if i % 250 == 249:
                time.sleep(0.02)  # within the listen backlog, without SYN cookies
        deadline = time.time() + 30
        pending = list(held)
        while pending and time.time() < deadline:
            left = []
            for s in pending:
                try:
                    s.send(HALF_REQUEST)
                except (BlockingIOError, OSError):
                    left.append(s)
            pending = left
            if pending:
                time.sleep(0.05)
        if pending:
            problem = f"{len(pending)} of {count} connections never became writable"
        while open_files(pid) < base_fds + 2 * count and time.time() < deadline:
            time.sleep(0.1)
        if open_files(pid) < base_fds + 2 * count:
            problem = problem or f"the proxy holds {(open_files(pid) - base_fds) // 2} of {count} connections"
        anon = memory(pid)[2]
        while time.time() < deadline:
            time.sleep(0.3)
            again = memory(pid)[2]
            if again == anon:
                break
            anon = again
    finally:
        for s in held:
            try:
                s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            except OSError:
                pass
            s.close()
    deadline = time.time() + 30
    while open_files(pid) > base_fds and time.time() < deadline:
        time.sleep(0.1)
    return (anon - idle_anon) / count, anon, problem


def cpu_times(pid):
    """(user, system) CPU time of a process and its children (nginx workers), in seconds."""
    user = system = 0
    for p in process_tree(pid):
        try:
            with open(f"/proc/{p}/stat") as f:
                fields = f.read().rpartition(")")[2].split()
            user += int(fields[11])  # utime
            system += int(fields[12])  # stime
        except (OSError, IndexError, ValueError):
            pass
    tick = os.sysconf("SC_CLK_TCK")
    return user / tick, system / tick


def to_mib_per_s(text):
    number, unit = re.match(r"([\d.]+)([KMGT]?B)", text).groups()
    factor = {"B": 1 / 2**20, "KB": 1 / 2**10, "MB": 1, "GB": 2**10, "TB": 2**20}[unit]
    return float(number) * factor


def to_ms(text):
    number, unit = re.match(r"([\d.]+)(us|ms|s|m)", text).groups()
    return float(number) * {"us": 0.001, "ms": 1, "s": 1000, "m": 60000}[unit]


def planner_figures(target_dir, build, hairpin):
    """desired() time, Corefile size and controller RSS at 10,000 Ingresses, from the examples."""
    examples = os.path.join(target_dir, "release", "examples")
    if build:
        print("building the planner and controller examples (release)...", flush=True)
        subprocess.run(["cargo", "build", "--release", "-p", "hairpin-planner", "--example", "scale",
                        "-p", "hairpin-controller", "--example", "memory_10k"], cwd=ROOT, check=True)
    scale = subprocess.run([os.path.join(examples, "scale"), "9"], capture_output=True, text=True,
                           check=True).stdout
    # memory_10k runs the hairpin binary as a separate controller process against its fake API
    # server, so the figures are the controller's alone.
    memory = subprocess.run([os.path.join(examples, "memory_10k"), "--hairpin", hairpin], capture_output=True,
                            text=True, check=True, env={**os.environ, "HAIRPIN_LOG": "error"}).stdout
    times = {case: tuple(float(x) for x in re.search(
        rf"desired\(\) {case}:\s+([\d.]+) ms wall, ([\d.]+) ms CPU", scale).groups())
        for case in ("first write", "steady state")}
    corefile_kib = float(re.search(r"Corefile size:.*?, ([\d.]+) KiB", scale).group(1))
    rss_mib = float(re.search(r"controller VmRSS steady state:\s+([\d.]+) MiB", memory).group(1))
    hwm_mib = float(re.search(r"controller VmHWM \(peak\):\s+([\d.]+) MiB", memory).group(1))
    return scale, memory, times, corefile_kib, (rss_mib, hwm_mib)


def socket_fds(pid):
    """How many of a process's descriptors are sockets."""
    count = 0
    try:
        for fd in os.listdir(f"/proc/{pid}/fd"):
            try:
                count += os.readlink(f"/proc/{pid}/fd/{fd}").startswith("socket:")
            except OSError:
                pass
    except OSError:
        pass
    return count


def nginx_split(workers, idle):
    """Connections open on each nginx worker now: its socket descriptors over `idle`, its count
    with no connection open."""
    return [max(0, socket_fds(pid) - idle[pid]) for pid in workers]


def last_cpus(tasks):
    """The CPU each (pid, tid) last ran on (None for one that is gone)."""
    cpus = []
    for pid, tid in tasks:
        try:
            with open(f"/proc/{pid}/task/{tid}/stat") as f:
                cpus.append(int(f.read().rpartition(")")[2].split()[36]))
        except (OSError, IndexError, ValueError):
            cpus.append(None)
    return cpus


def worker_tasks(pids, prefix=None):
    """(pid, tid) of the processes' threads, those named `prefix...` only if given."""
    tasks = []
    for pid in pids:
        try:
            for tid in os.listdir(f"/proc/{pid}/task"):
                with open(f"/proc/{pid}/task/{tid}/comm") as f:
                    if prefix is None or f.read().startswith(prefix):
                        tasks.append((pid, int(tid)))
        except OSError:
            pass
    return tasks


class Placement:
    """Samples taken while a keep-alive run goes on: how often a target's worker threads (the
    proxy's, or nginx's workers for direct) all sat on one CPU, and nginx's split halfway."""

    def __init__(self, tasks, nginx_workers, nginx_idle, duration):
        self.tasks, self.workers, self.idle = tasks, nginx_workers, nginx_idle
        self.start, self.duration = time.time(), duration
        self.samples = self.together = 0
        self.split = None

    def __call__(self):
        elapsed = time.time() - self.start
        if 0.3 < elapsed < self.duration - 0.2 and len(self.tasks) > 1:
            cpus = last_cpus(self.tasks)
            if None not in cpus:
                self.samples += 1
                self.together += len(set(cpus)) == 1
        if self.split is None and elapsed > self.duration / 2:
            self.split = nginx_split(self.workers, self.idle)

    def one_cpu(self):
        """The share of samples with every worker thread on one CPU (None without samples)."""
        return self.together / self.samples if self.samples else None


def stop_all(procs):
    """Stops the processes a benchmark started: SIGTERM to each, then each waited for, killed
    if it has not exited within 5 s."""
    for proc in procs:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
    for proc in procs:
        try:
            proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def run_wrk(port, workload, duration, during=None):
    """One wrk run: (value in the workload's unit, p99 ms, problems, requests or MiB done);
    `during`, if given, is called every 20 ms while wrk runs (samples of the peers' state)."""
    path, connections, extra, unit, threads = WORKLOADS[workload]
    cmd = [
        "wrk", f"-t{threads}", f"-c{connections}", f"-d{duration}s", "--latency", "--timeout", "10s",
        *extra, f"http://127.0.0.1:{port}{path}",
    ]
    wrk = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    while during and wrk.poll() is None:
        time.sleep(0.02)
        during()
    out, err = wrk.communicate()
    if wrk.returncode != 0:
        raise subprocess.CalledProcessError(wrk.returncode, cmd, out, err)
    rps = float(re.search(r"Requests/sec:\s+([\d.]+)", out).group(1))
    transfer = to_mib_per_s(re.search(r"Transfer/sec:\s+(\S+)", out).group(1))
    p99 = to_ms(re.search(r"^\s+99%\s+(\S+)", out, re.M).group(1))
    errors = re.search(r"Socket errors: (.*)", out)
    non2xx = re.search(r"Non-2xx or 3xx responses: (\d+)", out)
    value = transfer if unit == "MiB/s" else rps
    work = transfer * duration if unit == "MiB/s" else rps * duration
    problems = []
    if errors:
        problems.append("socket errors: " + errors.group(1))
    if non2xx:
        problems.append("non-2xx: " + non2xx.group(1))
    return value, p99, problems, work


# Kernel paths a sample's call chain is sorted into (see --profile). On loopback the segment a
# proxy sends is received by the peer's socket inside the same syscall (the softirq runs when
# the sender re-enables bottom halves), so a send costs the sender the peer's TCP receive and
# its wake-up as well as its own transmit.
def kernel_path(frames):
    """frames: (symbol, dso) from leaf to root. The path name, e.g. `send: peer's TCP receive`."""
    names = {sym for sym, _ in frames}
    if not frames[0][1].startswith("[kernel"):
        return "user space"
    syscall = next((sym[len("__x64_sys_"):] for sym, _ in reversed(frames) if sym.startswith("__x64_sys_")), None)
    switched = bool(names & {"__schedule", "schedule", "finish_task_switch.isra.0", "finish_task_switch"})
    if syscall in ("sendto", "write", "sendmsg"):
        if names & {"process_backlog", "net_rx_action"}:
            if names & {"sock_def_readable", "ep_poll_callback", "try_to_wake_up"}:
                return "send: waking the peer"
            return "send: peer's TCP receive"
        return "send: preempted after" if switched else "send: own TCP transmit"
    if syscall in ("recvfrom", "read", "recvmsg"):
        return "recv"
    if syscall in ("epoll_wait", "epoll_pwait"):
        return "epoll_wait: sleeping" if switched else "epoll_wait: events"
    if syscall is None:
        return "kernel, no syscall (interrupts, faults)"
    return f"{syscall}"


def profile_costs(pid, port, workload, duration, work_dir):
    """Runs one wrk run under `perf record` of `pid`: {path: µs per request}, CPU µs per request."""
    data = os.path.join(work_dir, f"perf-{pid}-{workload}.data")
    before = cpu_times(pid)
    recorder = subprocess.Popen(["perf", "record", "-q", "-e", "cpu-clock", "-F", "2000", "-g", "-p", str(pid),
                                 "-o", data, "--", "sleep", str(duration)],
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    _, _, _, requests = run_wrk(port, workload, duration)
    after = cpu_times(pid)
    recorder.wait()
    per_request = (sum(after) - sum(before)) * 1e6 / requests
    script = subprocess.run(["perf", "script", "-i", data, "-F", "ip,sym,dso"], capture_output=True, text=True).stdout
    counts, frames = {}, []
    for line in script.splitlines() + [""]:
        if line.strip():
            # "ADDRESS SYMBOL+OFFSET (DSO)"; demangled user-space symbols may contain spaces.
            match = re.match(r"\s*[0-9a-f]+ (.*?)(?:\+0x[0-9a-f]+)? \((.*)\)$", line)
            frames.append((match.group(1), match.group(2)) if match else ("?", "?"))
        elif frames:
            path = kernel_path(frames)
            counts[path] = counts.get(path, 0) + 1
            frames = []
    total = sum(counts.values()) or 1
    # perf's samples give the shares; /proc's CPU time gives the total they are shares of.
    return {path: n / total * per_request for path, n in counts.items()}, per_request, total


# Syscalls counted by --profile's `perf stat` (tracepoints; the ones a proxy makes per request).
STAT_SYSCALLS = ("sendto", "write", "writev", "sendmsg", "recvfrom", "read", "readv", "recvmsg",
                 "epoll_wait", "epoll_pwait", "epoll_ctl", "accept4", "connect", "socket", "setsockopt",
                 "getsockopt", "getsockname", "shutdown", "close", "futex", "splice")


def machine_idle():
    """(idle, total) jiffies of all CPUs, from /proc/stat."""
    with open("/proc/stat") as f:
        fields = [int(x) for x in f.readline().split()[1:]]
    return fields[3] + fields[4], sum(fields)


def stat_counts(pid, port, workload, duration):
    """Runs one wrk run under `perf stat` of `pid`: {event: count per request}, requests."""
    events = ["task-clock", "context-switches", "cpu-migrations", "page-faults", "raw_syscalls:sys_enter",
              *(f"syscalls:sys_enter_{name}" for name in STAT_SYSCALLS)]
    counter = subprocess.Popen(["perf", "stat", "-x", ",", "-e", ",".join(events), "-p", str(pid),
                                "--", "sleep", str(duration)],
                               stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    idle_before = machine_idle()
    _, _, _, requests = run_wrk(port, workload, duration)
    idle_after = machine_idle()
    _, err = counter.communicate()
    # The whole machine's idle share over the run: a proxy that waits (rather than works)
    # leaves the CPUs idle while the client and nginx have work to do.
    counts = {"machine idle %": 100 * (idle_after[0] - idle_before[0]) / max(idle_after[1] - idle_before[1], 1)}
    for line in err.splitlines():
        fields = line.split(",")
        if len(fields) > 2:
            try:
                value = float(fields[0])
            except ValueError:
                continue
            name = fields[2].removeprefix("syscalls:sys_enter_").removeprefix("raw_syscalls:sys_enter")
            counts[name or "all syscalls"] = value / requests
    return counts, requests


def round_order(names, round_):
    """The order of the runs in one round: the targets compared with each other (HAProxy,
    hairpin and the baseline for one PROXY version) run back to back, so that their ratio within
    the round compares runs under the same load; which group goes first, and which target
    within each group, rotates from round to round (none always runs first, after a cold pause
    or behind the same neighbour)."""
    groups = [[n for n in names if not n.endswith(("-v1", "-v2"))]]
    for v in ("v1", "v2"):
        groups.append([n for n in names if n.endswith("-" + v)])
    groups = [g for g in groups if g]
    shift = round_ % len(groups)
    order = []
    for group in groups[shift:] + groups[:shift]:
        k = round_ % len(group)
        order += group[k:] + group[:k]
    return order


def paired(ours, theirs, higher_is_better=True):
    """Ratios of two targets' runs within each round (adjacent runs, see `round_order`): the
    median of the per-round ratios, their min and max, in how many rounds `ours` was ahead
    (the ratio above 1.0, or below it where lower is better) and the number of rounds; None
    without runs."""
    per_round = [a / max(b, 1e-9) for a, b in zip(ours, theirs)]
    if not per_round:
        return None
    ahead = sum(1 for r in per_round if (r > 1.0 if higher_is_better else r < 1.0))
    return statistics.median(per_round), min(per_round), max(per_round), ahead, len(per_round)


def write_configs(work, ports, threads, max_conns, nginx_reuseport=True):
    """nginx (PROXY protocol and direct listeners), HAProxy (send-proxy, send-proxy-v2) and the
    two hairpin route files (prefixes hp and base), all on loopback, into `work`. nginx's
    listeners are `reuseport` (one socket per worker) unless `nginx_reuseport` is false."""
    reuseport = " reuseport" if nginx_reuseport else ""
    with open(os.path.join(work, "nginx.conf"), "w") as f:
        f.write(f"""
daemon off;
master_process on;
worker_processes 2;
{"user root;" if os.geteuid() == 0 else ""}
pid {work}/nginx.pid;
error_log {work}/nginx-error.log warn;
worker_rlimit_nofile {2 * max_conns + 100};
events {{ worker_connections {max_conns + 100}; }}
http {{
  access_log off;
  client_body_temp_path {work}/body; proxy_temp_path {work}/proxy; fastcgi_temp_path {work}/fcgi;
  uwsgi_temp_path {work}/uwsgi; scgi_temp_path {work}/scgi;
  default_type application/octet-stream;
  sendfile on; tcp_nopush on; tcp_nodelay on;
  keepalive_timeout 60s; keepalive_requests 1000000;
  server {{
listen 127.0.0.1:{ports["nginx_pp"]} proxy_protocol{reuseport} backlog=4096;
listen 127.0.0.1:{ports["nginx_direct"]}{reuseport} backlog=4096;
location = /small {{ return 200 "{SMALL_BODY.strip()}\\n"; }}
location = /check {{ return 200 "$proxy_protocol_addr"; }}
location = /big {{ alias {work}/big.bin; }}
  }}
}}
""")
    with open(os.path.join(work, "haproxy.cfg"), "w") as f:
        f.write(f"""
global
  nbthread {threads}
  maxconn {max_conns}
defaults
  mode tcp
  timeout connect 5s
  timeout client 600s
  timeout server 600s
listen hap_v1
  bind 127.0.0.1:{ports["hap_v1"]}
  server nginx 127.0.0.1:{ports["nginx_pp"]} send-proxy
listen hap_v2
  bind 127.0.0.1:{ports["hap_v2"]}
  server nginx 127.0.0.1:{ports["nginx_pp"]} send-proxy-v2
""")
    for prefix in ("hp", "base"):
        with open(os.path.join(work, f"routes-{prefix}.json"), "w") as f:
            f.write(f"""[
  {{"name": "v1", "listen": "127.0.0.1:{ports[prefix + "_v1"]}", "upstream": "127.0.0.1:{ports["nginx_pp"]}", "proxy_protocol": "v1"}},
  {{"name": "v2", "listen": "127.0.0.1:{ports[prefix + "_v2"]}", "upstream": "127.0.0.1:{ports["nginx_pp"]}", "proxy_protocol": "v2"}}
]""")


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--smoke", action="store_true", help="one short round: checks the harness, measures nothing")
    parser.add_argument("--quick", action="store_true",
                        help="3 rounds of 1 s runs (bulk 2 s) and no planner figures: every ratio in about 4 minutes")
    parser.add_argument("--connections", default="2000,10000",
                        help="open connections at which memory per connection is measured, comma-separated "
                             "(default 2000,10000; capped by the hard descriptor limit, two per connection)")
    parser.add_argument("--rounds", type=int, default=int(os.environ.get("ROUNDS", "5")),
                        help="interleaved rounds; the figures are medians over them (env ROUNDS, default 5)")
    parser.add_argument("--duration", type=int, default=2, help="seconds per wrk run (bulk gets +1)")
    parser.add_argument("--hairpin-workers", type=int,
                        help="hairpin `--workers` when it should differ from --threads")
    parser.add_argument("--no-build", action="store_true", help="use the binary already built")
    parser.add_argument("--hairpin", help="path of the hairpin binary (implies --no-build)")
    parser.add_argument("--release", action="store_true",
                        help="bench the release build (`cargo build --release`) instead of the image's binary")
    parser.add_argument("--image", action="store_true", help=argparse.SUPPRESS)  # the default; kept for old commands
    parser.add_argument("--baseline", metavar="PATH",
                        help="also bench this second hairpin binary, interleaved, and print hairpin/baseline "
                             "ratios (to compare two builds under the same load)")
    parser.add_argument("--only", choices=list(WORKLOADS), action="append",
                        help="run only this workload (repeatable; default: all)")
    parser.add_argument("--no-planner", action="store_true",
                        help="leave out the planner figures (scale and memory_10k examples)")
    parser.add_argument("--profile", action="store_true",
                        help="after the rounds, where each proxy's CPU per request goes (perf record; needs perf)")
    parser.add_argument("--nginx-shared-listener", action="store_true",
                        help="nginx's workers share one listening socket (as before issue 48's keep-alive "
                             "finding) instead of one `reuseport` socket each")
    parser.add_argument("--threads", type=int, default=2,
                        help="threads for each proxy: HAProxy `nbthread`, hairpin `--workers` (default 2)")
    args = parser.parse_args()
    if args.smoke:
        args.rounds, args.duration = 1, 1
    if args.quick:
        args.rounds, args.duration, args.no_planner = 3, 1, True
    raise_own_fd_limit()
    capacity = connection_capacity()
    levels = []
    for wanted in (int(n) for n in args.connections.split(",") if n.strip()):
        held = min(wanted, capacity - 50)
        if held > 0 and held not in levels:
            levels.append(held)
        if held != wanted:
            print(f"note: {wanted} connections need {2 * wanted} descriptors per proxy; the hard RLIMIT_NOFILE "
                  f"here allows {capacity} connections, so {held} are held instead")
    max_conns = max([8000, *(n + 50 for n in levels)])
    if args.only:
        for name in list(WORKLOADS):
            if name not in args.only:
                del WORKLOADS[name]

    for tool in ("wrk", "nginx", "haproxy"):
        if not shutil.which(tool, path=os.environ.get("PATH", "") + ":/usr/sbin:/sbin"):
            raise SystemExit(f"`{tool}` is missing: run scripts/install-test-deps.sh")
    if args.profile and not shutil.which("perf"):
        raise SystemExit("--profile needs `perf` (linux-perf)")
    os.environ["PATH"] += ":/usr/sbin:/sbin"

    target_dir = os.environ.get("CARGO_TARGET_DIR", os.path.join(ROOT, "target"))
    binary = args.hairpin or os.path.join(target_dir, "release", "hairpin")
    if not args.release and not args.hairpin:
        host = re.search(r"^host: (\S+)", subprocess.run(["rustc", "-vV"], capture_output=True, text=True,
                                                          check=True).stdout, re.M).group(1)
        binary = os.path.join(target_dir, host, "image", "hairpin")
        if not args.no_build:
            print("building hairpin (profile image, static, as scripts/image-rootfs.sh)...", flush=True)
            # The same flags as scripts/image-rootfs.sh, which prints them.
            rustflags = subprocess.run(["scripts/image-rootfs.sh", "--rustflags"], cwd=ROOT, capture_output=True,
                                       text=True, check=True).stdout.strip()
            subprocess.run(["cargo", "build", "--profile", "image", "--locked", "-p", "hairpin", "--target", host],
                           cwd=ROOT, check=True, env={**os.environ, "RUSTFLAGS": rustflags})
    elif not args.hairpin and not args.no_build:
        print("building hairpin (release)...", flush=True)
        subprocess.run(["cargo", "build", "--release", "-p", "hairpin"], cwd=ROOT, check=True)

    work = tempfile.mkdtemp(prefix="hairpin-bench-")
    procs = {}
    try:
        ports = {name: free_port() for name in ("nginx_pp", "nginx_direct", "hap_v1", "hap_v2", "hp_v1", "hp_v2", "hp_admin",
                                                "base_v1", "base_v2", "base_admin")}
        with open(os.path.join(work, "big.bin"), "wb") as f:
            f.write(os.urandom(BIG_BYTES))
        write_configs(work, ports, args.threads, max_conns, not args.nginx_shared_listener)

        def start(name, cmd, port):
            log = open(os.path.join(work, f"{name}.log"), "w")
            procs[name] = subprocess.Popen(cmd, stdout=log, stderr=log, stdin=subprocess.DEVNULL)
            wait_port(port, procs[name], name)

        start("nginx", ["nginx", "-p", work, "-c", os.path.join(work, "nginx.conf"), "-e", os.path.join(work, "nginx-error.log")], ports["nginx_pp"])
        wait_port(ports["nginx_direct"], procs["nginx"], "nginx")
        start("haproxy", ["haproxy", "-db", "-f", os.path.join(work, "haproxy.cfg")], ports["hap_v1"])
        wait_port(ports["hap_v2"], procs["haproxy"], "haproxy")
        hairpins = {"hairpin": (binary, "hp")}
        if args.baseline:
            hairpins["baseline"] = (args.baseline, "base")
        for proxy, (path, prefix) in hairpins.items():
            start(proxy, [path, "proxy", "--routes-file", os.path.join(work, f"routes-{prefix}.json"),
                          "--workers", str(args.hairpin_workers or args.threads),
                          "--connect-timeout", "5s", "--idle-timeout", "600s", "--max-connections", str(max_conns),
                          "--shutdown-delay", "0s",
                          "--admin-addr", f"127.0.0.1:{ports[prefix + '_admin']}", "--log-level", "warn"],
                  ports[prefix + "_v1"])
            wait_port(ports[prefix + "_v2"], procs[proxy], proxy)

        targets = {
            "direct": ports["nginx_direct"],
            "haproxy-v1": ports["hap_v1"],
            "haproxy-v2": ports["hap_v2"],
            "hairpin-v1": ports["hp_v1"],
            "hairpin-v2": ports["hp_v2"],
        }
        if args.baseline:
            targets.update({"baseline-v1": ports["base_v1"], "baseline-v2": ports["base_v2"]})
        # Sanity: every proxy delivers a header nginx accepts, and the big body arrives whole.
        for name, port in targets.items():
            if name == "direct":
                continue
            status, body = http_get(port, "/check")
            if "200" not in status or body != b"127.0.0.1":
                raise SystemExit(f"{name}: nginx did not get a PROXY header: {status} {body!r}")
            status, body = http_get(port, "/big")
            if len(body) != BIG_BYTES:
                raise SystemExit(f"{name}: /big returned {len(body)} bytes")

        load_before = os.getloadavg()
        print(f"hairpin: {binary} ({'as given' if args.hairpin else 'release build' if args.release else 'image build, static'})")
        if args.baseline:
            print(f"baseline: {args.baseline}")
        print(f"host: {cpu_model()}, {os.cpu_count()} CPUs, kernel {os.uname().release}")
        print(f"machine: {os.cpu_count()} CPUs, load average before: {load_before[0]:.2f} {load_before[1]:.2f} {load_before[2]:.2f}")
        print(f"rounds: {args.rounds}, {args.duration}s per run (bulk {args.duration + 1}s); wrk "
              + ", ".join(f"{w} -t{WORKLOADS[w][4]} -c{WORKLOADS[w][1]}" for w in WORKLOADS), flush=True)
        problems = {}
        for name, port in targets.items():  # warm-up
            run_wrk(port, next(iter(WORKLOADS)), 1)

        # Memory per open connection, before the rounds (whose bulk transfers would leave freed
        # buffers for the held connections to reuse): RssAnon with N connections open, each
        # holding half a request, less RssAnon just before, over N. Interleaved by level.
        memory_proxies = ["haproxy", "hairpin", *(["baseline"] if args.baseline else [])]
        idle_anon = {proxy: memory(procs[proxy].pid)[2] for proxy in memory_proxies}
        per_conn = {}
        for level in levels:
            for proxy in memory_proxies:
                port = targets[proxy + "-v1"]
                kib, anon, problem = anon_per_connection(procs[proxy].pid, port, level, idle_anon[proxy])
                per_conn[(proxy, level)] = kib
                if problem:
                    problems.setdefault((f"memory {level}", proxy), []).append(problem)
        if levels:
            print(f"memory per open connection measured at {', '.join(f'{n:,}' for n in levels)}", flush=True)

        results = {(w, t): [] for w in WORKLOADS for t in targets}
        # CPU time the proxy process spent per unit of work (µs per request, ms per GiB): the
        # proxy's own cost, which throughput on a shared 2-core machine only shows diluted.
        cpu_cost = {(w, t): [] for w in WORKLOADS for t in targets}
        kernel_share = {(w, t): [] for w in WORKLOADS for t in targets}
        owner = {"direct": None, "haproxy-v1": "haproxy", "haproxy-v2": "haproxy",
                 "hairpin-v1": "hairpin", "hairpin-v2": "hairpin", "baseline-v1": "baseline", "baseline-v2": "baseline"}
        latencies = {(w, t): [] for w in WORKLOADS for t in targets}
        # How nginx's workers share each keep-alive run's connections (sampled halfway through):
        # one more variable a run draws at random, beside the machine's load (see the docstring).
        nginx_workers = [pid for pid in process_tree(procs["nginx"].pid) if pid != procs["nginx"].pid]
        nginx_idle = {pid: socket_fds(pid) for pid in nginx_workers}
        splits = {t: [] for t in targets}
        one_cpu = {t: [] for t in targets}
        tasks = {"direct": [(pid, pid) for pid in nginx_workers]}
        names = list(targets)
        for round_ in range(args.rounds):
            order = round_order(names, round_)
            for workload in WORKLOADS:
                for name in order:
                    duration = args.duration + (1 if WORKLOADS[workload][3] == "MiB/s" else 0)
                    proc = procs[owner[name]] if owner[name] else None
                    before = cpu_times(proc.pid) if proc else (0.0, 0.0)
                    during = None
                    if workload == "keepalive":
                        if name not in tasks:
                            tasks[name] = worker_tasks([proc.pid], None if owner[name] == "haproxy" else "hairpin-proxy")
                        during = Placement(tasks[name], nginx_workers, nginx_idle, duration)
                    value, p99, issues, done = run_wrk(targets[name], workload, duration, during)
                    if during:
                        splits[name].append(during.split or [])
                        one_cpu[name].append(during.one_cpu())
                    if proc and done > 0:
                        after = cpu_times(proc.pid)
                        user, system = after[0] - before[0], after[1] - before[1]
                        spent = user + system
                        if spent > 0:
                            kernel_share[(workload, name)].append(system / spent)
                        # µs per request, or ms per GiB for bulk (`done` is in MiB there)
                        cpu_cost[(workload, name)].append(spent * 1e6 / done if WORKLOADS[workload][3] != "MiB/s" else spent * 1e3 * 1024 / done)
                    results[(workload, name)].append(value)
                    latencies[(workload, name)].append(p99)
                    if issues:
                        problems.setdefault((workload, name), []).extend(issues)
            print(f"round {round_ + 1}/{args.rounds} done", flush=True)

        print()
        header = f"{'workload':<10} {'target':<11} {'median':>12} {'unit':<6} {'p99 ms':>8}   runs"
        print(header)
        print("-" * len(header))
        for workload, (_, _, _, unit, _) in WORKLOADS.items():
            for name in names:
                runs = results[(workload, name)]
                p99 = statistics.median(latencies[(workload, name)])
                shown = " ".join(f"{r:.0f}" for r in runs)
                print(f"{workload:<10} {name:<11} {statistics.median(runs):>12.1f} {unit:<6} {p99:>8.2f}   {shown}")
        if any(splits.values()):
            print()
            print("keep-alive, each run in run order: nginx's workers' shares of the connections (halfway through), "
                  "and the share of samples (every 20 ms) with the target's worker threads on one CPU")
            for name in names:
                shown = " ".join("/".join(str(n) for n in split) for split in splits[name])
                print(f"  {name:<11} nginx {shown}")
                shown = " ".join("-" if x is None else f"{x:.2f}" for x in one_cpu[name])
                print(f"  {'':<11} one CPU {shown}")
            print("keep-alive req/s, median of the runs whose worker threads shared one CPU half the time or more, and "
                  "of the others")
            for name in names:
                together = [v for v, x in zip(results[("keepalive", name)], one_cpu[name]) if x is not None and x >= 0.5]
                apart = [v for v, x in zip(results[("keepalive", name)], one_cpu[name]) if x is not None and x < 0.5]
                cells = [f"{statistics.median(runs):8.0f} ({len(runs)} runs)" if runs else f"{'-':>8} (0 runs)"
                         for runs in (together, apart)]
                print(f"  {name:<11} one CPU {cells[0]}   apart {cells[1]}")
        print()
        print("ratios of medians (throughput: higher is better; p99: lower is better)")
        for workload in WORKLOADS:
            med = {n: statistics.median(results[(workload, n)]) for n in names}
            p99 = {n: statistics.median(latencies[(workload, n)]) for n in names}
            for v in ("v1", "v2"):
                print(f"  {workload:<10} {v}: hairpin/haproxy {med['hairpin-' + v] / med['haproxy-' + v]:.3f}"
                      f"   hairpin/direct {med['hairpin-' + v] / med['direct']:.3f}"
                      f"   p99 hairpin/haproxy {p99['hairpin-' + v] / max(p99['haproxy-' + v], 1e-9):.3f}")
                if args.baseline:
                    print(f"  {'':<10} {v}: baseline/haproxy {med['baseline-' + v] / med['haproxy-' + v]:.3f}"
                          f"  baseline/direct {med['baseline-' + v] / med['direct']:.3f}"
                          f"   p99 baseline/haproxy {p99['baseline-' + v] / max(p99['haproxy-' + v], 1e-9):.3f}")
        print()
        print("proxy CPU per unit of work (median; keepalive/newconn: µs per request, bulk: ms per GiB; lower is better)")
        for workload in WORKLOADS:
            for v in ("v1", "v2"):
                hp = statistics.median(cpu_cost[(workload, "hairpin-" + v)] or [0])
                ha = statistics.median(cpu_cost[(workload, "haproxy-" + v)] or [0])
                print(f"  {workload:<10} {v}: hairpin {hp:8.2f}   haproxy {ha:8.2f}   hairpin/haproxy {hp / max(ha, 1e-9):.3f}")
                if args.baseline:
                    base = statistics.median(cpu_cost[(workload, "baseline-" + v)] or [0])
                    print(f"  {'':<10} {v}: baseline {base:7.2f}   haproxy {ha:8.2f}   baseline/haproxy {base / max(ha, 1e-9):.3f}")
        print()
        # The verdict against HAProxy: each round's ratio of two adjacent runs, which share the
        # machine's load of that moment, rather than two medians taken at different moments.
        print("hairpin/haproxy paired within each round (median of the per-round ratios [min-max], and in how many "
              "rounds it was ahead; throughput: higher is better, CPU per unit: lower is better)")
        for workload in WORKLOADS:
            for v in ("v1", "v2"):
                for proxy in ("hairpin", *(["baseline"] if args.baseline else [])):
                    parts = []
                    for label, series, higher in (("throughput", results, True), ("CPU per unit", cpu_cost, False)):
                        pair = paired(series[(workload, f"{proxy}-{v}")], series[(workload, f"haproxy-{v}")], higher)
                        if pair:
                            med, low, high, ahead, n = pair
                            parts.append(f"{label} {med:.3f} [{low:.2f}-{high:.2f}] ahead in {ahead}/{n}")
                    print(f"  {workload:<10} {v}: {proxy}/haproxy paired " + "   ".join(parts))
        print()
        if args.baseline:
            print("hairpin/baseline (medians; in brackets the same ratio within each round, min-max)")
            for workload in WORKLOADS:
                for v in ("v1", "v2"):
                    parts = []
                    for label, series in (("throughput", results), ("CPU per unit", cpu_cost),
                                          ("p99", latencies)):
                        hp_runs, base_runs = series[(workload, "hairpin-" + v)], series[(workload, "baseline-" + v)]
                        if not hp_runs or not base_runs:
                            continue
                        per_round = [a / max(b, 1e-9) for a, b in zip(hp_runs, base_runs)]
                        ratio = statistics.median(hp_runs) / max(statistics.median(base_runs), 1e-9)
                        parts.append(f"{label} {ratio:.3f} [{min(per_round):.2f}-{max(per_round):.2f}]")
                    print(f"  {workload:<10} {v}: " + "   ".join(parts))
            print()
        # /proc/<pid>/stat stime over utime + stime: the share of each proxy's CPU spent in the
        # kernel (TCP, wake-ups, copies) for the same work, which no user-space proxy removes.
        print("kernel share of each proxy's CPU (system / (user + system), median) and user-space CPU per unit")
        for workload in WORKLOADS:
            for v in ("v1", "v2"):
                parts = []
                for proxy in ("hairpin", "haproxy"):
                    key = (workload, f"{proxy}-{v}")
                    share = statistics.median(kernel_share[key] or [0])
                    cost = statistics.median(cpu_cost[key] or [0])
                    parts.append(f"{proxy} {share * 100:5.1f}% kernel, user {cost * (1 - share):7.2f}")
                print(f"  {workload:<10} {v}: " + "   ".join(parts))
        print()
        if args.profile:
            print("where the CPU per request goes, PROXY v1 (µs per request: perf record call chains, "
                  "scaled to the CPU time measured over the same run)")
            for workload in [w for w in ("keepalive", "newconn") if w in WORKLOADS]:
                profiles = {proxy: profile_costs(procs[proxy].pid, targets[f"{proxy}-v1"], workload,
                                                 args.duration + 1, work)
                            for proxy in ("hairpin", "haproxy")}
                print(f"  {workload}: hairpin {profiles['hairpin'][1]:.2f} µs ({profiles['hairpin'][2]} samples), "
                      f"haproxy {profiles['haproxy'][1]:.2f} µs ({profiles['haproxy'][2]} samples)")
                paths = sorted(set(profiles["hairpin"][0]) | set(profiles["haproxy"][0]),
                               key=lambda p: -profiles["haproxy"][0].get(p, 0) - profiles["hairpin"][0].get(p, 0))
                for path in paths:
                    hp, ha = profiles["hairpin"][0].get(path, 0), profiles["haproxy"][0].get(path, 0)
                    print(f"    {path:<40} hairpin {hp:6.2f}   haproxy {ha:6.2f}")
            print()
            # Counted, not sampled: how many syscalls and context switches each proxy makes per
            # request (task-clock: CPU µs per request over the same run, in perf's own measure).
            print("perf stat per request (keepalive, newconn) and per MiB (bulk), PROXY v1; task-clock in µs; "
                  "with --baseline, the baseline beside")
            counted = ("hairpin", "haproxy", *(["baseline"] if args.baseline else []))
            for workload in WORKLOADS:
                stats = {proxy: stat_counts(procs[proxy].pid, targets[f"{proxy}-v1"], workload, args.duration + 1)[0]
                         for proxy in counted}
                print(f"  {workload} (per {'MiB' if WORKLOADS[workload][3] == 'MiB/s' else 'request'}):")
                ordered = [e for e in ("machine idle %", "task-clock", "all syscalls", "context-switches", "cpu-migrations", "page-faults",
                                       *STAT_SYSCALLS) if any(e in stats[p] for p in counted)]
                for event in ordered:
                    values = {p: stats[p].get(event, 0) * (1e3 if event == "task-clock" else 1) for p in counted}
                    if any(values.values()):
                        print(f"    {event:<20} " + "   ".join(f"{p} {v:9.3f}" for p, v in values.items()))
            print()
        print("resident memory after the runs (KiB)")
        for proc in ("haproxy", "hairpin", *(["baseline"] if args.baseline else []), "nginx"):
            rss, hwm, anon, file = memory(procs[proc].pid)
            print(f"  {proc:<8} VmRSS {rss:>8}   VmHWM {hwm:>8}   RssAnon {anon:>8}   RssFile {file:>8}"
                  + ("   (master + workers)" if proc == "nginx" else ""))
        print()
        if levels:
            print("anonymous memory per open connection (RssAnon growth over the connections, each holding half a "
                  "request; KiB; lower is better)")
            for level in levels:
                ha = per_conn[("haproxy", level)]
                line = f"  {level:>6,} connections: haproxy {ha:6.2f}   hairpin {per_conn[('hairpin', level)]:6.2f}" \
                       f"   hairpin/haproxy {per_conn[('hairpin', level)] / max(ha, 1e-9):.3f}"
                if args.baseline:
                    line += f"   baseline {per_conn[('baseline', level)]:6.2f}" \
                            f"   baseline/haproxy {per_conn[('baseline', level)] / max(ha, 1e-9):.3f}"
                print(line)
            print()
        planner_checks = []
        if not args.no_planner:
            print("planner at 10,000 Ingresses and 20,000 hostnames (medians of 9 runs)")
            _, _, times, corefile_kib, (rss_mib, hwm_mib) = planner_figures(target_dir, not args.no_build, binary)
            for case, (wall, cpu) in times.items():
                print(f"  desired() {case:<13} {cpu:7.1f} ms CPU   {wall:7.1f} ms wall")
            print(f"  Corefile                 {corefile_kib:7.1f} KiB")
            print(f"  controller VmRSS         {rss_mib:7.1f} MiB (memory_10k: the controller process, steady state)")
            print(f"  controller VmHWM         {hwm_mib:7.1f} MiB (its peak)")
            print()
            worst = max(times.values(), key=lambda t: t[1])
            # (The trailing True marks an absolute figure, printed with one decimal.)
            planner_checks.append(("planner desired() CPU ms", worst[1], "<=", 50, f"(wall {worst[0]:.1f} ms)", True))
            # Whole names since issue 24 (the per-domain groups cost every DNS query 30x at this
            # scale, docs/dns-cost.md): about 670 KiB here; the ConfigMap limit is 1,024.
            planner_checks.append(("planner Corefile KiB", corefile_kib, "<=", 768, "", True))
            planner_checks.append(("controller VmRSS MiB", rss_mib, "<=", 64, "(steady state)", True))
            planner_checks.append(("controller VmHWM MiB", hwm_mib, "<=", 64, "(peak)", True))
        # Every ratio to HAProxy in one table (and the baseline's beside it, from the same rounds).
        print("summary: ratios to HAProxy (median; [min-max of the same ratio within each round]); "
              "throughput >= 1.0 and CPU <= 1.0 is ahead")
        for workload in WORKLOADS:
            unit = "CPU/GiB" if WORKLOADS[workload][3] == "MiB/s" else "CPU/req"
            for v in ("v1", "v2"):
                parts = []
                for proxy in ("hairpin", *(["baseline"] if args.baseline else [])):
                    cells = []
                    for series in (results, cpu_cost):
                        ours, theirs = series[(workload, f"{proxy}-{v}")], series[(workload, f"haproxy-{v}")]
                        if not ours or not theirs:
                            cells.append("   n/a")
                            continue
                        per_round = [a / max(b, 1e-9) for a, b in zip(ours, theirs)]
                        cells.append(f"{statistics.median(ours) / max(statistics.median(theirs), 1e-9):5.2f}"
                                     f" [{min(per_round):.2f}-{max(per_round):.2f}]")
                    parts.append(f"{proxy} throughput {cells[0]} {unit} {cells[1]}")
                print(f"  {workload:<9} {v}  " + "   ".join(parts))
        for level in levels:
            line = f"  memory/conn at {level:,}: hairpin {per_conn[('hairpin', level)] / max(per_conn[('haproxy', level)], 1e-9):.3f}"
            if args.baseline:
                line += f"   baseline {per_conn[('baseline', level)] / max(per_conn[('haproxy', level)], 1e-9):.3f}"
            print(line + f"   (haproxy {per_conn[('haproxy', level)]:.2f} KiB)")
        print()
        print("targets (hairpin/haproxy per shape: the median of the ratios within each round, whose two runs "
              "are adjacent; beside it their min-max and the ratio of the medians above)")

        def paired_check(name, hp_runs, ha_runs, op, limit):
            """A target on the per-round ratios (both proxies ran back to back, under the same load)."""
            pair = paired(hp_runs, ha_runs)
            if not pair:
                return (name, 0.0, op, limit, "no runs")
            med, low, high, _, n = pair
            of_medians = statistics.median(hp_runs) / max(statistics.median(ha_runs), 1e-9)
            note = (f"rounds {low:.2f}-{high:.2f}, " if n > 1 else "") + f"ratio of medians {of_medians:.3f}"
            return (name, med, op, limit, note)

        checks = []
        for workload in WORKLOADS:
            for v in ("v1", "v2"):
                hp, ha = "hairpin-" + v, "haproxy-" + v
                checks.append(paired_check(f"{workload} {v} throughput", results[(workload, hp)],
                                           results[(workload, ha)], ">=", 1.0))
        for workload in WORKLOADS:
            limit = 0.5 if WORKLOADS[workload][3] == "MiB/s" else 0.85
            unit = "CPU per GiB" if WORKLOADS[workload][3] == "MiB/s" else "CPU per request"
            for v in ("v1", "v2"):
                checks.append(paired_check(f"{workload} {v} {unit}", cpu_cost[(workload, "hairpin-" + v)],
                                           cpu_cost[(workload, "haproxy-" + v)], "<=", limit))
        for level in levels:
            hp, ha = per_conn[("hairpin", level)], per_conn[("haproxy", level)]
            checks.append((f"memory per connection at {level:,}", hp / max(ha, 1e-9), "<=", 0.5,
                           f"{hp:.2f} / {ha:.2f} KiB"))
        hwm = {proc: memory(procs[proc].pid)[1] for proc in ("haproxy", "hairpin")}
        checks.append(("resident memory peak (VmHWM)", hwm["hairpin"] / max(hwm["haproxy"], 1), "<=", 0.5,
                       f"{hwm['hairpin']} / {hwm['haproxy']} KiB"))
        for workload in WORKLOADS:
            for v in ("v1", "v2"):
                checks.append(paired_check(f"{workload} {v} p99 latency", latencies[(workload, "hairpin-" + v)],
                                           latencies[(workload, "haproxy-" + v)], "<=", 1.0))
        checks.extend(planner_checks)
        for name, ratio, op, limit, note, *absolute in checks:
            met = ratio >= limit if op == ">=" else ratio <= limit
            shown = f"{ratio:6.3f}" if not absolute else f"{ratio:6.1f}"
            print(f"  {name:<32} {shown}  {op} {limit:<4}  {'PASS' if met else 'MISS'}" + (f"  {note}" if note else ""))
        missed = sum(1 for _, ratio, op, limit, *_ in checks if not (ratio >= limit if op == ">=" else ratio <= limit))
        print(f"  {len(checks) - missed} of {len(checks)} targets met")
        load_after = os.getloadavg()
        print(f"load average after: {load_after[0]:.2f} {load_after[1]:.2f} {load_after[2]:.2f}")
        for key, issues in problems.items():
            print(f"note: {key[0]} {key[1]}: {'; '.join(sorted(set(issues)))}")
        if args.smoke:
            print("smoke run: harness OK (figures from a 1-round run mean little)")
    finally:
        stop_all(procs.values())
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
