//! The controller against the fake API server: first sync, change-to-write latency, removal,
//! conflict retries, the CoreDNS write fight, API errors, leader hand-over, uninstall.

mod support;

use hairpin_testkit::coredns::names;
use std::time::{Duration, Instant};

use hairpin_controller::fight::FightParams;
use hairpin_fake_apiserver::fixtures::{self, coredns};
use hairpin_fake_apiserver::{FakeApiServer, object};
use hairpin_planner::{DnsMode, PlannerConfig};
use serde_json::{Value, json};
use support::cluster::{corefile, ingress, lb_service};
use support::controller::{config, start};

const COREFILE: &str = ".:53 {\n    errors\n    health {\n       lameduck 5s\n    }\n    ready\n    kubernetes cluster.local in-addr.arpa ip6.arpa {\n       pods insecure\n       fallthrough in-addr.arpa ip6.arpa\n       ttl 30\n    }\n    prometheus :9153\n    forward . /etc/resolv.conf {\n       max_concurrent 1000\n    }\n    cache 30\n    loop\n    reload\n    loadbalance\n}\n";

/// hairpin's namespace (where its chart installs it), the load balancer, an Ingress on it and
/// CoreDNS with `corefile`.
fn seed_with(fake: &FakeApiServer, corefile: &str) {
    fake.create_namespace("hairpin");
    fake.apply(lb_service());
    fake.apply(ingress("shop", "shop", "shop.example.com"));
    fake.apply(coredns(corefile));
}

fn seed(fake: &FakeApiServer) {
    seed_with(fake, COREFILE);
}

fn hairpin_services(fake: &FakeApiServer) -> Vec<Value> {
    fake.list("v1", "Service")
        .into_iter()
        .filter(|s| s["metadata"]["namespace"] == "hairpin")
        .collect()
}

fn events(fake: &FakeApiServer, reason: &str) -> Vec<Value> {
    fake.list("events.k8s.io/v1", "Event")
        .into_iter()
        .filter(|e| e["reason"] == reason)
        .collect()
}

/// `hairpin uninstall` with the defaults; every step must succeed.
async fn uninstall(fake: &FakeApiServer) -> hairpin_controller::UninstallReport {
    let report = hairpin_controller::uninstall(
        &fake.client(),
        &PlannerConfig::default(),
        "hairpin-controller",
    )
    .await;
    assert!(report.failures.is_empty(), "{report:?}");
    report
}

async fn converged(fake: &FakeApiServer, hosts: &[&str]) -> Option<Instant> {
    fake.wait_until(Duration::from_secs(10), |f| {
        let cf = corefile(f);
        hosts.iter().all(|h| names(&cf, h)) && hairpin_services(f).len() == 1
    })
    .await
}

#[tokio::test]
async fn first_sync_writes_the_plan_and_changes_follow_quickly() {
    let fake = FakeApiServer::start().await;
    seed(&fake);
    let running = start(&fake, config("pod-a", false));
    assert!(
        converged(&fake, &["shop.example.com"]).await.is_some(),
        "first sync wrote the plan"
    );
    assert!(
        running.readiness.is_ready(),
        "ready after the first full sync"
    );

    let services = hairpin_services(&fake);
    assert_eq!(
        services[0]["metadata"]["labels"]["app.kubernetes.io/managed-by"],
        "hairpin"
    );
    assert_eq!(
        services[0]["spec"]["selector"]["app.kubernetes.io/component"],
        "proxy"
    );
    let routes = fake
        .get("v1", "ConfigMap", Some("hairpin"), "hairpin-routes")
        .expect("routes published");
    let table: Vec<Value> =
        serde_json::from_str(routes["data"]["routes.json"].as_str().unwrap()).unwrap();
    assert_eq!(table.len(), 2, "one route per PROXY port: {table:?}");
    assert!(table.iter().all(|r| {
        r["destination"]
            .as_str()
            .unwrap()
            .starts_with("203.0.113.10:")
    }));
    let cf = corefile(&fake);
    assert!(cf.contains("# BEGIN hairpin"), "{cf}");
    assert!(
        cf.starts_with(".:53 {\n    errors\n"),
        "lines outside our block are untouched"
    );
    // The Gateway API is absent: discovery says so, so its objects are never asked for (that
    // answers a plain-text 404 page the client logs as an unparseable error).
    assert_eq!(fake.count("GET", "gateway.networking.k8s.io"), 0);
    let probes = fake.requests().iter().filter(|r| r.uri == "/apis").count();
    // One per kind and candidate version: Gateway API 6 (TLSRoute tries 3 versions), Hairpin
    // 1, the CRD hostname sources 8 (Traefik 2 kinds x 2 groups, Istio 3 versions, Contour
    // 1), and the receivers' custom resources 9 (GatewayClass 2 versions, NginxProxy 2,
    // ClientTrafficPolicy, ListenerPolicy, ContourConfiguration, ContourDeployment and Istio's
    // EnvoyFilter 1 each).
    assert!(
        (4..=24).contains(&probes),
        "one discovery read per kind and version: {probes}"
    );

    // Steady state (once the hosts block holds the new Service's ClusterIP): no further writes.
    let published = fake
        .wait_until(Duration::from_secs(10), |f| {
            published_hosts(f).is_some_and(|v| v.to_string().contains("shop.example.com"))
        })
        .await;
    assert!(published.is_some(), "{:?}", published_hosts(&fake));
    let writes = |f: &FakeApiServer| {
        f.requests()
            .iter()
            .filter(|r| r.method == "PUT" || r.method == "POST" && !r.uri.contains("/events"))
            .count()
    };
    let before = writes(&fake);
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(writes(&fake), before, "nothing changed, nothing written");

    // Change to write, measured through the fake.
    let mut latencies = Vec::new();
    for i in 0..5 {
        let host = format!("api{i}.example.com");
        let changed_at = Instant::now();
        fake.apply(ingress("shop", &format!("api{i}"), &host));
        let written = fake
            .wait_until(Duration::from_secs(5), |f| names(&corefile(f), &host))
            .await
            .expect("the new host is written");
        latencies.push(written - changed_at);
    }
    latencies.sort();
    println!(
        "change-to-write latency over the fake API server (debounce 50 ms): min {:?}, median {:?}, max {:?}",
        latencies[0], latencies[2], latencies[4]
    );
    assert!(running.metrics.reconciles.get() >= 2);
    let text = running.metrics_text();
    assert!(
        text.contains("hairpin_controller_managed_load_balancers 1"),
        "{text}"
    );
    assert!(
        text.contains("hairpin_controller_dns_plan_errors 0"),
        "{text}"
    );
    assert!(
        text.contains("hairpin_controller_dns_write_failures_total 0"),
        "{text}"
    );
    let last_success = running.metrics.last_reconcile_success.get();
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs_f64();
    assert!(
        last_success > now - 60.0 && last_success <= now,
        "last successful reconcile at {last_success}, now {now}"
    );
    assert!(
        !events(&fake, "HairpinConfigured").is_empty(),
        "an Event on the load balancer"
    );
    running.stop().await;
}

#[tokio::test]
async fn removing_the_load_balancer_removes_its_service_and_dns_entries() {
    let fake = FakeApiServer::start().await;
    seed(&fake);
    let running = start(&fake, config("pod-a", false));
    assert!(converged(&fake, &["shop.example.com"]).await.is_some());
    fake.delete(
        "v1",
        "Service",
        Some("ingress-nginx"),
        "ingress-nginx-controller",
    );
    let done = fake
        .wait_until(Duration::from_secs(10), |f| {
            hairpin_services(f).is_empty() && corefile(f) == COREFILE
        })
        .await;
    assert!(
        done.is_some(),
        "Service deleted and Corefile restored exactly:\n{}",
        corefile(&fake)
    );
    let routes = fake
        .get("v1", "ConfigMap", Some("hairpin"), "hairpin-routes")
        .unwrap();
    assert_eq!(routes["data"]["routes.json"].as_str().unwrap().trim(), "[]");
    running.stop().await;
}

#[tokio::test]
async fn a_conflicting_write_is_retried_on_a_fresh_read() {
    let fake = FakeApiServer::start().await;
    seed(&fake);
    // Another writer wins the race twice: the controller's update gets the real 409.
    fake.fail_next("PUT", "/configmaps/coredns", 2, 409);
    let running = start(&fake, config("pod-a", false));
    assert!(converged(&fake, &["shop.example.com"]).await.is_some());
    let puts: Vec<u16> = fake
        .requests()
        .iter()
        .filter(|r| r.method == "PUT" && r.uri.contains("/configmaps/coredns"))
        .map(|r| r.status)
        .collect();
    assert_eq!(&puts[..3], &[409, 409, 200], "{puts:?}");
    // Each retry read the object again first.
    assert!(fake.count("GET", "/configmaps/coredns") >= 3);
    running.stop().await;
}

/// [`COREFILE`] importing `coredns-custom` keys into its server block (AKS's, k3s's layout).
fn importing_corefile() -> String {
    COREFILE.replace(
        "    loadbalance\n}",
        "    loadbalance\n    import custom/*.override\n}",
    )
}

/// Quick write-fight settings: 3 reverts in a minute back off for `backoff`.
fn quick_fight(backoff: Duration) -> FightParams {
    FightParams {
        threshold: 3,
        window: Duration::from_secs(60),
        initial_backoff: backoff,
        max_backoff: Duration::from_secs(60),
    }
}

/// The seed with the Hairpin CRD, and the controller converged on it, backing off from a write
/// fight for 5 s.
async fn start_for_a_write_fight(fake: &FakeApiServer) -> support::controller::Running {
    fake.install_hairpin_crd();
    seed(fake);
    let mut cfg = config("pod-a", false);
    cfg.fight = quick_fight(Duration::from_secs(5));
    let running = start(fake, cfg);
    assert!(converged(fake, &["shop.example.com"]).await.is_some());
    running
}

/// hairpin's successful updates (PUT, as field manager `hairpin`) of the objects `path`
/// (e.g. `/services/<name>?`).
fn hairpin_updates(fake: &FakeApiServer, path: &str) -> usize {
    fake.requests()
        .iter()
        .filter(|r| {
            r.method == "PUT"
                && r.status < 300
                && r.uri.contains(path)
                && r.uri.contains("fieldManager=hairpin")
        })
        .count()
}

/// Plays another writer: `hijack` (one attempt, true when it wrote) every 20 ms until an Event
/// `reason` reports the fight, and 1.5 s longer (within the 5 s backoff). Returns its writes.
async fn keep_hijacking(
    fake: &FakeApiServer,
    reason: &str,
    mut hijack: impl AsyncFnMut() -> bool,
) -> usize {
    let mut writes = 0;
    let give_up = Instant::now() + Duration::from_secs(20);
    let mut until = give_up;
    while Instant::now() < until {
        if until == give_up && !events(fake, reason).is_empty() {
            until = Instant::now() + Duration::from_millis(1500);
        }
        if hijack().await {
            writes += 1;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    writes
}

/// Plays an addon manager in Reconcile mode for `within`, or until `done`: puts `theirs` back
/// whenever hairpin's block appears in the Corefile. Returns how many times it did.
async fn revert_coredns(
    fake: &FakeApiServer,
    theirs: &Value,
    within: Duration,
    done: impl Fn(&FakeApiServer) -> bool,
) -> usize {
    let mut reverts = 0;
    let deadline = Instant::now() + within;
    while Instant::now() < deadline && !done(fake) {
        if corefile(fake).contains("# BEGIN hairpin") {
            fake.apply(theirs.clone());
            reverts += 1;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    reverts
}

#[tokio::test]
async fn a_writer_that_keeps_reverting_coredns_is_detected_and_backed_off() {
    let fake = FakeApiServer::start().await;
    let importing = importing_corefile();
    seed_with(&fake, &importing);
    let mut cfg = config("pod-a", false);
    cfg.planner.dns_mode = DnsMode::Corefile;
    cfg.fight = quick_fight(Duration::from_secs(30));
    let running = start(&fake, cfg);
    assert!(converged(&fake, &["shop.example.com"]).await.is_some());

    let reverts = revert_coredns(&fake, &coredns(&importing), Duration::from_secs(8), |_| {
        false
    })
    .await;
    // Successful writes only: a revert racing a write makes it fail with 409 and retry.
    let coredns_puts = fake
        .requests()
        .iter()
        .filter(|r| r.method == "PUT" && r.uri.contains("/configmaps/coredns") && r.status == 200)
        .count();
    println!("reverts: {reverts}, controller writes to coredns: {coredns_puts}");
    assert!(
        reverts >= 3,
        "the controller rewrote {reverts} times before backing off"
    );
    assert!(
        coredns_puts <= 4,
        "backed off instead of fighting: {coredns_puts} writes in 8 s"
    );
    assert!(
        !events(&fake, "DNSWriteReverted").is_empty(),
        "a Warning Event on the ConfigMap"
    );
    let event = &events(&fake, "DNSWriteReverted")[0];
    assert_eq!(event["type"], "Warning");
    let note = event["note"].as_str().unwrap();
    // The Corefile imports `coredns-custom`: the distribution's own place for additions.
    assert!(
        note.contains("--dns-mode custom") && note.contains("`coredns-custom` keys (`*.override`)"),
        "names the fix: {note}"
    );
    assert!(!note.contains("eks"), "{note}");
    assert_eq!(running.metrics.dns_fight.get(), 1);
    assert!(running.metrics.dns_reverts.get() >= 2);
    running.stop().await;
}

/// Seeds CoreDNS with `corefile`, runs the controller (default DNS mode) and reverts CoreDNS to
/// `theirs` until the fight is reported; returns the Event's note.
async fn coredns_fight_note(corefile: &str, theirs: Value) -> String {
    let fake = FakeApiServer::start().await;
    seed_with(&fake, corefile);
    let mut cfg = config("pod-a", false);
    cfg.fight = quick_fight(Duration::from_secs(30));
    let running = start(&fake, cfg);
    assert!(converged(&fake, &["shop.example.com"]).await.is_some());
    let reported = |f: &FakeApiServer| !events(f, "DNSWriteReverted").is_empty();
    revert_coredns(&fake, &theirs, Duration::from_secs(15), reported).await;
    let events = events(&fake, "DNSWriteReverted");
    assert_eq!(events.len(), 1, "one fight reported: {events:?}");
    running.stop().await;
    events[0]["note"].as_str().unwrap().to_owned()
}

#[tokio::test]
async fn a_coredns_fight_where_the_corefile_imports_no_coredns_custom_does_not_advise_it() {
    // kubeadm's Corefile: no `import`, so a `coredns-custom` key would never be read.
    let note = coredns_fight_note(COREFILE, coredns(COREFILE)).await;
    assert!(
        note.contains("imports no `coredns-custom` keys"),
        "says why: {note}"
    );
    assert!(!note.contains("--dns-mode custom"), "{note}");
    assert!(
        note.contains("EnsureExists") && note.contains("--dns-mode external-dns"),
        "{note}"
    );
}

#[tokio::test]
async fn a_coredns_fight_with_the_eks_add_on_advises_preserve_or_external_dns() {
    // The EKS CoreDNS add-on applies the ConfigMap server-side as field manager `eks`.
    let mut theirs = coredns(COREFILE);
    theirs["metadata"]["managedFields"] = json!([{
        "manager": "eks", "operation": "Apply", "apiVersion": "v1",
        "time": "2026-11-02T09:14:07Z", "fieldsType": "FieldsV1",
        "fieldsV1": {"f:data": {"f:Corefile": {}}}
    }]);
    let note = coredns_fight_note(COREFILE, theirs).await;
    assert!(
        note.starts_with("another writer (field manager \"eks\")"),
        "names the writer: {note}"
    );
    assert!(
        note.contains("EKS CoreDNS add-on")
            && note.contains("--resolve-conflicts PRESERVE")
            && note.contains("--dns-mode external-dns"),
        "{note}"
    );
    assert!(
        !note.contains("--dns-mode custom") && !note.contains("EnsureExists"),
        "{note}"
    );
}

#[tokio::test]
async fn api_errors_of_every_kind_are_retried_and_counted() {
    let fake = FakeApiServer::start().await;
    seed(&fake);
    fake.fail_next("GET", "/api/v1/services?", 2, 500);
    fake.fail_next("GET", "/apis/networking.k8s.io/v1/ingresses?", 1, 403);
    fake.fail_next("PUT", "/configmaps/coredns", 1, 403);
    fake.fail_next("POST", "/namespaces/hairpin/services", 2, 500);
    fake.fail_next("GET", "/configmaps/coredns", 3, 503);
    fake.fail_next("POST", "/configmaps", 1, 429);
    let running = start(&fake, config("pod-a", false));
    assert!(
        converged(&fake, &["shop.example.com"]).await.is_some(),
        "converged despite errors"
    );
    assert!(running.metrics.error_count("api_forbidden") >= 1);
    assert!(running.metrics.error_count("api_server_error") >= 1);
    assert!(
        !events(&fake, "DNSWriteFailed").is_empty(),
        "the refused CoreDNS write was reported"
    );
    assert!(running.metrics.dns_write_failures.get() >= 1);
    // The write that converged may be followed by a failing step; a later reconcile succeeds.
    let deadline = Instant::now() + Duration::from_secs(10);
    while running.metrics.last_reconcile_success.get() == 0.0 && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(
        running.metrics.last_reconcile_success.get() > 0.0,
        "a reconcile after the errors succeeded"
    );

    // A dropped watch and a compacted history: the watches resume (410 -> re-list).
    fake.compact();
    fake.drop_watches();
    fake.apply(ingress("shop", "late", "late.example.com"));
    assert!(
        fake.wait_until(Duration::from_secs(10), |f| names(
            &corefile(f),
            "late.example.com"
        ))
        .await
        .is_some(),
        "changes after a dropped watch still arrive"
    );
    // Slow API: a delayed write still lands.
    fake.inject(hairpin_fake_apiserver::Fault {
        method: Some("PUT".into()),
        path_contains: "/configmaps/coredns".into(),
        remaining: 1,
        kind: hairpin_fake_apiserver::FaultKind::Delay(Duration::from_millis(1500)),
    });
    fake.apply(ingress("shop", "slow", "slow.example.com"));
    assert!(
        fake.wait_until(Duration::from_secs(10), |f| names(
            &corefile(f),
            "slow.example.com"
        ))
        .await
        .is_some()
    );
    running.stop().await;
}

#[tokio::test]
async fn the_standby_takes_over_when_the_leader_shuts_down() {
    let fake = FakeApiServer::start().await;
    seed(&fake);
    let a = start(&fake, config("pod-a", true));
    assert!(converged(&fake, &["shop.example.com"]).await.is_some());
    let b = start(&fake, config("pod-b", true));
    assert!(
        fake.wait_until(Duration::from_secs(5), |_| b.readiness.is_ready())
            .await
            .is_some(),
        "the standby is ready (warm caches)"
    );
    assert_eq!(b.metrics.leader.get(), 0);
    // Changes while a leads are applied by a only.
    a.stop().await;
    let stopped = Instant::now();
    // a vacated the Lease on the way out (held by nobody, or already by b): b takes over
    // without waiting for the 3 s expiry. That is the check; how fast is a figure.
    let holder = fake
        .get(
            "coordination.k8s.io/v1",
            "Lease",
            Some("hairpin"),
            "hairpin-controller",
        )
        .and_then(|l| l["spec"]["holderIdentity"].as_str().map(str::to_owned));
    assert_ne!(
        holder.as_deref(),
        Some("pod-a"),
        "a stopped without vacating the Lease"
    );
    fake.apply(ingress("shop", "after", "after.example.com"));
    let applied = fake
        .wait_until(Duration::from_secs(30), |f| {
            names(&corefile(f), "after.example.com")
        })
        .await
        .expect("b applied the change after taking over");
    println!(
        "figure: hand-over: leader stopped -> standby applied a change in {:?}",
        applied - stopped
    );
    assert_eq!(b.metrics.leader.get(), 1);
    b.stop().await;
}

#[tokio::test]
async fn uninstall_restores_the_exact_corefile_and_removes_everything() {
    let fake = FakeApiServer::start().await;
    // A Corefile with CRLF line endings and odd spacing, to check the byte-for-byte restore.
    let original = COREFILE
        .replace('\n', "\r\n")
        .replace("    cache 30", "    cache   30   # tuned");
    seed_with(&fake, &original);
    let running = start(&fake, config("pod-a", true));
    assert!(converged(&fake, &["shop.example.com"]).await.is_some());
    running.stop().await;
    assert_ne!(corefile(&fake), original);

    let report = uninstall(&fake).await;
    assert_eq!(
        corefile(&fake),
        original,
        "the Corefile is restored byte for byte"
    );
    assert!(hairpin_services(&fake).is_empty());
    assert!(
        fake.get("v1", "ConfigMap", Some("hairpin"), "hairpin-routes")
            .is_none()
    );
    assert!(
        fake.get(
            "coordination.k8s.io/v1",
            "Lease",
            Some("hairpin"),
            "hairpin-controller"
        )
        .is_none()
    );
    assert_eq!(
        report.corefiles_restored,
        vec!["kube-system/coredns".to_owned()]
    );

    // Running it again is a no-op, not an error.
    let again = uninstall(&fake).await;
    assert!(
        again.failures.is_empty() && again.corefiles_restored.is_empty(),
        "{again:?}"
    );
}

#[tokio::test]
async fn not_needed_and_conflicts_are_reported_as_events_and_gateways_are_watched() {
    let fake = FakeApiServer::start().await;
    fake.install_gateway_api();
    seed(&fake);
    // Already fine: ipMode Proxy.
    let mut fine = lb_service();
    fine["metadata"]["name"] = "fine".into();
    fine["status"]["loadBalancer"]["ingress"][0] = json!({"ip": "203.0.113.20", "ipMode": "Proxy"});
    fake.apply(fine);
    // A second PROXY load balancer whose Ingress claims the same host as the first.
    let mut second = lb_service();
    second["metadata"]["name"] = "second".into();
    second["status"]["loadBalancer"]["ingress"][0] = json!({"ip": "203.0.113.30"});
    fake.apply(second);
    let mut clash = ingress("other", "clash", "shared.example.com");
    clash["status"]["loadBalancer"]["ingress"][0]["ip"] = "203.0.113.30".into();
    fake.apply(clash);
    fake.apply(ingress("shop", "clash", "shared.example.com"));
    fake.apply(object(
        "gateway.networking.k8s.io/v1",
        "Gateway",
        Some("ingress-nginx"),
        "public",
        json!({
            "spec": {"gatewayClassName": "nginx", "listeners": [
                {"name": "https", "port": 443, "protocol": "HTTPS", "hostname": "gw.example.com"},
                {"name": "apps", "port": 443, "protocol": "HTTPS", "hostname": "*.apps.example.com"}]},
            "status": {"addresses": [{"type": "IPAddress", "value": "203.0.113.10"}]}
        }),
    ));
    let running = start(&fake, config("pod-a", false));
    let reported = fake
        .wait_until(Duration::from_secs(10), |f| {
            !events(f, "HairpinNotNeeded").is_empty()
                && events(f, "HostConflict").len() >= 2
                && names(&corefile(f), "gw.example.com")
        })
        .await;
    assert!(
        reported.is_some(),
        "events: {:?}\nCorefile:\n{}",
        fake.list("events.k8s.io/v1", "Event")
            .iter()
            .map(|e| (e["reason"].clone(), e["note"].clone()))
            .collect::<Vec<_>>(),
        corefile(&fake)
    );
    // A Gateway wildcard is a suffix match: its rule covers one or more labels.
    assert!(
        corefile(&fake).contains(r"regex ^(?:[^.]+\.)+apps\.example\.com\.$"),
        "Corefile:\n{}",
        corefile(&fake)
    );
    let not_needed = &events(&fake, "HairpinNotNeeded")[0];
    assert_eq!(not_needed["regarding"]["name"], "fine");
    assert!(
        not_needed["note"].as_str().unwrap().contains("ipMode"),
        "{not_needed}"
    );
    let conflict = &events(&fake, "HostConflict")[0];
    assert_eq!(conflict["type"], "Warning");
    assert!(
        conflict["note"]
            .as_str()
            .unwrap()
            .contains("shared.example.com")
    );
    assert!(
        !names(&corefile(&fake), "shared.example.com"),
        "a conflicting host is redirected for neither"
    );
    // Events are not repeated while nothing changes.
    let count = fake.list("events.k8s.io/v1", "Event").len();
    fake.apply(ingress("shop", "more", "more.example.com"));
    assert!(
        fake.wait_until(Duration::from_secs(5), |f| names(
            &corefile(f),
            "more.example.com"
        ))
        .await
        .is_some()
    );
    let new_events = fake.list("events.k8s.io/v1", "Event");
    assert!(
        new_events.len() <= count + 2,
        "only the changed notes are published again ({count} -> {})",
        new_events.len()
    );
    running.stop().await;
}

#[tokio::test]
async fn tls_routes_are_read_from_the_newest_served_version() {
    use hairpin_fake_apiserver::ResourceType;
    let fake = FakeApiServer::start().await;
    // An older Gateway API release: TLSRoute only as v1alpha2.
    for (version, plural, kind) in [
        ("v1", "gateways", "Gateway"),
        ("v1", "httproutes", "HTTPRoute"),
        ("v1", "grpcroutes", "GRPCRoute"),
        ("v1alpha2", "tlsroutes", "TLSRoute"),
    ] {
        fake.register(ResourceType::new(
            "gateway.networking.k8s.io",
            version,
            plural,
            kind,
            true,
        ));
    }
    seed(&fake);
    fake.apply(object(
        "gateway.networking.k8s.io/v1",
        "Gateway",
        Some("ingress-nginx"),
        "public",
        json!({
            "spec": {"gatewayClassName": "nginx", "listeners": [{"name": "tls", "port": 443, "protocol": "TLS"}]},
            "status": {"addresses": [{"type": "IPAddress", "value": "203.0.113.10"}]}
        }),
    ));
    fake.apply(object(
        "gateway.networking.k8s.io/v1alpha2",
        "TLSRoute",
        Some("ingress-nginx"),
        "passthrough",
        json!({"spec": {"hostnames": ["tls.example.com"], "parentRefs": [{"name": "public"}], "rules": [{"backendRefs": [{"name": "db", "port": 5432}]}]}}),
    ));
    let running = start(&fake, config("pod-a", false));
    assert!(
        converged(&fake, &["shop.example.com", "tls.example.com"])
            .await
            .is_some(),
        "the v1alpha2 TLSRoute's hostname is redirected:\n{}",
        corefile(&fake)
    );
    assert_eq!(
        fake.count("GET", "/v1/tlsroutes"),
        0,
        "discovery said v1 has no TLSRoutes, so they were never asked for"
    );
    assert!(
        fake.count("GET", "/v1alpha2/tlsroutes") >= 1,
        "the served version is watched"
    );
    running.stop().await;
}

#[tokio::test]
async fn coredns_custom_mode_creates_the_override_key_and_uninstall_removes_it() {
    let k3s = ".:53 {\n    errors\n    health\n    ready\n    kubernetes cluster.local in-addr.arpa ip6.arpa {\n      pods insecure\n      fallthrough in-addr.arpa ip6.arpa\n    }\n    prometheus :9153\n    forward . /etc/resolv.conf\n    cache 30\n    loop\n    reload\n    loadbalance\n    import /etc/coredns/custom/*.override\n}\nimport /etc/coredns/custom/*.server\n";
    let fake = FakeApiServer::start().await;
    seed_with(&fake, k3s);
    let running = start(&fake, config("pod-a", false));
    let custom =
        |f: &FakeApiServer| f.get("v1", "ConfigMap", Some("kube-system"), "coredns-custom");
    let written = fake
        .wait_until(Duration::from_secs(10), |f| {
            custom(f).is_some_and(|cm| {
                cm["data"]["hairpin.override"]
                    .as_str()
                    .is_some_and(|v| v.contains("shop.example.com"))
            })
        })
        .await;
    assert!(
        written.is_some(),
        "auto mode wrote coredns-custom: {:?}",
        custom(&fake)
    );
    assert_eq!(
        corefile(&fake),
        k3s,
        "the Corefile itself is not touched in custom mode"
    );
    assert_eq!(
        custom(&fake).unwrap()["metadata"]["annotations"]["hairpin.io/created-by"],
        "hairpin"
    );
    running.stop().await;

    let report = uninstall(&fake).await;
    assert!(
        report.failures.is_empty() && report.custom_key_removed,
        "{report:?}"
    );
    assert!(
        custom(&fake).is_none(),
        "the ConfigMap hairpin created is gone once empty"
    );
    assert_eq!(corefile(&fake), k3s);
}

#[tokio::test]
async fn a_corefile_hairpin_cannot_edit_is_reported_and_left_alone() {
    let odd = ".:53 {\n    forward . /etc/resolv.conf\n}\n";
    let fake = FakeApiServer::start().await;
    seed_with(&fake, odd);
    let running = start(&fake, config("pod-a", false));
    let reported = fake
        .wait_until(Duration::from_secs(10), |f| {
            !events(f, "DNSWriteFailed").is_empty() && hairpin_services(f).len() == 1
        })
        .await;
    assert!(
        reported.is_some(),
        "events: {:?}",
        fake.list("events.k8s.io/v1", "Event")
    );
    let event = &events(&fake, "DNSWriteFailed")[0];
    assert_eq!(event["regarding"]["name"], "coredns");
    assert!(
        event["note"]
            .as_str()
            .unwrap()
            .contains("hairpin cannot change DNS"),
        "{event}"
    );
    assert_eq!(corefile(&fake), odd, "not touched");
    assert_eq!(fake.count("PUT", "/configmaps/coredns"), 0);
    assert!(
        running.metrics.dns_plan_errors.get() >= 1,
        "the DNS change that cannot be planned shows in hairpin_controller_dns_plan_errors"
    );
    assert!(
        running.metrics.error_count("no_kubernetes_block") >= 1,
        "and in hairpin_controller_errors_total by the plan error's label"
    );
    assert_eq!(
        running.metrics.dns_write_failures.get(),
        0,
        "nothing was written"
    );
    running.stop().await;
}

#[tokio::test]
async fn a_missing_namespace_is_one_clear_error_naming_it() {
    use hairpin_controller::apply::{apply_services, write_key};
    use hairpin_controller::edits::KeyEdit;
    // No `hairpin` namespace: the chart was not installed, or --namespace names another.
    let fake = FakeApiServer::start().await;
    let client = fake.client();
    let edit = KeyEdit::set(
        "hairpin",
        "hairpin-routes",
        "routes.json",
        Some("[]".into()),
    );
    let err = write_key(&client, &edit).await.unwrap_err();
    assert_eq!(err.metric_label(), "namespace_missing");
    assert!(
        err.to_string().starts_with(
            "write ConfigMap hairpin/hairpin-routes: namespace \"hairpin\" does not exist"
        ),
        "{err}"
    );
    assert_eq!(
        fake.count("POST", "/namespaces/hairpin/configmaps"),
        1,
        "no retries"
    );

    let service: k8s_openapi::api::core::v1::Service = serde_json::from_value(object(
        "v1",
        "Service",
        Some("hairpin"),
        "hairpin-a",
        json!({
            "metadata": {"labels": {"app.kubernetes.io/managed-by": "hairpin"}},
            "spec": {"selector": {"app": "hairpin-proxy"}, "ports": [{"name": "https", "port": 443}]}
        }),
    ))
    .unwrap();
    let err = apply_services(&client, "hairpin", "hairpin.io/source", &[service], None)
        .await
        .unwrap_err();
    assert_eq!(err.metric_label(), "namespace_missing");
    assert!(err.to_string().contains("namespace \"hairpin\""), "{err}");
    assert_eq!(
        fake.count("POST", "/namespaces/hairpin/services"),
        1,
        "no retries"
    );
}

#[tokio::test]
async fn a_refused_hostname_gets_a_warning_event_on_its_ingress_and_is_counted_once() {
    let fake = FakeApiServer::start().await;
    seed(&fake);
    fake.apply(fixtures::ingress(
        "tenant",
        "evil",
        &[
            "tenant.example.com",
            "kubernetes.default.svc.cluster.local",
            "*.co.uk",
        ],
        "203.0.113.10",
    ));
    let running = start(&fake, config("pod-a", false));
    let reported = fake
        .wait_until(Duration::from_secs(10), |f| {
            !events(f, "HostnameRefused").is_empty() && names(&corefile(f), "tenant.example.com")
        })
        .await;
    assert!(
        reported.is_some(),
        "events: {:?}\nCorefile:\n{}",
        fake.list("events.k8s.io/v1", "Event")
            .iter()
            .map(|e| (e["reason"].clone(), e["note"].clone()))
            .collect::<Vec<_>>(),
        corefile(&fake)
    );
    let cf = corefile(&fake);
    assert!(!cf.contains("kubernetes.default"), "{cf}");
    assert!(!cf.contains(r"co\.uk"), "{cf}");
    // One Warning Event on the Ingress that asked, naming each refused host and the reason.
    let refused = events(&fake, "HostnameRefused");
    assert_eq!(refused.len(), 1, "{refused:?}");
    let event = &refused[0];
    assert_eq!(event["type"], "Warning");
    assert_eq!(event["regarding"]["kind"], "Ingress");
    assert_eq!(event["regarding"]["apiVersion"], "networking.k8s.io/v1");
    assert_eq!(event["regarding"]["namespace"], "tenant");
    assert_eq!(event["regarding"]["name"], "evil");
    let note = event["note"].as_str().unwrap();
    assert!(
        note.starts_with("hairpin does not redirect 2 of this object's hostnames: ")
            && note.contains("*.co.uk (public_suffix: ")
            && note.contains("kubernetes.default.svc.cluster.local (cluster_zone: "),
        "{note}"
    );
    assert_eq!(running.metrics.refused_count("cluster_zone"), 1);
    assert_eq!(running.metrics.refused_count("public_suffix"), 1);
    let text = running.metrics_text();
    assert!(
        text.contains("hairpin_hostnames_refused_total{reason=\"cluster_zone\"} 1"),
        "{text}"
    );

    // Later reconciles neither repeat the Events nor count the same claims again.
    fake.apply(ingress("shop", "more", "more.example.com"));
    assert!(
        fake.wait_until(Duration::from_secs(5), |f| names(
            &corefile(f),
            "more.example.com"
        ))
        .await
        .is_some()
    );
    assert!(running.metrics.reconciles.get() >= 2);
    let again = events(&fake, "HostnameRefused");
    assert_eq!(again.len(), 1);
    assert!(
        again[0]["series"].is_null(),
        "not published again: {}",
        again[0]
    );
    assert_eq!(running.metrics.refused_count("cluster_zone"), 1);
    running.stop().await;
}

#[tokio::test]
async fn hostname_namespaces_by_label_follow_the_namespace_objects() {
    let fake = FakeApiServer::start().await;
    fake.create_namespace("hairpin");
    fake.apply(lb_service());
    fake.apply(coredns(COREFILE));
    for (name, team) in [("web", "web"), ("tenant", "other")] {
        fake.apply(object(
            "v1",
            "Namespace",
            None,
            name,
            json!({"metadata": {"labels": {"team": team}}}),
        ));
    }
    fake.apply(ingress("web", "site", "web.example.com"));
    fake.apply(ingress("tenant", "site", "tenant.example.com"));
    let mut config = config("pod-a", false);
    config.planner.admission.hostname_namespaces = "team=web".parse().unwrap();
    let running = start(&fake, config);
    let refused = fake
        .wait_until(Duration::from_secs(10), |f| {
            names(&corefile(f), "web.example.com") && !events(f, "HostnameRefused").is_empty()
        })
        .await;
    assert!(refused.is_some(), "Corefile:\n{}", corefile(&fake));
    assert!(!names(&corefile(&fake), "tenant.example.com"));
    let event = &events(&fake, "HostnameRefused")[0];
    assert!(
        event["note"]
            .as_str()
            .unwrap()
            .contains("tenant.example.com (namespace_not_allowed: "),
        "{event}"
    );
    assert_eq!(running.metrics.refused_count("namespace_not_allowed"), 1);
    // Labelling the namespace lets its hostnames in.
    fake.apply(object(
        "v1",
        "Namespace",
        None,
        "tenant",
        json!({"metadata": {"labels": {"team": "web"}}}),
    ));
    assert!(
        fake.wait_until(Duration::from_secs(5), |f| names(
            &corefile(f),
            "tenant.example.com"
        ))
        .await
        .is_some(),
        "Corefile:\n{}",
        corefile(&fake)
    );
    running.stop().await;
}

fn node_local_dns(fake: &FakeApiServer) -> String {
    fake.get("v1", "ConfigMap", Some("kube-system"), "node-local-dns")
        .unwrap()["data"]["Corefile"]
        .as_str()
        .unwrap()
        .to_owned()
}

#[tokio::test]
async fn node_local_dns_gets_the_answers_and_uninstall_restores_it() {
    let fake = FakeApiServer::start().await;
    seed(&fake);
    let original = include_str!("../../planner/tests/golden/corefiles/nodelocaldns.Corefile");
    fake.apply(object(
        "v1",
        "ConfigMap",
        Some("kube-system"),
        "node-local-dns",
        json!({"data": {"Corefile": original}}),
    ));
    let running = start(&fake, config("pod-a", true));
    assert!(converged(&fake, &["shop.example.com"]).await.is_some());
    // The hairpin Service gets its ClusterIP when created; the next plan answers with it in
    // node-local-dns's root block.
    let written = fake
        .wait_until(Duration::from_secs(10), |f| {
            node_local_dns(f).contains("match ^shop\\.example\\.com\\.$")
        })
        .await;
    assert!(written.is_some(), "{}", node_local_dns(&fake));
    running.stop().await;
    let text = node_local_dns(&fake);
    let ip = hairpin_services(&fake)[0]["spec"]["clusterIP"]
        .as_str()
        .unwrap()
        .to_owned();
    assert!(
        text.contains(&format!("answer \"{{{{ .Name }}}} 30 IN A {ip}\"")),
        "{text}"
    );
    let root = text.find("\n.:53 {").unwrap();
    assert!(
        text.find("# BEGIN hairpin").unwrap() > root,
        "in the root block:\n{text}"
    );

    let report = uninstall(&fake).await;
    assert_eq!(node_local_dns(&fake), original, "restored byte for byte");
    assert!(
        report
            .corefiles_restored
            .contains(&"kube-system/node-local-dns".to_owned()),
        "{report:?}"
    );
}

fn published_hosts(fake: &FakeApiServer) -> Option<Value> {
    let cm = fake.get("v1", "ConfigMap", Some("hairpin"), "hairpin-hosts")?;
    serde_json::from_str(cm["data"]["hosts.json"].as_str()?).ok()
}

#[tokio::test]
async fn the_hosts_block_is_published_for_the_node_agents_in_both_families() {
    let fake = FakeApiServer::start().await;
    fake.dual_stack();
    seed(&fake);
    let running = start(&fake, config("pod-a", false));
    // The hairpin Service gets its ClusterIP when it is created; then the block holds it.
    let published = fake
        .wait_until(Duration::from_secs(10), |f| {
            published_hosts(f).is_some_and(|v| v.as_array().is_some_and(|a| !a.is_empty()))
        })
        .await;
    assert!(published.is_some(), "{:?}", published_hosts(&fake));
    let service = hairpin_services(&fake).remove(0);
    let v4 = service["spec"]["clusterIP"].as_str().unwrap().to_owned();
    assert_eq!(
        published_hosts(&fake).unwrap(),
        json!([{"ip": v4, "hostnames": ["shop.example.com"]}])
    );
    let cm = fake
        .get("v1", "ConfigMap", Some("hairpin"), "hairpin-hosts")
        .unwrap();
    assert_eq!(
        cm["metadata"]["labels"]["app.kubernetes.io/managed-by"], "hairpin",
        "{cm}"
    );

    // The load balancer turns dual-stack: the hairpin Service follows (the cluster allocates
    // its IPv6 ClusterIP, the IPv4 one stays), and both families are published.
    let mut lb = lb_service();
    lb["spec"]["ipFamilyPolicy"] = json!("PreferDualStack");
    lb["spec"]["ipFamilies"] = json!(["IPv4", "IPv6"]);
    lb["status"]["loadBalancer"]["ingress"] = json!([
        {"ip": "203.0.113.10", "ipMode": "VIP"},
        {"ip": "2001:db8::10", "ipMode": "VIP"}
    ]);
    fake.apply(lb);
    let followed = fake
        .wait_until(Duration::from_secs(10), |f| {
            published_hosts(f).is_some_and(|v| v.as_array().is_some_and(|a| a.len() == 2))
        })
        .await;
    assert!(followed.is_some(), "{:?}", published_hosts(&fake));
    let service = hairpin_services(&fake).remove(0);
    assert_eq!(service["spec"]["clusterIPs"][0], json!(v4));
    let v6 = service["spec"]["clusterIPs"][1]
        .as_str()
        .unwrap()
        .to_owned();
    assert_eq!(
        published_hosts(&fake).unwrap(),
        json!([
            {"ip": v4, "hostnames": ["shop.example.com"]},
            {"ip": v6, "hostnames": ["shop.example.com"]}
        ])
    );

    // A new Ingress: its hostname joins the block; an unchanged plan writes nothing.
    fake.apply(ingress("shop", "api", "api.example.com"));
    let grown = fake
        .wait_until(Duration::from_secs(10), |f| {
            published_hosts(f).is_some_and(|v| v.to_string().contains("api.example.com"))
        })
        .await;
    assert!(grown.is_some(), "{:?}", published_hosts(&fake));
    tokio::time::sleep(Duration::from_millis(300)).await;
    let writes = fake.count("PUT", "/configmaps/hairpin-hosts");
    let reconciles = running.metrics.reconciles.get();
    fake.apply(ingress("shop", "unrelated", "shop.example.com"));
    // The quiet window ends on a reconcile after the change, not on a guess of how long one
    // takes.
    let seen = fake
        .wait_until(Duration::from_secs(30), |_| {
            running.metrics.reconciles.get() > reconciles
        })
        .await;
    assert!(seen.is_some(), "no reconcile after the new Ingress");
    assert_eq!(
        fake.count("PUT", "/configmaps/hairpin-hosts"),
        writes,
        "the same block is not written again"
    );
    running.stop().await;

    let report = uninstall(&fake).await;
    assert!(
        report.failures.is_empty() && report.hosts_deleted,
        "{report:?}"
    );
    assert!(
        fake.get("v1", "ConfigMap", Some("hairpin"), "hairpin-hosts")
            .is_none()
    );
}

#[tokio::test]
async fn an_ambiguous_corefile_is_a_warning_event_and_nothing_is_written() {
    // Which block receives `shop.example.com`: the root block, or the placeholder zone (it
    // might be `example.com`)? hairpin does not guess.
    let ambiguous = "{$EXTRA_ZONE}:53 {\n    forward . 10.0.0.53\n}\n.:53 {\n    kubernetes cluster.local\n    forward . /etc/resolv.conf\n    reload\n}\n";
    let fake = FakeApiServer::start().await;
    seed_with(&fake, ambiguous);
    let running = start(&fake, config("pod-a", false));
    let reported = fake
        .wait_until(Duration::from_secs(10), |f| {
            !events(f, "DNSWriteFailed").is_empty()
        })
        .await;
    assert!(
        reported.is_some(),
        "events: {:?}",
        fake.list("events.k8s.io/v1", "Event")
    );
    let event = &events(&fake, "DNSWriteFailed")[0];
    assert_eq!(event["type"], "Warning", "{event}");
    assert_eq!(event["regarding"]["name"], "coredns");
    let note = event["note"].as_str().unwrap();
    assert!(
        note.contains("placeholder") && note.contains("nothing is written"),
        "{note}"
    );
    // Two more reconciles (the error is retried with backoff): still nothing written to any
    // DNS ConfigMap.
    let reconciles = running.metrics.reconciles.get();
    let retried = fake
        .wait_until(Duration::from_secs(30), |_| {
            running.metrics.reconciles.get() >= reconciles + 2
        })
        .await;
    assert!(retried.is_some(), "the reconcile was not retried");
    assert_eq!(corefile(&fake), ambiguous, "not touched");
    assert_eq!(fake.count("PUT", "/namespaces/kube-system/configmaps"), 0);
    assert_eq!(fake.count("POST", "/namespaces/kube-system/configmaps"), 0);
    assert!(running.metrics.dns_plan_errors.get() >= 1);
    assert!(running.metrics.error_count("ambiguous_layout") >= 1);
    running.stop().await;
}

fn coredns_custom(data: Value) -> Value {
    object(
        "v1",
        "ConfigMap",
        Some("kube-system"),
        "coredns-custom",
        json!({"metadata": {"labels": {"addonmanager.kubernetes.io/mode": "EnsureExists"}}, "data": data}),
    )
}

fn custom_key(fake: &FakeApiServer, key: &str) -> Option<String> {
    fake.get("v1", "ConfigMap", Some("kube-system"), "coredns-custom")?["data"][key]
        .as_str()
        .map(str::to_owned)
}

#[tokio::test]
async fn names_under_a_zone_of_an_imported_server_key_are_answered_there() {
    // AKS: the Corefile imports `custom/*.server`, and coredns-custom holds a zone block for
    // example.com in such a key: CoreDNS sends shop.example.com to that block, not to `.:53`.
    let aks = format!(
        "{}import custom/*.server\n",
        COREFILE.replace(
            "    loadbalance\n}\n",
            "    loadbalance\n    import custom/*.override\n}\n"
        )
    );
    let server = "example.com:53 {\n    errors\n    cache 30\n    forward . 192.0.2.53  # the company resolver\n}\n";
    let fake = FakeApiServer::start().await;
    seed_with(&fake, &aks);
    fake.apply(coredns_custom(
        json!({"example.server": server, "other.override": "log\n"}),
    ));
    fake.apply(ingress("shop", "api", "api.example.org"));
    let running = start(&fake, config("pod-a", false));
    let answered = fake
        .wait_until(Duration::from_secs(10), |f| {
            custom_key(f, "example.server").is_some_and(|t| t.contains("# BEGIN hairpin"))
        })
        .await;
    assert!(
        answered.is_some(),
        "{:?}",
        custom_key(&fake, "example.server")
    );
    let cluster_ip = hairpin_services(&fake)[0]["spec"]["clusterIP"]
        .as_str()
        .unwrap()
        .to_owned();
    let text = custom_key(&fake, "example.server").unwrap();
    assert!(
        text.contains("template IN A {") && text.contains(&format!("IN A {cluster_ip}")),
        "{text}"
    );
    assert!(text.contains(r"^shop\.example\.com\.$"), "{text}");
    // Custom mode (AKS imports `*.override`): the rest is in hairpin's override key.
    let override_key = custom_key(&fake, "hairpin.override").unwrap_or_default();
    assert!(override_key.contains("api.example.org"), "{override_key}");
    assert_eq!(
        custom_key(&fake, "other.override").as_deref(),
        Some("log\n"),
        "other keys are left alone"
    );
    assert_eq!(
        corefile(&fake),
        aks,
        "the Corefile itself is the distribution's"
    );
    running.stop().await;

    let report = uninstall(&fake).await;
    assert_eq!(
        custom_key(&fake, "example.server").as_deref(),
        Some(server),
        "restored byte for byte"
    );
    assert!(custom_key(&fake, "hairpin.override").is_none());
    assert!(
        report
            .corefiles_restored
            .contains(&"kube-system/coredns-custom key example.server".to_owned()),
        "{report:?}"
    );
}

#[tokio::test]
async fn the_rules_go_to_the_port_the_kube_dns_service_targets() {
    // CoreDNS serves the cluster on :53 and :5353; kube-dns sends pods' queries to 5353.
    let both = format!("{COREFILE}{}", COREFILE.replace(".:53 {", ".:5353 {"));
    let fake = FakeApiServer::start().await;
    seed_with(&fake, &both);
    fake.apply(object(
        "v1",
        "Service",
        Some("kube-system"),
        "kube-dns",
        json!({"spec": {"ports": [
            {"name": "dns", "port": 53, "protocol": "UDP", "targetPort": 5353},
            {"name": "dns-tcp", "port": 53, "protocol": "TCP", "targetPort": 5353}
        ]}}),
    ));
    let mut config = config("pod-a", false);
    // The propagation check asks the cluster DNS: a closed loopback port, never kube-dns's
    // ClusterIP (no traffic leaves the host).
    config.propagation.cluster_dns = Some("127.0.0.1:9".parse().unwrap());
    let running = start(&fake, config);
    assert!(converged(&fake, &["shop.example.com"]).await.is_some());
    let text = corefile(&fake);
    let second = text.find(".:5353 {").unwrap();
    assert!(!text[..second].contains("hairpin"), "{text}");
    assert!(
        text[second..].contains("rewrite stop name exact shop.example.com"),
        "{text}"
    );
    running.stop().await;
}

#[tokio::test]
async fn crd_hostname_sources_are_watched_only_when_installed() {
    use hairpin_fake_apiserver::ResourceType;
    let fake = FakeApiServer::start().await;
    // Contour is installed; Traefik and Istio are not.
    fake.register(ResourceType::new(
        "projectcontour.io",
        "v1",
        "httpproxies",
        "HTTPProxy",
        true,
    ));
    seed(&fake);
    fake.apply(object(
        "projectcontour.io/v1",
        "HTTPProxy",
        Some("blog"),
        "root",
        json!({
            "spec": {"virtualhost": {"fqdn": "blog.example.com"}},
            "status": {"loadBalancer": {"ingress": [{"ip": "203.0.113.10"}]}}
        }),
    ));
    let running = start(&fake, config("pod-a", false));
    assert!(
        converged(&fake, &["shop.example.com", "blog.example.com"])
            .await
            .is_some(),
        "the HTTPProxy's fqdn is redirected:\n{}",
        corefile(&fake)
    );
    // A new object is picked up by the watch.
    fake.apply(object(
        "projectcontour.io/v1",
        "HTTPProxy",
        Some("blog"),
        "docs",
        json!({
            "spec": {"virtualhost": {"fqdn": "docs.example.com"}},
            "status": {"loadBalancer": {"ingress": [{"ip": "203.0.113.10"}]}}
        }),
    ));
    assert!(
        converged(&fake, &["docs.example.com"]).await.is_some(),
        "{}",
        corefile(&fake)
    );
    for absent in [
        "/ingressroutes",
        "/ingressroutetcps",
        "networking.istio.io/",
    ] {
        assert_eq!(
            fake.count("GET", absent),
            0,
            "discovery said {absent} is not served, so it was never asked for"
        );
    }
    running.stop().await;
}

fn cluster_ips(svc: &Value) -> Vec<String> {
    svc["spec"]["clusterIPs"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|ip| ip.as_str().map(str::to_owned))
        .collect()
}

/// A dual-stack load balancer on a dual-stack cluster: the hairpin Service is created
/// `PreferDualStack` and gets a ClusterIP of each family, the routes carry the load balancer's
/// address of each family; when the load balancer loses its IPv6 address, the Service goes
/// `SingleStack`, releasing the IPv6 ClusterIP and keeping its IPv4 one, and the routes follow.
#[tokio::test]
async fn a_dual_stack_load_balancer_gets_a_dual_stack_hairpin_service() {
    let fake = FakeApiServer::start().await;
    fake.dual_stack();
    fake.create_namespace("hairpin");
    let mut lb = lb_service();
    lb["spec"]["ipFamilyPolicy"] = json!("PreferDualStack");
    lb["spec"]["ipFamilies"] = json!(["IPv4", "IPv6"]);
    lb["status"]["loadBalancer"]["ingress"] = json!([
        {"ip": "203.0.113.10", "ipMode": "VIP"},
        {"ip": "2001:db8::10", "ipMode": "VIP"}
    ]);
    fake.apply(lb.clone());
    fake.apply(ingress("shop", "shop", "shop.example.com"));
    fake.apply(coredns(COREFILE));
    let running = start(&fake, config("pod-a", false));
    let routes = |f: &FakeApiServer| {
        f.get("v1", "ConfigMap", Some("hairpin"), "hairpin-routes")
            .map(|cm| {
                cm["data"]["routes.json"]
                    .as_str()
                    .unwrap_or_default()
                    .to_owned()
            })
            .unwrap_or_default()
    };
    let dual = fake
        .wait_until(Duration::from_secs(10), |f| {
            hairpin_services(f)
                .first()
                .is_some_and(|s| cluster_ips(s).len() == 2)
                && routes(f).contains("destinations")
        })
        .await;
    assert!(dual.is_some(), "{:#?}", hairpin_services(&fake));
    let svc = hairpin_services(&fake).remove(0);
    assert_eq!(svc["spec"]["ipFamilyPolicy"], "PreferDualStack");
    assert_eq!(svc["spec"]["ipFamilies"], json!(["IPv4", "IPv6"]));
    let ips = cluster_ips(&svc);
    assert!(ips[0].parse::<std::net::Ipv4Addr>().is_ok(), "{ips:?}");
    assert!(ips[1].parse::<std::net::Ipv6Addr>().is_ok(), "{ips:?}");
    let table = routes(&fake);
    assert!(
        table.contains("\"[2001:db8::10]:443\"") && table.contains("\"listen\": \"[::]:"),
        "{table}"
    );

    lb["status"]["loadBalancer"]["ingress"] = json!([{"ip": "203.0.113.10", "ipMode": "VIP"}]);
    fake.apply(lb);
    let single = fake
        .wait_until(Duration::from_secs(10), |f| {
            hairpin_services(f)
                .first()
                .is_some_and(|s| cluster_ips(s).len() == 1)
                && !routes(f).contains("destinations")
        })
        .await;
    assert!(single.is_some(), "{:#?}", hairpin_services(&fake));
    let svc = hairpin_services(&fake).remove(0);
    assert_eq!(svc["spec"]["ipFamilyPolicy"], "SingleStack");
    assert_eq!(
        cluster_ips(&svc),
        [ips[0].clone()],
        "the IPv4 ClusterIP stays"
    );
    running.stop().await;
}

/// A Service in hairpin's namespace with `metadata` (labels, annotations).
fn service_in_hairpin(name: &str, metadata: Value) -> Value {
    object(
        "v1",
        "Service",
        Some("hairpin"),
        name,
        json!({
            "metadata": metadata,
            "spec": {"selector": {"app": "users-own"}, "ports": [{"name": "metrics", "port": 9999}]}
        }),
    )
}

fn a_hairpin(namespace: &str, name: &str, metadata: Value) -> Value {
    object(
        "hairpin.io/v1alpha1",
        "Hairpin",
        Some(namespace),
        name,
        json!({"metadata": metadata, "spec": {}}),
    )
}

#[tokio::test]
async fn objects_carrying_only_the_managed_by_label_survive_reconcile_and_uninstall() {
    let fake = FakeApiServer::start().await;
    fake.install_hairpin_crd();
    seed(&fake);
    let label = json!({"app.kubernetes.io/managed-by": "hairpin"});
    // Look-alikes: the label, not hairpin's annotation (a user's manifest, another tool).
    fake.apply(service_in_hairpin(
        "users-metrics",
        json!({"labels": label}),
    ));
    fake.create_namespace("shop");
    fake.apply(a_hairpin("shop", "tenants-own", json!({"labels": label})));
    // Real orphans (label AND annotation), so the delete paths demonstrably run.
    fake.apply(service_in_hairpin(
        "hairpin-gone-gone",
        json!({"labels": label, "annotations": {"hairpin.io/source": "gone/gone"}}),
    ));
    fake.apply(a_hairpin(
        "shop",
        "stale",
        json!({"labels": label, "annotations": {"hairpin.io/source": "shop/stale"}}),
    ));
    let exists = |f: &FakeApiServer, (kind, ns, name): (&str, &str, &str)| match kind {
        "Service" => f.get("v1", "Service", Some(ns), name).is_some(),
        _ => f
            .get("hairpin.io/v1alpha1", "Hairpin", Some(ns), name)
            .is_some(),
    };
    let users_metrics = ("Service", "hairpin", "users-metrics");
    let tenants_own = ("Hairpin", "shop", "tenants-own");

    let running = start(&fake, config("pod-a", false));
    let done = fake
        .wait_until(Duration::from_secs(10), |f| {
            names(&corefile(f), "shop.example.com")
                && !exists(f, ("Service", "hairpin", "hairpin-gone-gone"))
                && !exists(f, ("Hairpin", "shop", "stale"))
                && exists(f, ("Hairpin", "ingress-nginx", "ingress-nginx-controller"))
        })
        .await;
    assert!(done.is_some(), "the orphans are deleted");
    assert!(
        exists(&fake, users_metrics),
        "a label alone is not hairpin's"
    );
    assert!(exists(&fake, tenants_own), "a label alone is not hairpin's");
    let ours = fake
        .get(
            "hairpin.io/v1alpha1",
            "Hairpin",
            Some("ingress-nginx"),
            "ingress-nginx-controller",
        )
        .unwrap();
    assert_eq!(
        ours["metadata"]["annotations"]["hairpin.io/source"],
        "ingress-nginx/ingress-nginx-controller"
    );
    running.stop().await;

    let report = uninstall(&fake).await;
    assert_eq!(
        report.services_deleted,
        ["hairpin-ingress-nginx-ingress-nginx-controller"]
    );
    assert_eq!(
        report.hairpins_deleted,
        ["ingress-nginx/ingress-nginx-controller"]
    );
    assert!(exists(&fake, users_metrics), "uninstall leaves it too");
    assert!(exists(&fake, tenants_own), "uninstall leaves it too");
}

#[tokio::test]
async fn a_look_alike_at_a_name_hairpin_needs_is_never_overwritten() {
    use hairpin_controller::apply::write_key;
    use hairpin_controller::edits::routes_edit;

    let fake = FakeApiServer::start().await;
    seed(&fake);
    let label = json!({"app.kubernetes.io/managed-by": "hairpin"});
    let name = "hairpin-ingress-nginx-ingress-nginx-controller";
    fake.apply(service_in_hairpin(name, json!({"labels": label})));
    let users_routes = object(
        "v1",
        "ConfigMap",
        Some("hairpin"),
        "hairpin-routes",
        json!({"metadata": {"labels": label}, "data": {"routes.json": "the user's"}}),
    );
    fake.apply(users_routes);
    let service = |f: &FakeApiServer| f.get("v1", "Service", Some("hairpin"), name).unwrap();
    let before = service(&fake);

    let running = start(&fake, config("pod-a", false));
    let refused = fake
        .wait_until(Duration::from_secs(10), |_| {
            running
                .metrics_text()
                .contains("hairpin_controller_errors_total{kind=\"not_owned\"}")
        })
        .await;
    assert!(refused.is_some(), "{}", running.metrics_text());
    running.stop().await;
    assert_eq!(service(&fake)["spec"], before["spec"], "not replaced");
    assert_eq!(
        service(&fake)["metadata"]["resourceVersion"],
        before["metadata"]["resourceVersion"]
    );
    assert_eq!(
        corefile(&fake),
        COREFILE,
        "no DNS points at someone else's Service"
    );

    // The routes table is hairpin's own ConfigMap: one of that name without hairpin's marks
    // is refused with a clear error, and left as it was.
    let plan = hairpin_planner::desired(&Default::default(), &PlannerConfig::default());
    let edit = routes_edit(&plan, &Default::default(), &PlannerConfig::default()).unwrap();
    let err = write_key(&fake.client(), &edit).await.unwrap_err();
    assert_eq!(err.metric_label(), "not_owned");
    assert!(
        err.to_string()
            .starts_with("ConfigMap hairpin/hairpin-routes exists and is not hairpin's"),
        "{err}"
    );
    let routes_data = |f: &FakeApiServer| {
        f.get("v1", "ConfigMap", Some("hairpin"), "hairpin-routes")
            .map(|cm| cm["data"]["routes.json"].clone())
    };
    assert_eq!(routes_data(&fake), Some(json!("the user's")));

    let report = uninstall(&fake).await;
    assert!(report.services_deleted.is_empty() && !report.routes_deleted);
    assert_eq!(service(&fake)["spec"], before["spec"]);
    assert_eq!(routes_data(&fake), Some(json!("the user's")));
}

#[tokio::test]
async fn event_notes_over_the_api_limit_list_whole_hostnames_and_count_the_rest() {
    let fake = FakeApiServer::start().await;
    seed(&fake);
    // 120 hostnames of 40 bytes: the full list is about 5 kB, the API takes 1024 bytes.
    let hosts: Vec<String> = (0..120)
        .map(|i| format!("storefront-{i:03}.checkout.example.com"))
        .collect();
    let refs: Vec<&str> = hosts.iter().map(String::as_str).collect();
    fake.apply(fixtures::ingress("shop", "many", &refs, "203.0.113.10"));
    let running = start(&fake, config("pod-a", false));
    let configured = fake
        .wait_until(Duration::from_secs(10), |f| {
            !events(f, "HairpinConfigured").is_empty()
        })
        .await;
    assert!(configured.is_some(), "the Event was accepted");
    running.stop().await;
    let refused = fake
        .requests()
        .into_iter()
        .filter(|r| r.uri.contains("/events") && r.status == 422)
        .count();
    assert_eq!(refused, 0, "no Event refused by the API server");

    let event = events(&fake, "HairpinConfigured").remove(0);
    let note = event["note"].as_str().unwrap();
    assert!(note.len() <= 1024, "{} bytes", note.len());
    let listed = note
        .split_once(": ")
        .unwrap()
        .1
        .rsplit_once(", … and ")
        .unwrap();
    let names: Vec<&str> = listed.0.split(", ").collect();
    // Whole names only (the seed's Ingress adds shop.example.com).
    assert!(
        names
            .iter()
            .all(|n| *n == "shop.example.com" || hosts.iter().any(|h| h == n)),
        "{names:?}"
    );
    assert!(names.len() > 10, "as many as fit: {names:?}");
    assert_eq!(listed.1, format!("{} more", 121 - names.len()), "{note}");
}

/// A Lease at hairpin's Lease name that another program created (no hairpin marks), held by
/// `holder` and last renewed long ago (expired by any clock).
fn foreign_lease(holder: &str) -> Value {
    object(
        "coordination.k8s.io/v1",
        "Lease",
        Some("hairpin"),
        "hairpin-controller",
        json!({"spec": {
            "holderIdentity": holder,
            "leaseDurationSeconds": 1,
            "renewTime": "2026-01-01T00:00:00.000000Z"
        }}),
    )
}

#[tokio::test]
async fn a_lease_that_is_not_hairpins_is_never_taken_over() {
    let fake = FakeApiServer::start().await;
    seed(&fake);
    fake.apply(foreign_lease("other-app-0"));
    let before = fake
        .get(
            "coordination.k8s.io/v1",
            "Lease",
            Some("hairpin"),
            "hairpin-controller",
        )
        .unwrap();
    let running = start(&fake, config("pod-a", true));
    let reported = fake
        .wait_until(Duration::from_secs(10), |f| {
            !events(f, "LeaseNotOwned").is_empty()
        })
        .await;
    assert!(reported.is_some(), "a Warning Event says why nobody leads");
    // Many retry intervals (100 ms) and a whole lease duration of the foreign Lease later.
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let after = fake
        .get(
            "coordination.k8s.io/v1",
            "Lease",
            Some("hairpin"),
            "hairpin-controller",
        )
        .unwrap();
    assert_eq!(after, before, "the foreign Lease is untouched");
    assert_eq!(fake.count("PUT", "/leases/"), 0);
    assert!(hairpin_services(&fake).is_empty(), "no instance leads");
    assert!(!corefile(&fake).contains("# BEGIN hairpin"));
    assert_eq!(running.metrics.leader.get(), 0);
    let event = &events(&fake, "LeaseNotOwned")[0];
    assert_eq!(event["type"], "Warning");
    assert_eq!(event["regarding"]["kind"], "Lease");
    assert_eq!(event["regarding"]["name"], "hairpin-controller");
    let note = event["note"].as_str().unwrap();
    assert!(note.contains("--lease-name"), "{note}");
    // The upgrade case: an unmarked Lease of an earlier hairpin build, deleted once.
    assert!(
        note.contains(
            "an earlier build of hairpin left it (those did not mark their Lease), delete it once: `kubectl -n hairpin delete lease hairpin-controller`"
        ),
        "{note}"
    );
    assert!(!note.contains('\n'), "one line: {note}");
    assert_eq!(
        events(&fake, "LeaseNotOwned").len(),
        1,
        "reported once, not on every retry"
    );

    // Its owner removes it: hairpin creates its own and leads.
    assert!(fake.delete(
        "coordination.k8s.io/v1",
        "Lease",
        Some("hairpin"),
        "hairpin-controller"
    ));
    assert!(converged(&fake, &["shop.example.com"]).await.is_some());
    running.stop().await;
}

#[tokio::test]
async fn uninstall_leaves_a_lease_that_is_not_hairpins() {
    let fake = FakeApiServer::start().await;
    seed(&fake);
    fake.apply(foreign_lease("other-app-0"));
    let report = uninstall(&fake).await;
    assert!(!report.lease_deleted);
    assert_eq!(report.left_alone, ["Lease hairpin/hairpin-controller"]);
    assert!(
        fake.get(
            "coordination.k8s.io/v1",
            "Lease",
            Some("hairpin"),
            "hairpin-controller"
        )
        .is_some(),
        "another program's Lease survives uninstall"
    );
}

#[tokio::test]
async fn another_writer_that_keeps_changing_a_hairpin_service_is_backed_off_and_named() {
    use k8s_openapi::api::core::v1::Service;
    use kube::api::{Api, PostParams};

    let fake = FakeApiServer::start().await;
    let running = start_for_a_write_fight(&fake).await;
    let name = "hairpin-ingress-nginx-ingress-nginx-controller";
    let path = format!("/services/{name}?");
    let before = hairpin_updates(&fake, &path);

    // Someone keeps pointing hairpin's Service at other pods: until hairpin reports the
    // fight, and 1.5 s longer (within the 5 s backoff).
    let api: Api<Service> = Api::namespaced(fake.client(), "hairpin");
    let theirs = PostParams {
        field_manager: Some("kubectl-edit".into()),
        ..PostParams::default()
    };
    let stolen = std::collections::BTreeMap::from([("app".to_owned(), "elsewhere".to_owned())]);
    let adversary_writes = keep_hijacking(&fake, "ServiceWriteReverted", async || {
        let mut svc = api.get(name).await.unwrap();
        let spec = svc.spec.as_mut().unwrap();
        if spec.selector.as_ref() == Some(&stolen) {
            return false;
        }
        spec.selector = Some(stolen.clone());
        api.replace(name, &theirs, &svc).await.is_ok()
    })
    .await;
    let restores = hairpin_updates(&fake, &path) - before;
    println!("the other writer wrote {adversary_writes} times; hairpin restored {restores} times");
    // It writes only while the selector is not its own; without the backoff hairpin restored
    // it after every one of those writes. Reverts 1 and 2 are restored at once; the 3rd
    // starts the 5 s backoff, so the other writer's last change stands.
    assert_eq!(restores, 3, "hairpin's writes are bounded by the backoff");
    assert_eq!(adversary_writes, 4, "the other writer's last change stands");
    let fights = events(&fake, "ServiceWriteReverted");
    assert_eq!(fights.len(), 1, "{fights:?}");
    assert_eq!(fights[0]["type"], "Warning");
    assert_eq!(fights[0]["regarding"]["name"], name);
    let note = fights[0]["note"].as_str().unwrap();
    assert!(note.contains("\"kubectl-edit\""), "{note}");
    assert!(running.metrics.service_reverts.get() >= 3);
    assert_eq!(running.metrics.service_fight.get(), 1);

    // While backed off, the load balancer's Hairpin status says why it may not work.
    let hairpin = |f: &FakeApiServer| {
        f.get(
            "hairpin.io/v1alpha1",
            "Hairpin",
            Some("ingress-nginx"),
            "ingress-nginx-controller",
        )
    };
    let fight_condition = fake
        .wait_until(Duration::from_secs(5), |f| {
            hairpin(f).is_some_and(|h| {
                let c = support::controller::condition(&h, "ServiceWritten");
                c["status"] == "False" && c["reason"] == "WriteFight"
            })
        })
        .await;
    assert!(fight_condition.is_some(), "ServiceWritten=False WriteFight");
    let h = hairpin(&fake).unwrap();
    let ready = support::controller::condition(&h, "Ready");
    assert_eq!(ready["status"], "False", "{h}");
    assert_eq!(ready["reason"], "WriteFight", "{h}");
    assert!(
        ready["message"].as_str().unwrap().starts_with(&format!(
            "ServiceWritten: another writer keeps changing the hairpin Service hairpin/{name}"
        )),
        "{h}"
    );

    // Once the backoff ends, hairpin's selector is back.
    let restored = fake
        .wait_until(Duration::from_secs(10), |f| {
            f.get("v1", "Service", Some("hairpin"), name)
                .is_some_and(|s| s["spec"]["selector"]["app"] != "elsewhere")
        })
        .await;
    assert!(restored.is_some());
    let written = fake
        .wait_until(Duration::from_secs(5), |f| {
            hairpin(f).is_some_and(|h| {
                support::controller::condition(&h, "ServiceWritten")["status"] == "True"
            })
        })
        .await;
    assert!(written.is_some(), "ServiceWritten=True once restored");
    running.stop().await;
}

/// Once hairpin's ConfigMap `name` holds `settled` in `key` (its final value for the seed),
/// another writer (field manager `gitops-bot`) keeps setting that key to its own value
/// ([`keep_hijacking`]): hairpin restores it at most `--fight-threshold` times, names the writer in one
/// Warning Event, and writes its value again once the backoff ends.
async fn another_writer_keeps_changing_config_map(name: &str, key: &str, settled: &str) {
    use k8s_openapi::api::core::v1::ConfigMap;
    use kube::api::{Api, PostParams};

    let fake = FakeApiServer::start().await;
    let running = start_for_a_write_fight(&fake).await;
    let ours = fake
        .wait_until(Duration::from_secs(10), |f| {
            f.get("v1", "ConfigMap", Some("hairpin"), name)
                .and_then(|cm| cm["data"][key].as_str().map(|v| v.contains(settled)))
                == Some(true)
        })
        .await;
    assert!(ours.is_some(), "{name} published");
    let published =
        fake.get("v1", "ConfigMap", Some("hairpin"), name).unwrap()["data"][key].clone();
    let path = format!("/configmaps/{name}?");
    let before = hairpin_updates(&fake, &path);

    let api: Api<ConfigMap> = Api::namespaced(fake.client(), "hairpin");
    let theirs = PostParams {
        field_manager: Some("gitops-bot".into()),
        ..PostParams::default()
    };
    let hijacked = "[{\"theirs\": true}]".to_owned();
    let adversary_writes = keep_hijacking(&fake, "ConfigMapWriteReverted", async || {
        let mut cm = api.get(name).await.unwrap();
        let data = cm.data.get_or_insert_with(Default::default);
        if data.get(key) == Some(&hijacked) {
            return false;
        }
        data.insert(key.to_owned(), hijacked.clone());
        api.replace(name, &theirs, &cm).await.is_ok()
    })
    .await;
    let restores = hairpin_updates(&fake, &path) - before;
    println!(
        "{name}: the other writer wrote {adversary_writes} times; hairpin restored {restores} times"
    );
    // Before the guard hairpin restored the key after every one of those writes. Reverts 1
    // and 2 are restored at once; the 3rd starts the 5 s backoff, so the other writer's last
    // change stands.
    assert_eq!(restores, 3, "hairpin's writes are bounded by the backoff");
    assert_eq!(adversary_writes, 4, "the other writer's last change stands");
    let fights = events(&fake, "ConfigMapWriteReverted");
    assert_eq!(fights.len(), 1, "{fights:?}");
    assert_eq!(fights[0]["type"], "Warning");
    assert_eq!(fights[0]["regarding"]["kind"], "ConfigMap");
    assert_eq!(fights[0]["regarding"]["name"], name);
    let note = fights[0]["note"].as_str().unwrap();
    assert!(
        note.starts_with(
            "another writer (field manager \"gitops-bot\") changed hairpin's ConfigMap"
        ),
        "names the other writer: {note}"
    );
    assert!(note.contains(&format!("key {key}")), "{note}");
    assert_eq!(running.metrics.config_map_reverts.get(), 3);
    assert_eq!(running.metrics.config_map_fight.get(), 1);

    // Once the backoff ends, hairpin's value is back.
    let restored = fake
        .wait_until(Duration::from_secs(10), |f| {
            f.get("v1", "ConfigMap", Some("hairpin"), name)
                .is_some_and(|cm| cm["data"][key] == published)
        })
        .await;
    assert!(restored.is_some(), "restored after the backoff");
    running.stop().await;
}

#[tokio::test]
async fn another_writer_that_keeps_changing_the_routes_config_map_is_backed_off_and_named() {
    another_writer_keeps_changing_config_map("hairpin-routes", "routes.json", "203.0.113.10").await;
}

#[tokio::test]
async fn another_writer_that_keeps_changing_the_hosts_config_map_is_backed_off_and_named() {
    // The hosts block is published empty first, then with the hairpin Service's ClusterIP.
    another_writer_keeps_changing_config_map(
        "hairpin-hosts",
        hairpin_planner::HOSTS_KEY,
        "shop.example.com",
    )
    .await;
}
