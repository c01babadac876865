//! Resident memory of the controller process with 10,000 Ingresses and 20,000 hostnames.
//!
//! ```text
//! cargo build --release -p hairpin
//! cargo run --release -p hairpin-controller --example memory_10k [-- --hairpin PATH]
//! ```
//!
//! Loads 10,000 realistic Ingresses (two hostnames each, TLS, paths, annotations,
//! managedFields, a last-applied annotation) into the in-process fake API server, then runs the
//! real `hairpin controller` binary as a separate process against it (default: the `hairpin`
//! next to this example's directory, i.e. `target/release/hairpin`; `--hairpin PATH` or
//! `HAIRPIN_BIN` to choose another). The fake's own copy of the objects stays in this process,
//! so the figures, read from the controller's `/proc/<pid>/status`, are the controller's alone:
//! VmRSS once the first plan is written, VmRSS in the steady state after a few more changes,
//! and VmHWM, the peak. The controller runs with `--verify-hostnames=off --cure=dns`, so that no
//! query or probe leaves the machine.
//!
//! `bench/run.sh` reads the `controller VmRSS steady state` and `controller VmHWM` lines.

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use hairpin_fake_apiserver::{FakeApiServer, fixtures, object};
use serde_json::json;

const INGRESSES: usize = 10_000;
/// Tenant namespaces the Ingresses are spread over.
const TENANTS: usize = 500;

/// Memory figures of a process from `/proc/<pid>/status`, in KiB.
struct Memory {
    /// Resident now.
    rss: u64,
    /// Resident at the peak.
    hwm: u64,
    /// Resident anonymous memory (the heap, stacks), part of `rss`.
    anon: u64,
    /// Resident pages of mapped files (the binary's code), part of `rss`.
    file: u64,
}

fn memory_kib(pid: u32) -> Memory {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status"))
        .unwrap_or_else(|err| panic!("/proc/{pid}/status: {err}"));
    let field = |name: &str| {
        status
            .lines()
            .find_map(|l| l.strip_prefix(name))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
            .unwrap_or_else(|| panic!("no {name} line in /proc/{pid}/status"))
    };
    Memory {
        rss: field("VmRSS:"),
        hwm: field("VmHWM:"),
        anon: field("RssAnon:"),
        file: field("RssFile:"),
    }
}

fn mib(kib: u64) -> f64 {
    kib as f64 / 1024.0
}

/// Ingress `i`: two hostnames of its own (an app and its API), both in its TLS section.
fn ingress(i: usize) -> serde_json::Value {
    let tenant = i % TENANTS;
    let app = format!("app-{i}.tenant-{tenant}.example.com");
    let api = format!("api-{i}.tenant-{tenant}.example.com");
    let paths = |service: &str, port: u16| {
        json!([
            {"path": "/", "pathType": "Prefix", "backend": {"service": {"name": service, "port": {"number": port}}}},
            {"path": "/static", "pathType": "Prefix", "backend": {"service": {"name": format!("{service}-static"), "port": {"number": 80}}}}
        ])
    };
    object(
        "networking.k8s.io/v1",
        "Ingress",
        Some(&format!("tenant-{tenant}")),
        &format!("app-{i}"),
        json!({
            "metadata": {
                "labels": {"app.kubernetes.io/name": format!("app-{i}"), "app.kubernetes.io/instance": "prod"},
                "annotations": {
                    "cert-manager.io/cluster-issuer": "letsencrypt",
                    "nginx.ingress.kubernetes.io/proxy-body-size": "16m",
                    "kubectl.kubernetes.io/last-applied-configuration": "x".repeat(900)
                },
                "managedFields": [{"manager": "kubectl", "operation": "Apply", "apiVersion": "networking.k8s.io/v1",
                                   "time": "2026-01-01T00:00:00Z", "fieldsType": "FieldsV1",
                                   "fieldsV1": {"f:metadata": {"f:annotations": {".": {}, "f:cert-manager.io/cluster-issuer": {}}},
                                                "f:spec": {"f:ingressClassName": {}, "f:rules": {}, "f:tls": {}}}},
                                  {"manager": "nginx-ingress-controller", "operation": "Update", "apiVersion": "networking.k8s.io/v1",
                                   "time": "2026-01-01T00:00:05Z", "fieldsType": "FieldsV1", "subresource": "status",
                                   "fieldsV1": {"f:status": {"f:loadBalancer": {"f:ingress": {}}}}}]
            },
            "spec": {
                "ingressClassName": "nginx",
                "tls": [{"hosts": [app.clone(), api.clone()], "secretName": format!("app-{i}-tls")}],
                "rules": [
                    {"host": app, "http": {"paths": paths(&format!("app-{i}"), 80)}},
                    {"host": api, "http": {"paths": paths(&format!("app-{i}-api"), 8080)}}
                ]
            },
            "status": {"loadBalancer": {"ingress": [{"ip": "203.0.113.10"}]}}
        }),
    )
}

/// The CoreDNS Corefile, when the ConfigMap exists.
fn corefile(fake: &FakeApiServer) -> Option<String> {
    fake.get("v1", "ConfigMap", Some("kube-system"), "coredns")
        .and_then(|cm| cm["data"]["Corefile"].as_str().map(str::to_owned))
}

/// True when the CoreDNS Corefile contains `needle`.
fn corefile_contains(fake: &FakeApiServer, needle: &str) -> bool {
    fake.get("v1", "ConfigMap", Some("kube-system"), "coredns")
        .is_some_and(|cm| {
            cm["data"]["Corefile"]
                .as_str()
                .unwrap_or("")
                .contains(needle)
        })
}

/// The `hairpin` binary: `--hairpin PATH`, else `HAIRPIN_BIN`, else `target/<profile>/hairpin`
/// beside this example's `examples/` directory.
fn hairpin_binary() -> PathBuf {
    let mut args = std::env::args().skip(1);
    let chosen = match (args.next().as_deref(), args.next()) {
        (Some("--hairpin"), Some(path)) => Some(PathBuf::from(path)),
        (None, _) => std::env::var_os("HAIRPIN_BIN").map(PathBuf::from),
        _ => {
            eprintln!("usage: memory_10k [--hairpin PATH]");
            std::process::exit(2);
        }
    };
    let binary = chosen.unwrap_or_else(|| {
        let exe = std::env::current_exe().expect("this example's path");
        exe.parent()
            .and_then(|examples| examples.parent())
            .expect("the example runs from target/<profile>/examples")
            .join("hairpin")
    });
    if !binary.is_file() {
        eprintln!(
            "no hairpin binary at {}: build it first (`cargo build --release -p hairpin`) or pass --hairpin PATH",
            binary.display()
        );
        std::process::exit(2);
    }
    binary
}

/// The controller process, ended with SIGTERM (its drain) when dropped, and killed if it is
/// still running after the drain should have finished.
struct Controller(Child);

impl Drop for Controller {
    fn drop(&mut self) {
        let _ = Command::new("kill")
            .args(["-TERM", &self.0.id().to_string()])
            .status();
        let deadline = Instant::now() + Duration::from_secs(10);
        while Instant::now() < deadline {
            if self.0.try_wait().ok().flatten().is_some() {
                return;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// A free loopback port for the controller's admin server.
fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free loopback port")
        .port()
}

/// The value of an unlabelled metric on the controller's `/metrics`.
fn metric(port: u16, name: &str) -> Option<f64> {
    use std::io::{Read, Write};
    let mut conn = std::net::TcpStream::connect(("127.0.0.1", port)).ok()?;
    conn.write_all(b"GET /metrics HTTP/1.0\r\nHost: localhost\r\n\r\n")
        .ok()?;
    let mut text = String::new();
    conn.read_to_string(&mut text).ok()?;
    text.lines()
        .find_map(|l| l.strip_prefix(name)?.strip_prefix(' '))
        .and_then(|v| v.trim().parse().ok())
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let binary = hairpin_binary();
    let fake = FakeApiServer::start().await;
    fake.create_namespace("hairpin");
    fake.apply(fixtures::proxy_load_balancer(
        "load-balancer.hetzner.cloud/uses-proxyprotocol",
        "203.0.113.10",
        json!([{"name": "https", "port": 443, "protocol": "TCP"}]),
    ));
    fake.apply(fixtures::coredns(
        ".:53 {\n    errors\n    kubernetes cluster.local in-addr.arpa ip6.arpa {\n       pods insecure\n    }\n    forward . /etc/resolv.conf\n    reload\n}\n",
    ));
    fake.apply_many((0..INGRESSES).map(ingress));

    let dir = tempfile::tempdir().expect("a temporary directory");
    let kubeconfig = fake.write_kubeconfig(dir.path());
    let admin = free_port();
    let started = Instant::now();
    let child = Command::new(&binary)
        .arg("controller")
        .arg("--kubeconfig")
        .arg(&kubeconfig)
        .args(["--leader-election=false", "--identity=memory-probe"])
        // Nothing leaves the machine: no hostname is looked up in the machine's resolver and no
        // load balancer address (203.0.113.10) is probed; every hostname is planned.
        .args(["--verify-hostnames=off", "--cure=dns"])
        .arg(format!("--admin-addr=127.0.0.1:{admin}"))
        .env(
            "HAIRPIN_LOG",
            std::env::var("HAIRPIN_LOG").unwrap_or_else(|_| "warn".into()),
        )
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .spawn()
        .unwrap_or_else(|err| panic!("cannot start {}: {err}", binary.display()));
    let pid = child.id();
    let controller = Controller(child);

    let Some(written) = fake
        .wait_until(Duration::from_secs(180), |f| {
            corefile_contains(f, "# BEGIN hairpin")
        })
        .await
    else {
        eprintln!(
            "the plan was not written in time; Corefile:\n{}",
            corefile(&fake).unwrap_or_default()
        );
        drop(controller);
        std::process::exit(1);
    };
    let synced_and_written = written - started;
    let at_write = memory_kib(pid);
    let written_corefile = corefile(&fake).unwrap_or_default();
    let planned = metric(admin, "hairpin_controller_managed_hostnames").unwrap_or(0.0);

    // A few more changes at this scale: change-to-write latency with 10,000 Ingresses cached.
    let mut latencies = Vec::new();
    let mut before = written_corefile.clone();
    for i in 0..5 {
        let mut extra = ingress(INGRESSES + i);
        extra["spec"]["rules"][0]["host"] = format!("new-{i}.example.com").into();
        let changed = Instant::now();
        fake.apply(extra);
        let seen = fake
            .wait_until(Duration::from_secs(60), |f| {
                corefile(f).is_some_and(|c| c != before)
            })
            .await
            .expect("the change was written");
        before = corefile(&fake).unwrap_or_default();
        latencies.push(seen - changed);
    }
    latencies.sort();
    // Settle: the last reconcile's status writes and propagation check are done.
    tokio::time::sleep(Duration::from_secs(2)).await;
    let steady = memory_kib(pid);
    drop(controller);

    println!(
        "ingresses cached: {INGRESSES} ({} hostnames)",
        2 * INGRESSES
    );
    println!("hostnames planned (the controller's managed_hostnames): {planned}");
    println!(
        "Corefile size: {} bytes, {:.1} KiB",
        written_corefile.len(),
        written_corefile.len() as f64 / 1024.0
    );
    println!("first sync + plan written: {synced_and_written:?}");
    println!(
        "change-to-write latency at this scale (debounce 150 ms): min {:?}, median {:?}, max {:?}",
        latencies[0], latencies[2], latencies[4]
    );
    println!(
        "controller VmRSS plan written:  {:7.1} MiB",
        mib(at_write.rss)
    );
    println!(
        "controller VmRSS steady state: {:7.1} MiB ({:.1} MiB anonymous, {:.1} MiB of mapped files)",
        mib(steady.rss),
        mib(steady.anon),
        mib(steady.file)
    );
    println!("controller VmHWM (peak):       {:7.1} MiB", mib(steady.hwm));
}
