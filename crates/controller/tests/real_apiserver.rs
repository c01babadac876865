//! The controller's main scenarios against the real kube-apiserver v1.31.14
//! (`../shared/peers/kubernetes`, started by `hairpin_testkit::kube`): the first write, a new
//! host, a write fight over the Corefile, the uninstall fence, a Lease deleted under the leader.
//! The fake API server's tests (`controller.rs`, `lifecycle.rs`, `lease.rs`) cover the faults
//! a real server cannot be made to show; these show the same flows on the real one.
//!
//! One apiserver for the binary ([`ApiServer::shared`], about 5 s to start); the scenarios run
//! one at a time (every controller watches the whole cluster), each with namespaces of its own
//! (hairpin's, CoreDNS's, the load balancer's and the Ingresses') and its load balancer and
//! Ingresses deleted at the end. The real server has no garbage collector, namespace
//! controller or kubelet: what those would do, the test does (a Deployment's status, deleting
//! the fence the garbage collector would take with the Deployment).
//!
//! Needs root, etcd and the test peers; without them each test prints why and passes.

mod support;

use hairpin_testkit::coredns::names;
use std::sync::Arc;
use std::time::{Duration, Instant};

use hairpin_controller::fight::FightParams;
use hairpin_controller::lease::{FENCE_HOLDER, LeaseParams};
use hairpin_controller::{ControllerConfig, Metrics, UninstallParams, UninstallReport};
use hairpin_fake_apiserver::fixtures;
use hairpin_planner::{DnsMode, PlannerConfig};
use hairpin_runtime::{Readiness, Shutdown};
use hairpin_testkit::kube::{self as real, ApiServer, object_path};
use prometheus_client::registry::Registry;
use serde_json::{Value, json};
use support::controller::Running;

const COREFILE: &str = ".:53 {\n    errors\n    health {\n       lameduck 5s\n    }\n    ready\n    kubernetes cluster.local in-addr.arpa ip6.arpa {\n       pods insecure\n       fallthrough in-addr.arpa ip6.arpa\n       ttl 30\n    }\n    prometheus :9153\n    forward . /etc/resolv.conf {\n       max_concurrent 1000\n    }\n    cache 30\n    loop\n    reload\n    loadbalance\n}\n";
const LB_IP: &str = "203.0.113.10";

/// One scenario at a time: each controller watches the whole cluster.
static SERIAL: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// A scenario's part of the shared apiserver: its namespaces, an admin client, and on drop its
/// load balancer and Ingresses deleted (so the next scenario's controller does not see them).
struct Cluster {
    api: &'static ApiServer,
    client: kube::Client,
    /// hairpin's namespace (Services, ConfigMaps, the Lease, the Deployment).
    hairpin: String,
    /// CoreDNS's namespace.
    dns: String,
    /// The load balancer's namespace.
    lb: String,
    /// The Ingresses' namespace.
    shop: String,
}

impl Cluster {
    /// The shared apiserver with this scenario's namespaces and the `Hairpin` CRD; `None`
    /// (after saying why) when the real apiserver cannot run here.
    async fn new(tag: &str) -> Option<Cluster> {
        if let Some(reason) = real::skip_reason() {
            hairpin_testkit::skip::skip(
                &format!("real_apiserver {tag}"),
                hairpin_testkit::skip::Cause::Missing,
                &reason,
            );
            return None;
        }
        let started = Instant::now();
        let api = ApiServer::shared().unwrap_or_else(|err| panic!("start kube-apiserver: {err}"));
        if started.elapsed() > Duration::from_secs(1) {
            println!("kube-apiserver ready after {:?}", api.started_in());
        }
        let kubeconfig =
            kube::config::Kubeconfig::read_from(api.admin_kubeconfig()).expect("read kubeconfig");
        let config = kube::Config::from_custom_kubeconfig(kubeconfig, &Default::default())
            .await
            .expect("client config");
        let client = kube::Client::try_from(config).expect("client");
        let cluster = Cluster {
            api,
            client,
            hairpin: format!("hp-{tag}"),
            dns: format!("dns-{tag}"),
            lb: format!("lb-{tag}"),
            shop: format!("shop-{tag}"),
        };
        for ns in [&cluster.hairpin, &cluster.dns, &cluster.lb, &cluster.shop] {
            api.ensure_namespace(ns);
        }
        install_hairpin_crd(api).await;
        Some(cluster)
    }

    /// The planner's settings for this scenario's namespaces.
    fn planner(&self) -> PlannerConfig {
        PlannerConfig {
            namespace: self.hairpin.clone(),
            coredns_namespace: self.dns.clone(),
            ..PlannerConfig::default()
        }
    }

    /// Quick debounce and retries; a 3 s Lease in hairpin's namespace with leader election.
    fn config(&self, identity: &str, leader_election: bool) -> ControllerConfig {
        let mut config = ControllerConfig::new(self.planner(), identity);
        config.debounce = Duration::from_millis(50);
        config.min_retry = Duration::from_millis(50);
        config.max_retry = Duration::from_millis(400);
        config.lease = leader_election.then(|| LeaseParams {
            duration: Duration::from_secs(3),
            renew_interval: Duration::from_millis(300),
            retry_interval: Duration::from_millis(100),
            ..LeaseParams::new(&self.hairpin, "hairpin-controller", identity)
        });
        config
    }

    /// Runs the controller until [`Running::stop`].
    fn start(&self, config: ControllerConfig) -> Running {
        let mut registry = Registry::default();
        let metrics = Metrics::register(&mut registry);
        let readiness = Readiness::new();
        let ready = readiness.condition("caches synced");
        let shutdown = Shutdown::new();
        let task = tokio::spawn({
            let (client, metrics, shutdown) =
                (self.client.clone(), metrics.clone(), shutdown.clone());
            async move {
                hairpin_controller::run(client, config, metrics, ready, shutdown)
                    .await
                    .unwrap();
            }
        });
        Running {
            shutdown,
            task,
            readiness,
            metrics,
            registry: Arc::new(registry),
        }
    }

    /// Applies `object` and then its `status` (server-side apply leaves status alone).
    fn apply(&self, object: &Value) -> Value {
        let stored = self.api.apply(object);
        if object["status"].is_object() {
            return self
                .api
                .patch_status(&object_path(object), &json!({"status": object["status"]}));
        }
        stored
    }

    /// The PROXY load balancer (Hetzner annotation) at [`LB_IP`], ports 80 and 443.
    fn seed(&self, corefile: &str) {
        let mut lb = support::cluster::lb_service();
        lb["metadata"]["namespace"] = json!(self.lb);
        self.apply(&lb);
        self.apply(&self.ingress("shop", "shop.example.com"));
        self.apply(&self.coredns(corefile));
    }

    fn coredns(&self, corefile: &str) -> Value {
        let mut cm = fixtures::coredns(corefile);
        cm["metadata"]["namespace"] = json!(self.dns);
        cm
    }

    fn ingress(&self, name: &str, host: &str) -> Value {
        fixtures::ingress(&self.shop, name, &[host], LB_IP)
    }

    fn corefile(&self) -> String {
        self.api
            .get(&format!(
                "/api/v1/namespaces/{}/configmaps/coredns",
                self.dns
            ))
            .expect("the coredns ConfigMap")["data"]["Corefile"]
            .as_str()
            .unwrap_or_default()
            .to_owned()
    }

    fn list(&self, path: &str) -> Vec<Value> {
        self.api.request_ok("GET", path, None)["items"]
            .as_array()
            .cloned()
            .unwrap_or_default()
    }

    fn hairpin_services(&self) -> Vec<Value> {
        self.list(&format!("/api/v1/namespaces/{}/services", self.hairpin))
    }

    fn config_map(&self, name: &str) -> Option<Value> {
        self.api.get(&format!(
            "/api/v1/namespaces/{}/configmaps/{name}",
            self.hairpin
        ))
    }

    fn lease(&self) -> Option<Value> {
        self.api.get(&format!(
            "/apis/coordination.k8s.io/v1/namespaces/{}/leases/hairpin-controller",
            self.hairpin
        ))
    }

    fn hairpins(&self) -> Vec<Value> {
        self.list(&format!(
            "/apis/hairpin.io/v1alpha1/namespaces/{}/hairpins",
            self.lb
        ))
    }

    /// events.k8s.io Events with `reason` in this scenario's namespaces.
    fn events(&self, reason: &str) -> Vec<Value> {
        let mine = [&self.hairpin, &self.dns, &self.lb, &self.shop];
        self.list("/apis/events.k8s.io/v1/events")
            .into_iter()
            .filter(|e| e["reason"] == reason)
            .filter(|e| {
                mine.iter()
                    .any(|ns| e["metadata"]["namespace"] == ns.as_str())
            })
            .collect()
    }

    /// Polls `done` every 20 ms for `within`; when it held.
    async fn wait_until(
        &self,
        within: Duration,
        done: impl Fn(&Cluster) -> bool,
    ) -> Option<Instant> {
        let deadline = Instant::now() + within;
        loop {
            if done(self) {
                return Some(Instant::now());
            }
            if Instant::now() >= deadline {
                return None;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// The Corefile names every host and there is one hairpin Service.
    async fn converged(&self, hosts: &[&str]) -> bool {
        self.wait_until(Duration::from_secs(10), |c| {
            let cf = c.corefile();
            hosts.iter().all(|h| names(&cf, h)) && c.hairpin_services().len() == 1
        })
        .await
        .is_some()
    }

    /// `hairpin uninstall` as the Job runs it; every step must succeed.
    async fn uninstall(&self) -> UninstallReport {
        let report = hairpin_controller::uninstall_with(
            &self.client,
            &self.planner(),
            &UninstallParams::new("hairpin-controller"),
        )
        .await;
        assert!(report.failures.is_empty(), "{report:?}");
        report
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        self.api.delete(&format!(
            "/api/v1/namespaces/{}/services/ingress-nginx-controller",
            self.lb
        ));
        for ingress in self.list(&format!(
            "/apis/networking.k8s.io/v1/namespaces/{}/ingresses",
            self.shop
        )) {
            let name = ingress["metadata"]["name"].as_str().unwrap_or_default();
            self.api.delete(&format!(
                "/apis/networking.k8s.io/v1/namespaces/{}/ingresses/{name}",
                self.shop
            ));
        }
    }
}

/// The `Hairpin` CRD as the chart ships it (generated from the controller's types), and
/// waits until it is served.
async fn install_hairpin_crd(api: &ApiServer) {
    use kube::CustomResourceExt as _;
    let crd = serde_json::to_value(hairpin_controller::crd::Hairpin::crd()).expect("CRD JSON");
    api.apply(&crd);
    let deadline = Instant::now() + Duration::from_secs(10);
    while api.get("/apis/hairpin.io/v1alpha1/hairpins").is_none() {
        assert!(Instant::now() < deadline, "the Hairpin CRD is not served");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn first_write_and_a_new_host() {
    let _serial = SERIAL.lock().await;
    let Some(cluster) = Cluster::new("first").await else {
        return;
    };
    cluster.seed(COREFILE);
    let started = Instant::now();
    let running = cluster.start(cluster.config("pod-a", false));
    assert!(
        cluster.converged(&["shop.example.com"]).await,
        "first sync wrote the plan: {}",
        cluster.corefile()
    );
    println!(
        "first write on the real apiserver after {:?}",
        started.elapsed()
    );
    assert!(running.readiness.is_ready(), "ready after the first sync");
    let services = cluster.hairpin_services();
    assert_eq!(
        services[0]["metadata"]["labels"]["app.kubernetes.io/managed-by"],
        "hairpin"
    );
    let routes = cluster
        .config_map("hairpin-routes")
        .expect("routes published");
    let table: Vec<Value> =
        serde_json::from_str(routes["data"]["routes.json"].as_str().unwrap()).unwrap();
    assert_eq!(table.len(), 2, "one route per PROXY port: {table:?}");
    let cf = cluster.corefile();
    assert!(cf.contains("# BEGIN hairpin"), "{cf}");
    assert!(cf.starts_with(".:53 {\n    errors\n"), "{cf}");
    let status = cluster
        .wait_until(Duration::from_secs(5), |c| {
            c.hairpins().iter().any(|h| !h["status"].is_null())
                && !c.events("HairpinConfigured").is_empty()
        })
        .await;
    assert!(
        status.is_some(),
        "a Hairpin status and an Event: {:?}",
        cluster.hairpins()
    );

    // A new host.
    let mut latencies = Vec::new();
    for i in 0..3 {
        let host = format!("api{i}.example.com");
        let changed = Instant::now();
        cluster.apply(&cluster.ingress(&format!("api{i}"), &host));
        let written = cluster
            .wait_until(Duration::from_secs(5), |c| names(&c.corefile(), &host))
            .await
            .expect("the new host is written");
        latencies.push(written - changed);
    }
    println!("change-to-write latency on the real apiserver (debounce 50 ms): {latencies:?}");
    let text = running.metrics_text();
    assert!(
        text.contains("hairpin_controller_managed_load_balancers 1"),
        "{text}"
    );
    assert!(
        text.contains("hairpin_controller_dns_write_failures_total 0"),
        "{text}"
    );
    running.stop().await;
    let report = cluster.uninstall().await;
    assert_eq!(
        cluster.corefile(),
        COREFILE,
        "restored byte for byte: {report:?}"
    );
    assert!(cluster.hairpin_services().is_empty() && cluster.hairpins().is_empty());
}

fn importing_corefile() -> String {
    COREFILE.replace(
        "    loadbalance\n}",
        "    loadbalance\n    import custom/*.override\n}",
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_writer_that_keeps_reverting_coredns_is_detected_and_backed_off() {
    let _serial = SERIAL.lock().await;
    let Some(cluster) = Cluster::new("fight").await else {
        return;
    };
    let importing = importing_corefile();
    cluster.seed(&importing);
    let mut config = cluster.config("pod-a", false);
    config.planner.dns_mode = DnsMode::Corefile;
    config.fight = FightParams {
        threshold: 3,
        window: Duration::from_secs(60),
        initial_backoff: Duration::from_secs(30),
        max_backoff: Duration::from_secs(60),
    };
    let running = cluster.start(config);
    assert!(cluster.converged(&["shop.example.com"]).await);

    // An addon manager in Reconcile mode: puts its Corefile back whenever ours appears, until
    // the fight is reported (8 s at most).
    let theirs = cluster.coredns(&importing);
    let give_up = Instant::now() + Duration::from_secs(10);
    let (mut reverts, mut until) = (0, give_up);
    while Instant::now() < until {
        if until == give_up && !cluster.events("DNSWriteReverted").is_empty() {
            // Reported: go on reverting a little longer (a write racing the report).
            until = Instant::now() + Duration::from_millis(1000);
        }
        if cluster.corefile().contains("# BEGIN hairpin") {
            cluster.apply(&theirs);
            reverts += 1;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let reverts_reported = reverts;
    // Backed off (30 s): hairpin's block does not come back.
    let came_back = cluster
        .wait_until(Duration::from_millis(1500), |c| {
            c.corefile().contains("# BEGIN hairpin")
        })
        .await;
    println!("reverts until the fight was reported (and 1 s on): {reverts_reported}");
    assert!(reverts >= 3, "the controller rewrote {reverts} times");
    assert!(came_back.is_none(), "backed off: {}", cluster.corefile());
    let events = cluster.events("DNSWriteReverted");
    assert!(!events.is_empty(), "a Warning Event on the ConfigMap");
    assert_eq!(events[0]["type"], "Warning");
    let note = events[0]["note"].as_str().unwrap_or_default();
    assert!(note.contains("--dns-mode custom"), "names the fix: {note}");
    assert_eq!(running.metrics.dns_fight.get(), 1);
    running.stop().await;
    cluster.apply(&cluster.coredns(&importing));
    cluster.uninstall().await;
}

/// The controller Deployment of an install, with the status its pods would give it.
fn deployment(namespace: &str) -> Value {
    json!({
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"namespace": namespace, "name": "hairpin-controller"},
        "spec": {
            "replicas": 2,
            "selector": {"matchLabels": {"app": "hairpin-controller"}},
            "template": {
                "metadata": {"labels": {"app": "hairpin-controller"}},
                "spec": {"containers": [{"name": "controller", "image": "hairpin:test"}]}
            }
        },
        "status": {"replicas": 2, "readyReplicas": 2}
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn uninstall_fences_the_running_controllers_and_restores_the_corefile() {
    let _serial = SERIAL.lock().await;
    let Some(cluster) = Cluster::new("fence").await else {
        return;
    };
    cluster.seed(COREFILE);
    cluster.apply(&deployment(&cluster.hairpin));
    let a = cluster.start(cluster.config("pod-a", true));
    let b = cluster.start(cluster.config("pod-b", true));
    assert!(cluster.converged(&["shop.example.com"]).await);
    let warm = cluster
        .wait_until(Duration::from_secs(5), |_| {
            a.readiness.is_ready() && b.readiness.is_ready()
        })
        .await;
    assert!(warm.is_some(), "the follower is warm");
    let leader = cluster.lease().unwrap()["spec"]["holderIdentity"]
        .as_str()
        .unwrap()
        .to_owned();

    let started = Instant::now();
    let report = cluster.uninstall().await;
    println!(
        "uninstall took {:?} (leader stood down after {:?})",
        started.elapsed(),
        report.fence.acknowledged_after
    );
    assert!(report.fence.fenced, "{report:?}");
    assert_eq!(report.fence.displaced.as_deref(), Some(leader.as_str()));
    assert!(report.fence.acknowledged_after.is_some(), "{report:?}");
    let deployment_name = format!("{}/hairpin-controller", cluster.hairpin);
    assert_eq!(
        report.fence.owned_by.as_deref(),
        Some(deployment_name.as_str())
    );
    assert_eq!(report.still_running.len(), 1, "{report:?}");
    assert!(report.still_running[0].contains(&format!("Deployment {deployment_name}")));
    assert_eq!(cluster.corefile(), COREFILE, "restored byte for byte");
    let fence = cluster.lease().expect("the fence");
    assert_eq!(fence["spec"]["holderIdentity"], FENCE_HOLDER);
    assert_eq!(
        fence["metadata"]["ownerReferences"][0]["kind"],
        "Deployment"
    );
    assert!(cluster.hairpin_services().is_empty() && cluster.hairpins().is_empty());
    assert!(cluster.config_map("hairpin-routes").is_none());
    let fenced = cluster
        .wait_until(Duration::from_secs(5), |_| {
            [&a, &b]
                .iter()
                .all(|c| c.metrics.fenced.get() == 1 && !c.readiness.is_ready())
        })
        .await;
    assert!(fenced.is_some(), "every controller reports the fence");
    assert!(!cluster.events("HairpinUninstalling").is_empty());

    // A change while the fenced controllers keep running: nothing is written.
    cluster.apply(&cluster.ingress("late", "late.example.com"));
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert_eq!(cluster.corefile(), COREFILE, "still the original");
    assert!(
        cluster.hairpin_services().is_empty() && cluster.config_map("hairpin-routes").is_none()
    );
    // The Deployment goes; the garbage collector (absent here) would take the fence with it.
    cluster.api.delete(&format!(
        "/apis/apps/v1/namespaces/{}/deployments/hairpin-controller",
        cluster.hairpin
    ));
    cluster.api.delete(&format!(
        "/apis/coordination.k8s.io/v1/namespaces/{}/leases/hairpin-controller",
        cluster.hairpin
    ));
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(cluster.corefile(), COREFILE, "the old pods stay idle");
    assert!(cluster.lease().is_none());
    a.stop().await;
    b.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_leader_whose_lease_is_deleted_writes_nothing_until_it_is_claimed_again() {
    let _serial = SERIAL.lock().await;
    let Some(cluster) = Cluster::new("lease").await else {
        return;
    };
    cluster.seed(COREFILE);
    let a = cluster.start(cluster.config("pod-a", true));
    assert!(cluster.converged(&["shop.example.com"]).await);
    let b = cluster.start(cluster.config("pod-b", true));
    let warm = cluster
        .wait_until(Duration::from_secs(5), |_| b.readiness.is_ready())
        .await;
    assert!(warm.is_some(), "the standby is warm");
    tokio::time::sleep(Duration::from_millis(300)).await;
    let hosts_version = cluster
        .config_map("hairpin-hosts")
        .map(|cm| cm["metadata"]["resourceVersion"].clone());
    assert!(cluster.api.delete(&format!(
        "/apis/coordination.k8s.io/v1/namespaces/{}/leases/hairpin-controller",
        cluster.hairpin
    )));
    let deleted = Instant::now();
    // The leader saw the deletion (its gate closed) before the change comes.
    let stood_down = cluster
        .wait_until(Duration::from_secs(10), |_| a.metrics.leader.get() == 0)
        .await;
    assert!(stood_down.is_some(), "the leader saw its Lease deleted");
    cluster.apply(&cluster.ingress("late", "late.example.com"));
    // For the hold-off (the Lease duration, 3 s, less a margin): no Lease, no write.
    while deleted.elapsed() < Duration::from_millis(2500) {
        assert!(
            cluster.lease().is_none(),
            "the Lease was not claimed during the hold-off"
        );
        assert!(
            !names(&cluster.corefile(), "late.example.com"),
            "no write after the Lease went"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(
        cluster
            .config_map("hairpin-hosts")
            .map(|cm| cm["metadata"]["resourceVersion"].clone()),
        hosts_version
    );
    assert_eq!(a.metrics.leader.get() + b.metrics.leader.get(), 0);
    let back = cluster
        .wait_until(Duration::from_secs(6), |c| {
            names(&c.corefile(), "late.example.com")
        })
        .await;
    assert!(back.is_some(), "re-acquired and caught up");
    println!(
        "claimed again and written {:?} after the Lease was deleted",
        deleted.elapsed()
    );
    let holder = cluster.lease().unwrap()["spec"]["holderIdentity"].clone();
    assert!(holder == "pod-a" || holder == "pod-b", "{holder}");
    assert_eq!(a.metrics.leader.get() + b.metrics.leader.get(), 1);
    a.stop().await;
    b.stop().await;
    cluster.uninstall().await;
}

/// One request of the comparison between the fake and the real server, and the parts of the
/// answer compared (JSON pointers; `?` first: only whether it is there).
struct Probe {
    what: &'static str,
    method: &'static str,
    path: &'static str,
    content_type: &'static str,
    body: Value,
    facts: &'static [&'static str],
}

const STATUS_FACTS: &[&str] = &["/kind", "/reason", "/details/kind", "/details/name"];

fn probe(what: &'static str, method: &'static str, path: &'static str, body: Value) -> Probe {
    Probe {
        what,
        method,
        path,
        content_type: "application/json",
        body,
        facts: STATUS_FACTS,
    }
}

fn probes() -> Vec<Probe> {
    let cm = |name: &str, data: Value| {
        json!({"apiVersion": "v1", "kind": "ConfigMap",
               "metadata": {"name": name, "namespace": "diff"}, "data": data})
    };
    vec![
        probe(
            "create a namespace",
            "POST",
            "/api/v1/namespaces",
            json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "diff"}}),
        ),
        probe(
            "create in a missing namespace",
            "POST",
            "/api/v1/namespaces/nope/configmaps",
            json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "a", "namespace": "nope"}}),
        ),
        Probe {
            facts: &[
                "/kind",
                "?/metadata/uid",
                "?/metadata/resourceVersion",
                "?/metadata/creationTimestamp",
                "/metadata/managedFields/0/operation",
                "/metadata/managedFields/0/manager",
            ],
            ..probe(
                "create a ConfigMap",
                "POST",
                "/api/v1/namespaces/diff/configmaps?fieldManager=hairpin",
                cm("a", json!({"k": "v"})),
            )
        },
        probe(
            "create it again",
            "POST",
            "/api/v1/namespaces/diff/configmaps",
            cm("a", json!({})),
        ),
        probe(
            "update at a stale resourceVersion",
            "PUT",
            "/api/v1/namespaces/diff/configmaps/a",
            {
                let mut c = cm("a", json!({"k": "w"}));
                c["metadata"]["resourceVersion"] = json!("1");
                c
            },
        ),
        Probe {
            facts: &["/kind", "/data/k"],
            ..probe(
                "update without a resourceVersion",
                "PUT",
                "/api/v1/namespaces/diff/configmaps/a",
                cm("a", json!({"k": "x"})),
            )
        },
        probe(
            "an invalid key",
            "POST",
            "/api/v1/namespaces/diff/configmaps",
            cm("b", json!({"a b": "v"})),
        ),
        probe(
            "get a missing object",
            "GET",
            "/api/v1/namespaces/diff/configmaps/missing",
            Value::Null,
        ),
        Probe {
            facts: &[
                "/kind",
                "/apiVersion",
                "?/metadata/resourceVersion",
                "?/items/0/kind",
                "?/items/0/apiVersion",
                "/items/0/metadata/name",
            ],
            ..probe(
                "list",
                "GET",
                "/api/v1/namespaces/diff/configmaps",
                Value::Null,
            )
        },
        Probe {
            facts: &["/kind", "/status", "/details/name", "/metadata/name"],
            ..probe(
                "delete",
                "DELETE",
                "/api/v1/namespaces/diff/configmaps/a",
                Value::Null,
            )
        },
        probe(
            "delete a missing object",
            "DELETE",
            "/api/v1/namespaces/diff/configmaps/a",
            Value::Null,
        ),
        Probe {
            facts: &[
                "/kind",
                "?/spec/clusterIP",
                "?/spec/ports/0/nodePort",
                "/spec/ports/0/targetPort",
                "/spec/externalTrafficPolicy",
                "/spec/allocateLoadBalancerNodePorts",
                "/spec/sessionAffinity",
                "/spec/ipFamilyPolicy",
                "/spec/ipFamilies",
                "/spec/internalTrafficPolicy",
                "/status",
            ],
            ..probe(
                "create a LoadBalancer Service",
                "POST",
                "/api/v1/namespaces/diff/services",
                json!({"apiVersion": "v1", "kind": "Service", "metadata": {"name": "lb", "namespace": "diff"},
                       "spec": {"type": "LoadBalancer", "ports": [{"port": 80}]}}),
            )
        },
        Probe {
            content_type: "application/merge-patch+json",
            facts: &[
                "/kind",
                "/status/loadBalancer/ingress/0/ipMode",
                "/status/loadBalancer/ingress/0/ip",
            ],
            ..probe(
                "its status: an ip",
                "PATCH",
                "/api/v1/namespaces/diff/services/lb/status",
                json!({"status": {"loadBalancer": {"ingress": [{"ip": "203.0.113.10"}]}}}),
            )
        },
        Probe {
            content_type: "application/merge-patch+json",
            facts: &[
                "/kind",
                "/status/loadBalancer/ingress/0/ipMode",
                "/metadata/labels/x",
            ],
            ..probe(
                "status in a patch of the object",
                "PATCH",
                "/api/v1/namespaces/diff/services/lb",
                json!({"metadata": {"labels": {"x": "y"}},
                       "status": {"loadBalancer": {"ingress": [{"ip": "203.0.113.10", "ipMode": "Proxy"}]}}}),
            )
        },
        Probe {
            facts: &["/kind", "/reason", "/status/loadBalancer/ingress/0/ipMode"],
            ..probe(
                "replace a Service without a resourceVersion",
                "PUT",
                "/api/v1/namespaces/diff/services/lb",
                json!({"apiVersion": "v1", "kind": "Service",
                       "metadata": {"name": "lb", "namespace": "diff"},
                       "spec": {"type": "LoadBalancer", "ports": [{"port": 80}]}}),
            )
        },
        Probe {
            facts: &["/kind", "/reason", "/status/loadBalancer/ingress/0/ipMode"],
            ..probe(
                "replace its status without a resourceVersion",
                "PUT",
                "/api/v1/namespaces/diff/services/lb/status",
                json!({"apiVersion": "v1", "kind": "Service",
                       "metadata": {"name": "lb", "namespace": "diff"},
                       "spec": {"type": "LoadBalancer", "ports": [{"port": 80}]},
                       "status": {"loadBalancer": {"ingress": [{"ip": "203.0.113.10", "ipMode": "Proxy"}]}}}),
            )
        },
        Probe {
            facts: &["/kind", "/reason", "/status/loadBalancer/ingress/0/ipMode"],
            ..probe(
                "replace a ConfigMap's status-less kind at a path with /status",
                "PUT",
                "/api/v1/namespaces/diff/configmaps/a/status",
                json!({"apiVersion": "v1", "kind": "ConfigMap",
                       "metadata": {"name": "a", "namespace": "diff"}}),
            )
        },
        Probe {
            content_type: "application/merge-patch+json",
            ..probe(
                "change the clusterIP",
                "PATCH",
                "/api/v1/namespaces/diff/services/lb",
                json!({"spec": {"clusterIP": "10.96.99.99", "clusterIPs": ["10.96.99.99"]}}),
            )
        },
        probe(
            "a Lease with negative transitions",
            "POST",
            "/apis/coordination.k8s.io/v1/namespaces/diff/leases",
            json!({"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
                   "metadata": {"name": "l", "namespace": "diff"},
                   "spec": {"holderIdentity": "a", "leaseTransitions": -1}}),
        ),
        Probe {
            facts: &[
                "/kind",
                "/spec/renewTime",
                "/spec/acquireTime",
                "/spec/leaseDurationSeconds",
            ],
            ..probe(
                "a Lease's times",
                "POST",
                "/apis/coordination.k8s.io/v1/namespaces/diff/leases",
                json!({"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
                       "metadata": {"name": "l", "namespace": "diff"},
                       "spec": {"holderIdentity": "a", "leaseDurationSeconds": 15,
                                "acquireTime": "2026-01-01T00:00:00Z",
                                "renewTime": "2026-01-01T00:00:01.5Z"}}),
            )
        },
        probe(
            "an Event without its required fields",
            "POST",
            "/apis/events.k8s.io/v1/namespaces/diff/events",
            json!({"apiVersion": "events.k8s.io/v1", "kind": "Event",
                   "metadata": {"name": "e", "namespace": "diff"}, "reason": "R", "note": "n"}),
        ),
        Probe {
            content_type: "application/merge-patch+json",
            facts: &["/kind", "/status/loadBalancer/ingress/0/ip"],
            ..probe(
                "an Ingress status",
                "PATCH",
                "/apis/networking.k8s.io/v1/namespaces/diff/ingresses/i/status",
                json!({"status": {"loadBalancer": {"ingress": [{"ip": "203.0.113.10"}]}}}),
            )
        },
    ]
}

/// A fact of `answer` at `pointer` (`?pointer`: whether it is there).
fn fact(answer: &Value, pointer: &str) -> Value {
    match pointer.strip_prefix('?') {
        Some(p) => json!(answer.pointer(p).is_some_and(|v| !v.is_null())),
        None => answer.pointer(pointer).cloned().unwrap_or(Value::Null),
    }
}

/// One request to the fake (over plain HTTP, with `curl`).
fn fake_request(url: &str, probe: &Probe) -> (u16, Value) {
    let mut command = std::process::Command::new("curl");
    command.args([
        "-sS",
        "--max-time",
        "10",
        "-X",
        probe.method,
        "-w",
        "\n%{http_code}",
    ]);
    if !probe.body.is_null() {
        command.args(["-H", &format!("Content-Type: {}", probe.content_type)]);
        command.args(["--data-binary", &probe.body.to_string()]);
    }
    let out = command
        .arg(format!("{url}{}", probe.path))
        .output()
        .expect("curl");
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let (body, code) = text.rsplit_once('\n').unwrap_or(("", &text));
    let value = serde_json::from_str(body).unwrap_or_else(|_| Value::String(body.to_owned()));
    (code.trim().parse().unwrap_or(0), value)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_fake_answers_these_requests_as_the_real_server_does() {
    let _serial = SERIAL.lock().await;
    let Some(cluster) = Cluster::new("diff").await else {
        return;
    };
    let fake = hairpin_fake_apiserver::FakeApiServer::start().await;
    fake.install_hairpin_crd();
    // The Ingress whose status the last probe patches.
    let ingress = json!({"apiVersion": "networking.k8s.io/v1", "kind": "Ingress",
        "metadata": {"name": "i", "namespace": "diff"}, "spec": {"rules": [{"host": "a.example.com"}]}});
    let mut differences = Vec::new();
    for probe in probes() {
        if probe.what == "an Ingress status" {
            cluster.api.apply(&ingress);
            fake.apply(ingress.clone());
        }
        let body = (!probe.body.is_null()).then_some((probe.content_type, &probe.body));
        let (real_code, real) = cluster
            .api
            .request(probe.method, probe.path, body)
            .expect("the real server answers");
        let (fake_code, faked) = fake_request(&fake.url(), &probe);
        let real_facts: Vec<Value> = probe.facts.iter().map(|p| fact(&real, p)).collect();
        let fake_facts: Vec<Value> = probe.facts.iter().map(|p| fact(&faked, p)).collect();
        if real_code != fake_code || real_facts != fake_facts {
            differences.push(format!(
                "{}: real {real_code} {real_facts:?}, fake {fake_code} {fake_facts:?}\n  real: {}\n  fake: {}",
                probe.what,
                truncate(&real),
                truncate(&faked)
            ));
        }
    }
    cluster.api.delete("/api/v1/namespaces/diff/services/lb");
    assert!(
        differences.is_empty(),
        "the fake answers differently:\n{}",
        differences.join("\n")
    );
}

fn truncate(value: &Value) -> String {
    let text = value.to_string();
    text.chars().take(600).collect()
}

/// Who changed the status's `ingress` list last after each of these status writes
/// ([`hairpin_planner::native::ingress_writer`]), and whether hairpin's cure then counts as
/// taken over ([`hairpin_planner::native::taken_over`]): the native cure steps back on that.
async fn ingress_writers(client: &kube::Client, namespace: &str) -> Vec<(String, bool)> {
    use hairpin_planner::native::{IpModeWas, NativeEntry, ProbeState, ingress_writer, taken_over};
    use k8s_openapi::api::core::v1::Service;
    use kube::api::{Api, PostParams};
    let services: Api<Service> = Api::namespaced(client.clone(), namespace);
    let svc: Service = serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Service",
        "metadata": {"name": "owned", "namespace": namespace},
        "spec": {"type": "LoadBalancer", "ports": [{"port": 80, "protocol": "TCP"}]}
    }))
    .unwrap();
    let _ = services.delete("owned", &Default::default()).await;
    services.create(&PostParams::default(), &svc).await.unwrap();
    let entry = NativeEntry {
        uid: String::new(),
        original: vec![IpModeWas {
            ip: "203.0.113.77".into(),
            ip_mode: Some("VIP".into()),
        }],
        // hairpin's own Proxy is not in place (its probe failed and it put VIP back): a
        // writer's Proxy is then that writer's own.
        state: ProbeState::Failed,
        since: String::new(),
        reason: String::new(),
        data_plane: String::new(),
        failures: 0,
        server_version: String::new(),
        due: false,
        skipped: Vec::new(),
        put_back: String::new(),
        probe: Default::default(),
    };
    let writes = [
        ("cloud-controller", json!({"ip": "203.0.113.77"})),
        ("hairpin", json!({"ip": "203.0.113.77", "ipMode": "Proxy"})),
        // The same status again: nothing changes, nobody's ownership either.
        (
            "cloud-controller",
            json!({"ip": "203.0.113.77", "ipMode": "Proxy"}),
        ),
        (
            "cloud-controller",
            json!({"ip": "203.0.113.77", "ipMode": "Proxy", "hostname": "lb.example.net"}),
        ),
        (
            "cloud-controller",
            json!({"ip": "203.0.113.77", "hostname": "lb.example.net"}),
        ),
    ];
    let mut out = Vec::new();
    for (manager, ingress) in writes {
        let mut current = services.get("owned").await.unwrap();
        current.status =
            Some(serde_json::from_value(json!({"loadBalancer": {"ingress": [ingress]}})).unwrap());
        let params = PostParams {
            field_manager: Some(manager.into()),
            ..PostParams::default()
        };
        let written = services
            .replace_status("owned", &params, &current)
            .await
            .unwrap();
        out.push((
            ingress_writer(&written).unwrap_or("?").to_owned(),
            taken_over(&written, &entry, false).is_some(),
        ));
    }
    services.delete("owned", &Default::default()).await.unwrap();
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_status_ingress_list_belongs_to_its_last_changer_on_both_servers() {
    let _serial = SERIAL.lock().await;
    let Some(cluster) = Cluster::new("owner").await else {
        return;
    };
    let expected = [
        ("cloud-controller", false),
        ("hairpin", false),
        ("hairpin", false),
        ("cloud-controller", true),
        ("cloud-controller", false),
    ]
    .map(|(w, t)| (w.to_owned(), t));
    let real = ingress_writers(&cluster.client, &cluster.lb).await;
    assert_eq!(real, expected, "the real kube-apiserver");
    let fake = hairpin_fake_apiserver::FakeApiServer::start().await;
    fake.create_namespace(&cluster.lb);
    let faked = ingress_writers(&fake.client(), &cluster.lb).await;
    assert_eq!(faked, real, "the fake answers as the real server does");
}
