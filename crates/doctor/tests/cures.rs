//! Issue 30 item 6: the doctor names the cure this cluster can use, and why — kube-proxy's
//! version, mode and gate, the CNI, the cloud controller's `ipMode`, hairpin's probe record,
//! cert-manager's `waitInsteadOfSelfCheck` — read through a real `kube::Client` over the fake
//! API server.

#[path = "support/clusters.rs"]
mod clusters;

use std::path::Path;
use std::time::Duration;

use hairpin_doctor::cluster::{self, ClusterOptions};
use hairpin_doctor::cure::CureKind;
use hairpin_doctor::probe::{ProbeOutcome, Probes, Resolution};
use hairpin_doctor::verdict::{self, ClusterFacts, ClusterView, NetworkChecks, Status, Vantage};
use hairpin_fake_apiserver::FakeApiServer;
use hairpin_planner::{CureMode, PlannerConfig};
use serde_json::json;

const IP: &str = "198.51.100.10";
const SHOP: &str = "shop.example.com";

/// Options that read `fake` through a kubeconfig written in `dir`, with `hairpin doctor`'s
/// default `--cure auto` (as the controller's).
fn cluster_options(fake: &FakeApiServer, dir: &Path) -> ClusterOptions {
    ClusterOptions {
        kubeconfig: Some(fake.write_kubeconfig(dir)),
        context: None,
        timeout: Duration::from_secs(2),
        planner: PlannerConfig {
            cure: CureMode::Auto,
            ..PlannerConfig::default()
        },
        admission_policy: cluster::DEFAULT_ADMISSION_POLICY.into(),
    }
}

async fn facts_of(objects: Vec<serde_json::Value>) -> ClusterFacts {
    let fake = FakeApiServer::start().await;
    fake.apply_many(objects);
    facts_from(&fake).await
}

async fn facts_from(fake: &FakeApiServer) -> ClusterFacts {
    let dir = tempfile::tempdir().unwrap();
    let options = cluster_options(fake, dir.path());
    let client = cluster::client(&options).await.unwrap();
    let read = cluster::read(&client, &options).await.unwrap();
    let plan = cluster::plan(&read, &options.planner);
    cluster::facts_for(&read, &plan, &options.planner, SHOP, &[IP.parse().unwrap()])
}

/// The facts of the DigitalOcean cluster with `extra` objects added.
async fn digitalocean_with(extra: impl IntoIterator<Item = serde_json::Value>) -> ClusterFacts {
    let mut objects = clusters::digitalocean_cluster(IP);
    objects.extend(extra);
    facts_of(objects).await
}

/// From a pod: a plain request gets nothing, one after a PROXY header is answered.
fn signature() -> NetworkChecks {
    let answered = ProbeOutcome::Answered {
        first_line: "HTTP/1.1 200 OK".into(),
    };
    NetworkChecks {
        resolution: Resolution::Resolved {
            addresses: vec![IP.parse().unwrap()],
        },
        hosts_file: None,
        probes: Some(Probes {
            address: format!("{IP}:80").parse().unwrap(),
            plain: ProbeOutcome::EmptyReply,
            proxy_v1: answered.clone(),
            proxy_v2: answered,
        }),
    }
}

fn from_a_pod(facts: &ClusterFacts) -> verdict::Verdict {
    verdict::diagnose(
        &signature(),
        &ClusterView::Checked(Box::new(facts.clone())),
        Vantage::Pod,
    )
}

#[tokio::test]
async fn hcloud_ccm_1_21_with_proxy_on_cures_it_itself() {
    let facts = facts_of(clusters::hcloud_cluster(IP)).await;
    let kube_proxy = facts.kube_proxy.as_ref().expect("kube-proxy is read");
    assert_eq!(kube_proxy.version.as_deref(), Some("v1.31.2"));
    assert_eq!(kube_proxy.mode.as_deref(), Some("iptables"));
    assert_eq!(facts.ip_mode.honours, Some(true), "{:?}", facts.ip_mode);
    let ccm = facts.ccm.as_ref().expect("hcloud-ccm computes ipMode");
    assert_eq!(ccm.controller, "hcloud-cloud-controller-manager");
    assert_eq!(ccm.version.as_deref(), Some("v1.21.0"));
    let cure = facts.cure.as_ref().unwrap();
    assert_eq!(cure.cure, CureKind::Ccm, "{cure:?}");
    assert!(
        cure.why
            .contains("hcloud-cloud-controller-manager v1.21.0 sets ipMode: Proxy itself")
            && cure
                .why
                .contains("load-balancer.hetzner.cloud/uses-proxyprotocol"),
        "{cure:?}"
    );
    assert_eq!(cure.plan, None, "no hairpin cure planned: {cure:?}");
}

#[tokio::test]
async fn digitalocean_on_1_31_with_kube_proxy_gets_the_native_cure() {
    let facts = facts_of(clusters::digitalocean_cluster(IP)).await;
    assert_eq!(facts.ip_mode.honours, Some(true), "{:?}", facts.ip_mode);
    assert_eq!(
        facts.ccm, None,
        "DigitalOcean's controller never sets ipMode"
    );
    let cure = facts.cure.as_ref().unwrap();
    assert_eq!(cure.cure, CureKind::Native, "{cure:?}");
    assert!(
        cure.why
            .contains("kube-proxy v1.31.2 (iptables, the default) honours ipMode: Proxy"),
        "{cure:?}"
    );
    // The planner (--cure auto) keeps DNS until the controller's probe proves native.
    assert!(
        cure.plan.as_deref().is_some_and(
            |plan| plan.starts_with("dns (--cure auto): ipMode: Proxy is to be proven")
        ),
        "{cure:?}"
    );
    let verdict = from_a_pod(&facts);
    assert_eq!(verdict.status, Status::Broken);
    assert!(
        verdict.fixes[0].starts_with("install hairpin: its native cure works here"),
        "{:?}",
        verdict.fixes
    );

    // kube-proxy with the gate off: DNS, and why.
    let off = digitalocean_with(clusters::kube_proxy(
        "v1.31.2",
        "nftables",
        "LoadBalancerIPMode: false",
        &[],
    ))
    .await;
    let cure = off.cure.as_ref().unwrap();
    assert_eq!(cure.cure, CureKind::Dns, "{cure:?}");
    assert!(
        cure.why
            .contains("`LoadBalancerIPMode=false` (ConfigMap kube-system/kube-proxy config.conf)"),
        "{cure:?}"
    );
    let fixes = from_a_pod(&off).fixes;
    assert!(
        fixes.iter().any(|fix| fix.contains("`--cure dns`")),
        "the futile native attempt can be skipped: {fixes:?}"
    );

    // The probe's record, once hairpin tried: proven, then failed.
    let fake = FakeApiServer::start().await;
    fake.apply_many(clusters::digitalocean_cluster(IP));
    fake.apply(clusters::do_lb(IP, "Proxy"));
    let uid = fake
        .get("v1", "Service", Some("ingress-nginx"), "do-lb")
        .unwrap()["metadata"]["uid"]
        .as_str()
        .unwrap()
        .to_owned();
    fake.apply(clusters::native_record(
        "ingress-nginx/do-lb",
        &uid,
        IP,
        "proven",
        "port 80: HTTP/1.1 404 Not Found",
    ));
    let proven = facts_from(&fake).await;
    let cure = proven.cure.as_ref().unwrap();
    assert_eq!(cure.cure, CureKind::Native, "{cure:?}");
    assert_eq!(
        cure.probe.as_ref().map(|p| p.state.as_str()),
        Some("proven")
    );
    assert!(
        cure.plan
            .as_deref()
            .unwrap()
            .starts_with("native (--cure auto)"),
        "{cure:?}"
    );
    fake.apply(clusters::native_record(
        "ingress-nginx/do-lb",
        &uid,
        IP,
        "failed",
        "port 80: empty reply\n\u{1b}[31mforged",
    ));
    let failed = facts_from(&fake).await;
    let cure = failed.cure.as_ref().unwrap();
    assert_eq!(cure.cure, CureKind::Dns, "{cure:?}");
    assert!(
        cure.why.contains("empty reply\\n\\u{1b}[31mforged"),
        "escaped: {cure:?}"
    );
}

#[tokio::test]
async fn cilium_1_16_kube_proxy_replacement_gets_dns_and_why() {
    let facts = facts_of(clusters::cilium_cluster(IP)).await;
    assert_eq!(facts.kube_proxy, None, "kube-proxy-free");
    assert_eq!(facts.ip_mode.honours, Some(false), "{:?}", facts.ip_mode);
    let cure = facts.cure.as_ref().unwrap();
    assert_eq!(cure.cure, CureKind::Dns, "{cure:?}");
    assert!(
        cure.why
            .contains("Cilium v1.16.5 kube-proxy replacement (kube-proxy-replacement=true) ignores ipMode (needs >= 1.17, not 1.18.0)"),
        "{cure:?}"
    );
    assert_eq!(
        facts
            .cert_manager
            .as_ref()
            .and_then(|c| c.version.as_deref()),
        Some("v1.21.0")
    );
    let verdict = from_a_pod(&facts);
    let last = verdict.fixes.last().unwrap();
    assert!(
        last.contains("`waitInsteadOfSelfCheck: 30s`") && last.contains("No hairpin needed"),
        "{:?}",
        verdict.fixes
    );
}

#[tokio::test]
async fn calico_ebpf_antrea_and_kube_router_are_read_by_name() {
    // Calico 3.28 with FELIX_BPFENABLED: its eBPF dataplane handles Services and ignores ipMode.
    let mut calico = clusters::daemon_set(
        "calico-system",
        "calico-node",
        "calico-node",
        "docker.io/calico/node:v3.28.2",
        &[],
        json!([]),
    );
    calico["spec"]["template"]["spec"]["containers"][0]["env"] =
        json!([{"name": "FELIX_BPFENABLED", "value": "true"}]);
    let facts = digitalocean_with([calico]).await;
    assert_eq!(facts.ip_mode.honours, Some(false), "{:?}", facts.ip_mode);
    assert!(
        facts
            .ip_mode
            .handler
            .starts_with("Calico v3.28.2 eBPF dataplane")
    );

    let antrea = digitalocean_with([clusters::daemon_set(
        "kube-system",
        "antrea-agent",
        "antrea-agent",
        "antrea/antrea-agent-ubuntu:v2.1.0",
        &[],
        json!([]),
    )])
    .await;
    assert_eq!(antrea.ip_mode.honours, Some(true), "{:?}", antrea.ip_mode);
    assert_eq!(antrea.cure.unwrap().cure, CureKind::Native);

    let router = digitalocean_with([clusters::daemon_set(
        "kube-system",
        "kube-router",
        "kube-router",
        "docker.io/cloudnativelabs/kube-router:v2.4.1",
        &["--run-router=true", "--run-service-proxy=true"],
        json!([]),
    )])
    .await;
    assert_eq!(router.ip_mode.honours, Some(false), "{:?}", router.ip_mode);
}

/// The whole run (`hairpin_doctor::run`, what `hairpin doctor 127.0.0.1 --port P` prints) for
/// each of the three clusters, the load balancer at 127.0.0.1 in front of a real nginx: one
/// that requires the PROXY header (the in-cluster path when kube-proxy short-circuits) or a
/// plain one (through a load balancer that adds it). From a pod, `--cure auto`.
async fn whole_run(objects: Vec<serde_json::Value>, requires_proxy: bool) -> String {
    let addr = hairpin_testkit::free_addr();
    let listen = if requires_proxy {
        format!("{addr} proxy_protocol")
    } else {
        addr.to_string()
    };
    let _nginx = hairpin_testkit::Nginx::start(
        &format!("server {{ listen {listen}; location / {{ return 200 \"ok\"; }} }}"),
        &[addr],
    )
    .unwrap();
    let fake = FakeApiServer::start().await;
    fake.apply_many(objects);
    let dir = tempfile::tempdir().unwrap();
    let cluster_options = cluster_options(&fake, dir.path());
    let options = hairpin_doctor::Options {
        port: addr.port(),
        timeouts: hairpin_doctor::probe::Timeouts::default(),
        hosts_file: dir.path().join("no-hosts-file"),
        vantage: Vantage::Pod,
    };
    hairpin_doctor::run(&["127.0.0.1".to_owned()], &options, Some(&cluster_options))
        .await
        .unwrap()
        .to_text()
}

#[tokio::test]
async fn the_three_clusters_as_the_doctor_prints_them() {
    let hcloud = whole_run(clusters::hcloud_cluster("127.0.0.1"), false).await;
    println!("--- hcloud-ccm 1.21, PROXY on ---\n{hcloud}");
    assert!(hcloud.contains("NOT NEEDED"), "{hcloud}");
    assert!(
        hcloud.contains("cure            the CCM cures it: hcloud-cloud-controller-manager v1.21.0 sets ipMode: Proxy itself"),
        "{hcloud}"
    );
    let digitalocean = whole_run(clusters::digitalocean_cluster("127.0.0.1"), true).await;
    println!("--- DigitalOcean, Kubernetes 1.31, kube-proxy ---\n{digitalocean}");
    assert!(digitalocean.contains("BROKEN"), "{digitalocean}");
    assert!(
        digitalocean.contains("cure            native: kube-proxy v1.31.2 (iptables, the default) honours ipMode: Proxy"),
        "{digitalocean}"
    );
    assert!(
        digitalocean.contains("fix 1: install hairpin: its native cure works here"),
        "{digitalocean}"
    );
    let cilium = whole_run(clusters::cilium_cluster("127.0.0.1"), true).await;
    println!("--- Cilium 1.16 kube-proxy replacement ---\n{cilium}");
    assert!(
        cilium.contains("cure            dns: Cilium v1.16.5 kube-proxy replacement (kube-proxy-replacement=true) ignores ipMode (needs >= 1.17, not 1.18.0)"),
        "{cilium}"
    );
    assert!(cilium.contains("`waitInsteadOfSelfCheck: 30s`"), "{cilium}");
}

/// Issue 36: the same cluster, but the load balancer's address is MetalLB's (the nodes
/// receive it as destination). The data plane honours `ipMode`, yet the doctor says DNS,
/// tells the VIP from a proxy and names the outage native would cause; no fix suggests the
/// native cure.
#[tokio::test]
async fn a_metallb_address_is_a_vip_and_the_doctor_names_the_outage_avoided() {
    let mut objects = clusters::digitalocean_cluster(IP);
    objects[0]["metadata"]["annotations"]["metallb.io/ip-allocated-from-pool"] = json!("public");
    let facts = facts_of(objects).await;
    assert_eq!(facts.ip_mode.honours, Some(true), "{:?}", facts.ip_mode);
    let cure = facts.cure.as_ref().unwrap();
    assert_eq!(cure.cure, CureKind::Dns, "{cure:?}");
    let delivery = cure.describe_delivery().expect("a delivery line");
    assert!(
        delivery.starts_with("vip: MetalLB, annotation metallb.io/ip-allocated-from-pool=public")
            && delivery.contains(
                "would cut off every client outside the cluster: kube-proxy drops every rule for that IP"
            ),
        "{delivery}"
    );
    assert!(
        cure.plan
            .as_deref()
            .is_some_and(|plan| plan.starts_with("dns (--cure auto): native never tried")),
        "{cure:?}"
    );
    let fixes = from_a_pod(&facts).fixes;
    assert!(
        fixes
            .iter()
            .all(|fix| !fix.contains("native cure works here")),
        "{fixes:?}"
    );
    // The DigitalOcean load balancer itself is a proxy: said so, native as before.
    let proxy = facts_of(clusters::digitalocean_cluster(IP)).await;
    let cure = proxy.cure.as_ref().unwrap();
    assert_eq!(cure.cure, CureKind::Native, "{cure:?}");
    assert!(
        cure.describe_delivery()
            .is_some_and(|line| line.starts_with("proxy: DigitalOcean")),
        "{cure:?}"
    );
}

/// Bare metal: a MetalLB address that only hairpin's annotation says sends PROXY (no
/// provider). No fix suggests `ipMode: Proxy` (it would cut every outside client off): hairpin's
/// DNS cure is the fix.
#[tokio::test]
async fn no_fix_suggests_ip_mode_proxy_for_a_metallb_address() {
    let mut objects = clusters::digitalocean_cluster(IP);
    objects[0]["metadata"]["annotations"] = json!({
        "hairpin.io/proxy-protocol": "v1",
        "metallb.io/ip-allocated-from-pool": "public",
    });
    let facts = facts_of(objects.clone()).await;
    let cure = facts.cure.as_ref().unwrap();
    assert_eq!(cure.cure, CureKind::Dns, "{cure:?}");
    assert!(cure.is_vip(), "{cure:?}");
    let fixes = from_a_pod(&facts).fixes;
    assert!(
        fixes.iter().all(|fix| !fix.contains("ipMode: Proxy")),
        "{fixes:?}"
    );
    assert!(
        fixes.iter().any(|fix| fix.starts_with("install hairpin")),
        "{fixes:?}"
    );
    // Without MetalLB's mark (unknown delivery) the generic fixes stay, native among them.
    objects[0]["metadata"]["annotations"] = json!({"hairpin.io/proxy-protocol": "v1"});
    let unknown = facts_of(objects).await;
    let fixes = from_a_pod(&unknown).fixes;
    assert!(
        fixes
            .iter()
            .any(|fix| fix.starts_with("native: if your cloud controller")),
        "{fixes:?}"
    );
}
