//! The native cure proven from every node (issue 45, item 1), end to end on a real
//! kube-apiserver and TWO or three nodes, each a network namespace with its own real
//! kube-proxy (v1.31.14, `../shared/peers/kubernetes`): node A honours `ipMode` (its Node
//! reports kubelet v1.31.14), node B runs kube-proxy with `--feature-gates=LoadBalancerIPMode=
//! false` standing in for an older node (its Node reports kubelet v1.29.9). `hairpin
//! controller --cure auto` runs in A with the shipped ServiceAccount's token.
//!
//! All in the loop for every phase: an in-cluster client on EACH node (its name resolved by
//! real CoreDNS running the Corefile hairpin writes, then curled from the node's namespace),
//! and the client OUTSIDE the cluster (through the proxy load balancer, HAProxy in its own
//! namespace in front of A). Each node has the ingress (nginx requiring PROXY on the pod IP)
//! and `hairpin proxy` behind the hairpin Service (the DNS cure's path), and reaches the load
//! balancer's address through HAProxy (A: the cloud LB's namespace; B and C: a stand-in of the
//! same load balancer in the node's namespace, sending PROXY to the node's NodePort).
//!
//! - mixed) A and B: the Nodes' gate names B; the DNS cure stays, nothing is written (`ipMode`
//!   stays VIP, no record), the `Hairpin` status says `not-on-every-node` naming B, an Event
//!   `NativeCureNotOnEveryNode` names B, `hairpin plan` and `hairpin doctor` name B; 0
//!   failures on either node nor outside.
//! - upgraded) B's kube-proxy restarted with the gate on, its Node reporting v1.31.14: native
//!   is proven after, the DNS rule goes, CoreDNS answers the LB IP, and both nodes' clients
//!   cross the load balancer; failures counted (expected 0).
//! - added) a node C added on an older version after native was proven (its Node reports
//!   v1.29.9, its kube-proxy ignores `ipMode`): the DNS rule is back (make before break: no
//!   status write), and the failures of C's client (which starts with C) are counted; A, B and
//!   outside: 0.
//!
//! Prints one row per phase: failed/total requests of the in-cluster clients on each node and
//! of the outside client. Needs root, etcd, HAProxy, nginx, the test peers and CoreDNS;
//! without them the test records a skip ([`hairpin_testkit::skip`]: a failure under CI).

#[path = "support/cluster.rs"]
mod cluster;
mod support;

use std::net::{IpAddr, SocketAddr};
use std::path::PathBuf;
use std::process::Command;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use cluster::*;
use hairpin_testkit::coredns::{self, CoreDns, RecordType};
use hairpin_testkit::kube::{self, ApiServer, Curl, KubeNode, NodeOptions};
use hairpin_testkit::skip::{self, Cause};
use serde_json::{Value, json};

/// The `hairpin proxy` "pod" in each node's namespace.
const PROXY_POD_IP: &str = "10.244.0.20";
/// The hairpin Service the controller creates for `ingress/nginx`, and its cluster DNS name.
const HAIRPIN_SERVICE: &str = "hairpin-ingress-nginx";
const HAIRPIN_SERVICE_FQDN: &str = "hairpin-ingress-nginx.hairpin.svc.cluster.local";
/// The ingress Service's cluster DNS name (the proxy's upstream).
const INGRESS_FQDN: &str = "nginx.ingress.svc.cluster.local";
const OLD: &str = "v1.29.9";

/// The Node `name` as its kubelet registers it, with `kubelet` as its version (before its
/// kube-proxy starts, as a kubelet registers before any pod runs).
fn register_node(api: &ApiServer, name: &str, kubelet: &str) {
    api.apply(
        &json!({"apiVersion": "v1", "kind": "Node", "metadata": {"name": name,
        "labels": {"kubernetes.io/hostname": name}}}),
    );
    report_version(api, name, kubelet);
}

fn report_version(api: &ApiServer, name: &str, kubelet: &str) {
    api.patch_status(
        &format!("/api/v1/nodes/{name}"),
        &json!({"status": {"nodeInfo": {"kubeletVersion": kubelet}}}),
    );
}

/// A node with its ingress and a stand-in of the load balancer on `lb_ip` (HAProxy sending
/// PROXY to the node's NodePort), for a node not linked to the cloud LB's namespace.
fn extra_node(api: &ApiServer, name: &str, kubelet: &str, honour: bool, lb_ip: &str) -> KubeNode {
    register_node(api, name, kubelet);
    let options = NodeOptions {
        honour_ip_mode: honour,
        ..NodeOptions::iptables(name)
    };
    let mut node = node_with_receiver(api, &options, Receiver::Nginx);
    let node_port = api.get(SERVICE).expect("the Service")["spec"]["ports"][0]["nodePort"]
        .as_u64()
        .expect("nodePort");
    node.add_address(lb_ip);
    node.start_cloud_lb(lb_ip, 80, u16::try_from(node_port).unwrap(), false)
        .expect("the load balancer's stand-in");
    node
}

/// `/etc/netns/<namespace>/hosts` (the proxy's upstream name), removed on drop.
struct NetnsEtc(PathBuf);

impl NetnsEtc {
    fn hosts(node: &KubeNode, lines: &str) -> Self {
        let dir = PathBuf::from("/etc/netns").join(node.netns());
        std::fs::create_dir_all(&dir).expect("create /etc/netns/<ns>");
        std::fs::write(
            dir.join("hosts"),
            format!("127.0.0.1 localhost\n::1 localhost\n{lines}"),
        )
        .expect("write /etc/netns/<ns>/hosts");
        NetnsEtc(dir)
    }
}

impl Drop for NetnsEtc {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// The hairpin Service's ClusterIP once the controller created it, with the EndpointSlice the
/// EndpointSlice controller would write for the proxy pod [`PROXY_POD_IP`] (the same IP on
/// every node: each node's kube-proxy sends it to its own copy).
fn proxy_endpoints(api: &ApiServer, log: impl Fn() -> String) -> (String, u64) {
    let path = format!("/api/v1/namespaces/hairpin/services/{HAIRPIN_SERVICE}");
    wait_for(
        "the hairpin Service created",
        Duration::from_secs(30),
        || api.get(&path).is_some(),
        log,
    );
    let service = api.get(&path).expect("the hairpin Service");
    let proxy_ip = service["spec"]["clusterIP"]
        .as_str()
        .expect("clusterIP")
        .to_owned();
    let ports: Vec<Value> = service["spec"]["ports"]
        .as_array()
        .expect("ports")
        .iter()
        .map(|p| json!({"name": p["name"], "port": p["targetPort"], "protocol": "TCP"}))
        .collect();
    let listener = ports[0]["port"].as_u64().expect("a numeric targetPort");
    api.apply(&json!({
        "apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
        "metadata": {"namespace": "hairpin", "name": format!("{HAIRPIN_SERVICE}-proxy"),
                     "labels": {"kubernetes.io/service-name": HAIRPIN_SERVICE}},
        "addressType": "IPv4",
        "endpoints": [{"addresses": [PROXY_POD_IP], "conditions": {"ready": true}}],
        "ports": ports
    }));
    (proxy_ip, listener)
}

/// `hairpin proxy` in `node`'s namespace on [`PROXY_POD_IP`] with the shipped `hairpin-proxy`
/// ServiceAccount's token; returns once a curl of the name through the hairpin Service is
/// answered by nginx. The guard keeps the namespace's hosts file.
fn start_proxy(
    api: &ApiServer,
    node: &mut KubeNode,
    (proxy_ip, listener): (&str, u64),
    extra_hosts: &str,
) -> NetnsEtc {
    let ingress_ip = api
        .get("/api/v1/namespaces/ingress/services/nginx")
        .expect("ingress")["spec"]["clusterIP"]
        .as_str()
        .expect("clusterIP")
        .to_owned();
    let hosts = NetnsEtc::hosts(node, &format!("{ingress_ip} {INGRESS_FQDN}\n{extra_hosts}"));
    node.add_address(PROXY_POD_IP);
    let token = api.service_account_token("hairpin", "hairpin-proxy");
    let kubeconfig = api
        .kubeconfig_for("hairpin-proxy", &token)
        .expect("kubeconfig");
    let mut proxy = node.command(env!("CARGO_BIN_EXE_hairpin"));
    proxy
        .args(["proxy", "--routes-configmap", "hairpin/hairpin-routes"])
        .args([
            "--admin-addr",
            "127.0.0.1:9091",
            "--workers",
            "1",
            "--log-format",
            "text",
        ])
        .arg("--kubeconfig")
        .arg(&kubeconfig);
    node.spawn("proxy", proxy).expect("start hairpin proxy");
    node.wait_listening(&format!(":{listener} "), "proxy")
        .expect("the proxy listens on the route's port");
    wait_for(
        "a curl of the name through the hairpin Service answered",
        Duration::from_secs(20),
        || answered(&curl_name(node, proxy_ip)),
        || node.log("proxy"),
    );
    hosts
}

/// A curl of `http://HOST/` with the name resolved to `ip` (as a client that asked DNS).
fn curl_name(node: &KubeNode, ip: &str) -> Curl {
    node.curl(
        &format!("http://{HOST}/"),
        &["--max-time", "2", "--resolve", &format!("{HOST}:80:{ip}")],
    )
}

/// nginx answered: it requires the PROXY protocol, so a header came with the connection.
fn answered(curl: &Curl) -> bool {
    curl.ok() && curl.body.starts_with("proxy_protocol_addr=")
}

/// The Corefile with its `reload` checking every 2 s.
fn fast_reload(corefile: &str) -> String {
    corefile
        .lines()
        .map(|l| {
            if l.trim() == "reload" {
                l.replace("reload", "reload 2s 1s")
            } else {
                l.to_owned()
            }
        })
        .collect::<Vec<_>>()
        .join("\n")
        + "\n"
}

/// What a client's resolver does: ask CoreDNS for `HOST`'s A record, up to 3 times.
fn resolve(server: SocketAddr) -> Result<IpAddr, String> {
    let mut last = String::new();
    for _ in 0..3 {
        match coredns::query(
            server,
            &format!("{HOST}."),
            RecordType::A,
            Duration::from_secs(1),
        ) {
            Ok(answer) => {
                return answer
                    .addresses()
                    .first()
                    .copied()
                    .ok_or_else(|| format!("no address: {answer}"));
            }
            Err(err) => last = err.to_string(),
        }
    }
    Err(format!("no answer in 3 tries: {last}"))
}

/// One request of an in-cluster client: when, what the name resolved to, whether nginx
/// answered through a load balancer or the proxy (a header came with it).
#[derive(Debug)]
struct Sample {
    at: Duration,
    answer: Result<IpAddr, String>,
    ok: bool,
}

/// The in-cluster clients' samples, per node.
type Samples = Mutex<Vec<Vec<Sample>>>;

/// Failed and total requests of node `i`'s client since `since` (loop time).
fn count(samples: &Samples, i: usize, since: Duration) -> (usize, usize) {
    let samples = samples
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    let seen: Vec<&Sample> = samples[i].iter().filter(|s| s.at >= since).collect();
    (seen.iter().filter(|s| !s.ok).count(), seen.len())
}

/// `hairpin plan` (live, the admin's kubeconfig) from the test process.
fn plan_text(api: &ApiServer) -> String {
    let out = Command::new(env!("CARGO_BIN_EXE_hairpin"))
        .args(["plan", "--cure", "auto", "--kubeconfig"])
        .arg(api.admin_kubeconfig())
        .output()
        .expect("run hairpin plan");
    String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr)
}

/// `hairpin doctor HOST` from node A's namespace (the admin's kubeconfig).
fn doctor_text(api: &ApiServer, node: &KubeNode) -> String {
    let out = node
        .command(env!("CARGO_BIN_EXE_hairpin"))
        .args(["doctor", HOST, "--kubeconfig"])
        .arg(api.admin_kubeconfig())
        .output()
        .expect("run hairpin doctor");
    String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr)
}

#[test]
fn native_proven_from_every_node_mixed_upgraded_added() {
    let test = "native_proven_from_every_node_mixed_upgraded_added";
    if let Some(reason) = kube::skip_reason() {
        skip::skip(test, Cause::Missing, &reason);
        return;
    }
    if coredns::skip_without(test) {
        return;
    }
    let lb_ip = "203.0.113.49";
    let api = ApiServer::start().expect("start kube-apiserver");
    // Node A: the Scene (the cloud LB in front of it, the outside client looping).
    register_node(&api, "node-a", kube::VERSION);
    let mut scene = Scene::start(&api, "node-a", lb_ip, Receiver::Nginx);
    // Node B: kube-proxy with the gate off, the Node reporting an older kubelet.
    let mut b = extra_node(&api, "node-b", OLD, false, lb_ip);
    b.wait_lb_rule(lb_ip, true, Duration::from_secs(10))
        .expect("B short-circuits the LB IP");
    let _controller = scene.controller(&api, "controller", &[]);
    let log_path = scene.node.dir().join("controller.log");
    let log = || std::fs::read_to_string(&log_path).unwrap_or_default();

    // mixed) The DNS cure stays, B named everywhere, nothing written.
    wait_for(
        "the DNS cure written",
        Duration::from_secs(40),
        || corefile(&api).contains(HOST),
        log,
    );
    let status = wait_for(
        "the Hairpin status says not-on-every-node, naming node-b",
        Duration::from_secs(30),
        || {
            hairpin_status(&api).is_some_and(|s| {
                s["nativeCure"] == "not-on-every-node"
                    && s["cure"] == "dns"
                    && s["cureReason"]
                        .as_str()
                        .is_some_and(|r| r.contains("node-b"))
            })
        },
        log,
    );
    let event = wait_event(&api, "NativeCureNotOnEveryNode", "node-b", log);
    let (proxy_ip, listener) = proxy_endpoints(&api, log);
    // The doctor in A resolves the name as the public DNS does (its /etc/hosts).
    let public = format!("{lb_ip} {HOST}\n");
    let _hosts_a = start_proxy(&api, &mut scene.node, (&proxy_ip, listener), &public);
    let _hosts_b = start_proxy(&api, &mut b, (&proxy_ip, listener), "");
    let records = coredns::Options {
        records: vec![(HAIRPIN_SERVICE_FQDN.into(), proxy_ip.parse().unwrap())],
        upstream: vec![(HOST.into(), lb_ip.parse().unwrap())],
        ..coredns::Options::default()
    };
    let mut seen = corefile(&api);
    let Some(dns) = CoreDns::start_with(test, &fast_reload(&seen), &records) else {
        return;
    };
    assert_eq!(
        resolve(dns.addr()).map(|ip| ip.to_string()),
        Ok(proxy_ip.clone()),
        "{}",
        dns.corefile()
    );

    let server = dns.addr();
    let stop = AtomicBool::new(false);
    let samples: Samples = Mutex::new(vec![Vec::new(), Vec::new(), Vec::new()]);
    let started = Instant::now();
    let outside_start = scene.client.elapsed();
    // The outside client's loop time of one of our instants.
    let outside_at = |t: Duration| outside_start + t;
    let outside = |since: Duration| {
        let seen: Vec<_> = scene
            .client
            .attempts()
            .into_iter()
            .filter(|a| a.at >= outside_at(since))
            .collect();
        (seen.iter().filter(|a| !a.ok()).count(), seen.len())
    };
    let mut rows: Vec<(String, String)> = Vec::new();
    let c_netns: Mutex<Option<String>> = Mutex::new(None);
    let namespaces = [scene.node.netns().to_owned(), b.netns().to_owned()];
    let mut c_node: Option<KubeNode> = None;
    let mut hosts_c = None;
    let (plan, doctor) = (plan_text(&api), doctor_text(&api, &scene.node));
    std::thread::scope(|scope| {
        let _stop = StopOnDrop(&stop);
        let (stop, samples, c_netns, api_ref, dns_ref) = (&stop, &samples, &c_netns, &api, &dns);
        for (i, netns) in namespaces.iter().enumerate() {
            scope.spawn(move || client(netns, i, server, started, stop, samples));
        }
        scope.spawn(move || {
            // C's client starts with C.
            while !stop.load(Ordering::Relaxed) {
                let netns = c_netns.lock().unwrap().clone();
                if let Some(netns) = netns {
                    client(&netns, 2, server, started, stop, samples);
                    return;
                }
                std::thread::sleep(Duration::from_millis(20));
            }
        });
        // The DNS follower: the kubelet's ConfigMap sync and `reload`, fast.
        scope.spawn(move || {
            while !stop.load(Ordering::Relaxed) {
                let now = corefile(api_ref);
                if !now.is_empty() && now != seen {
                    dns_ref
                        .write_corefile(&fast_reload(&now))
                        .expect("write the Corefile");
                    seen = now;
                }
                std::thread::sleep(Duration::from_millis(100));
            }
        });

        // mixed) a few seconds with every client running.
        std::thread::sleep(Duration::from_secs(5));
        assert_eq!(ip_mode(&api).as_deref(), Some("VIP"), "{}", log());
        assert!(record(&api).is_none(), "{:?}", record(&api));
        let (fa, ta) = count(samples, 0, Duration::ZERO);
        let (fb, tb) = count(samples, 1, Duration::ZERO);
        let (fo, to) = outside(Duration::ZERO);
        rows.push((
            "mixed".into(),
            format!("A {fa}/{ta}, B {fb}/{tb}, outside {fo}/{to} (DNS cure kept; ipMode VIP, no record; the status named node-b {status:.1?} after the DNS rule)"),
        ));
        assert!(ta > 0 && tb > 0, "{rows:?}");
        assert_eq!((fa, fb, fo), (0, 0, 0), "mixed: {rows:?}\n{}", log());

        // upgraded) B's kube-proxy honours ipMode now and its Node says so.
        let upgrade = started.elapsed();
        b.restart_kube_proxy(&api, true)
            .expect("restart B's kube-proxy");
        report_version(&api, "node-b", kube::VERSION);
        let proven = wait_for(
            "native proven once every node honours ipMode",
            Duration::from_secs(40),
            || record(&api).is_some_and(|e| e["state"] == "proven"),
            log,
        );
        wait_for(
            "the DNS rule gone",
            Duration::from_secs(20),
            || !corefile(&api).contains(HOST),
            log,
        );
        wait_for(
            "CoreDNS answers the LB IP",
            Duration::from_secs(20),
            || resolve(server).is_ok_and(|ip| ip.to_string() == lb_ip),
            log,
        );
        let switched = started.elapsed();
        std::thread::sleep(Duration::from_secs(3));
        let (fa, ta) = count(samples, 0, upgrade);
        let (fb, tb) = count(samples, 1, upgrade);
        let via_lb = |i: usize| {
            let s = samples.lock().unwrap();
            s[i].iter()
                .filter(|s| s.at > switched && s.ok)
                .filter(|s| s.answer.as_ref().is_ok_and(|ip| ip.to_string() == lb_ip))
                .count()
        };
        let (la, lb_) = (via_lb(0), via_lb(1));
        let (fo, to) = outside(upgrade);
        rows.push((
            "upgraded".into(),
            format!("A {fa}/{ta}, B {fb}/{tb}, outside {fo}/{to} (native proven {proven:.1?} after B's upgrade; after the switch {la} of A's and {lb_} of B's requests crossed the load balancer)"),
        ));
        assert!(la > 0 && lb_ > 0, "both nodes through the LB: {rows:?}");
        assert_eq!((fa, fb, fo), (0, 0, 0), "upgraded: {rows:?}\n{}", log());

        // added) node C on an older version after native was proven.
        let added = started.elapsed();
        let mut c = extra_node(&api, "node-c", OLD, false, lb_ip);
        let c_up = started.elapsed();
        hosts_c = Some(start_proxy(&api, &mut c, (&proxy_ip, listener), ""));
        *c_netns.lock().unwrap() = Some(c.netns().to_owned());
        c_node = Some(c);
        let dns_back = wait_for(
            "the DNS rule back for node-c",
            Duration::from_secs(30),
            || corefile(&api).contains(HOST),
            log,
        );
        wait_for(
            "CoreDNS answers the hairpin Service again",
            Duration::from_secs(20),
            || resolve(server).is_ok_and(|ip| ip.to_string() == proxy_ip),
            log,
        );
        wait_for(
            "the status names node-c",
            Duration::from_secs(20),
            || {
                hairpin_status(&api).is_some_and(|s| {
                    s["cureReason"]
                        .as_str()
                        .is_some_and(|r| r.contains("node-c"))
                })
            },
            log,
        );
        std::thread::sleep(Duration::from_secs(3));
        let (fa, ta) = count(samples, 0, added);
        let (fb, tb) = count(samples, 1, added);
        let (fc, tc) = count(samples, 2, Duration::ZERO);
        let (fo, to) = outside(added);
        rows.push((
            "added".into(),
            format!(
                "A {fa}/{ta}, B {fb}/{tb}, C {fc}/{tc}, outside {fo}/{to} (C registered and its kube-proxy up {:.1?} after the phase began; the DNS rule back {dns_back:.1?} after C's proxy was up; ipMode {:?}, record {})",
                c_up - added,
                ip_mode(&api),
                record(&api).map(|e| e["state"].clone()).unwrap_or_default()
            ),
        ));
        assert!(tc > 0, "{rows:?}");
        assert_eq!((fa, fb, fo), (0, 0, 0), "added: {rows:?}\n{}", log());
        stop.store(true, Ordering::Relaxed);
    });
    drop((c_node, hosts_c));
    for (phase, row) in &rows {
        println!("{phase}) failed/total requests: {row}");
    }
    println!("mixed) Event NativeCureNotOnEveryNode: {event}");
    let plan_line = plan
        .lines()
        .find(|l| l.contains("node-b"))
        .unwrap_or_default()
        .trim()
        .to_owned();
    let doctor_lines: Vec<&str> = doctor.lines().filter(|l| l.contains("node-b")).collect();
    println!("mixed) hairpin plan: {plan_line}");
    println!("mixed) hairpin doctor: {}", doctor_lines.join(" | "));
    assert!(!plan_line.is_empty(), "hairpin plan names node-b:\n{plan}");
    assert!(
        !doctor_lines.is_empty(),
        "hairpin doctor names node-b:\n{doctor}"
    );
    let log = log();
    scene.finish("nodes", &log);
}

/// Node `i`'s in-cluster client: resolve the name with CoreDNS, curl it from the node's
/// namespace `netns` (2 s at most), again, until `stop`.
fn client(
    netns: &str,
    i: usize,
    server: SocketAddr,
    started: Instant,
    stop: &AtomicBool,
    samples: &Samples,
) {
    while !stop.load(Ordering::Relaxed) {
        let at = started.elapsed();
        let answer = resolve(server);
        let ok = answer.as_ref().is_ok_and(|ip| {
            Command::new("ip")
                .args(["netns", "exec", netns, "curl", "-s", "--max-time", "2"])
                .args([
                    "--resolve",
                    &format!("{HOST}:80:{ip}"),
                    &format!("http://{HOST}/"),
                ])
                .output()
                .is_ok_and(|o| o.status.success() && o.stdout.starts_with(b"proxy_protocol_addr="))
        });
        samples
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)[i]
            .push(Sample { at, answer, ok });
        std::thread::sleep(Duration::from_millis(50));
    }
}

// The node agents prove the cure from every node (issue 45 item 1, bullets 2 and 3): each
// node runs `hairpin node-agent --native-probes` in its namespace, which probes the load
// balancer through its own kube-proxy and reports in its Lease `hairpin-node-<node>`; the
// controller runs with `--node-probes-max-age`. Node B reports kubelet v1.31.14 but its
// kube-proxy runs with the gate off, so the Nodes' gate cannot tell.

/// The node agent's ServiceAccount and Role as the chart makes them with `nodeAgent.enabled`
/// and `nativeProbes`, and the controller's read of the Leases (the chart's Role rule).
fn node_agent_rbac(api: &ApiServer) -> String {
    let token = api.service_account_token("hairpin", "hairpin-node-agent");
    api.apply(&json!({
        "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
        "metadata": {"namespace": "hairpin", "name": "hairpin-node-agent"},
        "rules": [
            {"apiGroups": [""], "resources": ["configmaps"],
             "resourceNames": ["hairpin-hosts", "hairpin-native"], "verbs": ["get", "list", "watch"]},
            {"apiGroups": ["coordination.k8s.io"], "resources": ["leases"],
             "verbs": ["create", "get", "update", "patch"]}
        ]
    }));
    api.apply(&json!({
        "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
        "metadata": {"namespace": "hairpin", "name": "hairpin-node-agent"},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "hairpin-node-agent"},
        "subjects": [{"kind": "ServiceAccount", "name": "hairpin-node-agent", "namespace": "hairpin"}]
    }));
    api.apply(&json!({
        "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
        "metadata": {"namespace": "hairpin", "name": "hairpin-controller-node-probes"},
        "rules": [{"apiGroups": ["coordination.k8s.io"], "resources": ["leases"], "verbs": ["list", "watch"]}]
    }));
    api.apply(&json!({
        "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
        "metadata": {"namespace": "hairpin", "name": "hairpin-controller-node-probes"},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "hairpin-controller-node-probes"},
        "subjects": [{"kind": "ServiceAccount", "name": "hairpin-controller", "namespace": "hairpin"}]
    }));
    token
}

/// `hairpin node-agent --native-probes` in `node`'s namespace as node `name`, with the node
/// agent's token and a hosts file of its own; logs to `node-agent.log` in the node's folder.
fn start_agent(api: &ApiServer, node: &mut KubeNode, name: &str, token: &str) {
    let kubeconfig = api
        .kubeconfig_for(&format!("node-agent-{name}"), token)
        .expect("kubeconfig");
    let hosts = node.dir().join("agent-hosts");
    std::fs::write(&hosts, "127.0.0.1 localhost\n").expect("the agent's hosts file");
    let mut agent = node.command(env!("CARGO_BIN_EXE_hairpin"));
    agent
        .args(["node-agent", "--native-probes", "--node-name", name])
        .args(["--interval", "2s", "--admin-addr", "127.0.0.1:0"])
        .args(["--log-format", "text", "--hosts-file"])
        .arg(&hosts)
        .arg("--kubeconfig")
        .arg(&kubeconfig);
    node.spawn("node-agent", agent)
        .expect("start hairpin node-agent");
}

/// What node `name`'s agent reported for the load balancer: `(result, attempt)`.
fn agent_report(api: &ApiServer, name: &str) -> Option<(String, String)> {
    let lease = api.get(&format!(
        "/apis/coordination.k8s.io/v1/namespaces/hairpin/leases/hairpin-node-{name}"
    ))?;
    let text = lease["metadata"]["annotations"]["hairpin.io/native-probes"].as_str()?;
    let probes: Value = serde_json::from_str(text).ok()?;
    let probe = &probes["ingress/nginx"];
    Some((
        probe["result"].as_str()?.to_owned(),
        probe["attempt"].as_str()?.to_owned(),
    ))
}

/// The record's current attempt.
fn attempt(api: &ApiServer) -> Option<String> {
    let entry = record(api)?;
    entry["attempt"]
        .as_str()
        .or_else(|| entry["since"].as_str())
        .map(str::to_owned)
}

#[test]
fn native_proven_by_every_nodes_agent() {
    let test = "native_proven_by_every_nodes_agent";
    if let Some(reason) = kube::skip_reason() {
        skip::skip(test, Cause::Missing, &reason);
        return;
    }
    if coredns::skip_without(test) {
        return;
    }
    let lb_ip = "203.0.113.51";
    let api = ApiServer::start().expect("start kube-apiserver");
    register_node(&api, "node-a", kube::VERSION);
    let mut scene = Scene::start(&api, "node-a", lb_ip, Receiver::Nginx);
    // Node B: kube-proxy with the gate off, its Node reporting v1.31.14 (nothing tells).
    let mut b = extra_node(&api, "node-b", kube::VERSION, false, lb_ip);
    b.wait_lb_rule(lb_ip, true, Duration::from_secs(10))
        .expect("B short-circuits the LB IP");
    let token = node_agent_rbac(&api);
    let _controller = scene.controller(
        &api,
        "controller",
        &[
            "--node-probes-max-age",
            "10s",
            "--native-retry",
            "3s",
            "--native-dns-settle",
            "5s",
        ],
    );
    let log_path = scene.node.dir().join("controller.log");
    let log = || std::fs::read_to_string(&log_path).unwrap_or_default();
    wait_for(
        "the DNS cure written",
        Duration::from_secs(40),
        || corefile(&api).contains(HOST),
        log,
    );
    let (proxy_ip, listener) = proxy_endpoints(&api, log);
    // The doctor in A resolves the name as the public DNS does (its /etc/hosts).
    let public = format!("{lb_ip} {HOST}\n");
    let _hosts_a = start_proxy(&api, &mut scene.node, (&proxy_ip, listener), &public);
    let _hosts_b = start_proxy(&api, &mut b, (&proxy_ip, listener), "");
    start_agent(&api, &mut scene.node, "node-a", &token);
    start_agent(&api, &mut b, "node-b", &token);
    let records = coredns::Options {
        records: vec![(HAIRPIN_SERVICE_FQDN.into(), proxy_ip.parse().unwrap())],
        upstream: vec![(HOST.into(), lb_ip.parse().unwrap())],
        ..coredns::Options::default()
    };
    let mut seen = corefile(&api);
    let Some(dns) = CoreDns::start_with(test, &fast_reload(&seen), &records) else {
        return;
    };
    let server = dns.addr();
    let stop = AtomicBool::new(false);
    let samples: Samples = Mutex::new(vec![Vec::new(), Vec::new(), Vec::new()]);
    let started = Instant::now();
    let outside_start = scene.client.elapsed();
    let outside = |since: Duration| {
        let seen: Vec<_> = scene
            .client
            .attempts()
            .into_iter()
            .filter(|a| a.at >= outside_start + since)
            .collect();
        (seen.iter().filter(|a| !a.ok()).count(), seen.len())
    };
    let mut rows: Vec<(String, String)> = Vec::new();
    let c_netns: Mutex<Option<String>> = Mutex::new(None);
    let namespaces = [scene.node.netns().to_owned(), b.netns().to_owned()];
    let mut c_node: Option<KubeNode> = None;
    let mut hosts_c = None;
    let b_log = |b: &KubeNode| b.log("node-agent");
    std::thread::scope(|scope| {
        let _stop = StopOnDrop(&stop);
        let (stop, samples, c_netns, api_ref, dns_ref) = (&stop, &samples, &c_netns, &api, &dns);
        for (i, netns) in namespaces.iter().enumerate() {
            scope.spawn(move || client(netns, i, server, started, stop, samples));
        }
        scope.spawn(move || {
            while !stop.load(Ordering::Relaxed) {
                let netns = c_netns.lock().unwrap().clone();
                if let Some(netns) = netns {
                    client(&netns, 2, server, started, stop, samples);
                    return;
                }
                std::thread::sleep(Duration::from_millis(20));
            }
        });
        scope.spawn(move || {
            while !stop.load(Ordering::Relaxed) {
                let now = corefile(api_ref);
                if !now.is_empty() && now != seen {
                    dns_ref
                        .write_corefile(&fast_reload(&now))
                        .expect("write the Corefile");
                    seen = now;
                }
                std::thread::sleep(Duration::from_millis(100));
            }
        });

        // a) B's agent fails the proof: never proven, the DNS cure stays, B named.
        let failed = wait_for(
            "node-b's agent reports failed",
            Duration::from_secs(60),
            || agent_report(api_ref, "node-b").is_some_and(|(r, _)| r == "failed"),
            || log() + "\n--- node-b agent ---\n" + &b_log(&b),
        );
        let mut reason = Value::Null;
        let named = wait_for(
            "the record says failed, naming node-b",
            Duration::from_secs(20),
            || {
                record(api_ref).is_some_and(|e| {
                    let named = e["state"] == "failed"
                        && e["reason"].as_str().is_some_and(|r| r.contains("node-b"));
                    if named {
                        reason = e["reason"].clone();
                    }
                    named
                })
            },
            log,
        );
        wait_for(
            "ipMode put back",
            Duration::from_secs(20),
            || ip_mode(api_ref).as_deref() != Some("Proxy"),
            log,
        );
        let mut status = Value::Null;
        wait_for(
            "the Hairpin status names node-b",
            Duration::from_secs(20),
            || {
                hairpin_status(api_ref).is_some_and(|s| {
                    let named = s["cure"] == "dns"
                        && s["cureReason"]
                            .as_str()
                            .is_some_and(|r| r.contains("node-b"));
                    if named {
                        status =
                            json!({"nativeCure": s["nativeCure"], "cureReason": s["cureReason"]});
                    }
                    named
                })
            },
            log,
        );
        std::thread::sleep(Duration::from_secs(8));
        assert!(corefile(api_ref).contains(HOST), "the DNS cure stays");
        let (fa, ta) = count(samples, 0, Duration::ZERO);
        let (fb, tb) = count(samples, 1, Duration::ZERO);
        let (fo, to) = outside(Duration::ZERO);
        rows.push((
            "a) B's agent fails".into(),
            format!("A {fa}/{ta}, B {fb}/{tb}, outside {fo}/{to} (B reported failed {failed:.1?} after the agents started, the record failed naming node-b {named:.1?} later; never proven, DNS cure kept; reason: {reason}; Hairpin status: {status})"),
        ));
        assert!(ta > 0 && tb > 0, "{rows:?}");
        assert_eq!((fa, fb, fo), (0, 0, 0), "a: {rows:?}\n{}", log());

        // b) B's kube-proxy honours ipMode now: proven once both agents proved it.
        let upgrade = started.elapsed();
        b.restart_kube_proxy(api_ref, true)
            .expect("restart B's kube-proxy");
        let proven = wait_for(
            "both agents prove the current attempt and the DNS rule goes",
            Duration::from_secs(90),
            || {
                let Some(now) = attempt(api_ref) else {
                    return false;
                };
                ["node-a", "node-b"].iter().all(|n| {
                    agent_report(api_ref, n).is_some_and(|(r, a)| r == "proven" && a == now)
                }) && !corefile(api_ref).contains(HOST)
            },
            || log() + "\n--- node-b agent ---\n" + &b_log(&b),
        );
        wait_for(
            "CoreDNS answers the LB IP",
            Duration::from_secs(20),
            || resolve(server).is_ok_and(|ip| ip.to_string() == lb_ip),
            log,
        );
        let switched = started.elapsed();
        std::thread::sleep(Duration::from_secs(3));
        let (fa, ta) = count(samples, 0, upgrade);
        let (fb, tb) = count(samples, 1, upgrade);
        let via_lb = |i: usize| {
            let s = samples.lock().unwrap();
            s[i].iter()
                .filter(|s| s.at > switched && s.ok)
                .filter(|s| s.answer.as_ref().is_ok_and(|ip| ip.to_string() == lb_ip))
                .count()
        };
        let (la, lb_) = (via_lb(0), via_lb(1));
        let (fo, to) = outside(upgrade);
        rows.push((
            "b) B upgraded".into(),
            format!("A {fa}/{ta}, B {fb}/{tb}, outside {fo}/{to} (native proven by both agents and the DNS rule gone {proven:.1?} after B's kube-proxy restart; then {la} of A's and {lb_} of B's requests crossed the load balancer)"),
        ));
        assert!(la > 0 && lb_ > 0, "both nodes through the LB: {rows:?}");
        assert_eq!((fa, fb, fo), (0, 0, 0), "b: {rows:?}\n{}", log());

        // c) B's kube-proxy back with the gate off: B's agent fails, the DNS rule comes
        // back first, then ipMode is put back.
        let broke = started.elapsed();
        b.restart_kube_proxy(api_ref, false)
            .expect("restart B's kube-proxy");
        let at = Instant::now();
        let mut dns_back = None;
        let mut put_back = None;
        let mut reason = Value::Null;
        while dns_back.is_none() || put_back.is_none() {
            if let Some(e) = record(api_ref)
                && e["state"] == "failed"
                && reason.is_null()
            {
                reason = e["reason"].clone();
            }
            assert!(
                at.elapsed() < Duration::from_secs(60),
                "c: DNS back {dns_back:?}, put back {put_back:?}\n{}\n--- node-b agent ---\n{}",
                log(),
                b_log(&b)
            );
            if dns_back.is_none() && corefile(api_ref).contains(HOST) {
                dns_back = Some(at.elapsed());
            }
            if put_back.is_none() && ip_mode(api_ref).as_deref() != Some("Proxy") {
                put_back = Some(at.elapsed());
                // Make before break: the DNS rule was back first.
                assert!(
                    dns_back.is_some() || corefile(api_ref).contains(HOST),
                    "ipMode put back before the DNS rule came back"
                );
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        wait_for(
            "CoreDNS answers the hairpin Service again",
            Duration::from_secs(20),
            || resolve(server).is_ok_and(|ip| ip.to_string() == proxy_ip),
            log,
        );
        let resolved = at.elapsed();
        std::thread::sleep(Duration::from_secs(3));
        let (fa, ta) = count(samples, 0, broke);
        let (fb, tb) = count(samples, 1, broke);
        let (fo, to) = outside(broke);
        rows.push((
            "c) B's gate off after proven".into(),
            format!("A {fa}/{ta}, B {fb}/{tb}, outside {fo}/{to} (after B's kube-proxy restart: DNS rule back {:.1?}, ipMode put back {:.1?}, CoreDNS answering the proxy {resolved:.1?}; reason: {reason})", dns_back.unwrap(), put_back.unwrap()),
        ));
        assert!(
            reason.as_str().is_some_and(|r| r.contains("node-b")),
            "{rows:?}"
        );
        assert_eq!((fa, fo), (0, 0), "c: {rows:?}\n{}", log());

        // d) B fixed again and proven; then a node C added (kubelet 1.31, no agent yet): the
        // DNS rule comes back first, until C's agent proved it.
        b.restart_kube_proxy(api_ref, true)
            .expect("restart B's kube-proxy");
        wait_for(
            "native proven again by both agents",
            Duration::from_secs(90),
            || !corefile(api_ref).contains(HOST) && ip_mode(api_ref).as_deref() == Some("Proxy"),
            log,
        );
        wait_for(
            "CoreDNS answers the LB IP",
            Duration::from_secs(20),
            || resolve(server).is_ok_and(|ip| ip.to_string() == lb_ip),
            log,
        );
        let added = started.elapsed();
        let mut c = extra_node(api_ref, "node-c", kube::VERSION, true, lb_ip);
        let c_up = started.elapsed();
        let dns_back = wait_for(
            "the DNS rule back for node-c",
            Duration::from_secs(30),
            || corefile(api_ref).contains(HOST),
            log,
        );
        assert_eq!(
            ip_mode(api_ref).as_deref(),
            Some("Proxy"),
            "make before break"
        );
        hosts_c = Some(start_proxy(api_ref, &mut c, (&proxy_ip, listener), ""));
        *c_netns.lock().unwrap() = Some(c.netns().to_owned());
        let status = wait_for(
            "the status names node-c",
            Duration::from_secs(20),
            || {
                hairpin_status(api_ref).is_some_and(|s| {
                    s["cureReason"]
                        .as_str()
                        .is_some_and(|r| r.contains("node-c"))
                })
            },
            log,
        );
        // The live plan reads the agents' Leases as the controller does: it names node-c.
        let plan = plan_text(api_ref);
        let plan_line = plan
            .lines()
            .find(|l| l.contains("node-c"))
            .unwrap_or_default()
            .to_owned();
        println!("d) hairpin plan: {plan_line}");
        assert!(!plan_line.is_empty(), "hairpin plan names node-c:\n{plan}");
        let doctor = doctor_text(api_ref, &scene.node);
        let doctor_lines: Vec<&str> = doctor.lines().filter(|l| l.contains("node-c")).collect();
        println!("d) hairpin doctor: {}", doctor_lines.join(" | "));
        assert!(
            !doctor_lines.is_empty(),
            "hairpin doctor names node-c:\n{doctor}"
        );
        let agent_c = started.elapsed();
        start_agent(api_ref, &mut c, "node-c", &token);
        let vouched = wait_for(
            "native again once C's agent proved it",
            Duration::from_secs(60),
            || !corefile(api_ref).contains(HOST),
            || log() + "\n--- node-c agent ---\n" + &c.log("node-agent"),
        );
        std::thread::sleep(Duration::from_secs(3));
        let (fa, ta) = count(samples, 0, added);
        let (fb, tb) = count(samples, 1, added);
        let (fc, tc) = count(samples, 2, Duration::ZERO);
        let (fo, to) = outside(added);
        rows.push((
            "d) C added after proven".into(),
            format!(
                "A {fa}/{ta}, B {fb}/{tb}, C {fc}/{tc}, outside {fo}/{to} (C registered and its kube-proxy up {:.1?} after the phase began; the DNS rule back {dns_back:.1?} after that, ipMode kept Proxy; status named node-c; native again {vouched:.1?} after C's agent started ({:.1?} into the phase), status named C {status:.1?} after the rule)",
                c_up - added,
                agent_c - added,
            ),
        ));
        assert!(tc > 0, "{rows:?}");
        assert_eq!((fa, fb, fo), (0, 0, 0), "d: {rows:?}\n{}", log());
        c_node = Some(c);
        stop.store(true, Ordering::Relaxed);
    });
    drop((c_node, hosts_c));
    for (phase, row) in &rows {
        println!("{phase}: failed/total requests: {row}");
    }
    let log = log();
    scene.finish("node agents", &log);
}
