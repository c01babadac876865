//! The doctor's cluster checks through a real `kube::Client` over the fake API server.

use std::time::Duration;

use hairpin_doctor::cluster::{self, ClusterError, ClusterOptions};
use hairpin_doctor::probe::{ProbeOutcome, Probes, Resolution};
use hairpin_doctor::providers::Provider;
use hairpin_doctor::verdict::{self, ClusterView, NetworkChecks, Status, Vantage};
use hairpin_fake_apiserver::{FakeApiServer, Grant, ResourceType};
use hairpin_planner::PlannerConfig;
use serde_json::json;

fn lb_service(
    name: &str,
    annotations: serde_json::Value,
    ip: &str,
    ip_mode: &str,
) -> serde_json::Value {
    json!({
        "apiVersion": "v1", "kind": "Service",
        "metadata": {"name": name, "namespace": "ingress-nginx", "annotations": annotations},
        "spec": {"type": "LoadBalancer", "externalTrafficPolicy": "Cluster",
                 "ports": [{"name": "http", "port": 80, "protocol": "TCP"}]},
        "status": {"loadBalancer": {"ingress": [{"ip": ip, "ipMode": ip_mode}]}}
    })
}

/// A DigitalOcean load balancer with the PROXY protocol on, at `ip`.
fn do_lb(ip: &str) -> serde_json::Value {
    lb_service(
        "do-lb",
        json!({"service.beta.kubernetes.io/do-loadbalancer-enable-proxy-protocol": "true"}),
        ip,
        "VIP",
    )
}

fn ingress(name: &str, host: &str, ip: &str) -> serde_json::Value {
    json!({
        "apiVersion": "networking.k8s.io/v1", "kind": "Ingress",
        "metadata": {"name": name, "namespace": "shop"},
        "spec": {"rules": [{"host": host}]},
        "status": {"loadBalancer": {"ingress": [{"ip": ip}]}}
    })
}

/// ConfigMap `namespace/name` holding `data`.
fn config_map(namespace: &str, name: &str, data: serde_json::Value) -> serde_json::Value {
    json!({
        "apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": name, "namespace": namespace},
        "data": data
    })
}

async fn options_for(fake: &FakeApiServer, dir: &tempfile::TempDir) -> ClusterOptions {
    let path = fake.write_kubeconfig(dir.path());
    ClusterOptions {
        kubeconfig: Some(path),
        context: None,
        timeout: Duration::from_secs(2),
        planner: PlannerConfig::default(),
        admission_policy: cluster::DEFAULT_ADMISSION_POLICY.into(),
    }
}

fn network(plain: ProbeOutcome) -> NetworkChecks {
    NetworkChecks {
        resolution: Resolution::Resolved {
            addresses: vec!["198.51.100.10".parse().unwrap()],
        },
        hosts_file: None,
        probes: Some(Probes {
            address: "198.51.100.10:80".parse().unwrap(),
            plain,
            proxy_v1: ProbeOutcome::EmptyReply,
            proxy_v2: ProbeOutcome::EmptyReply,
        }),
    }
}

#[tokio::test]
async fn the_load_balancer_behind_a_host_and_its_fixes_are_found() {
    let fake = FakeApiServer::start().await;
    fake.apply_many([
        do_lb("198.51.100.10"),
        lb_service(
            "hetzner-lb",
            json!({"load-balancer.hetzner.cloud/uses-proxyprotocol": "true"}),
            "198.51.100.20",
            "Proxy",
        ),
        ingress("shop", "shop.example.com", "198.51.100.10"),
        ingress("blog", "blog.example.com", "198.51.100.20"),
        config_map(
            "kube-system",
            "coredns",
            json!({"Corefile": ".:53 {\n    errors\n    kubernetes cluster.local in-addr.arpa ip6.arpa {\n       pods insecure\n    }\n    forward . /etc/resolv.conf\n    cache 30\n}\n"}),
        ),
    ]);
    let planned = Planned::of(&fake).await;
    // Without a HOST the doctor checks every planned hostname: the DigitalOcean one only
    // (the Hetzner load balancer needs no hairpin).
    assert_eq!(cluster::planned_hostnames(&planned.plan), vec![SHOP]);

    let shop = planned.facts(SHOP, SHOP_IP);
    let lb = shop
        .load_balancer
        .as_ref()
        .expect("the DigitalOcean LB is behind shop.example.com");
    assert_eq!(lb.service, "ingress-nginx/do-lb");
    assert!(lb.needs_hairpin);
    assert_eq!(lb.provider, Some(Provider::DigitalOcean));
    assert_eq!(lb.proxy_protocol.as_deref(), Some("v1"));
    assert_eq!(lb.ingress[0].ip_mode.as_deref(), Some("VIP"));
    assert!(shop.dns.coredns_found && !shop.dns.markers_present && !shop.dns.host_in_block);
    assert_eq!(shop.dns.reload_plugin, Some(false));
    assert!(shop.hairpin.services.is_empty());

    // From a laptop the request goes through the LB and works, but the cluster view shows
    // that in-cluster clients bypass it; the fix is DigitalOcean's hostname annotation.
    let verdict = from_a_machine(shop);
    assert_eq!(verdict.status, Status::Broken, "{verdict:?}");
    assert!(
        verdict.fixes[0].contains("service.beta.kubernetes.io/do-loadbalancer-hostname"),
        "{:?}",
        verdict.fixes
    );

    // Hetzner with ipMode Proxy: not needed.
    let blog = planned.facts("blog.example.com", "198.51.100.20");
    let lb = blog.load_balancer.as_ref().unwrap();
    assert!(!lb.needs_hairpin);
    assert!(
        lb.not_needed_reason
            .as_deref()
            .unwrap()
            .contains("ipMode is Proxy"),
        "{lb:?}"
    );
    let verdict = verdict::diagnose(
        &network(answered()),
        &ClusterView::Checked(Box::new(blog)),
        Vantage::Pod,
    );
    assert_eq!(verdict.status, Status::NotNeeded);
}

#[tokio::test]
async fn a_deep_name_under_a_gateway_wildcard_is_found_but_not_under_an_ingress_wildcard() {
    let fake = FakeApiServer::start().await;
    fake.install_gateway_api();
    fake.apply_many([
        do_lb("198.51.100.10"),
        // Gateway API: `*.apps.example.com` is a suffix match (one or more labels).
        json!({
            "apiVersion": "gateway.networking.k8s.io/v1", "kind": "Gateway",
            "metadata": {"name": "public", "namespace": "ingress-nginx"},
            "spec": {"gatewayClassName": "nginx", "listeners": [
                {"name": "https", "port": 443, "protocol": "HTTPS", "hostname": "*.apps.example.com"}]},
            "status": {"addresses": [{"type": "IPAddress", "value": "198.51.100.10"}]}
        }),
        // Ingress: `*.shop.example.com` covers exactly one label.
        ingress("shop", "*.shop.example.com", "198.51.100.10"),
    ]);
    let planned = Planned::of(&fake).await;
    // The names resolve to an address that is not the load balancer's, so only the planned
    // hostnames can tie them to it (not the address fallback).
    let facts = |host: &str| planned.facts(host, "192.0.2.1");
    let deep_gateway = facts("a.b.apps.example.com");
    assert_eq!(
        deep_gateway
            .load_balancer
            .as_ref()
            .map(|lb| lb.service.as_str()),
        Some("ingress-nginx/do-lb"),
        "two labels under a Gateway wildcard are planned: {deep_gateway:?}"
    );
    assert!(facts("a.shop.example.com").load_balancer.is_some());
    let deep_ingress = facts("a.b.shop.example.com");
    assert!(
        deep_ingress.load_balancer.is_none(),
        "two labels under an Ingress wildcard are not: {deep_ingress:?}"
    );
}

#[tokio::test]
async fn forbidden_lists_become_gaps_and_an_absent_api_is_unavailable() {
    let fake = FakeApiServer::start().await;
    fake.fail_next("GET", "/ingresses", 1, 403);
    let dir = tempfile::tempdir().unwrap();
    let options = options_for(&fake, &dir).await;
    let client = cluster::client(&options).await.unwrap();
    let read = cluster::read(&client, &options).await.unwrap();
    assert!(
        read.gaps
            .iter()
            .any(|gap| gap.starts_with("Ingresses: forbidden")),
        "{:?}",
        read.gaps
    );

    // Nothing listens: unavailable (skipped with a note), quickly.
    drop(fake);
    let closed = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap();
    let path = dir.path().join("closed");
    std::fs::write(
        &path,
        format!(
            "apiVersion: v1\nkind: Config\nclusters:\n- name: c\n  cluster:\n    server: http://{closed}\n\
             contexts:\n- name: c\n  context:\n    cluster: c\n    user: u\ncurrent-context: c\nusers:\n- name: u\n  user: {{}}\n"
        ),
    )
    .unwrap();
    let options = ClusterOptions {
        kubeconfig: Some(path),
        ..options
    };
    let client = cluster::client(&options).await.unwrap();
    let started = std::time::Instant::now();
    let err = cluster::read(&client, &options).await.unwrap_err();
    assert!(matches!(err, ClusterError::Unavailable(_)), "{err}");
    assert!(started.elapsed() < Duration::from_secs(10));

    // A kubeconfig that is not one: an access error.
    let bad = dir.path().join("bad");
    std::fs::write(&bad, "this: [is not a kubeconfig").unwrap();
    let Err(err) = cluster::client(&ClusterOptions {
        kubeconfig: Some(bad),
        ..options
    })
    .await
    else {
        panic!("a broken kubeconfig must be refused");
    };
    assert!(matches!(err, ClusterError::Kubeconfig(_)), "{err}");
}

#[tokio::test]
async fn a_whole_run_joins_the_probes_and_the_cluster_view() {
    // The "load balancer's IP" is loopback here, so the probes reach a real nginx that
    // requires the PROXY protocol: exactly what an in-cluster client meets.
    let ingress_addr = hairpin_testkit::free_addr();
    let _nginx = hairpin_testkit::Nginx::start(
        &format!(
            "server {{ listen {ingress_addr} proxy_protocol; location / {{ return 200 \"ok\"; }} }}"
        ),
        &[ingress_addr],
    )
    .unwrap();
    let fake = FakeApiServer::start().await;
    fake.apply_many([
        do_lb("127.0.0.1"),
        ingress("shop", "shop.example.com", "127.0.0.1"),
    ]);
    let dir = tempfile::tempdir().unwrap();
    let cluster_options = options_for(&fake, &dir).await;
    let options = hairpin_doctor::Options {
        port: ingress_addr.port(),
        timeouts: hairpin_doctor::probe::Timeouts::default(),
        hosts_file: dir.path().join("no-hosts-file"),
        vantage: Vantage::Pod,
    };
    let report = hairpin_doctor::run(&["127.0.0.1".to_owned()], &options, Some(&cluster_options))
        .await
        .unwrap();
    assert_eq!(report.exit_code(), 1);
    let host = &report.hosts[0];
    assert_eq!(host.verdict.status, Status::Broken);
    let cause = host.verdict.cause.as_deref().unwrap();
    assert!(cause.contains("hairpin short-circuit"), "{cause}");
    assert!(
        cause.contains("Service ingress-nginx/do-lb sends v1"),
        "{cause}"
    );
    assert!(
        host.verdict.fixes[0].contains("do-loadbalancer-hostname"),
        "{:?}",
        host.verdict.fixes
    );
    let text = report.to_text();
    assert!(
        text.contains("load balancer   ingress-nginx/do-lb (DigitalOcean) PROXY v1"),
        "{text}"
    );

    // No host and no cluster: a usage error, not a silent success.
    let err = hairpin_doctor::run(&[], &options, None).await.unwrap_err();
    assert!(err.contains("pass a HOST"), "{err}");
}

fn cilium(version: &str, kube_proxy_replacement: &str) -> [serde_json::Value; 2] {
    [
        config_map(
            "kube-system",
            "cilium-config",
            json!({"kube-proxy-replacement": kube_proxy_replacement, "tunnel-protocol": "vxlan"}),
        ),
        json!({
            "apiVersion": "apps/v1", "kind": "DaemonSet",
            "metadata": {"name": "cilium", "namespace": "kube-system"},
            "spec": {
                "selector": {"matchLabels": {"k8s-app": "cilium"}},
                "template": {
                    "metadata": {"labels": {"k8s-app": "cilium"}},
                    "spec": {"containers": [{
                        "name": "cilium-agent",
                        "image": format!("quay.io/cilium/cilium:{version}@sha256:0123456789abcdef"),
                    }]}
                }
            }
        }),
    ]
}

const COREFILE: &str = ".:53 {\n    errors\n    kubernetes cluster.local in-addr.arpa ip6.arpa {\n       pods insecure\n    }\n    forward . /etc/resolv.conf\n    cache 30\n    reload\n}\n";

fn coredns(labels: serde_json::Value) -> serde_json::Value {
    json!({
        "apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": "coredns", "namespace": "kube-system", "labels": labels},
        "data": {"Corefile": COREFILE}
    })
}

fn answered() -> ProbeOutcome {
    ProbeOutcome::Answered {
        first_line: "HTTP/1.1 200 OK".into(),
    }
}

/// The hairpin signature from a pod: plain gets nothing, a PROXY header gets an answer.
fn signature() -> NetworkChecks {
    let mut checks = network(ProbeOutcome::EmptyReply);
    let probes = checks.probes.as_mut().unwrap();
    probes.proxy_v1 = answered();
    probes.proxy_v2 = answered();
    checks
}

/// One read of a fake API server and its plan, as the doctor makes them.
struct Planned {
    options: ClusterOptions,
    read: cluster::ClusterRead,
    plan: hairpin_planner::Plan,
    /// Holds the kubeconfig.
    _dir: tempfile::TempDir,
}

impl Planned {
    async fn of(fake: &FakeApiServer) -> Self {
        let dir = tempfile::tempdir().unwrap();
        let options = options_for(fake, &dir).await;
        let client = cluster::client(&options).await.unwrap();
        let read = cluster::read(&client, &options).await.unwrap();
        let plan = cluster::plan(&read, &options.planner);
        Self {
            options,
            read,
            plan,
            _dir: dir,
        }
    }

    /// The facts about `host`, which resolved to `ip`.
    fn facts(&self, host: &str, ip: &str) -> verdict::ClusterFacts {
        cluster::facts_for(
            &self.read,
            &self.plan,
            &self.options.planner,
            host,
            &[ip.parse().unwrap()],
        )
    }
}

/// Reads the fake and returns the facts about `host` at `ip`.
async fn facts(fake: &FakeApiServer, host: &str, ip: &str) -> verdict::ClusterFacts {
    Planned::of(fake).await.facts(host, ip)
}

/// The fake serves no `/version`: that gap only, every other read succeeded.
fn assert_only_the_version_gap(gaps: &[String]) {
    assert!(gaps.iter().all(|gap| gap.contains("/version")), "{gaps:?}");
}

/// The host most tests check, and the address of its DigitalOcean load balancer.
const SHOP: &str = "shop.example.com";
const SHOP_IP: &str = "198.51.100.10";

/// The DigitalOcean load balancer at [`SHOP_IP`], the Ingress for [`SHOP`] on it, and `more`.
fn shop_objects(more: impl IntoIterator<Item = serde_json::Value>) -> Vec<serde_json::Value> {
    [do_lb(SHOP_IP), ingress("shop", SHOP, SHOP_IP)]
        .into_iter()
        .chain(more)
        .collect()
}

/// A fake API server holding [`shop_objects`].
async fn shop_cluster(more: impl IntoIterator<Item = serde_json::Value>) -> FakeApiServer {
    let fake = FakeApiServer::start().await;
    fake.apply_many(shop_objects(more));
    fake
}

/// The facts about [`SHOP`] at [`SHOP_IP`].
async fn shop_facts(fake: &FakeApiServer) -> verdict::ClusterFacts {
    facts(fake, SHOP, SHOP_IP).await
}

/// The verdict from a pod that meets the hairpin signature.
fn from_a_pod(facts: verdict::ClusterFacts) -> verdict::Verdict {
    verdict::diagnose(
        &signature(),
        &ClusterView::Checked(Box::new(facts)),
        Vantage::Pod,
    )
}

/// The verdict from a machine outside the cluster whose plain request is answered.
fn from_a_machine(facts: verdict::ClusterFacts) -> verdict::Verdict {
    verdict::diagnose(
        &network(answered()),
        &ClusterView::Checked(Box::new(facts)),
        Vantage::Machine,
    )
}

#[tokio::test]
async fn a_cilium_that_ignores_ip_mode_turns_not_needed_into_a_forced_hairpin() {
    let fake = FakeApiServer::start().await;
    fake.apply_many([
        lb_service(
            "hetzner-lb",
            json!({"load-balancer.hetzner.cloud/uses-proxyprotocol": "true"}),
            "198.51.100.20",
            "Proxy",
        ),
        ingress("blog", "blog.example.com", "198.51.100.20"),
        coredns(json!({})),
    ]);

    // No Cilium: kube-proxy, which honours ipMode; nothing is said about a CRD that is absent.
    let plain = facts(&fake, "blog.example.com", "198.51.100.20").await;
    assert_eq!(plain.cni.cilium, None);
    // (The fake serves no /version: that gap only.)
    assert_only_the_version_gap(&plain.gaps);
    assert_eq!(plain.hairpin.status, None);
    // No kube-proxy DaemonSet either: who handles the Service is unknown, so nothing says
    // its ipMode is ignored.
    let support = verdict::ip_mode_support(&plain);
    assert!(support.starts_with("no kube-proxy"), "{support}");
    assert_eq!(plain.ip_mode.honours, None);
    let verdict = from_a_machine(plain);
    assert_eq!(verdict.status, Status::NotNeeded, "{verdict:?}");

    // Cilium 1.16 replacing kube-proxy ignores ipMode: in-cluster clients still bypass the
    // load balancer, and the fix is the forced annotation.
    fake.apply_many(cilium("v1.16.5", "true"));
    let ignored = facts(&fake, "blog.example.com", "198.51.100.20").await;
    let cilium_facts = ignored.cni.cilium.clone().unwrap();
    assert_eq!(cilium_facts.version.as_deref(), Some("v1.16.5"));
    assert_eq!(cilium_facts.replaces_kube_proxy, Some(true));
    assert_eq!(cilium_facts.ignores_ip_mode, Some(true));
    assert!(
        verdict::ip_mode_support(&ignored).contains("ignores ipMode (needs >= 1.17, not 1.18.0)"),
        "{}",
        verdict::ip_mode_support(&ignored)
    );
    let verdict = from_a_machine(ignored);
    assert_eq!(verdict.status, Status::Broken, "{verdict:?}");
    assert!(
        verdict.cause.as_deref().unwrap().contains("Cilium v1.16.5"),
        "{verdict:?}"
    );
    assert!(
        verdict.fixes[0].contains("`hairpin.io/proxy-protocol: v1` or `v2`"),
        "{:?}",
        verdict.fixes
    );

    // 1.18.0 ignores it too; 1.17 and 1.18.1 honour it.
    for (version, ignores) in [("v1.18.0", true), ("v1.17.2", false), ("v1.18.1", false)] {
        fake.apply_many(cilium(version, "strict"));
        let facts = facts(&fake, "blog.example.com", "198.51.100.20").await;
        let verdict = from_a_machine(facts);
        let expected = if ignores {
            Status::Broken
        } else {
            Status::NotNeeded
        };
        assert_eq!(verdict.status, expected, "{version}: {verdict:?}");
    }

    // With the forced annotation hairpin plans it: the verdict is the usual one (hairpin's
    // DNS rules are not in place here), and forcing is not recommended again.
    fake.apply_many(cilium("v1.16.5", "true"));
    fake.apply(lb_service(
        "hetzner-lb",
        json!({"load-balancer.hetzner.cloud/uses-proxyprotocol": "true",
               "hairpin.io/proxy-protocol": "v1"}),
        "198.51.100.20",
        "Proxy",
    ));
    let forced = facts(&fake, "blog.example.com", "198.51.100.20").await;
    assert!(forced.load_balancer.as_ref().unwrap().needs_hairpin);
    let verdict = from_a_pod(forced);
    assert_eq!(verdict.status, Status::Broken, "{verdict:?}");
    assert!(
        !verdict.cause.as_deref().unwrap().contains("ignores ipMode"),
        "{verdict:?}"
    );
    assert!(
        verdict
            .fixes
            .iter()
            .all(|fix| !fix.contains("hairpin.io/proxy-protocol")),
        "{:?}",
        verdict.fixes
    );

    // Without kube-proxy replacement, kube-proxy handles the Service: ipMode is honoured.
    fake.apply(lb_service(
        "hetzner-lb",
        json!({"load-balancer.hetzner.cloud/uses-proxyprotocol": "true"}),
        "198.51.100.20",
        "Proxy",
    ));
    fake.apply_many(cilium("v1.16.5", "false"));
    let kube_proxy = facts(&fake, "blog.example.com", "198.51.100.20").await;
    assert_eq!(
        kube_proxy.cni.cilium.as_ref().unwrap().replaces_kube_proxy,
        Some(false)
    );
    let verdict = from_a_machine(kube_proxy);
    assert_eq!(verdict.status, Status::NotNeeded, "{verdict:?}");
}

fn hairpin_object(dns: &str, ready: &str, reason: &str) -> serde_json::Value {
    json!({
        "apiVersion": "hairpin.io/v1alpha1", "kind": "Hairpin",
        "metadata": {"name": "do-lb", "namespace": "ingress-nginx"},
        "spec": {},
        "status": {
            "proxy": "v1", "hostCount": 1, "dns": dns, "readyEndpoints": 2,
            "service": "hairpin/hairpin-ingress-nginx-do-lb",
            "propagationSeconds": 42.4,
            "conditions": [
                {"type": "DNSWritten", "status": "True", "reason": "Written", "message": "",
                 "lastTransitionTime": "2026-01-01T00:00:00Z"},
                {"type": "Ready", "status": ready, "reason": reason,
                 "message": "the cluster DNS answers 203.0.113.7",
                 "lastTransitionTime": "2026-01-01T00:00:00Z"}
            ]
        }
    })
}

#[tokio::test]
async fn the_hairpin_status_of_the_load_balancer_says_whether_the_fix_is_effective() {
    let fake = FakeApiServer::start().await;
    fake.install_hairpin_crd();
    fake.apply_many(shop_objects([
        coredns(json!({})),
        hairpin_object("Effective", "True", "Effective"),
    ]));
    let effective = shop_facts(&fake).await;
    let status = effective.hairpin.status.clone().unwrap();
    assert_eq!(status.name, "ingress-nginx/do-lb");
    assert_eq!(status.dns.as_deref(), Some("Effective"));
    assert_eq!(status.propagation_seconds, Some(42.4));
    assert_eq!(status.ready_endpoints, Some(2));
    assert!(status.effective);
    let text = status.describe();
    assert!(text.contains("42 s"), "{text}");
    assert!(text.contains("the fix is effective"), "{text}");

    fake.apply(hairpin_object("NotEffective", "False", "DNSNotEffective"));
    let not_effective = shop_facts(&fake).await;
    let status = not_effective.hairpin.status.unwrap();
    assert!(!status.effective);
    let text = status.describe();
    assert!(text.contains("NOT effective"), "{text}");
    assert!(
        text.contains("Ready=False (DNSNotEffective): the cluster DNS answers 203.0.113.7"),
        "{text}"
    );
}

#[tokio::test]
async fn dns_that_hairpin_cannot_edit_is_recognised_and_named() {
    // GKE's kube-dns: a kube-dns Deployment and ConfigMap, no coredns ConfigMap.
    let fake = shop_cluster([
        json!({
            "apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": "kube-dns", "namespace": "kube-system"},
            "spec": {
                "selector": {"matchLabels": {"k8s-app": "kube-dns"}},
                "template": {
                    "metadata": {"labels": {"k8s-app": "kube-dns"}},
                    "spec": {"containers": [{"name": "kubedns", "image": "gke.gcr.io/k8s-dns-kube-dns:1.23.0"}]}
                }
            }
        }),
        {
            let mut kube_dns = config_map("kube-system", "kube-dns", json!({}));
            kube_dns["metadata"]["labels"] =
                json!({"addonmanager.kubernetes.io/mode": "EnsureExists"});
            kube_dns
        },
    ])
    .await;
    let kube_dns = shop_facts(&fake).await;
    assert_only_the_version_gap(&kube_dns.gaps);
    assert_eq!(
        kube_dns.dns.uneditable,
        Some(verdict::UneditableDns::KubeDns)
    );
    let verdict = from_a_pod(kube_dns);
    let hairpin_fix = verdict.fixes.last().unwrap();
    assert!(hairpin_fix.contains("kube-dns"), "{hairpin_fix}");
    assert!(hairpin_fix.contains("stubDomains"), "{hairpin_fix}");
    assert!(
        hairpin_fix.contains("--dns-mode external-dns"),
        "{hairpin_fix}"
    );
    assert!(!hairpin_fix.contains("helm install"), "{hairpin_fix}");

    // A CoreDNS ConfigMap an add-on manager reconciles: hairpin's edit would be reverted.
    let fake = shop_cluster([coredns(
        json!({"addonmanager.kubernetes.io/mode": "Reconcile"}),
    )])
    .await;
    let reconciled = shop_facts(&fake).await;
    assert_eq!(
        reconciled.dns.uneditable,
        Some(verdict::UneditableDns::ReconciledCoreDns {
            config_map: "kube-system/coredns".into(),
            label: "addonmanager.kubernetes.io/mode=Reconcile".into(),
        })
    );
    let verdict = from_a_pod(reconciled);
    let cause = verdict.cause.unwrap();
    assert!(cause.contains("reverts every edit"), "{cause}");
    assert!(!cause.contains("stubDomains"), "{cause}");

    // `EnsureExists` only creates it: edits stay, hairpin can write.
    let fake = shop_cluster([coredns(
        json!({"addonmanager.kubernetes.io/mode": "EnsureExists"}),
    )])
    .await;
    let editable = shop_facts(&fake).await;
    assert_eq!(editable.dns.uneditable, None);

    // No cluster DNS configuration at all (Cloud DNS for GKE): the external-dns mode is named.
    let fake = shop_cluster([]).await;
    let cloud_dns = shop_facts(&fake).await;
    assert_eq!(
        cloud_dns.dns.uneditable,
        Some(verdict::UneditableDns::NoDnsConfig)
    );
    let verdict = from_a_pod(cloud_dns);
    let hairpin_fix = verdict.fixes.last().unwrap();
    assert!(
        hairpin_fix.contains("--dns-mode external-dns"),
        "{hairpin_fix}"
    );
    assert!(hairpin_fix.contains("Cloud DNS"), "{hairpin_fix}");
    assert!(!hairpin_fix.contains("stubDomains"), "{hairpin_fix}");
}

/// `kube-system/coredns` with the EKS label and these `managedFields`.
fn eks_coredns(managed_fields: serde_json::Value) -> serde_json::Value {
    json!({
        "apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {
            "name": "coredns", "namespace": "kube-system",
            "labels": {"eks.amazonaws.com/component": "coredns", "k8s-app": "kube-dns"},
            "managedFields": managed_fields
        },
        "data": {"Corefile": COREFILE}
    })
}

fn managed_fields_entry(
    manager: &str,
    operation: &str,
    fields: serde_json::Value,
) -> serde_json::Value {
    json!({
        "manager": manager, "operation": operation, "apiVersion": "v1",
        "time": "2026-11-02T09:14:07Z", "fieldsType": "FieldsV1", "fieldsV1": fields
    })
}

#[tokio::test]
async fn the_eks_coredns_add_on_is_recognised_by_its_field_manager_not_its_label() {
    let labels =
        json!({"f:labels": {".": {}, "f:eks.amazonaws.com/component": {}, "f:k8s-app": {}}});
    // The add-on: EKS applied the ConfigMap server-side, its Corefile included.
    let fake = shop_cluster([eks_coredns(json!([managed_fields_entry(
        "eks",
        "Apply",
        json!({"f:data": {".": {}, "f:Corefile": {}}, "f:metadata": labels}),
    )]))])
    .await;
    let add_on = shop_facts(&fake).await;
    assert_eq!(
        add_on.dns.eks_add_on,
        Some(verdict::EksAddOn {
            config_map: "kube-system/coredns".into(),
            key: "Corefile".into(),
            eks_owns_key: true,
            other_owners: Vec::new(),
        })
    );
    // hairpin can still write there: it is a warning about add-on updates, not a refusal.
    assert_eq!(add_on.dns.uneditable, None);
    let verdict = from_a_pod(add_on);
    let note = verdict
        .notes
        .iter()
        .find(|note| note.contains("EKS CoreDNS add-on"))
        .unwrap_or_else(|| panic!("no EKS note in {:?}", verdict.notes));
    assert!(
        !note.contains("  "),
        "one sentence, no runs of spaces: {note:?}"
    );
    for words in [
        "field manager `eks` owns `data.Corefile`",
        "kube-system/coredns",
        "--resolve-conflicts OVERWRITE",
        "--resolve-conflicts PRESERVE",
        "--dns-mode external-dns",
        "writes it again",
    ] {
        assert!(note.contains(words), "{words:?} missing from {note}");
    }
    assert!(
        verdict
            .fixes
            .iter()
            .any(|fix| fix.contains("install hairpin")),
        "{:?}",
        verdict.fixes
    );

    // A self-managed CoreDNS on EKS carries the same label, edited by kubectl: no finding.
    let fake = shop_cluster([eks_coredns(json!([managed_fields_entry(
        "kubectl-client-side-apply",
        "Update",
        json!({"f:data": {".": {}, "f:Corefile": {}}, "f:metadata": labels}),
    )]))])
    .await;
    let self_managed = shop_facts(&fake).await;
    assert_eq!(self_managed.dns.eks_add_on, None);
    let verdict = from_a_pod(self_managed);
    assert!(
        verdict.notes.iter().all(|note| !note.contains("EKS")),
        "{:?}",
        verdict.notes
    );

    // After an edit by another writer, `eks` owns the labels only: the ConfigMap is still the
    // add-on's, and an update with OVERWRITE takes the Corefile back.
    let fake = shop_cluster([eks_coredns(json!([
        managed_fields_entry("eks", "Apply", json!({"f:metadata": labels})),
        managed_fields_entry(
            "kubectl-edit",
            "Update",
            json!({"f:data": {".": {}, "f:Corefile": {}}}),
        ),
    ]))])
    .await;
    let labels_only = shop_facts(&fake).await;
    let eks = labels_only.dns.eks_add_on.expect("still the add-on's");
    assert!(!eks.eks_owns_key);
    assert_eq!(eks.other_owners, vec!["kubectl-edit"]);
    assert!(
        eks.describe()
            .contains("`kubectl-edit` took `data.Corefile` over from it by an edit"),
        "{}",
        eks.describe()
    );
}

/// hairpin's own write takes the Corefile over from `eks` (the fake keeps managedFields as
/// kube-apiserver does): the doctor still knows the ConfigMap is the add-on's.
#[tokio::test]
async fn the_eks_add_on_is_still_recognised_after_hairpin_wrote_the_corefile() {
    use k8s_openapi::api::core::v1::ConfigMap;
    use kube::api::{Api, PostParams};
    let fake = shop_cluster([
        eks_coredns(json!([managed_fields_entry(
            "eks",
            "Apply",
            json!({"f:data": {".": {}, "f:Corefile": {}},
                   "f:metadata": {"f:labels": {".": {}, "f:eks.amazonaws.com/component": {}, "f:k8s-app": {}}}}),
        )])),
    ])
    .await;
    let dir = tempfile::tempdir().unwrap();
    let options = options_for(&fake, &dir).await;
    let client = cluster::client(&options).await.unwrap();
    let api: Api<ConfigMap> = Api::namespaced(client.clone(), "kube-system");
    let mut coredns = api.get("coredns").await.unwrap();
    coredns.data.as_mut().unwrap().insert(
        "Corefile".into(),
        COREFILE.replace(
            "    reload\n",
            "    reload\n    # BEGIN hairpin (managed)\n    # END hairpin\n",
        ),
    );
    let params = PostParams {
        field_manager: Some("hairpin".into()),
        ..PostParams::default()
    };
    api.replace("coredns", &params, &coredns).await.unwrap();

    let written = shop_facts(&fake).await;
    let eks = written.dns.eks_add_on.expect("still the add-on's");
    assert!(!eks.eks_owns_key, "{eks:?}");
    assert_eq!(eks.other_owners, vec!["hairpin"]);
}

/// The doctor reads the hostname sources the controller reads: the CRD sources (here a
/// Traefik `IngressRoute`) and `TLSRoute`s at the newest version served (here only
/// `v1alpha2`, an older Gateway API release).
#[tokio::test]
async fn hostnames_of_crd_sources_and_older_tls_routes_find_their_load_balancer() {
    let fake = FakeApiServer::start().await;
    fake.register(ResourceType::new(
        "traefik.io",
        "v1alpha1",
        "ingressroutes",
        "IngressRoute",
        true,
    ));
    fake.install_gateway_api_kinds(&[("Gateway", "v1"), ("TLSRoute", "v1alpha2")]);
    let mut traefik = lb_service(
        "traefik",
        json!({"hairpin.io/proxy-protocol": "v2"}),
        "198.51.100.20",
        "VIP",
    );
    traefik["metadata"]["labels"] = json!({"app.kubernetes.io/name": "traefik"});
    fake.apply_many([
        traefik,
        do_lb("198.51.100.10"),
        coredns(json!({})),
        json!({
            "apiVersion": "traefik.io/v1alpha1", "kind": "IngressRoute",
            "metadata": {"name": "web", "namespace": "shop"},
            "spec": {"entryPoints": ["websecure"], "routes": [{
                "match": "Host(`shop.example.com`) && PathPrefix(`/api`)",
                "kind": "Rule", "services": [{"name": "shop", "port": 80}]
            }]}
        }),
        json!({
            "apiVersion": "gateway.networking.k8s.io/v1", "kind": "Gateway",
            "metadata": {"name": "public", "namespace": "ingress-nginx"},
            "spec": {"gatewayClassName": "nginx", "listeners": [{"name": "tls", "port": 443, "protocol": "TLS"}]},
            "status": {"addresses": [{"type": "IPAddress", "value": "198.51.100.10"}]}
        }),
        json!({
            "apiVersion": "gateway.networking.k8s.io/v1alpha2", "kind": "TLSRoute",
            "metadata": {"name": "passthrough", "namespace": "ingress-nginx"},
            "spec": {"hostnames": ["tls.example.com"], "parentRefs": [{"name": "public"}],
                     "rules": [{"backendRefs": [{"name": "db", "port": 5432}]}]}
        }),
    ]);
    let planned = Planned::of(&fake).await;
    // Istio and Contour are not installed, nor TLSRoute v1: absent, not gaps.
    assert_only_the_version_gap(&planned.read.gaps);
    assert_eq!(
        cluster::planned_hostnames(&planned.plan),
        vec![SHOP, "tls.example.com"]
    );
    let shop = planned.facts(SHOP, "198.51.100.20");
    let lb = shop.load_balancer.expect("Traefik's load balancer");
    assert_eq!(lb.service, "ingress-nginx/traefik");
    assert!(lb.needs_hairpin);
    let tls = facts(&fake, "tls.example.com", "198.51.100.10").await;
    assert_eq!(
        tls.load_balancer.map(|lb| lb.service).as_deref(),
        Some("ingress-nginx/do-lb")
    );
}

#[tokio::test]
async fn node_local_dns_is_looked_for_in_its_own_namespace() {
    let fake = shop_cluster([
        coredns(json!({})),
        config_map(
            "dns-cache",
            "node-local-dns",
            json!({"Corefile": ".:53 {\n    forward . /etc/resolv.conf\n}\n"}),
        ),
    ])
    .await;
    let dir = tempfile::tempdir().unwrap();
    let mut options = options_for(&fake, &dir).await;
    let client = cluster::client(&options).await.unwrap();
    let judged = |options: &ClusterOptions, read: &cluster::ClusterRead| {
        let plan = cluster::plan(read, &options.planner);
        cluster::facts_for(
            read,
            &plan,
            &options.planner,
            "shop.example.com",
            &["198.51.100.10".parse().unwrap()],
        )
        .dns
        .node_local_dns
    };
    let read = cluster::read(&client, &options).await.unwrap();
    assert!(!judged(&options, &read), "not in kube-system");
    options.planner.node_local_dns_namespace = "dns-cache".into();
    let read = cluster::read(&client, &options).await.unwrap();
    assert!(
        judged(&options, &read),
        "found in --node-local-dns-namespace"
    );
}

/// What the chart grants the `helm test` pod's ServiceAccount (the controller's, plus the test
/// hook's Role): the controller's ClusterRole, its Roles in kube-system (the CoreDNS and
/// node-local-dns ConfigMaps, by name) and in hairpin's namespace, and the test's gets by name.
fn chart_grants(coredns_config_maps: &[&str]) -> Vec<Grant> {
    let read = ["get", "list", "watch"];
    let mut grants = vec![
        Grant::cluster_wide("", "services", &read, &[]),
        Grant::cluster_wide("", "namespaces", &["list", "watch"], &[]),
        Grant::cluster_wide("networking.k8s.io", "ingresses", &read, &[]),
        Grant::cluster_wide("networking.k8s.io", "ingressclasses", &read, &[]),
        Grant::cluster_wide("hairpin.io", "hairpins", &read, &[]),
        Grant::namespaced("kube-system", "", "configmaps", &read, coredns_config_maps),
        Grant::namespaced(
            "kube-system",
            "",
            "configmaps",
            &read,
            &["node-local-dns", "nodelocaldns"],
        ),
        Grant::namespaced("hairpin", "", "services", &read, &[]),
        Grant::namespaced("hairpin", "discovery.k8s.io", "endpointslices", &read, &[]),
        Grant::namespaced(
            "hairpin",
            "",
            "configmaps",
            &read,
            &["hairpin-routes", "hairpin-hosts", "hairpin-native"],
        ),
        Grant::namespaced("kube-system", "apps", "daemonsets", &["get"], &["cilium"]),
        // What the doctor reads to name the cure (issue 30 item 6), by name: kube-proxy and
        // its ConfigMap, the CNI agents that may replace it, cert-manager. The chart's test
        // Role (charts/hairpin/templates/tests/doctor.yaml) must grant these too.
        Grant::namespaced(
            "kube-system",
            "apps",
            "daemonsets",
            &["get"],
            &["kube-proxy", "antrea-agent", "kube-router", "calico-node"],
        ),
        Grant::namespaced(
            "calico-system",
            "apps",
            "daemonsets",
            &["get"],
            &["calico-node"],
        ),
        Grant::namespaced("kube-system", "", "configmaps", &["get"], &["kube-proxy"]),
        Grant::namespaced(
            "cert-manager",
            "apps",
            "deployments",
            &["get"],
            &["cert-manager"],
        ),
        Grant::namespaced(
            "kube-system",
            "apps",
            "deployments",
            &["get"],
            &["kube-dns"],
        ),
        Grant::namespaced(
            "kube-system",
            "",
            "configmaps",
            &["get"],
            &["cilium-config", "kube-dns"],
        ),
    ];
    for resource in [
        "gateways",
        "httproutes",
        "grpcroutes",
        "tlsroutes",
        "gatewayclasses",
    ] {
        grants.push(Grant::cluster_wide(
            "gateway.networking.k8s.io",
            resource,
            &read,
            &[],
        ));
    }
    // The receivers (issue 31): the workloads listed, the receivers' custom resources, and
    // their ConfigMaps by the names of `receivers.configMaps`.
    for resource in ["deployments", "daemonsets", "statefulsets"] {
        grants.push(Grant::cluster_wide(
            "apps",
            resource,
            &["list", "watch"],
            &[],
        ));
    }
    for (group, resource) in [
        ("gateway.envoyproxy.io", "clienttrafficpolicies"),
        ("gateway.nginx.org", "nginxproxies"),
        ("gateway.kgateway.dev", "listenerpolicies"),
        ("projectcontour.io", "contourconfigurations"),
        ("projectcontour.io", "contourdeployments"),
        ("networking.istio.io", "envoyfilters"),
    ] {
        grants.push(Grant::cluster_wide(group, resource, &read, &[]));
    }
    grants.push(Grant::cluster_wide(
        "",
        "configmaps",
        &read,
        &[
            "ingress-nginx-controller",
            "rke2-ingress-nginx-controller",
            "nginx-ingress",
            "haproxy-kubernetes-ingress",
            "haproxy-ingress",
            "cilium-config",
            "istio",
        ],
    ));
    grants
}

/// The chart's default CoreDNS ConfigMap names, and `coredns-custom`.
const CHART_COREDNS_CONFIG_MAPS: [&str; 5] = [
    "coredns",
    "rke2-coredns-rke2-coredns",
    "coredns-base",
    "kube-dns",
    "coredns-custom",
];

/// `helm test` runs the doctor with grants that name every ConfigMap it may read in
/// kube-system and in hairpin's namespace: it reads each by name, so nothing is forbidden and
/// the DNS findings are the same as with full access.
#[tokio::test]
async fn the_doctor_reads_kube_system_by_name_with_the_charts_grants_only() {
    let fake = FakeApiServer::start().await;
    fake.install_hairpin_crd();
    let written = COREFILE.replace(
        "    reload\n",
        "    reload\n    # BEGIN hairpin (managed)\n    rewrite name exact shop.example.com hairpin-ingress-nginx-do-lb.hairpin.svc.cluster.local\n    # END hairpin\n",
    );
    fake.apply_many(shop_objects(
        [
            config_map("kube-system", "coredns", json!({"Corefile": written})),
            config_map(
                "kube-system",
                "nodelocaldns",
                json!({"Corefile": ".:53 {\n    forward . /etc/resolv.conf\n}\n"}),
            ),
            // Not named by any grant: never read, and its list is what was forbidden.
            config_map(
                "kube-system",
                "extension-apiserver-authentication",
                json!({}),
            ),
        ]
        .into_iter()
        .chain(cilium("v1.17.2", "true")),
    ));
    fake.authorize_only(chart_grants(&CHART_COREDNS_CONFIG_MAPS));
    let shop = shop_facts(&fake).await;
    assert_only_the_version_gap(&shop.gaps);
    assert!(shop.dns.coredns_found && shop.dns.markers_present && shop.dns.host_in_block);
    assert_eq!(shop.dns.reload_plugin, Some(true));
    assert!(shop.dns.node_local_dns, "kubespray's nodelocaldns is found");
    // The fake serves no admissionregistration.k8s.io (a bare 404, as a real API server
    // without the API): the status policy is not available there, which is no gap and no
    // warning (issue 37; tests/admission_policy.rs in crates/hairpin reads a real one).
    let policy = shop.admission_policy.as_ref().expect("the policy read");
    assert!(
        !policy.available && policy.warning().is_none(),
        "{policy:?}"
    );
    assert_eq!(shop.dns.uneditable, None);
    assert_eq!(
        shop.cni.cilium.as_ref().and_then(|c| c.version.as_deref()),
        Some("v1.17.2")
    );
    assert_eq!(
        shop.load_balancer.map(|lb| lb.service).as_deref(),
        Some("ingress-nginx/do-lb")
    );
    let configmap_reads: Vec<_> = fake
        .requests()
        .into_iter()
        .filter(|r| r.uri.contains("/configmaps"))
        .collect();
    assert!(
        configmap_reads
            .iter()
            .all(|r| r.method == "GET" && r.status != 403 && !r.uri.ends_with("/configmaps")),
        "only gets by name: {configmap_reads:?}"
    );

    // GKE's kube-dns under the same grants: still named (its ConfigMap is read once, as a
    // CoreDNS candidate).
    let fake = shop_cluster([config_map("kube-system", "kube-dns", json!({}))]).await;
    fake.authorize_only(chart_grants(&CHART_COREDNS_CONFIG_MAPS));
    let kube_dns = shop_facts(&fake).await;
    assert_only_the_version_gap(&kube_dns.gaps);
    assert_eq!(
        kube_dns.dns.uneditable,
        Some(verdict::UneditableDns::KubeDns)
    );
    assert_eq!(fake.count("GET", "/configmaps/kube-dns"), 1);

    // A CoreDNS ConfigMap the grants do not name: a gap with the apiserver's words, and its
    // absence is not taken for Cloud DNS.
    let fake = shop_cluster([coredns(json!({}))]).await;
    fake.authorize_only(chart_grants(&["coredns-custom"]));
    let unread = shop_facts(&fake).await;
    assert!(
        unread.gaps.iter().any(|gap| gap
            == "ConfigMap kube-system/coredns: forbidden (configmaps \"coredns\" is forbidden: \
                User \"system:serviceaccount:hairpin:hairpin\" cannot get resource \
                \"configmaps\" in API group \"\" in the namespace \"kube-system\")"),
        "{:?}",
        unread.gaps
    );
    assert!(!unread.dns.coredns_found);
    assert_eq!(unread.dns.uneditable, None);
}

/// ingress-nginx behind the DigitalOcean load balancer at [`SHOP_IP`]: its Deployment and its
/// ConfigMap holding `data`.
fn ingress_nginx_behind_do(data: serde_json::Value) -> Vec<serde_json::Value> {
    let mut lb = do_lb(SHOP_IP);
    lb["spec"]["selector"] = json!({"app.kubernetes.io/name": "ingress-nginx"});
    let deployment = json!({
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": "ingress-nginx-controller", "namespace": "ingress-nginx"},
        "spec": {
            "selector": {"matchLabels": {"app.kubernetes.io/name": "ingress-nginx"}},
            "template": {
                "metadata": {"labels": {"app.kubernetes.io/name": "ingress-nginx"}},
                "spec": {"containers": [{
                    "name": "controller",
                    "image": "registry.k8s.io/ingress-nginx/controller:v1.12.1",
                    "args": ["/nginx-ingress-controller", "--configmap=$(POD_NAMESPACE)/ingress-nginx-controller"],
                    "env": [{"name": "POD_NAMESPACE", "valueFrom": {"fieldRef": {"fieldPath": "metadata.namespace"}}}]
                }]}
            }
        }
    });
    vec![
        lb,
        ingress("shop", SHOP, SHOP_IP),
        deployment,
        config_map("ingress-nginx", "ingress-nginx-controller", data),
    ]
}

/// Issue 31: the load balancer sends PROXY (DigitalOcean's annotation) but ingress-nginx does
/// not expect it: BROKEN for every client, whatever the probes say, naming both settings and
/// the fix; with `use-proxy-protocol: "true"` the receiver is only named.
#[tokio::test]
async fn a_load_balancer_and_its_receiver_that_disagree_are_broken_for_everyone() {
    let fake = FakeApiServer::start().await;
    fake.apply_many(ingress_nginx_behind_do(
        json!({"allow-snippet-annotations": "false"}),
    ));
    let facts = shop_facts(&fake).await;
    let lb = facts
        .load_balancer
        .clone()
        .expect("the load balancer is found");
    let mismatch = lb.mismatch.clone().expect("a mismatch");
    assert!(
        mismatch.contains("do-loadbalancer-enable-proxy-protocol=true"),
        "{mismatch}"
    );
    assert!(
        mismatch.contains("PROXY off by use-proxy-protocol not set"),
        "{mismatch}"
    );
    let verdict = verdict::diagnose(
        &network(answered()),
        &ClusterView::Checked(Box::new(facts)),
        Vantage::Pod,
    );
    assert_eq!(verdict.status, Status::Broken);
    eprintln!(
        "summary: {}\ncause: {}\nfix: {}",
        verdict.summary,
        verdict.cause.as_deref().unwrap_or_default(),
        verdict.fixes.join(" | ")
    );
    assert!(verdict.fixes[0].starts_with("turn the PROXY protocol on in the receiver"));

    let fake = FakeApiServer::start().await;
    fake.apply_many(ingress_nginx_behind_do(
        json!({"use-proxy-protocol": "true"}),
    ));
    let facts = shop_facts(&fake).await;
    let lb = facts.load_balancer.clone().unwrap();
    assert_eq!(lb.mismatch, None);
    assert!(
        lb.receiver
            .as_deref()
            .is_some_and(|r| r.contains("PROXY required by use-proxy-protocol")),
        "{lb:?}"
    );
    assert_eq!(
        from_a_pod(facts).status,
        Status::Broken,
        "the usual hairpin signature"
    );
}
