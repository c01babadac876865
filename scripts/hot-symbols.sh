#!/usr/bin/env bash
# Renews scripts/hot-symbols.txt: the functions `hairpin proxy` runs, which the image's linker
# (scripts/link-hot-first.sh) places next to each other so the proxy maps less of its binary.
#
#   scripts/hot-symbols.sh          (about 15 minutes: one image build; the two runs under
#                                    callgrind then take 1 to 3 minutes)
#
# It builds the image's binary exactly as scripts/image-rootfs.sh does (the `image` profile
# keeps the symbols, which image-rootfs.sh strips when it installs the binary: a build that
# differed only in its strip setting would split the LTO module otherwise, inline otherwise
# and run other functions), by default in its own target directory; CI's image target
# directory (HAIRPIN_HOT_TARGET_DIR=~/.cache/hairpin/target-image) saves a build. Then it runs
# `hairpin proxy` under callgrind (valgrind), which lists every function that ran, twice, while
# a client on loopback drives the work the proxy does in a cluster: its start, PROXY v1 and v2
# connections to a local upstream, keep-alive requests, new connections, bulk transfers both
# ways (the splice path), refused upstreams, /metrics and /readyz, SIGTERM and the drain.
# The first run reads its routes from `--routes-file`. The second reads them as in a cluster,
# `--routes-configmap hairpin/hairpin-routes --kubeconfig ...`, from a real kube-apiserver
# (crates/testkit/examples/apiserver.rs, the tests' ApiServer: etcd and kube-apiserver on a
# local address of this machine): the kube client, its TLS (rustls), hyper and the watch of
# the ConfigMap, which is then updated once with a route more (the proxy must start
# accepting on it). The names are written without their hashes (see link-hot-first.sh):
# the first run's sorted, then the sorted names only the second run adds, so that a proxy with
# a routes file maps none of those, and a renewed list diffs by the functions that changed.
#
# When: after a change to the proxy's path or to its dependencies (image-rootfs.sh prints how
# many listed names the last image build found; fewer found means more of the binary mapped).
# Needs valgrind (Debian's `valgrind`) and what the real-Kubernetes tests need: root, the
# Kubernetes test peers (../shared/peers/kubernetes) and etcd (scripts/install-test-deps.sh);
# without them it stops, saying which is missing. Traffic stays on this machine: the proxy,
# its clients and its upstream on 127.0.0.1, the apiserver on a local address (10.201.x.y,
# the testkit's own veth).
set -euo pipefail
cd "$(dirname "$0")/.."

command -v valgrind >/dev/null || { echo "hot-symbols: needs valgrind (apt-get install valgrind)" >&2; exit 1; }
# The apiserver example is built (debug) in the workspace's usual target directory, whose
# unpacked Kubernetes peers it also reuses.
cargo build --locked -q -p hairpin-testkit --example apiserver
dev_target="$(cargo metadata --format-version 1 --no-deps | python3 -c 'import json, sys; print(json.load(sys.stdin)["target_directory"])')"
apiserver="$dev_target/debug/examples/apiserver"
target="$(rustc -vV | sed -n 's/^host: //p')"
export CARGO_TARGET_DIR="${HAIRPIN_HOT_TARGET_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/hairpin/target-hot-symbols}"
RUSTFLAGS="$(scripts/image-rootfs.sh --rustflags)" \
    cargo build --profile image --locked -p hairpin --target "$target"
bin="$CARGO_TARGET_DIR/$target/image/hairpin"

work="$(mktemp -d)"
trap 'kill $(jobs -p) 2>/dev/null || true; rm -rf "$work"' EXIT
python3 - "$bin" "$work" "$apiserver" "$dev_target" <<'EOF'
import atexit, json, os, re, signal, socket, subprocess, sys, threading, time

# Whatever ends this script (a failed check included) ends the processes it started too.
started = []
atexit.register(lambda: [p.kill() for p in started if p.poll() is None])

binary, work, apiserver_example, dev_target = sys.argv[1:5]

def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]

# The upstream: reads the PROXY header with the request; answers "BIG" with 4 MiB, an upload
# (a request of more than 64 KiB) with "ok" once it is all read, anything else with "ok".
def serve(conn):
    with conn:
        buf = b""
        while True:
            data = conn.recv(65536)
            if not data:
                return
            buf += data
            if b"BIG\n" in buf:
                conn.sendall(b"x" * (4 << 20)); buf = b""
            elif b"UPLOAD\n" in buf and buf.endswith(b"END\n"):
                conn.sendall(b"ok\n"); buf = b""
            elif buf.endswith(b"SMALL\n"):
                conn.sendall(b"ok\n"); buf = b""

upstream = socket.socket(); upstream.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
upstream.bind(("127.0.0.1", 0)); upstream.listen(128)
up_port = upstream.getsockname()[1]
threading.Thread(target=lambda: [threading.Thread(target=serve, args=(c,), daemon=True).start()
                                 for c, _ in iter(upstream.accept, None)], daemon=True).start()

dead_port = free_port()  # nothing listens there: the upstream of the route "refused"

def routes(v1, v2, refused, added=None):
    table = [
        {"name": "v1", "listen": f"127.0.0.1:{v1}", "upstream": f"127.0.0.1:{up_port}", "proxy_protocol": "v1"},
        {"name": "v2", "listen": f"127.0.0.1:{v2}", "upstream": f"127.0.0.1:{up_port}", "proxy_protocol": "v2",
         "destination": "192.0.2.10:443"},
        {"name": "refused", "listen": f"127.0.0.1:{refused}", "upstream": f"127.0.0.1:{dead_port}",
         "proxy_protocol": "v1"},
    ]
    if added:
        table.append({"name": "added", "listen": f"127.0.0.1:{added}", "upstream": f"127.0.0.1:{up_port}",
                      "proxy_protocol": "v1"})
    return json.dumps(table, indent=2)

def request(port, path):
    with socket.create_connection(("127.0.0.1", port), timeout=30) as s:
        s.sendall(f"GET {path} HTTP/1.0\r\n\r\n".encode())
        return b"".join(iter(lambda: s.recv(65536), b""))

def start_proxy(tag, route_args):
    """`hairpin proxy` under callgrind, once /readyz answers 200: the process, its admin port."""
    admin = free_port()
    log = os.path.join(work, f"proxy.{tag}.log")
    proxy = subprocess.Popen(["valgrind", "--tool=callgrind", "--demangle=no",
                              f"--callgrind-out-file={os.path.join(work, f'callgrind.{tag}.out')}",
                              binary, "proxy", *route_args, "--workers", "2",
                              "--admin-addr", f"127.0.0.1:{admin}", "--shutdown-delay", "1s", "--drain-timeout", "5s"],
                             stdout=subprocess.DEVNULL, stderr=open(log, "w"))
    started.append(proxy)
    deadline = time.monotonic() + 180
    while True:
        try:
            if b"200" in request(admin, "/readyz"):
                return proxy, admin
        except OSError:
            pass
        if time.monotonic() > deadline or proxy.poll() is not None:
            proxy.kill()
            sys.exit(f"hot-symbols: the proxy ({tag}) did not become ready; its log:\n" + open(log).read()[-4000:])
        time.sleep(0.5)

def exchange(s, message, until=b"ok\n", size=None):
    s.sendall(message)
    got = b""
    while (len(got) < size) if size else not got.endswith(until):
        data = s.recv(1 << 20)
        if not data:
            break
        got += data
    return got

def drive(v1, v2, refused, admin):
    for port in (v1, v2):
        for _ in range(3):  # new connections, each with a few keep-alive requests, a download, an upload
            with socket.create_connection(("127.0.0.1", port), timeout=30) as s:
                for _ in range(20):
                    assert exchange(s, b"SMALL\n").endswith(b"ok\n")
                assert len(exchange(s, b"BIG\n", size=4 << 20)) == 4 << 20
                assert exchange(s, b"UPLOAD\n" + b"y" * (4 << 20) + b"END\n").endswith(b"ok\n")
                s.shutdown(socket.SHUT_WR)
                s.recv(1)
    for _ in range(3):
        with socket.create_connection(("127.0.0.1", refused), timeout=30) as s:
            s.recv(1)
    request(admin, "/metrics"); request(admin, "/healthz"); request(admin, "/readyz")

def wait_accepts(proxy, tag, port):
    """Routes from a ConfigMap come after /readyz: wait until the route's port accepts."""
    deadline = time.monotonic() + 120
    while True:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=30).close()
            return
        except OSError:
            if time.monotonic() > deadline or proxy.poll() is not None:
                proxy.kill()
                sys.exit(f"hot-symbols: the proxy ({tag}) never accepted on its routes; its log:\n"
                         + open(os.path.join(work, f"proxy.{tag}.log")).read()[-4000:])
            time.sleep(0.5)

def stop(proxy):
    proxy.send_signal(signal.SIGTERM)
    proxy.wait(timeout=120)

# 1. Routes from a file.
v1, v2, refused = free_port(), free_port(), free_port()
with open(os.path.join(work, "routes.json"), "w") as f:
    f.write(routes(v1, v2, refused))
proxy, admin = start_proxy("file", ["--routes-file", os.path.join(work, "routes.json")])
drive(v1, v2, refused, admin)
stop(proxy)

# 2. Routes from a ConfigMap in a real kube-apiserver, as in a cluster. The example prints the
# admin kubeconfig, applies each object written to its stdin, and stops when stdin closes.
env = dict(os.environ, CARGO_TARGET_DIR=dev_target)
api = subprocess.Popen([apiserver_example], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env,
                       stderr=open(os.path.join(work, "apiserver.log"), "w"))
started.append(api)
line = api.stdout.readline()
if not line:
    api.wait()
    sys.exit("hot-symbols: the apiserver example did not start:\n" + open(os.path.join(work, "apiserver.log")).read()[-4000:])
kubeconfig = json.loads(line)["kubeconfig"]

def apply(obj):
    api.stdin.write(json.dumps(obj) + "\n"); api.stdin.flush()
    answer = json.loads(api.stdout.readline())
    if answer.get("status") not in (200, 201):
        sys.exit(f"hot-symbols: applying {obj['kind']} {obj['metadata']['name']}: {answer}")

def configmap(table):
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"namespace": "hairpin", "name": "hairpin-routes"},
            "data": {"routes.json": table}}

v1, v2, refused, added = free_port(), free_port(), free_port(), free_port()
apply({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "hairpin"}})
apply(configmap(routes(v1, v2, refused)))
proxy, admin = start_proxy("configmap", ["--routes-configmap", "hairpin/hairpin-routes", "--kubeconfig", kubeconfig])
for port in (v1, v2, refused):
    wait_accepts(proxy, "configmap", port)
drive(v1, v2, refused, admin)
apply(configmap(routes(v1, v2, refused, added)))  # a route more, through the watch
wait_accepts(proxy, "configmap", added)
with socket.create_connection(("127.0.0.1", added), timeout=30) as s:
    assert exchange(s, b"SMALL\n").endswith(b"ok\n")
request(admin, "/metrics")
stop(proxy)
api.stdin.close()
api.wait(timeout=60)

# Callgrind names a function once, where it first appears, as the function (`fn=(id) name`) or
# as a callee (`cfn=(id) name`); later lines give only the id.
names = {}
for tag in ("file", "configmap"):
    names[tag] = set()
    with open(os.path.join(work, f"callgrind.{tag}.out")) as f:
        for line in f:
            if line.startswith(("fn=(", "cfn=(")) and ") " in line:
                name = line.split(") ", 1)[1].strip()
                if name and not name.startswith("0x") and name != "(below main)":
                    names[tag].add(name)
symbols = subprocess.run(["nm", "--defined-only", "-P", binary], capture_output=True, text=True,
                         check=True).stdout
defined = {f[0] for f in map(str.split, symbols.splitlines()) if len(f) >= 2 and f[1] in "tTwW"}
def key(name):  # as link-hot-first.sh's key_of
    name = re.sub(r"\.(llvm\.)?[0-9]+$", "", name)
    if name.startswith("_R"):
        return re.sub(r"B[0-9a-zA-Z]*_", "B_", re.sub(r"Cs[0-9a-zA-Z]+_", "C", name))
    return re.sub(r"17h[0-9a-f]+E$", "", name)
keys = {tag: {key(n) for n in found if n in defined} for tag, found in names.items()}
# The linker places them in this order: what a proxy with a routes file runs first, then what
# only a proxy following a ConfigMap adds (kube's client, TLS, the watch), so that the first
# maps none of the second.
first = sorted(keys["file"])
then = sorted(keys["configmap"] - keys["file"])
with open("scripts/hot-symbols.txt", "w") as f:
    f.write("# The functions `hairpin proxy` runs (written by scripts/hot-symbols.sh; read, in this\n"
            "# order, by scripts/link-hot-first.sh): symbol names without their hashes, one per line.\n"
            "# With --routes-file:\n")
    f.write("\n".join(first) + "\n")
    f.write("# Only with --routes-configmap (kube's client, TLS, the watch):\n")
    f.write("\n".join(then) + "\n")
print(f"hot-symbols: {len(first)} + {len(then)} names written to scripts/hot-symbols.txt")
EOF
