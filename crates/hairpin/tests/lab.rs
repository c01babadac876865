//! End-to-end lab: a cloud load balancer, an ingress and a node with the kube-proxy
//! short-circuit, built from network namespaces, veth pairs and iptables rules that this test
//! creates and removes. Only private and documentation addresses, only inside those namespaces.
//!
//! ```text
//!  ext ns                 lb ns                          node ns
//!  198.51.100.2 ──veth── 198.51.100.10 (HAProxy,         10.200.1.2 nginx (proxy_protocol)
//!  2001:db8:100::2        2001:db8:100::10                fd00:200:1::2
//!  (external client)      send-proxy :80, -v2 :81)        hairpin proxy on [::]:10080/10081
//!                         10.200.1.1 ───────veth──────── 10.200.1.2
//!                                                          iptables/ip6tables DNAT: the LB's
//!                                                          addresses -> nginx (short-circuit),
//!                                                          the hairpin Service's ClusterIPs
//!                                                          10.96.0.50 / fd00:10:96::50 -> proxy
//!                                                          "public DNS" (A and AAAA) on :53
//!                                                          /etc/hosts = /etc/netns/<node>/hosts
//! ```
//!
//! It shows the external path working with the client's real address, the in-cluster path
//! failing the way users see it, `hairpin doctor` saying BROKEN, and then, with `hairpin proxy`
//! and the node agent's hosts entry in place, the in-cluster path working with the client's own
//! address and the doctor saying OK. Both families: the load balancer is dual-stack, and an
//! IPv4 and an IPv6 client each go through the short-circuit (broken) and through hairpin
//! (fixed), the proxy listening dual-stack on `[::]` as planned and writing each client's
//! header in its own family with the load balancer's address of that family (nginx reports
//! `$proxy_protocol_server_addr`). Everything is removed by a drop guard, even on failure.
//!
//! Needs root and `ip netns`; without them it skips loudly (CI runs it as root).

mod support;

use std::net::{IpAddr, UdpSocket};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

const HOST: &str = "shop.example.test";
const LB_IP: &str = "198.51.100.10";
const EXT_IP: &str = "198.51.100.2";
const LB_INNER_IP: &str = "10.200.1.1";
const NODE_IP: &str = "10.200.1.2";
/// The hairpin proxy's address, standing in for its Service's ClusterIP.
const HAIRPIN_IP: &str = "10.96.0.50";
const TOKEN: &str = "Xq3-acme-token_42";
const LB_IP6: &str = "2001:db8:100::10";
const EXT_IP6: &str = "2001:db8:100::2";
const LB_INNER_IP6: &str = "fd00:200:1::1";
const NODE_IP6: &str = "fd00:200:1::2";
/// The hairpin Service's IPv6 ClusterIP.
const HAIRPIN_IP6: &str = "fd00:10:96::50";
/// The proxy's listener ports for the load balancer's ports 80 and 81 (the hairpin Service's
/// targetPorts).
const LISTENERS: [(&str, &str); 2] = [("80", "10080"), ("81", "10081")];

/// The environment variable that turns [`lab_dns_server`] into the lab's "public DNS".
const DNS_ENV: &str = "HAIRPIN_LAB_DNS";

struct Lab {
    prefix: String,
    namespaces: Vec<String>,
    children: Vec<(String, Child)>,
    dir: tempfile::TempDir,
}

impl Lab {
    fn new() -> Self {
        Lab {
            prefix: format!("hp-{}", std::process::id()),
            namespaces: Vec::new(),
            children: Vec::new(),
            dir: tempfile::Builder::new()
                .prefix("hairpin-lab-")
                .tempdir()
                .unwrap(),
        }
    }

    fn ns(&self, role: &str) -> String {
        format!("{}-{role}", self.prefix)
    }

    fn add_namespace(&mut self, role: &str) -> String {
        let name = self.ns(role);
        run_ok(Command::new("ip").args(["netns", "add", &name]));
        self.namespaces.push(name.clone());
        self.exec_ok(&name, &["ip", "link", "set", "lo", "up"]);
        name
    }

    fn netns_etc(&self, ns: &str) -> PathBuf {
        Path::new("/etc/netns").join(ns)
    }

    fn exec(&self, ns: &str, args: &[&str]) -> Output {
        in_ns(ns, args).output().unwrap()
    }

    fn exec_ok(&self, ns: &str, args: &[&str]) -> Output {
        run_ok(&mut in_ns(ns, args))
    }

    /// Starts a long-running process in `ns`, logging to `<name>.log` in the lab's dir.
    fn spawn(&mut self, name: &str, ns: &str, args: &[&str], env: &[(&str, &str)]) {
        let log = std::fs::File::create(self.dir.path().join(format!("{name}.log"))).unwrap();
        let child = in_ns(ns, args)
            .envs(env.iter().copied())
            .stdin(Stdio::null())
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .spawn()
            .unwrap();
        self.children.push((name.to_owned(), child));
    }

    fn log(&self, name: &str) -> String {
        std::fs::read_to_string(self.dir.path().join(format!("{name}.log"))).unwrap_or_default()
    }

    /// Waits until something in `ns` listens on `addr` (TCP, or UDP with `udp`).
    fn wait_listening(&mut self, ns: &str, addr: &str, udp: bool, owner: &str) {
        let deadline = Instant::now() + Duration::from_secs(10);
        let flag = if udp { "-Hlun" } else { "-Hltn" };
        loop {
            let out = self.exec(ns, &["ss", flag]);
            if String::from_utf8_lossy(&out.stdout).contains(addr) {
                return;
            }
            if let Some((_, child)) = self.children.iter_mut().find(|(n, _)| n == owner)
                && let Ok(Some(status)) = child.try_wait()
            {
                panic!("{owner} exited with {status}:\n{}", self.log(owner));
            }
            assert!(
                Instant::now() < deadline,
                "{owner} does not listen on {addr}:\n{}",
                self.log(owner)
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

impl Drop for Lab {
    fn drop(&mut self) {
        for (_, child) in &mut self.children {
            let _ = child.kill();
            let _ = child.wait();
        }
        for ns in &self.namespaces {
            let _ = Command::new("ip").args(["netns", "del", ns]).output();
            let _ = std::fs::remove_dir_all(self.netns_etc(ns));
        }
        // Only removed when no other namespace still uses it.
        let _ = std::fs::remove_dir(Path::new("/etc/netns"));
    }
}

/// `args` run inside the network namespace `ns`.
fn in_ns(ns: &str, args: &[&str]) -> Command {
    let mut command = hairpin_testkit::isolated_command("ip");
    command.args(["netns", "exec", ns]).args(args);
    command
}

fn run_ok(command: &mut Command) -> Output {
    let out = command.output().unwrap();
    assert!(
        out.status.success(),
        "{command:?} failed: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

/// `true` (after a skip, which fails the test under CI: CI runs the suite as root) when the lab
/// cannot run here: it needs root and `ip netns`.
fn skip_without(test: &str) -> bool {
    let reason = if !hairpin_testkit::is_root() {
        Some("not running as root: the lab needs root and `ip netns` (CI runs it as root)".into())
    } else {
        match Command::new("ip").args(["netns", "list"]).output() {
            Ok(out) if out.status.success() => None,
            Ok(out) => Some(format!(
                "`ip netns` fails: {}",
                String::from_utf8_lossy(&out.stderr)
            )),
            Err(err) => Some(format!("`ip` is not available: {err}")),
        }
    };
    hairpin_testkit::skip::missing(test, reason)
}

fn curl(lab: &Lab, ns: &str, url: &str, extra: &[&str]) -> (Option<i32>, String, String) {
    let mut args = vec!["curl", "-sS", "--max-time", "5", "-w", "\n%{local_ip}"];
    args.extend_from_slice(extra);
    args.push(url);
    let out = lab.exec(ns, &args);
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let (body, local_ip) = stdout.rsplit_once('\n').unwrap_or((&stdout, ""));
    (
        out.status.code(),
        body.to_owned(),
        format!("{}{}", local_ip, String::from_utf8_lossy(&out.stderr)),
    )
}

fn doctor(lab: &Lab, ns: &str, port: &str) -> (Option<i32>, String) {
    let out = lab.exec(
        ns,
        &[
            env!("CARGO_BIN_EXE_hairpin"),
            "doctor",
            HOST,
            "--port",
            port,
            "--no-cluster",
            "--timeout",
            "2",
        ],
    );
    (
        out.status.code(),
        format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        ),
    )
}

#[test]
fn hairpin_lab_in_network_namespaces() {
    if skip_without("hairpin_lab_in_network_namespaces") {
        return;
    }
    let hairpin = env!("CARGO_BIN_EXE_hairpin");
    let nginx_bin = hairpin_testkit::require_binary("nginx");
    let haproxy_bin = hairpin_testkit::require_binary("haproxy");
    hairpin_testkit::require_binary("curl");
    let mut lab = Lab::new();
    let ext = lab.add_namespace("ext");
    let lb = lab.add_namespace("lb");
    let node = lab.add_namespace("node");

    // Links: ext <-> lb (the internet side), lb <-> node (the cloud's private network).
    let p = std::process::id() % 100_000;
    let (ext_if, lb_out_if) = (format!("hpe{p}"), format!("hpl{p}"));
    let (lb_in_if, node_if) = (format!("hpm{p}"), format!("hpn{p}"));
    for (a, a_ns, b, b_ns) in [
        (&ext_if, &ext, &lb_out_if, &lb),
        (&lb_in_if, &lb, &node_if, &node),
    ] {
        lab.exec_ok(
            a_ns,
            &[
                "ip", "link", "add", a, "type", "veth", "peer", "name", b, "netns", b_ns,
            ],
        );
    }
    for (ns, dev, addr) in [
        (&ext, &ext_if, format!("{EXT_IP}/24")),
        (&lb, &lb_out_if, format!("{LB_IP}/24")),
        (&lb, &lb_in_if, format!("{LB_INNER_IP}/24")),
        (&node, &node_if, format!("{NODE_IP}/24")),
    ] {
        lab.exec_ok(ns, &["ip", "addr", "add", &addr, "dev", dev]);
        lab.exec_ok(ns, &["ip", "link", "set", dev, "up"]);
    }
    // The same links carry IPv6 (nodad: usable at once, no duplicate address detection).
    for (ns, dev, addr) in [
        (&ext, &ext_if, format!("{EXT_IP6}/64")),
        (&lb, &lb_out_if, format!("{LB_IP6}/64")),
        (&lb, &lb_in_if, format!("{LB_INNER_IP6}/64")),
        (&node, &node_if, format!("{NODE_IP6}/64")),
    ] {
        lab.exec_ok(ns, &["ip", "-6", "addr", "add", &addr, "dev", dev, "nodad"]);
    }
    lab.exec_ok(
        &node,
        &[
            "ip",
            "-6",
            "route",
            "add",
            "2001:db8:100::/64",
            "via",
            LB_INNER_IP6,
        ],
    );
    lab.exec_ok(
        &node,
        &[
            "ip",
            "-6",
            "addr",
            "add",
            &format!("{HAIRPIN_IP6}/128"),
            "dev",
            "lo",
        ],
    );
    lab.exec_ok(
        &node,
        &["ip", "route", "add", "198.51.100.0/24", "via", LB_INNER_IP],
    );
    lab.exec_ok(
        &node,
        &[
            "ip",
            "addr",
            "add",
            &format!("{HAIRPIN_IP}/32"),
            "dev",
            "lo",
        ],
    );

    // kube-proxy's short-circuit: traffic for the LB's external IP never leaves the node.
    for (tool, lb, node_ip) in [
        ("iptables", format!("{LB_IP}/32"), NODE_IP),
        ("ip6tables", format!("{LB_IP6}/128"), NODE_IP6),
    ] {
        for chain in ["OUTPUT", "PREROUTING"] {
            lab.exec_ok(
                &node,
                &[
                    tool,
                    "-t",
                    "nat",
                    "-A",
                    chain,
                    "-d",
                    &lb,
                    "-p",
                    "tcp",
                    "-m",
                    "multiport",
                    "--dports",
                    "80,81",
                    "-j",
                    "DNAT",
                    "--to-destination",
                    node_ip,
                ],
            );
        }
    }

    // The node's resolver: its own hosts file (the node agent's target) and a "public DNS"
    // that says what the real one would: the hostname is the load balancer's IP.
    let etc = lab.netns_etc(&node);
    std::fs::create_dir_all(&etc).unwrap();
    let hosts_file = etc.join("hosts");
    let original_hosts = "127.0.0.1\tlocalhost\n::1\tlocalhost ip6-localhost\n# the node's own entries\n10.200.1.2\tnode-1\n";
    std::fs::write(&hosts_file, original_hosts).unwrap();
    std::fs::write(
        etc.join("resolv.conf"),
        "nameserver 127.0.0.1\noptions timeout:1 attempts:2\n",
    )
    .unwrap();
    let test_binary = std::env::current_exe().unwrap();
    lab.spawn(
        "dns",
        &node,
        &[
            test_binary.to_str().unwrap(),
            "--ignored",
            "--exact",
            "lab_dns_server",
            "--nocapture",
        ],
        &[(DNS_ENV, &format!("{HOST}={LB_IP},{HOST}={LB_IP6}"))],
    );
    lab.wait_listening(&node, "127.0.0.1:53", true, "dns");

    // The ingress: nginx requiring the PROXY protocol, reporting the client it sees.
    let nginx_dir = lab.dir.path().join("nginx");
    std::fs::create_dir_all(&nginx_dir).unwrap();
    let d = nginx_dir.display();
    let nginx_conf = format!(
        "user root;\ndaemon off;\nmaster_process off;\npid {d}/nginx.pid;\nerror_log {d}/error.log info;\n\
         events {{ worker_connections 256; }}\nhttp {{\n  access_log {d}/access.log;\n  default_type text/plain;\n\
         client_body_temp_path {d}/body; proxy_temp_path {d}/proxy; fastcgi_temp_path {d}/fastcgi;\n\
         uwsgi_temp_path {d}/uwsgi; scgi_temp_path {d}/scgi;\n\
         server {{\n    listen {NODE_IP}:80 proxy_protocol;\n    listen {NODE_IP}:81 proxy_protocol;\n\
         listen [{NODE_IP6}]:80 proxy_protocol;\n    listen [{NODE_IP6}]:81 proxy_protocol;\n\
         real_ip_header proxy_protocol;\n    set_real_ip_from 10.200.1.0/24;\n    set_real_ip_from 10.96.0.0/16;\n\
         set_real_ip_from fd00::/8;\n\
         location ~ ^/\\.well-known/acme-challenge/(?<token>[A-Za-z0-9_-]+)$ {{ return 200 \"$token\"; }}\n\
         location / {{ return 200 \"proxy_protocol_addr=$proxy_protocol_addr server_addr=$proxy_protocol_server_addr remote_addr=$remote_addr\"; }}\n  }}\n}}\n"
    );
    std::fs::write(nginx_dir.join("nginx.conf"), nginx_conf).unwrap();
    let nginx_conf_path = nginx_dir.join("nginx.conf");
    lab.spawn(
        "nginx",
        &node,
        &[
            nginx_bin.to_str().unwrap(),
            "-p",
            &d.to_string(),
            "-c",
            nginx_conf_path.to_str().unwrap(),
            "-e",
            &format!("{d}/error.log"),
        ],
        &[],
    );
    lab.wait_listening(&node, &format!("{NODE_IP}:80"), false, "nginx");

    // The cloud load balancer: HAProxy sending PROXY v1 on :80 and v2 on :81.
    let haproxy_conf = lab.dir.path().join("haproxy.cfg");
    std::fs::write(
        &haproxy_conf,
        format!(
            "global\n  log stderr format raw local0 info\ndefaults\n  log global\n  mode tcp\n  timeout connect 5s\n  timeout client 30s\n  timeout server 30s\n\
             listen lb_v1\n  bind {LB_IP}:80\n  bind ipv6@{LB_IP6}:80\n  server ingress {NODE_IP}:80 send-proxy\n\
             listen lb_v2\n  bind {LB_IP}:81\n  bind ipv6@{LB_IP6}:81\n  server ingress {NODE_IP}:81 send-proxy-v2\n"
        ),
    )
    .unwrap();
    lab.spawn(
        "haproxy",
        &lb,
        &[
            haproxy_bin.to_str().unwrap(),
            "-db",
            "-f",
            haproxy_conf.to_str().unwrap(),
        ],
        &[],
    );
    lab.wait_listening(&lb, &format!("{LB_IP}:81"), false, "haproxy");

    // 1. External clients through the load balancer, over IPv4 and IPv6: works, nginx sees
    //    each one's real address and the load balancer's address it connected to.
    for port in ["80", "81"] {
        for (client, lb_ip, resolve) in [
            (EXT_IP, LB_IP, LB_IP.to_owned()),
            (EXT_IP6, LB_IP6, format!("[{LB_IP6}]")),
        ] {
            let (code, body, err) = curl(
                &lab,
                &ext,
                &format!("http://{HOST}:{port}/"),
                &["--resolve", &format!("{HOST}:{port}:{resolve}")],
            );
            assert_eq!(code, Some(0), "external client {client} on :{port}: {err}");
            assert_eq!(
                body,
                format!("proxy_protocol_addr={client} server_addr={lb_ip} remote_addr={client}"),
                "port {port}"
            );
        }
    }

    // 2. The in-cluster client: the public name resolves to the LB, kube-proxy short-circuits
    //    it, and nginx rejects the header-less connection: curl's "Empty reply from server".
    for (family, lb_ip) in [("ahostsv4", LB_IP), ("ahostsv6", LB_IP6)] {
        let out = lab.exec(&node, &["getent", family, HOST]);
        assert!(
            String::from_utf8_lossy(&out.stdout).starts_with(lb_ip),
            "public DNS ({family}): {out:?}"
        );
    }
    for flag in ["-4", "-6"] {
        let (code, body, err) = curl(&lab, &node, &format!("http://{HOST}/"), &[flag]);
        assert_eq!(
            code,
            Some(52),
            "curl {flag}: expected an empty reply, got body {body:?}: {err}"
        );
    }
    let (code, _, err) = curl(
        &lab,
        &node,
        &format!("http://{HOST}/.well-known/acme-challenge/{TOKEN}"),
        &["-4"],
    );
    assert_eq!(
        code,
        Some(52),
        "cert-manager's self-check must fail the same way: {err}"
    );
    let error_log = nginx_dir.join("error.log");
    wait_for_file(&error_log, "broken header");

    let (code, broken_report) = doctor(&lab, &node, "80");
    show(
        "hairpin doctor, BROKEN state (run in the node namespace)",
        &broken_report,
    );
    assert_eq!(code, Some(1), "{broken_report}");
    assert!(
        broken_report.contains(&format!("{HOST}:80  BROKEN")),
        "{broken_report}"
    );
    assert!(
        broken_report.contains("hairpin short-circuit"),
        "{broken_report}"
    );
    assert!(
        broken_report.contains("PROXY v1 + HTTP ok"),
        "{broken_report}"
    );

    // 3. The fix, as the controller plans it: the proxy listens dual-stack on `[::]` (v1 for
    //    :80, v2 for :81) with the load balancer's address of each family as the header's
    //    destination; the hairpin Service's two ClusterIPs forward to it (kube-proxy's DNAT,
    //    here iptables and ip6tables); the node agent's hosts entries, one per family, point
    //    the name at them.
    let routes: Vec<String> = LISTENERS
        .iter()
        .zip(["v1", "v2"])
        .map(|((port, listener), version)| {
            format!(
                r#"{{"name":"lb/{port}","listen":"[::]:{listener}","upstream":"{NODE_IP}:{port}","proxy_protocol":"{version}","destination":"{LB_IP}:{port}","destinations":["{LB_IP}:{port}","[{LB_IP6}]:{port}"]}}"#
            )
        })
        .collect();
    let routes_file = lab.dir.path().join("routes.json");
    std::fs::write(&routes_file, format!("[{}]\n", routes.join(","))).unwrap();
    lab.spawn(
        "proxy",
        &node,
        &[
            hairpin,
            "proxy",
            "--routes-file",
            routes_file.to_str().unwrap(),
            "--admin-addr",
            "127.0.0.1:0",
            "--workers",
            "1",
        ],
        &[],
    );
    for (_, listener) in LISTENERS {
        lab.wait_listening(&node, &format!(":{listener} "), false, "proxy");
    }
    assert!(
        lab.log("proxy").contains("families=\"dual-stack\""),
        "the planned [::] listener is dual-stack here:\n{}",
        lab.log("proxy")
    );
    for (tables, cluster_ip, to) in [
        ("iptables", HAIRPIN_IP, HAIRPIN_IP),
        ("ip6tables", HAIRPIN_IP6, &*format!("[{HAIRPIN_IP6}]")),
    ] {
        for (port, listener) in LISTENERS {
            lab.exec_ok(
                &node,
                &[
                    tables,
                    "-t",
                    "nat",
                    "-A",
                    "OUTPUT",
                    "-d",
                    cluster_ip,
                    "-p",
                    "tcp",
                    "--dport",
                    port,
                    "-j",
                    "DNAT",
                    "--to-destination",
                    &format!("{to}:{listener}"),
                ],
            );
        }
    }
    let entries = lab.dir.path().join("entries.yaml");
    std::fs::write(
        &entries,
        format!(
            "- ip: {HAIRPIN_IP}\n  hostnames: [{HOST}]\n- ip: {HAIRPIN_IP6}\n  hostnames: [{HOST}]\n"
        ),
    )
    .unwrap();
    let out = run_ok(
        support::hairpin_command()
            .args(["node-agent", "--once", "--hosts-file"])
            .arg(&hosts_file)
            .arg("--source-file")
            .arg(&entries),
    );
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("updated and verified"),
        "{out:?}"
    );
    let hosts_now = std::fs::read_to_string(&hosts_file).unwrap();
    assert!(hosts_now.starts_with(original_hosts), "{hosts_now}");
    for ip in [HAIRPIN_IP, HAIRPIN_IP6] {
        assert!(hosts_now.contains(&format!("{ip}\t{HOST}")), "{hosts_now}");
    }
    // The name no longer answers the load balancer's public addresses, of either family.
    for (family, ip) in [("ahostsv4", HAIRPIN_IP), ("ahostsv6", HAIRPIN_IP6)] {
        let out = lab.exec(&node, &["getent", family, HOST]);
        let answer = String::from_utf8_lossy(&out.stdout).into_owned();
        assert!(answer.starts_with(ip), "{family}: {answer}");
        assert!(
            !answer.contains(LB_IP) && !answer.contains(LB_IP6),
            "{family}: {answer}"
        );
    }

    // 4. The in-cluster clients now work, IPv4 and IPv6, and nginx sees each client's own
    //    address and the load balancer's address of the client's family (an IPv4 client
    //    arrived v4-mapped on the dual-stack listener; its header is TCP4 / AF_INET).
    for port in ["80", "81"] {
        for (flag, lb_ip) in [("-4", LB_IP), ("-6", LB_IP6)] {
            let (code, body, local_ip) =
                curl(&lab, &node, &format!("http://{HOST}:{port}/"), &[flag]);
            assert_eq!(
                code,
                Some(0),
                "in-cluster client (curl {flag}) on :{port} after the fix: {local_ip}"
            );
            assert!(!local_ip.starts_with("::ffff:"), "{local_ip}");
            assert_eq!(
                body,
                format!(
                    "proxy_protocol_addr={local_ip} server_addr={lb_ip} remote_addr={local_ip}"
                ),
                "nginx must see the in-cluster client's own address (curl {flag}, port {port})"
            );
        }
    }
    for flag in ["-4", "-6"] {
        let (code, body, err) = curl(
            &lab,
            &node,
            &format!("http://{HOST}/.well-known/acme-challenge/{TOKEN}"),
            &[flag],
        );
        assert_eq!(
            (code, body.as_str()),
            (Some(0), TOKEN),
            "curl {flag}: {err}"
        );
    }

    let (code, fixed_report) = doctor(&lab, &node, "80");
    show(
        "hairpin doctor, FIXED state (run in the node namespace)",
        &fixed_report,
    );
    assert_eq!(code, Some(0), "{fixed_report}");
    assert!(
        fixed_report.contains(&format!("{HOST}:80  OK")),
        "{fixed_report}"
    );
    assert!(
        fixed_report.contains("in hairpin's block"),
        "{fixed_report}"
    );

    // 5. Uninstall: the node agent removes its block, the hosts file is as before.
    run_ok(
        support::hairpin_command()
            .args(["node-agent", "--remove", "--hosts-file"])
            .arg(&hosts_file),
    );
    assert_eq!(
        std::fs::read_to_string(&hosts_file).unwrap(),
        original_hosts
    );
}

/// On a node whose network namespace has IPv6 disabled, the planned `[::]` listener and the
/// admin server's `[::]` default fall back to `0.0.0.0`, detected when binding, logged, and
/// serving IPv4 clients.
#[test]
fn the_ipv6_wildcard_falls_back_to_ipv4_where_the_node_has_ipv6_disabled() {
    if skip_without("the_ipv6_wildcard_falls_back_to_ipv4_where_the_node_has_ipv6_disabled") {
        return;
    }
    hairpin_testkit::require_binary("curl");
    let mut lab = Lab::new();
    let node = lab.add_namespace("nov6");
    lab.exec_ok(
        &node,
        &["sysctl", "-q", "-w", "net.ipv6.conf.all.disable_ipv6=1"],
    );
    lab.spawn(
        "proxy",
        &node,
        &[
            env!("CARGO_BIN_EXE_hairpin"),
            "proxy",
            "--listen",
            "[::]:10090",
            "--upstream",
            "127.0.0.1:9",
            "--admin-addr",
            "[::]:19090",
            "--workers",
            "1",
        ],
        &[],
    );
    lab.wait_listening(&node, "0.0.0.0:10090", false, "proxy");
    lab.wait_listening(&node, "0.0.0.0:19090", false, "proxy");
    let out = lab.exec(&node, &["ss", "-Hltn"]);
    let listening = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        !listening.contains("[::]") && !listening.contains("*:"),
        "{listening}"
    );
    let log = lab.log("proxy");
    assert!(
        log.contains("listening on IPv4 only") && log.contains("disable_ipv6"),
        "{log}"
    );
    assert!(log.contains("admin server on IPv4 only"), "{log}");
    let (code, body, err) = curl(&lab, &node, "http://127.0.0.1:19090/livez", &[]);
    assert_eq!((code, body.as_str()), (Some(0), "ok\n"), "{err}");
}

/// Prints to stderr directly, past the test harness's capture, so the reports show in every
/// run's output (they are quoted in the project's notes).
fn show(title: &str, text: &str) {
    use std::io::Write as _;
    let _ = writeln!(std::io::stderr(), "\n===== {title} =====\n{text}");
}

fn wait_for_file(path: &Path, needle: &str) {
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let text = std::fs::read_to_string(path).unwrap_or_default();
        if text.contains(needle) {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "{} never contained {needle:?}:\n{text}",
            path.display()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// The lab's "public DNS": started by the lab test inside the node namespace (ignored in normal
/// runs). Answers A and AAAA queries for the names in `HAIRPIN_LAB_DNS` (`name=ip,...`, a name
/// repeated for each family), NOERROR with no answer for other types of those names, NXDOMAIN
/// for anything else.
#[test]
#[ignore = "helper process of hairpin_lab_in_network_namespaces"]
fn lab_dns_server() {
    let Ok(spec) = std::env::var(DNS_ENV) else {
        // Run by hand (`--include-ignored`): nothing to serve outside the lab.
        show(
            "lab_dns_server",
            "helper of hairpin_lab_in_network_namespaces; nothing to do alone",
        );
        return;
    };
    let records: Vec<(String, IpAddr)> = spec
        .split(',')
        .filter_map(|pair| pair.split_once('='))
        .map(|(name, ip)| (name.to_ascii_lowercase(), ip.parse().expect("IP address")))
        .collect();
    let socket = UdpSocket::bind("127.0.0.1:53").expect("bind 127.0.0.1:53");
    let mut buf = [0u8; 512];
    loop {
        let Ok((len, from)) = socket.recv_from(&mut buf) else {
            continue;
        };
        if let Some(answer) = dns_answer(&buf[..len], &records) {
            let _ = socket.send_to(&answer, from);
        }
    }
}

fn dns_answer(query: &[u8], records: &[(String, IpAddr)]) -> Option<Vec<u8>> {
    if query.len() < 12 {
        return None;
    }
    let mut pos = 12;
    let mut labels = Vec::new();
    loop {
        let len = usize::from(*query.get(pos)?);
        pos += 1;
        if len == 0 {
            break;
        }
        labels.push(String::from_utf8_lossy(query.get(pos..pos + len)?).to_ascii_lowercase());
        pos += len;
    }
    let qtype = u16::from_be_bytes([*query.get(pos)?, *query.get(pos + 1)?]);
    let question_end = pos + 4;
    query.get(..question_end)?;
    let name = labels.join(".");
    let known = records.iter().any(|(n, _)| *n == name);
    // A (1) answers the IPv4 records, AAAA (28) the IPv6 ones.
    let answers: Vec<IpAddr> = records
        .iter()
        .filter(|(n, ip)| {
            *n == name && matches!((qtype, ip), (1, IpAddr::V4(_)) | (28, IpAddr::V6(_)))
        })
        .map(|(_, ip)| *ip)
        .collect();
    let mut out = Vec::with_capacity(question_end + 16 + 28 * answers.len());
    out.extend_from_slice(&query[..2]);
    let rcode = if known { 0 } else { 3 };
    out.extend_from_slice(&[0x81, 0x80 | rcode]);
    out.extend_from_slice(&[0, 1]);
    out.extend_from_slice(&u16::try_from(answers.len()).ok()?.to_be_bytes());
    out.extend_from_slice(&[0, 0, 0, 0]);
    out.extend_from_slice(&query[12..question_end]);
    for ip in answers {
        let (rtype, data) = match ip {
            IpAddr::V4(v4) => (1u16, v4.octets().to_vec()),
            IpAddr::V6(v6) => (28u16, v6.octets().to_vec()),
        };
        out.extend_from_slice(&[0xC0, 0x0C]);
        out.extend_from_slice(&rtype.to_be_bytes());
        out.extend_from_slice(&[0, 1, 0, 0, 0, 60]);
        out.extend_from_slice(&u16::try_from(data.len()).ok()?.to_be_bytes());
        out.extend_from_slice(&data);
    }
    Some(out)
}
