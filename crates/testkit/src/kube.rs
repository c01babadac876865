//! A real kube-apiserver (with etcd) and real kube-proxy in network namespaces, for tests.
//!
//! The binaries are the Kubernetes v1.31.14 test peers in `../shared/peers/kubernetes`
//! (README there), unpacked once into `target/kube-peers-v1.31.14/`; etcd is Debian's `etcd-server`.
//! Call [`skip_without`] first: without root, the peers or etcd it records a skip
//! ([`crate::skip`]; under CI the test fails instead) and the test returns.
//!
//! ```text
//!  root namespace                                    network namespace hpk-<slot> (KubeNode)
//!  etcd 127.0.0.1:<free>                             lo: NODE_IP 10.200.0.10, the test's LB
//!  kube-apiserver <api-ip>:<free> on veth hpk<slot>      IPs and pod IPs (add_address)
//!  test code ── https://<api-ip>:<port>              kube-proxy (iptables or nftables), the
//!  veth hpv<slot> 10.201.x.1/30 ───────────────────  processes the test spawns; a route for
//!                                                    <api-ip>/32 only (no default route:
//!                                                    nothing else leaves the namespace),
//!                                                    and SERVICE_CIDR on lo (ClusterIPs)
//! ```
//!
//! The apiserver binds an address (`10.201.x.y`, one per apiserver) on the root end of a veth
//! pair of its own (the other end idles in a namespace of its own): the test code reaches it
//! there, and each [`KubeNode`]'s namespace reaches it through the node's veth pair (a
//! packet for any local address of the root namespace is delivered locally), with a route for
//! that one address only. The serving certificate names that address and 127.0.0.1.
//! Addresses, interface and namespace names come from a slot claimed under
//! `/run/hairpin-testkit` (test processes running at once never share one; a slot left by a
//! killed process is cleaned up and reused).
//!
//! ```no_run
//! use hairpin_testkit::kube::{self, ApiServer, KubeNode, NodeOptions};
//! use serde_json::json;
//! if kube::skip_without("demo") {
//!     return;
//! }
//! let api = ApiServer::start().unwrap();
//! api.ensure_namespace("demo");
//! let node = KubeNode::start(&api, &NodeOptions::iptables("node-1")).unwrap();
//! node.add_address("203.0.113.10");
//! let svc = api.apply(&json!({"apiVersion": "v1", "kind": "Service",
//!     "metadata": {"namespace": "demo", "name": "lb"},
//!     "spec": {"type": "LoadBalancer", "ports": [{"port": 80, "name": "http"}]}}));
//! let node_port = svc["spec"]["ports"][0]["nodePort"].as_u64().unwrap() as u16;
//! api.patch_status("/api/v1/namespaces/demo/services/lb",
//!     &json!({"status": {"loadBalancer": {"ingress": [{"ip": "203.0.113.10"}]}}}));
//! node.wait_lb_rule("203.0.113.10", true, std::time::Duration::from_secs(5)).unwrap();
//! ```
//!
//! Every process is killed (its process group) and every interface, namespace, slot and temp
//! dir removed when its handle is dropped, also when a test panics.

use std::io::{self, Write as _};
use std::net::{Ipv4Addr, SocketAddr};
use std::os::unix::process::CommandExt as _;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::{free_port, is_root, isolated_command, require_binary};

/// The Kubernetes version of the test peers.
pub const VERSION: &str = "v1.31.14";
/// The node's InternalIP, on the namespace's `lo`.
pub const NODE_IP: &str = "10.200.0.10";
/// The cluster CIDR kube-proxy is told (pod addresses the tests pick come from it).
pub const CLUSTER_CIDR: &str = "10.244.0.0/16";
/// The apiserver's Service CIDR (ClusterIPs). A node's namespace routes it on `lo`, standing
/// in for a node's default route: a connection to a ClusterIP needs a route before
/// kube-proxy's DNAT rewrites it (without one, `connect` fails with "network unreachable").
pub const SERVICE_CIDR: &str = "10.96.0.0/16";
/// How long the apiserver may take to answer `/readyz` 200.
pub const READY_TIMEOUT: Duration = Duration::from_secs(60);

/// Why the real-Kubernetes tests cannot run here (not root, the peers or etcd absent, a tool
/// missing), or `None`.
pub fn skip_reason() -> Option<String> {
    if !is_root() {
        return Some(
            "not running as root (the real kube-apiserver tests need network namespaces)".into(),
        );
    }
    let dir = match peers_dir() {
        Ok(dir) => dir,
        Err(why) => return Some(format!("the Kubernetes {VERSION} test peers: {why}")),
    };
    for file in ["kube-apiserver.xz", "kube-proxy.xz"] {
        if !dir.join(file).is_file() {
            return Some(format!("{} is absent; CI has it", dir.join(file).display()));
        }
    }
    let missing: Vec<&str> = [
        "etcd",
        "openssl",
        "xz",
        "curl",
        "ip",
        "iptables-save",
        "nft",
    ]
    .into_iter()
    .filter(|tool| find_binary(tool).is_none())
    .collect();
    if !missing.is_empty() {
        return Some(format!(
            "{} not installed (etcd comes from Debian's etcd-server): run scripts/install-test-deps.sh",
            missing.join(", ")
        ));
    }
    None
}

fn find_binary(name: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH").unwrap_or_default();
    let mut dirs: Vec<PathBuf> = std::env::split_paths(&path).collect();
    dirs.extend(["/usr/sbin", "/sbin", "/usr/local/sbin", "/usr/bin"].map(PathBuf::from));
    dirs.into_iter().map(|d| d.join(name)).find(|c| c.is_file())
}

/// `shared/peers/kubernetes` in the nearest ancestor of the workspace that has it
/// (`$HAIRPIN_TEST_KUBE_PEERS` first), or where it was looked for.
fn peers_dir() -> Result<PathBuf, String> {
    crate::shared_path("peers/kubernetes", "HAIRPIN_TEST_KUBE_PEERS", |p| {
        p.join("kube-apiserver.xz").is_file()
    })
}

/// For a test that needs the real kube-apiserver: `true` (after [`crate::skip::skip`], which
/// fails the test under CI) when [`skip_reason`] says it cannot run here.
pub fn skip_without(test: &str) -> bool {
    crate::skip::missing(test, skip_reason())
}

/// The unpacked binaries' folder: `$CARGO_TARGET_DIR/kube-peers-<version>` (or the
/// workspace's `target/`), unpacked once (written aside and renamed, so concurrent test
/// processes never run a half-written binary; one test at a time within a process, whose tests
/// share its pid and so the name written aside: in a fresh target directory two tests of one
/// binary raced on it, and one found the other's file renamed away).
fn unpacked() -> io::Result<PathBuf> {
    static UNPACKING: std::sync::Mutex<()> = std::sync::Mutex::new(());
    let _one_at_a_time = UNPACKING
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    let peers = peers_dir().map_err(io::Error::other)?;
    let target = std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("../../target"));
    let dir = target.join(format!("kube-peers-{VERSION}"));
    std::fs::create_dir_all(&dir)?;
    for name in ["kube-apiserver", "kube-proxy", "kube-controller-manager"] {
        let path = dir.join(name);
        if path.is_file() {
            continue;
        }
        let tmp = dir.join(format!("{name}.{}.tmp", std::process::id()));
        let out = std::fs::File::create(&tmp)?;
        let status = Command::new("xz")
            .arg("-dc")
            .arg(peers.join(format!("{name}.xz")))
            .stdout(out)
            .status()?;
        if !status.success() {
            return Err(io::Error::other(format!("xz -dc {name}.xz: {status}")));
        }
        run_checked(Command::new("chmod").arg("+x").arg(&tmp))?;
        std::fs::rename(&tmp, &path)?;
    }
    Ok(dir)
}

pub(crate) fn run_checked(command: &mut Command) -> io::Result<Output> {
    let out = command.stdin(Stdio::null()).output()?;
    if out.status.success() {
        Ok(out)
    } else {
        Err(io::Error::other(format!(
            "{command:?} failed ({}): {}{}",
            out.status,
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        )))
    }
}

/// A /30 in 10.201.0.0/16 and interface names, claimed under `/run/hairpin-testkit` for this
/// process; released on drop.
#[derive(Debug)]
pub(crate) struct Slot {
    pub(crate) n: u32,
    pub(crate) path: PathBuf,
}

const SLOTS: u32 = 16_000;

impl Slot {
    pub(crate) fn claim() -> io::Result<Slot> {
        let dir = Path::new("/run/hairpin-testkit");
        std::fs::create_dir_all(dir)?;
        let start = std::process::id().wrapping_mul(2_654_435_761) % SLOTS;
        for i in 0..SLOTS {
            let n = 1 + (start + i) % SLOTS;
            let path = dir.join(format!("slot-{n}"));
            let fresh = match std::fs::create_dir(&path) {
                Ok(()) => true,
                Err(err) if err.kind() == io::ErrorKind::AlreadyExists => {
                    Slot::reclaim_if_stale(n, &path)
                }
                Err(err) => return Err(err),
            };
            if fresh {
                std::fs::write(path.join("pid"), std::process::id().to_string())?;
                return Ok(Slot { n, path });
            }
        }
        Err(io::Error::other("no free slot under /run/hairpin-testkit"))
    }

    /// A slot whose owner is gone: its leftovers are removed and it is taken.
    fn reclaim_if_stale(n: u32, path: &Path) -> bool {
        let owner = std::fs::read_to_string(path.join("pid")).unwrap_or_default();
        let alive = owner
            .trim()
            .parse::<u32>()
            .is_ok_and(|pid| Path::new(&format!("/proc/{pid}")).exists());
        // A slot being claimed right now has no pid file yet: leave it.
        let young = std::fs::metadata(path)
            .and_then(|m| m.modified())
            .is_ok_and(|t| t.elapsed().unwrap_or_default() < Duration::from_secs(5));
        if alive || (owner.is_empty() && young) {
            return false;
        }
        for link in [format!("hpk{n}"), format!("hpv{n}")] {
            let _ = Command::new("ip").args(["link", "del", &link]).output();
        }
        // hpk-: a node's or an apiserver's; hpo-, hpl-: an outside client's, a load
        // balancer's (crate::outside).
        for netns in [format!("hpk-{n}"), format!("hpo-{n}"), format!("hpl-{n}")] {
            let _ = Command::new("ip").args(["netns", "del", &netns]).output();
        }
        std::fs::write(path.join("pid"), std::process::id().to_string()).is_ok()
    }

    /// The `i`th address of the slot's /30 (1 and 2 are usable).
    pub(crate) fn addr(&self, i: u32) -> Ipv4Addr {
        Ipv4Addr::from(u32::from(Ipv4Addr::new(10, 201, 0, 0)) + self.n * 4 + i)
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.path);
    }
}

/// A process in a process group of its own, killed as a group (and reaped) on drop.
#[derive(Debug)]
pub struct Group {
    name: String,
    child: Child,
    log: PathBuf,
}

impl Group {
    /// Spawns `command` in a new process group, stdout and stderr to `log`.
    pub fn spawn(name: &str, command: Command, log: PathBuf) -> io::Result<Group> {
        let out = std::fs::File::create(&log)?;
        Group::spawn_to(name, command, out, log)
    }

    /// [`Group::spawn`] writing to `out`, an opened `log` (appended to, say).
    fn spawn_to(
        name: &str,
        mut command: Command,
        out: std::fs::File,
        log: PathBuf,
    ) -> io::Result<Group> {
        let child = command
            .process_group(0)
            .stdin(Stdio::null())
            .stdout(out.try_clone()?)
            .stderr(out)
            .spawn()
            .map_err(|err| io::Error::new(err.kind(), format!("spawn {name}: {err}")))?;
        Ok(Group {
            name: name.to_owned(),
            child,
            log,
        })
    }

    /// What the process logged so far.
    pub fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// The process id (and process group id).
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Waits up to `timeout` for the process to exit; whether it did.
    pub fn wait_exit(&mut self, timeout: Duration) -> io::Result<bool> {
        let deadline = Instant::now() + timeout;
        loop {
            if self.child.try_wait()?.is_some() {
                return Ok(true);
            }
            if Instant::now() >= deadline {
                return Ok(false);
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// An error when the process has exited, with its log.
    pub(crate) fn check_alive(&mut self) -> io::Result<()> {
        if let Some(status) = self.child.try_wait()? {
            return Err(io::Error::other(format!(
                "{} exited with {status}:\n{}",
                self.name,
                tail(&self.log(), 40)
            )));
        }
        Ok(())
    }
}

impl Drop for Group {
    fn drop(&mut self) {
        let _ = Command::new("kill")
            .args(["-KILL", "--", &format!("-{}", self.child.id())])
            .output();
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

pub(crate) fn tail(text: &str, lines: usize) -> String {
    let all: Vec<&str> = text.lines().collect();
    all[all.len().saturating_sub(lines)..].join("\n")
}

/// A random token (hex), for the admin user.
fn random_token() -> String {
    use std::hash::BuildHasher;
    let state = std::collections::hash_map::RandomState::new();
    let a = state.hash_one(Instant::now());
    let b = state.hash_one(std::process::id());
    format!("{a:016x}{b:016x}")
}

/// etcd and a real kube-apiserver, RBAC on, an admin token (`system:masters`).
#[derive(Debug)]
pub struct ApiServer {
    // Field order is drop order: the reaper (not needed then), the apiserver before etcd,
    // the link before its slot.
    _reaper: Group,
    apiserver: Group,
    _etcd: Group,
    _link: ApiLink,
    _slot: Slot,
    addr: SocketAddr,
    url: String,
    token: String,
    bin: PathBuf,
    dir: tempfile::TempDir,
    started_in: Duration,
}

impl ApiServer {
    /// Starts etcd and kube-apiserver and waits for `/readyz` (about 5 s).
    pub fn start() -> io::Result<ApiServer> {
        ApiServer::start_with(&[])
    }

    /// [`ApiServer::start`] with `extra` flags for kube-apiserver (e.g.
    /// `--feature-gates=LoadBalancerIPMode=false`, as an API server before 1.30 or with the
    /// gate off).
    pub fn start_with(extra: &[&str]) -> io::Result<ApiServer> {
        let started = Instant::now();
        let bin = unpacked()?;
        let dir = tempfile::Builder::new().prefix("hairpin-kube-").tempdir()?;
        let slot = Slot::claim()?;
        let ip = slot.addr(1);
        let guard = ApiLink::create(slot.n, ip)?;
        make_certificates(dir.path(), ip)?;
        let token = random_token();
        std::fs::write(
            dir.path().join("tokens.csv"),
            format!("{token},admin,admin-uid,system:masters\n"),
        )?;
        let etcd_url = format!("http://127.0.0.1:{}", free_port());
        let mut etcd = start_etcd(dir.path(), &etcd_url)?;
        let port = free_port();
        let addr = SocketAddr::new(ip.into(), port);
        let mut apiserver = start_apiserver(&bin, dir.path(), &etcd_url, addr, extra)?;
        let url = format!("https://{addr}");
        wait_ready(&url, dir.path(), &token, &mut apiserver, &mut etcd)?;
        let reaper = spawn_reaper(
            &[apiserver.pid(), etcd.pid()],
            &guard,
            &[dir.path(), &slot.path],
        )?;
        let api = ApiServer {
            _reaper: reaper,
            apiserver,
            _etcd: etcd,
            _link: guard,
            _slot: slot,
            addr,
            url,
            token,
            bin,
            dir,
            started_in: started.elapsed(),
        };
        api.write_kubeconfig(&api.admin_kubeconfig(), &api.token)?;
        Ok(api)
    }

    /// One apiserver for the whole test process, started by the first caller (tests of one
    /// binary share it; give each scenario its own namespaces, and run scenarios that watch
    /// cluster-wide one at a time). A static is never dropped: a reaper process removes
    /// everything once the test process has exited. The error of the start, if any, every
    /// time.
    pub fn shared() -> Result<&'static ApiServer, String> {
        static SHARED: std::sync::OnceLock<Result<ApiServer, String>> = std::sync::OnceLock::new();
        SHARED
            .get_or_init(|| ApiServer::start().map_err(|err| err.to_string()))
            .as_ref()
            .map_err(Clone::clone)
    }

    /// `https://<ip>:<port>`, reachable from the root namespace and every [`KubeNode`].
    pub fn url(&self) -> &str {
        &self.url
    }

    /// The apiserver's address.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// The CA certificate (PEM) that signed the serving certificate.
    pub fn ca_file(&self) -> PathBuf {
        self.dir.path().join("ca.crt")
    }

    /// The admin's bearer token (group `system:masters`).
    pub fn admin_token(&self) -> &str {
        &self.token
    }

    /// A kubeconfig for the admin.
    pub fn admin_kubeconfig(&self) -> PathBuf {
        self.dir.path().join("admin.kubeconfig")
    }

    /// How long [`ApiServer::start`] took (unpacking, certificates, etcd, `/readyz`).
    pub fn started_in(&self) -> Duration {
        self.started_in
    }

    /// Where the unpacked `kube-apiserver` and `kube-proxy` are.
    pub fn bin_dir(&self) -> &Path {
        &self.bin
    }

    /// A folder that lives as long as the apiserver (kubeconfigs, logs).
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    /// kube-apiserver's log so far.
    pub fn log(&self) -> String {
        self.apiserver.log()
    }

    /// Writes a kubeconfig for `token` (a ServiceAccount's, from
    /// [`ApiServer::service_account_token`]) to `path`.
    pub fn write_kubeconfig(&self, path: &Path, token: &str) -> io::Result<()> {
        let text = format!(
            "apiVersion: v1\nkind: Config\nclusters:\n- name: test\n  cluster:\n    server: {}\n    \
             certificate-authority: {}\nusers:\n- name: test\n  user:\n    token: {token}\n\
             contexts:\n- name: test\n  context:\n    cluster: test\n    user: test\n\
             current-context: test\n",
            self.url,
            self.ca_file().display()
        );
        std::fs::write(path, text)
    }

    /// A kubeconfig for `token` in the apiserver's folder, named `name.kubeconfig`.
    pub fn kubeconfig_for(&self, name: &str, token: &str) -> io::Result<PathBuf> {
        let path = self.dir.path().join(format!("{name}.kubeconfig"));
        self.write_kubeconfig(&path, token)?;
        Ok(path)
    }

    /// One request as the admin (through `curl`): the status code and the body (JSON, or a
    /// JSON string when the body is not JSON). `content_type` applies when `body` is given.
    pub fn request(
        &self,
        method: &str,
        path: &str,
        body: Option<(&str, &Value)>,
    ) -> io::Result<(u16, Value)> {
        curl_api(&self.url, &self.ca_file(), &self.token, method, path, body)
    }

    /// Starts kube-controller-manager against this apiserver with only `controllers` (its
    /// `--controllers` names, e.g. `validatingadmissionpolicy-status-controller`), as the
    /// admin; stopped when the [`Group`] is dropped. Its log is `kcm-<n>.log` here.
    pub fn start_controller_manager(&self, controllers: &[&str]) -> io::Result<Group> {
        let d = |name: &str| self.dir.path().join(name);
        let mut command = Command::new(self.bin.join("kube-controller-manager"));
        command
            .arg("--kubeconfig")
            .arg(self.admin_kubeconfig())
            .args(["--leader-elect=false", "--secure-port=0"])
            .arg(format!(
                "--service-account-private-key-file={}",
                d("sa.key").display()
            ))
            .arg(format!("--root-ca-file={}", d("ca.crt").display()))
            .args(["--cluster-cidr", CLUSTER_CIDR])
            .arg(format!("--controllers={}", controllers.join(",")));
        static STARTED: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
        let n = STARTED.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let log = d(&format!("kcm-{n}.log"));
        Group::spawn("kube-controller-manager", command, log)
    }

    /// [`ApiServer::request`] with another bearer token (a ServiceAccount's, from
    /// [`ApiServer::service_account_token`]): what that identity is allowed or denied.
    pub fn request_as(
        &self,
        token: &str,
        method: &str,
        path: &str,
        body: Option<(&str, &Value)>,
    ) -> io::Result<(u16, Value)> {
        curl_api(&self.url, &self.ca_file(), token, method, path, body)
    }

    /// Like [`ApiServer::request`], panicking unless the answer is 2xx.
    pub fn request_ok(&self, method: &str, path: &str, body: Option<(&str, &Value)>) -> Value {
        let (status, answer) = self
            .request(method, path, body)
            .unwrap_or_else(|err| panic!("{method} {path}: {err}"));
        assert!(
            (200..300).contains(&status),
            "{method} {path}: {status} {answer}"
        );
        answer
    }

    /// Server-side apply of `object` (create or update; field manager `hairpin-test`, forced)
    /// and the object as stored. Status is not applied: use [`ApiServer::patch_status`].
    pub fn apply(&self, object: &Value) -> Value {
        let path = format!(
            "{}?fieldManager=hairpin-test&force=true",
            object_path(object)
        );
        self.request_ok(
            "PATCH",
            &path,
            Some(("application/apply-patch+yaml", object)),
        )
    }

    /// A JSON merge patch of the `/status` subresource of the object at `path` (as
    /// [`object_path`] gives it); the object as stored.
    pub fn patch_status(&self, path: &str, patch: &Value) -> Value {
        self.request_ok(
            "PATCH",
            &format!("{path}/status"),
            Some(("application/merge-patch+json", patch)),
        )
    }

    /// The object at `path`, `None` on 404.
    pub fn get(&self, path: &str) -> Option<Value> {
        match self.request("GET", path, None) {
            Ok((404, _)) => None,
            Ok((200, v)) => Some(v),
            other => panic!("GET {path}: {other:?}"),
        }
    }

    /// Deletes the object at `path`; false when it was not there.
    pub fn delete(&self, path: &str) -> bool {
        match self.request("DELETE", path, None) {
            Ok((404, _)) => false,
            Ok((200 | 202, _)) => true,
            other => panic!("DELETE {path}: {other:?}"),
        }
    }

    /// Creates the namespace unless it exists.
    pub fn ensure_namespace(&self, name: &str) {
        self.apply(&json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}}));
    }

    /// A token for the ServiceAccount `namespace/name` (created when missing) through the
    /// TokenRequest API, valid one hour: a process run with it has exactly that account's RBAC.
    pub fn service_account_token(&self, namespace: &str, name: &str) -> String {
        self.ensure_namespace(namespace);
        self.apply(&json!({"apiVersion": "v1", "kind": "ServiceAccount",
            "metadata": {"namespace": namespace, "name": name}}));
        let answer = self.request_ok(
            "POST",
            &format!("/api/v1/namespaces/{namespace}/serviceaccounts/{name}/token"),
            Some((
                "application/json",
                &json!({"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest",
                    "spec": {"expirationSeconds": 3600}}),
            )),
        );
        answer["status"]["token"]
            .as_str()
            .expect("a token in the TokenRequest answer")
            .to_owned()
    }

    /// [`ApiServer::apply`] for each object, in order.
    pub fn apply_all(&self, objects: &[Value]) {
        for object in objects {
            self.apply(object);
        }
    }
}

/// The apiserver's address: on the root side (`hpk<slot>`) of a veth pair whose other end
/// sits, up and otherwise unused, in a namespace `hpk-<slot>` (a `dummy` interface would do,
/// but not every kernel has the module). Both deleted on drop.
#[derive(Debug)]
struct ApiLink {
    link: String,
    netns: String,
}

/// A shell that waits for this process to exit and then removes what `Drop` would have:
/// the process groups `groups`, the apiserver's link and namespace, `paths`. For a shared
/// (static) apiserver, and for a test process that is killed. Dropped (killed) first when the
/// apiserver is dropped normally.
fn spawn_reaper(groups: &[u32], link: &ApiLink, paths: &[&Path]) -> io::Result<Group> {
    // Each group, and its leader by pid too (dash's `kill` takes `-PGID`, not `--`).
    let kills: Vec<String> = groups
        .iter()
        .flat_map(|g| [format!("-{g}"), g.to_string()])
        .collect();
    let paths: Vec<String> = paths
        .iter()
        .map(|p| format!("'{}'", p.display().to_string().replace('\'', "")))
        .collect();
    let script = format!(
        "while kill -0 {pid} 2>/dev/null; do sleep 0.2; done; kill -KILL {kills} 2>/dev/null; \
         sleep 0.2; ip link del {link} 2>/dev/null; ip netns del {netns} 2>/dev/null; \
         rm -rf {paths}",
        pid = std::process::id(),
        kills = kills.join(" "),
        link = link.link,
        netns = link.netns,
        paths = paths.join(" "),
    );
    let mut command = Command::new("sh");
    command.args(["-c", &script]);
    Group::spawn("reaper", command, PathBuf::from("/dev/null"))
}

impl ApiLink {
    fn create(slot: u32, ip: Ipv4Addr) -> io::Result<ApiLink> {
        let link = ApiLink {
            link: format!("hpk{slot}"),
            netns: format!("hpk-{slot}"),
        };
        let peer = format!("hpa{slot}");
        let ip_cmd = |args: &[&str]| run_checked(Command::new("ip").args(args));
        ip_cmd(&["netns", "add", &link.netns])?;
        ip_cmd(&[
            "link",
            "add",
            &link.link,
            "type",
            "veth",
            "peer",
            "name",
            &peer,
            "netns",
            &link.netns,
        ])?;
        ip_cmd(&["addr", "add", &format!("{ip}/32"), "dev", &link.link])?;
        ip_cmd(&["link", "set", &link.link, "up"])?;
        ip_cmd(&["-n", &link.netns, "link", "set", &peer, "up"])?;
        Ok(link)
    }
}

impl Drop for ApiLink {
    fn drop(&mut self) {
        let _ = Command::new("ip")
            .args(["link", "del", &self.link])
            .output();
        let _ = Command::new("ip")
            .args(["netns", "del", &self.netns])
            .output();
    }
}

/// The REST path of `object`: `/api/v1/...` or `/apis/<group>/<version>/...`, with
/// `namespaces/<ns>/` when it has a namespace, the lower-case plural of its kind, its name.
pub fn object_path(object: &Value) -> String {
    let api_version = object["apiVersion"].as_str().expect("apiVersion");
    let kind = object["kind"].as_str().expect("kind").to_lowercase();
    let name = object["metadata"]["name"].as_str().expect("metadata.name");
    let base = if api_version == "v1" {
        "/api/v1".to_owned()
    } else {
        format!("/apis/{api_version}")
    };
    let plural = if kind.ends_with('s') {
        format!("{kind}es")
    } else if let Some(stem) = kind
        .strip_suffix('y')
        .filter(|stem| !stem.ends_with(['a', 'e', 'o', 'u']))
    {
        // `nginxproxy` -> `nginxproxies`, but `gateway` -> `gateways`.
        format!("{stem}ies")
    } else {
        format!("{kind}s")
    };
    match object["metadata"]["namespace"].as_str() {
        Some(ns) => format!("{base}/namespaces/{ns}/{plural}/{name}"),
        None => format!("{base}/{plural}/{name}"),
    }
}

fn curl_api(
    url: &str,
    ca: &Path,
    token: &str,
    method: &str,
    path: &str,
    body: Option<(&str, &Value)>,
) -> io::Result<(u16, Value)> {
    let mut command = isolated_command("curl");
    command
        .args(["-sS", "--max-time", "20", "-X", method, "--cacert"])
        .arg(ca)
        .args(["-H", &format!("Authorization: Bearer {token}")])
        .args(["-w", "\n%{http_code}"]);
    if let Some((content_type, _)) = body {
        command
            .args(["-H", &format!("Content-Type: {content_type}")])
            .args(["--data-binary", "@-"]);
    }
    command
        .arg(format!("{url}{path}"))
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut child = command.spawn()?;
    let mut stdin = child.stdin.take().expect("piped stdin");
    if let Some((_, value)) = body {
        stdin.write_all(value.to_string().as_bytes())?;
    }
    drop(stdin);
    let out = child.wait_with_output()?;
    let text = String::from_utf8_lossy(&out.stdout);
    let (body, code) = text.rsplit_once('\n').unwrap_or(("", &text));
    let code: u16 = code.trim().parse().map_err(|_| {
        io::Error::other(format!(
            "curl {method} {path}: {}",
            String::from_utf8_lossy(&out.stderr)
        ))
    })?;
    if code == 0 {
        return Err(io::Error::other(format!(
            "curl {method} {path}: {}",
            String::from_utf8_lossy(&out.stderr)
        )));
    }
    let value = serde_json::from_str(body).unwrap_or_else(|_| Value::String(body.to_owned()));
    Ok((code, value))
}

/// A CA, a serving certificate for `ip` and 127.0.0.1, and the service-account key pair
/// (all P-256), made with `openssl` in `dir`.
fn make_certificates(dir: &Path, ip: Ipv4Addr) -> io::Result<()> {
    let openssl = |args: &[&str]| run_checked(Command::new("openssl").current_dir(dir).args(args));
    openssl(&[
        "req",
        "-x509",
        "-newkey",
        "ec",
        "-pkeyopt",
        "ec_paramgen_curve:prime256v1",
        "-nodes",
        "-keyout",
        "ca.key",
        "-out",
        "ca.crt",
        "-days",
        "2",
        "-subj",
        "/CN=hairpin-test-ca",
    ])?;
    openssl(&[
        "req",
        "-newkey",
        "ec",
        "-pkeyopt",
        "ec_paramgen_curve:prime256v1",
        "-nodes",
        "-keyout",
        "server.key",
        "-out",
        "server.csr",
        "-subj",
        "/CN=kube-apiserver",
    ])?;
    std::fs::write(
        dir.join("server.ext"),
        format!(
            "subjectAltName=IP:127.0.0.1,IP:{ip},DNS:localhost,DNS:kubernetes,\
             DNS:kubernetes.default,DNS:kubernetes.default.svc\n\
             extendedKeyUsage=serverAuth\nkeyUsage=critical,digitalSignature,keyEncipherment\n\
             basicConstraints=CA:FALSE\n"
        ),
    )?;
    openssl(&[
        "x509",
        "-req",
        "-in",
        "server.csr",
        "-CA",
        "ca.crt",
        "-CAkey",
        "ca.key",
        "-CAcreateserial",
        "-out",
        "server.crt",
        "-days",
        "2",
        "-extfile",
        "server.ext",
    ])?;
    openssl(&[
        "ecparam",
        "-name",
        "prime256v1",
        "-genkey",
        "-noout",
        "-out",
        "sa.key",
    ])?;
    openssl(&["ec", "-in", "sa.key", "-pubout", "-out", "sa.pub"])?;
    Ok(())
}

fn start_etcd(dir: &Path, client_url: &str) -> io::Result<Group> {
    let peer_url = format!("http://127.0.0.1:{}", free_port());
    let mut command = isolated_command(require_binary("etcd"));
    command
        .arg("--data-dir")
        .arg(dir.join("etcd"))
        .args(["--listen-client-urls", client_url])
        .args(["--advertise-client-urls", client_url])
        .args(["--listen-peer-urls", &peer_url])
        .args(["--initial-advertise-peer-urls", &peer_url])
        .args(["--initial-cluster", &format!("default={peer_url}")])
        .args(["--log-level", "warn"])
        // One test's etcd: nothing to keep across a crash.
        .arg("--unsafe-no-fsync");
    Group::spawn("etcd", command, dir.join("etcd.log"))
}

fn start_apiserver(
    bin: &Path,
    dir: &Path,
    etcd: &str,
    addr: SocketAddr,
    extra: &[&str],
) -> io::Result<Group> {
    let d = |name: &str| dir.join(name).display().to_string();
    let mut command = isolated_command(bin.join("kube-apiserver"));
    command.args([
        &format!("--etcd-servers={etcd}"),
        &format!("--bind-address={}", addr.ip()),
        &format!("--secure-port={}", addr.port()),
        &format!("--advertise-address={}", addr.ip()),
        "--endpoint-reconciler-type=none",
        &format!("--tls-cert-file={}", d("server.crt")),
        &format!("--tls-private-key-file={}", d("server.key")),
        &format!("--client-ca-file={}", d("ca.crt")),
        &format!("--token-auth-file={}", d("tokens.csv")),
        "--authorization-mode=RBAC",
        "--service-account-issuer=https://kubernetes.default.svc.cluster.local",
        &format!("--service-account-key-file={}", d("sa.pub")),
        &format!("--service-account-signing-key-file={}", d("sa.key")),
        &format!("--service-cluster-ip-range={SERVICE_CIDR}"),
        &format!("--cert-dir={}", d("certs")),
        "--profiling=false",
    ]);
    command.args(extra);
    Group::spawn("kube-apiserver", command, dir.join("kube-apiserver.log"))
}

fn wait_ready(
    url: &str,
    dir: &Path,
    token: &str,
    apiserver: &mut Group,
    etcd: &mut Group,
) -> io::Result<()> {
    let deadline = Instant::now() + READY_TIMEOUT;
    let ca = dir.join("ca.crt");
    loop {
        etcd.check_alive()?;
        apiserver.check_alive()?;
        if let Ok((200, _)) = curl_api(url, &ca, token, "GET", "/readyz", None) {
            return Ok(());
        }
        if Instant::now() >= deadline {
            return Err(io::Error::new(
                io::ErrorKind::TimedOut,
                format!(
                    "kube-apiserver not ready after {READY_TIMEOUT:?}:\n{}",
                    tail(&apiserver.log(), 40)
                ),
            ));
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// kube-proxy's mode.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ProxyMode {
    /// `--proxy-mode iptables`
    Iptables,
    /// `--proxy-mode nftables`
    Nftables,
}

impl ProxyMode {
    fn flag(self) -> &'static str {
        match self {
            ProxyMode::Iptables => "iptables",
            ProxyMode::Nftables => "nftables",
        }
    }
}

/// How a [`KubeNode`] runs kube-proxy.
#[derive(Clone, Debug)]
pub struct NodeOptions {
    /// The Node's name (`--hostname-override`); one per node on an apiserver.
    pub name: String,
    /// iptables or nftables.
    pub mode: ProxyMode,
    /// False: `--feature-gates=LoadBalancerIPMode=false`, kube-proxy ignores `ipMode` as
    /// kube-proxy before 1.30 and CNIs that do not honour it do.
    pub honour_ip_mode: bool,
}

impl NodeOptions {
    /// kube-proxy in iptables mode, honouring `ipMode`.
    pub fn iptables(name: &str) -> Self {
        NodeOptions {
            name: name.to_owned(),
            mode: ProxyMode::Iptables,
            honour_ip_mode: true,
        }
    }

    /// kube-proxy in nftables mode, honouring `ipMode`.
    pub fn nftables(name: &str) -> Self {
        NodeOptions {
            mode: ProxyMode::Nftables,
            ..NodeOptions::iptables(name)
        }
    }
}

/// A node: a network namespace with kube-proxy, the Node object, and the processes a test
/// starts in it. Removed on drop (processes killed, namespace and veth deleted).
#[derive(Debug)]
pub struct KubeNode {
    // Drop order: processes, then kube-proxy, then the namespace (in Drop), then the slot.
    processes: Vec<Group>,
    reaper: Option<Group>,
    kube_proxy: Option<Group>,
    netns: String,
    options: NodeOptions,
    dir: tempfile::TempDir,
    slot: Slot,
}

impl KubeNode {
    /// Creates the namespace (`lo` up with [`NODE_IP`], a veth to the apiserver), the Node
    /// object (`options.name`, InternalIP [`NODE_IP`]), and runs kube-proxy in it; returns
    /// once kube-proxy answers `/healthz` (its first sync done).
    pub fn start(api: &ApiServer, options: &NodeOptions) -> io::Result<KubeNode> {
        let slot = Slot::claim()?;
        let netns = format!("hpk-{}", slot.n);
        run_checked(Command::new("ip").args(["netns", "add", &netns]))?;
        let mut node = KubeNode {
            processes: Vec::new(),
            reaper: None,
            kube_proxy: None,
            netns,
            options: options.clone(),
            dir: tempfile::Builder::new().prefix("hairpin-node-").tempdir()?,
            slot,
        };
        node.reaper = Some(node.spawn_reaper()?);
        node.wire(api)?;
        node.register(api);
        node.start_kube_proxy(api)?;
        Ok(node)
    }

    /// Runs kube-proxy as the options say; returns once it answers `/healthz`.
    fn start_kube_proxy(&mut self, api: &ApiServer) -> io::Result<()> {
        let kubeconfig = self.dir.path().join("kube-proxy.kubeconfig");
        api.write_kubeconfig(&kubeconfig, api.admin_token())?;
        let mut command = self.command(api.bin_dir().join("kube-proxy"));
        command
            .arg("--kubeconfig")
            .arg(&kubeconfig)
            .args(["--hostname-override", &self.options.name])
            .args(["--proxy-mode", self.options.mode.flag()])
            .args(["--cluster-cidr", CLUSTER_CIDR])
            .args(["--conntrack-max-per-core=0", "-v=2"])
            .args(["--healthz-bind-address", "127.0.0.1:10256"])
            .args(["--metrics-bind-address", "127.0.0.1:10249"]);
        if !self.options.honour_ip_mode {
            command.arg("--feature-gates=LoadBalancerIPMode=false");
        }
        // Appended to: a restarted kube-proxy's log follows the first one's.
        let log = self.dir.path().join("kube-proxy.log");
        let out = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&log)?;
        self.kube_proxy = Some(Group::spawn_to("kube-proxy", command, out, log)?);
        self.wait_healthy()
    }

    /// Stops kube-proxy (its rules stay, as when its pod is replaced) and starts it again
    /// with `honour_ip_mode` (false: `--feature-gates=LoadBalancerIPMode=false`, as a changed
    /// flag or an older kube-proxy would); returns once the new one answers `/healthz`
    /// (its first sync done).
    pub fn restart_kube_proxy(&mut self, api: &ApiServer, honour_ip_mode: bool) -> io::Result<()> {
        self.kube_proxy = None;
        self.options.honour_ip_mode = honour_ip_mode;
        self.start_kube_proxy(api)
    }

    /// `lo` up with the node IP; a veth pair with the apiserver's address routed through it.
    fn wire(&self, api: &ApiServer) -> io::Result<()> {
        let (root_if, node_if) = (format!("hpv{}", self.slot.n), format!("hpw{}", self.slot.n));
        let (root_ip, node_ip) = (self.slot.addr(1), self.slot.addr(2));
        let ip = |args: &[&str]| run_checked(Command::new("ip").args(args));
        ip(&[
            "link",
            "add",
            &root_if,
            "type",
            "veth",
            "peer",
            "name",
            &node_if,
            "netns",
            &self.netns,
        ])?;
        ip(&["addr", "add", &format!("{root_ip}/30"), "dev", &root_if])?;
        ip(&["link", "set", &root_if, "up"])?;
        self.exec_ok(&["ip", "link", "set", "lo", "up"])?;
        self.exec_ok(&["ip", "addr", "add", &format!("{NODE_IP}/32"), "dev", "lo"])?;
        self.exec_ok(&[
            "ip",
            "addr",
            "add",
            &format!("{node_ip}/30"),
            "dev",
            &node_if,
        ])?;
        self.exec_ok(&["ip", "link", "set", &node_if, "up"])?;
        let api_ip = api.addr().ip().to_string();
        self.exec_ok(&[
            "ip",
            "route",
            "add",
            &format!("{api_ip}/32"),
            "via",
            &root_ip.to_string(),
        ])?;
        self.exec_ok(&["ip", "route", "add", SERVICE_CIDR, "dev", "lo"])?;
        Ok(())
    }

    /// The Node object with [`NODE_IP`] as its InternalIP.
    fn register(&self, api: &ApiServer) {
        let name = &self.options.name;
        api.apply(
            &json!({"apiVersion": "v1", "kind": "Node", "metadata": {"name": name,
            "labels": {"kubernetes.io/hostname": name}}}),
        );
        api.patch_status(
            &format!("/api/v1/nodes/{name}"),
            &json!({"status": {"addresses": [
                {"type": "InternalIP", "address": NODE_IP},
                {"type": "Hostname", "address": name}]}}),
        );
    }

    fn wait_healthy(&mut self) -> io::Result<()> {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            if let Some(proxy) = self.kube_proxy.as_mut() {
                proxy.check_alive()?;
            }
            let out = self.exec(&[
                "curl",
                "-sf",
                "--max-time",
                "1",
                "http://127.0.0.1:10256/healthz",
            ])?;
            if out.status.success() {
                return Ok(());
            }
            if Instant::now() >= deadline {
                return Err(io::Error::new(
                    io::ErrorKind::TimedOut,
                    format!(
                        "kube-proxy not healthy after 30s:\n{}",
                        tail(&self.kube_proxy_log(), 40)
                    ),
                ));
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// The network namespace's name (for `ip netns exec`).
    pub fn netns(&self) -> &str {
        &self.netns
    }

    /// The Node's name.
    pub fn name(&self) -> &str {
        &self.options.name
    }

    /// kube-proxy's mode.
    pub fn mode(&self) -> ProxyMode {
        self.options.mode
    }

    /// A folder that lives as long as the node (configs, logs).
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    /// `program` run inside the namespace (`ip netns exec`), without ambient `HAIRPIN_*`,
    /// `KUBECONFIG`, `POD_NAME`.
    pub fn command(&self, program: impl AsRef<std::ffi::OsStr>) -> Command {
        let mut command = isolated_command("ip");
        command.args(["netns", "exec", &self.netns]).arg(program);
        command
    }

    /// Runs `args` inside the namespace and returns its output.
    pub fn exec(&self, args: &[&str]) -> io::Result<Output> {
        self.command(args[0])
            .args(&args[1..])
            .stdin(Stdio::null())
            .output()
    }

    /// Like [`KubeNode::exec`], an error unless it exits 0.
    pub fn exec_ok(&self, args: &[&str]) -> io::Result<Output> {
        run_checked(self.command(args[0]).args(&args[1..]))
    }

    /// Adds `ip` (a load balancer IP, a pod IP) to the namespace's `lo`.
    pub fn add_address(&self, ip: &str) {
        let prefix = if ip.contains(':') { 128 } else { 32 };
        self.exec_ok(&["ip", "addr", "add", &format!("{ip}/{prefix}"), "dev", "lo"])
            .unwrap_or_else(|err| panic!("add {ip}: {err}"));
    }

    /// Runs `command` (from [`KubeNode::command`]) until the node is dropped; its output goes
    /// to `<name>.log` in the node's folder ([`KubeNode::log`]).
    pub fn spawn(&mut self, name: &str, command: Command) -> io::Result<()> {
        let log = self.dir.path().join(format!("{name}.log"));
        self.processes.push(Group::spawn(name, command, log)?);
        Ok(())
    }

    /// What the process `name` started by [`KubeNode::spawn`] logged (also `kube-proxy`).
    pub fn log(&self, name: &str) -> String {
        std::fs::read_to_string(self.dir.path().join(format!("{name}.log"))).unwrap_or_default()
    }

    /// kube-proxy's log so far.
    pub fn kube_proxy_log(&self) -> String {
        self.log("kube-proxy")
    }

    /// Waits until something in the namespace listens on TCP `addr` (`ip:port` as `ss`
    /// prints it), failing early when the process `owner` has exited.
    pub fn wait_listening(&mut self, addr: &str, owner: &str) -> io::Result<()> {
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let out = self.exec(&["ss", "-Hltn"])?;
            if String::from_utf8_lossy(&out.stdout).contains(addr) {
                return Ok(());
            }
            if let Some(p) = self.processes.iter_mut().find(|p| p.name == owner) {
                p.check_alive()?;
            }
            if Instant::now() >= deadline {
                return Err(io::Error::new(
                    io::ErrorKind::TimedOut,
                    format!("{owner} does not listen on {addr}:\n{}", self.log(owner)),
                ));
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// kube-proxy's rules as the kernel has them: `iptables-save -t nat` or `nft list
    /// ruleset`.
    pub fn proxy_rules(&self) -> String {
        let args: &[&str] = match self.options.mode {
            ProxyMode::Iptables => &["iptables-save", "-t", "nat"],
            ProxyMode::Nftables => &["nft", "list", "ruleset"],
        };
        self.exec(args)
            .map(|o| String::from_utf8_lossy(&o.stdout).into_owned())
            .unwrap_or_default()
    }

    /// Whether kube-proxy short-circuits the load balancer IP `ip` (iptables: a
    /// `KUBE-SERVICES -d <ip>/32` rule; nftables: an element of the `service-ips` map).
    pub fn has_lb_rule(&self, ip: &str) -> bool {
        let rules = self.proxy_rules();
        match self.options.mode {
            ProxyMode::Iptables => rules
                .lines()
                .any(|l| l.starts_with("-A KUBE-SERVICES ") && l.contains(&format!("-d {ip}/32 "))),
            ProxyMode::Nftables => {
                let Some(map) = rules.split("map service-ips {").nth(1) else {
                    return false;
                };
                let map = map.split("\n\t}").next().unwrap_or_default();
                map.contains(&format!("{ip} . "))
            }
        }
    }

    /// Waits (polling every 10 ms) until [`KubeNode::has_lb_rule`] is `present`; how long it
    /// took, or an error with the rules after `timeout`.
    pub fn wait_lb_rule(&self, ip: &str, present: bool, timeout: Duration) -> io::Result<Duration> {
        let started = Instant::now();
        loop {
            if self.has_lb_rule(ip) == present {
                return Ok(started.elapsed());
            }
            if started.elapsed() >= timeout {
                let what = if present { "has no" } else { "still has a" };
                return Err(io::Error::new(
                    io::ErrorKind::TimedOut,
                    format!(
                        "kube-proxy {what} rule for {ip} after {timeout:?}:\n{}",
                        self.proxy_rules()
                    ),
                ));
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    /// `curl` inside the namespace (`-sS --max-time 5`, plus `extra`) of `url`.
    pub fn curl(&self, url: &str, extra: &[&str]) -> Curl {
        let mut args = vec!["curl", "-sS", "--max-time", "5"];
        args.extend_from_slice(extra);
        args.push(url);
        let out = self.exec(&args).expect("run curl");
        Curl {
            exit: out.status.code(),
            body: String::from_utf8_lossy(&out.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
        }
    }

    /// The stand-in cloud load balancer: HAProxy on `lb_ip:port` in the namespace, sending
    /// each connection with a PROXY v1 header (`send-proxy`, or v2 with `v2`) to the node's
    /// `NODE_IP:node_port`. Logs to `haproxy-<lb_ip>-<port>.log`.
    pub fn start_cloud_lb(
        &mut self,
        lb_ip: &str,
        port: u16,
        node_port: u16,
        v2: bool,
    ) -> io::Result<()> {
        let name = format!("haproxy-{lb_ip}-{port}");
        let send = if v2 { "send-proxy-v2" } else { "send-proxy" };
        let conf = format!(
            "global\n  log stderr format raw local0 info\n\ndefaults\n  log global\n  mode tcp\n  \
             timeout connect 5s\n  timeout client 30s\n  timeout server 30s\n\n\
             listen lb\n  bind {lb_ip}:{port}\n  server s1 {NODE_IP}:{node_port} {send}\n"
        );
        let path = self.dir.path().join(format!("{name}.cfg"));
        std::fs::write(&path, conf)?;
        let mut command = self.command(require_binary("haproxy"));
        command.arg("-db").arg("-f").arg(&path);
        self.spawn(&name, command)?;
        self.wait_listening(&format!("{lb_ip}:{port}"), &name)
    }

    /// The ingress: nginx on `pod_ip:port` in the namespace, requiring the PROXY protocol
    /// (`listen ... proxy_protocol`) and answering every request with
    /// `proxy_protocol_addr=<$proxy_protocol_addr> remote_addr=<$remote_addr>`. Its logs are
    /// read with [`KubeNode::ingress_logs`].
    pub fn start_ingress(&mut self, pod_ip: &str, port: u16) -> io::Result<()> {
        let name = format!("ingress-{pod_ip}-{port}");
        let root = self.dir.path().join(&name);
        std::fs::create_dir_all(&root)?;
        let r = root.display();
        let d = self.dir.path().display();
        let conf = format!(
            "user root;\ndaemon off;\nmaster_process off;\npid {r}/nginx.pid;\n\
             error_log {d}/{name}.error.log info;\nevents {{ worker_connections 1024; }}\n\
             http {{\n  log_format hp '$proxy_protocol_addr $remote_addr \"$request\" $status';\n  \
             access_log {d}/{name}.access.log hp;\n  client_body_temp_path {r}/body;\n  \
             proxy_temp_path {r}/proxy;\n  fastcgi_temp_path {r}/fastcgi;\n  \
             uwsgi_temp_path {r}/uwsgi;\n  scgi_temp_path {r}/scgi;\n  default_type text/plain;\n  \
             server {{\n    listen {pod_ip}:{port} proxy_protocol;\n    location / {{\n      \
             return 200 \"proxy_protocol_addr=$proxy_protocol_addr remote_addr=$remote_addr\\n\";\n    \
             }}\n  }}\n}}\n"
        );
        let path = root.join("nginx.conf");
        std::fs::write(&path, conf)?;
        let mut command = self.command(require_binary("nginx"));
        command
            .arg("-p")
            .arg(&root)
            .arg("-c")
            .arg(&path)
            .arg("-e")
            .arg(self.dir.path().join(format!("{name}.error.log")));
        self.spawn(&name, command)?;
        self.wait_listening(&format!("{pod_ip}:{port}"), &name)
    }
}

impl KubeNode {
    /// The access log (`$proxy_protocol_addr $remote_addr "$request" $status` per line) and
    /// the error log (`broken header` lands there) of the ingress on `pod_ip:port`.
    pub fn ingress_logs(&self, pod_ip: &str, port: u16) -> (String, String) {
        let name = format!("ingress-{pod_ip}-{port}");
        (
            self.log(&format!("{name}.access")),
            self.log(&format!("{name}.error")),
        )
    }
}

impl KubeNode {
    /// A shell that, once this process has exited (killed by a timeout, say), kills every
    /// process in the namespace and removes the namespace, the veth, the folder and the slot.
    fn spawn_reaper(&self) -> io::Result<Group> {
        let script = format!(
            "while kill -0 {pid} 2>/dev/null; do sleep 0.2; done; \
             ip netns pids {netns} | xargs -r kill -KILL; sleep 0.2; \
             ip link del hpv{n} 2>/dev/null; ip netns del {netns} 2>/dev/null; rm -rf '{dir}' '{slot}'",
            pid = std::process::id(),
            netns = self.netns,
            n = self.slot.n,
            dir = self.dir.path().display(),
            slot = self.slot.path.display(),
        );
        let mut command = Command::new("sh");
        command.args(["-c", &script]);
        Group::spawn("reaper", command, PathBuf::from("/dev/null"))
    }
}

impl Drop for KubeNode {
    fn drop(&mut self) {
        self.reaper = None;
        self.processes.clear();
        self.kube_proxy = None;
        let _ = Command::new("ip")
            .args(["link", "del", &format!("hpv{}", self.slot.n)])
            .output();
        let _ = Command::new("ip")
            .args(["netns", "del", &self.netns])
            .output();
    }
}

/// What `curl` did: its exit code (52 is "empty reply from server", the hairpin failure),
/// stdout and stderr.
#[derive(Clone, Debug)]
pub struct Curl {
    /// curl's exit code (`None` when killed).
    pub exit: Option<i32>,
    /// The response body.
    pub body: String,
    /// curl's error message.
    pub stderr: String,
}

impl Curl {
    /// True when curl got an answer (exit 0).
    pub fn ok(&self) -> bool {
        self.exit == Some(0)
    }
}

// ---------------------------------------------------------------------------------------------
// kube-controller-manager (issue 40): the garbage collector, namespace deletion, ReplicaSets.

/// A real kube-controller-manager against an [`ApiServer`] (every upstream controller: the
/// garbage collector, namespace deletion, Deployments' ReplicaSets and Pods, EndpointSlices).
/// No scheduler or kubelet: Pods stay Pending. Killed on drop.
#[derive(Debug)]
pub struct ControllerManager {
    process: Group,
    started_in: Duration,
}

impl ControllerManager {
    /// Starts kube-controller-manager with the admin's kubeconfig and waits until it serves:
    /// a namespace created after the start gets its `default` ServiceAccount (about 3 s).
    pub fn start(api: &ApiServer) -> io::Result<ControllerManager> {
        let started = Instant::now();
        let dir = api.dir();
        let mut command = isolated_command(api.bin_dir().join("kube-controller-manager"));
        command.args([
            &format!("--kubeconfig={}", api.admin_kubeconfig().display()),
            "--leader-elect=false",
            "--secure-port=0",
            &format!(
                "--service-account-private-key-file={}",
                dir.join("sa.key").display()
            ),
            &format!("--root-ca-file={}", dir.join("ca.crt").display()),
            "--cluster-cidr=10.244.0.0/16",
            "--controllers=*",
            "--profiling=false",
        ]);
        let log = dir.join(format!("kube-controller-manager-{}.log", free_port()));
        let mut process = Group::spawn("kube-controller-manager", command, log)?;
        let probe = format!("kcm-probe-{}", random_token().get(..8).unwrap_or("x"));
        api.ensure_namespace(&probe);
        let deadline = Instant::now() + READY_TIMEOUT;
        let path = format!("/api/v1/namespaces/{probe}/serviceaccounts/default");
        while api.get(&path).is_none() {
            process.check_alive()?;
            if Instant::now() >= deadline {
                return Err(io::Error::new(
                    io::ErrorKind::TimedOut,
                    format!(
                        "kube-controller-manager not serving after {READY_TIMEOUT:?}:\n{}",
                        tail(&process.log(), 40)
                    ),
                ));
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        api.delete(&format!("/api/v1/namespaces/{probe}"));
        Ok(ControllerManager {
            process,
            started_in: started.elapsed(),
        })
    }

    /// How long [`ControllerManager::start`] took.
    pub fn started_in(&self) -> Duration {
        self.started_in
    }

    /// Its log so far.
    pub fn log(&self) -> String {
        self.process.log()
    }
}

impl Group {
    /// Sends SIGTERM to the process (not its group) and waits up to `timeout` for it to exit;
    /// how long it took, `None` when it did not.
    pub fn terminate(&mut self, timeout: Duration) -> Option<Duration> {
        let started = Instant::now();
        let _ = Command::new("kill")
            .args(["-TERM", &self.child.id().to_string()])
            .output();
        while started.elapsed() < timeout {
            if let Ok(Some(_)) = self.child.try_wait() {
                return Some(started.elapsed());
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        None
    }
}
