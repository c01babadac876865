//! Where the fake once differed from kube-apiserver 1.31, it now answers as the real server
//! does: missing namespaces, Service defaulting, validation, consistent paged lists, body
//! versus URL, absent resources, and the managedFields of writes.

use std::time::Duration;

use futures::StreamExt;
use hairpin_fake_apiserver::{FakeApiServer, object};
use http_body_util::BodyExt;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{ConfigMap, Service};
use kube::Api;
use kube::api::{ListParams, Patch, PatchParams, PostParams, WatchEvent, WatchParams};
use serde_json::{Value, json};

fn api_status(err: kube::Error) -> kube::core::Status {
    match err {
        kube::Error::Api(status) => *status,
        other => panic!("expected an API status, got {other:?}"),
    }
}

fn typed<T: k8s_openapi::serde::de::DeserializeOwned>(value: Value) -> T {
    serde_json::from_value(value).unwrap()
}

fn config_map(namespace: &str, name: &str, data: Value) -> ConfigMap {
    typed(object(
        "v1",
        "ConfigMap",
        Some(namespace),
        name,
        json!({ "data": data }),
    ))
}

fn service(name: &str, ports: Value) -> Service {
    typed(object(
        "v1",
        "Service",
        Some("default"),
        name,
        json!({"spec": {"selector": {"app": "x"}, "ports": ports}}),
    ))
}

/// The causes of a 422, as (field, message) pairs.
fn causes(status: &kube::core::Status) -> Vec<(String, String)> {
    assert_eq!((status.code, status.reason.as_str()), (422, "Invalid"));
    status
        .details
        .as_ref()
        .expect("an Invalid status has details")
        .causes
        .iter()
        .map(|c| (c.field.clone(), c.message.clone()))
        .collect()
}

#[tokio::test]
async fn a_create_in_a_missing_namespace_is_a_404_naming_the_namespace() {
    let fake = FakeApiServer::start().await;
    let pp = PostParams::default();
    let cms: Api<ConfigMap> = Api::namespaced(fake.client(), "nowhere");
    let status = api_status(
        cms.create(&pp, &config_map("nowhere", "a", json!({})))
            .await
            .unwrap_err(),
    );
    assert_eq!((status.code, status.reason.as_str()), (404, "NotFound"));
    assert_eq!(status.message, "namespaces \"nowhere\" not found");
    let details = status.details.unwrap();
    assert_eq!(
        (details.kind.as_str(), details.name.as_str()),
        ("namespaces", "nowhere")
    );

    // Services and Leases alike; reading a missing namespace is only empty.
    let svcs: Api<Service> = Api::namespaced(fake.client(), "nowhere");
    let mut svc = service("web", json!([{"port": 80}]));
    svc.metadata.namespace = None;
    assert_eq!(
        api_status(svcs.create(&pp, &svc).await.unwrap_err()).code,
        404
    );
    let leases: Api<Lease> = Api::namespaced(fake.client(), "nowhere");
    let lease: Lease = typed(object(
        "coordination.k8s.io/v1",
        "Lease",
        None,
        "l",
        json!({}),
    ));
    let status = api_status(leases.create(&pp, &lease).await.unwrap_err());
    assert_eq!(status.details.unwrap().kind, "namespaces");
    assert!(
        cms.list(&ListParams::default())
            .await
            .unwrap()
            .items
            .is_empty()
    );

    // Once it exists, the same create succeeds.
    fake.create_namespace("nowhere");
    cms.create(&pp, &config_map("nowhere", "a", json!({})))
        .await
        .unwrap();
}

#[tokio::test]
async fn services_get_the_servers_defaults_and_a_clusterip_that_cannot_change() {
    let fake = FakeApiServer::start().await;
    let svcs: Api<Service> = Api::namespaced(fake.client(), "default");
    let pp = PostParams::default();
    let a = svcs
        .create(&pp, &service("a", json!([{"name": "http", "port": 80}])))
        .await
        .unwrap();
    let b = svcs
        .create(&pp, &service("b", json!([{"port": 443}])))
        .await
        .unwrap();
    let spec = a.spec.clone().unwrap();
    let ip: std::net::Ipv4Addr = spec.cluster_ip.clone().unwrap().parse().unwrap();
    assert_eq!(ip.octets()[0], 10);
    assert_eq!(ip.octets()[1] & 0xf0, 96, "{ip} is in 10.96.0.0/12");
    assert_eq!(spec.cluster_ips, Some(vec![ip.to_string()]));
    assert_eq!(spec.ip_families, Some(vec!["IPv4".to_owned()]));
    assert_eq!(spec.ip_family_policy.as_deref(), Some("SingleStack"));
    assert_eq!(spec.session_affinity.as_deref(), Some("None"));
    assert_eq!(spec.internal_traffic_policy.as_deref(), Some("Cluster"));
    assert_eq!(spec.type_.as_deref(), Some("ClusterIP"));
    let port = &spec.ports.unwrap()[0];
    assert_eq!(port.protocol.as_deref(), Some("TCP"));
    assert_eq!(
        port.target_port,
        Some(k8s_openapi::apimachinery::pkg::util::intstr::IntOrString::Int(80))
    );
    assert_ne!(
        b.spec.unwrap().cluster_ip,
        a.spec.as_ref().unwrap().cluster_ip,
        "every Service gets its own address"
    );

    // An update that leaves the ClusterIP out keeps it (and changes nothing else).
    let mut resubmitted = service("a", json!([{"name": "http", "port": 80}]));
    resubmitted.metadata.resource_version = a.metadata.resource_version.clone();
    let kept = svcs.replace("a", &pp, &resubmitted).await.unwrap();
    assert_eq!(kept.spec.unwrap().cluster_ip, Some(ip.to_string()));
    assert_eq!(
        kept.metadata.resource_version, a.metadata.resource_version,
        "resubmitting the same manifest is a no-op"
    );

    // Changing it is refused as the real server does.
    let mut moved = a.clone();
    let moved_spec = moved.spec.as_mut().unwrap();
    moved_spec.cluster_ip = Some("10.96.0.200".into());
    moved_spec.cluster_ips = Some(vec!["10.96.0.200".into()]);
    let status = api_status(svcs.replace("a", &pp, &moved).await.unwrap_err());
    assert_eq!(
        causes(&status),
        vec![(
            "spec.clusterIPs[0]".to_owned(),
            "Invalid value: []string{\"10.96.0.200\"}: may not change once set".to_owned()
        )]
    );
    assert!(
        status.message.starts_with("Service \"a\" is invalid: "),
        "{}",
        status.message
    );

    // A requested address outside the range is refused; a free one inside is kept.
    let mut outside = service("c", json!([{"port": 80}]));
    outside.spec.as_mut().unwrap().cluster_ip = Some("192.0.2.1".into());
    let status = api_status(svcs.create(&pp, &outside).await.unwrap_err());
    assert!(
        causes(&status)[0].1.contains("not in the valid range"),
        "{status:?}"
    );
    let mut chosen = service("d", json!([{"port": 80}]));
    chosen.spec.as_mut().unwrap().cluster_ip = Some("10.96.1.1".into());
    let d = svcs.create(&pp, &chosen).await.unwrap();
    assert_eq!(
        d.spec.unwrap().cluster_ips,
        Some(vec!["10.96.1.1".to_owned()])
    );
}

#[tokio::test]
async fn a_dual_stack_fake_allocates_both_families_when_asked() {
    let fake = FakeApiServer::start().await;
    let svcs: Api<Service> = Api::namespaced(fake.client(), "default");
    let mut svc = service("dual", json!([{"port": 80}]));
    svc.spec.as_mut().unwrap().ip_family_policy = Some("RequireDualStack".into());
    let status = api_status(svcs.create(&PostParams::default(), &svc).await.unwrap_err());
    assert!(
        causes(&status)[0]
            .1
            .contains("not configured for dual-stack"),
        "{status:?}"
    );

    fake.dual_stack();
    let created = svcs.create(&PostParams::default(), &svc).await.unwrap();
    let spec = created.spec.unwrap();
    assert_eq!(
        spec.ip_families,
        Some(vec!["IPv4".to_owned(), "IPv6".to_owned()])
    );
    let ips = spec.cluster_ips.unwrap();
    assert!(ips[0].parse::<std::net::Ipv4Addr>().is_ok(), "{ips:?}");
    assert!(ips[1].parse::<std::net::Ipv6Addr>().is_ok(), "{ips:?}");
}

/// `PreferDualStack` gets both families on a dual-stack cluster (the missing one appended to
/// the one asked for) and one on a single-stack cluster; `SingleStack` gets one everywhere;
/// going single-stack on an update releases the secondary ClusterIP, and only that policy may.
#[tokio::test]
async fn prefer_dual_stack_follows_the_clusters_families() {
    let fake = FakeApiServer::start().await;
    let svcs: Api<Service> = Api::namespaced(fake.client(), "default");
    let pp = PostParams::default();
    let with = |name: &str, policy: &str, families: &[&str]| {
        let mut svc = service(name, json!([{"port": 80}]));
        let spec = svc.spec.as_mut().unwrap();
        spec.ip_family_policy = Some(policy.into());
        if !families.is_empty() {
            spec.ip_families = Some(families.iter().map(|f| (*f).to_owned()).collect());
        }
        svc
    };
    let families = |svc: &Service| {
        let spec = svc.spec.as_ref().unwrap();
        (
            spec.ip_family_policy.clone().unwrap(),
            spec.ip_families.clone().unwrap(),
            spec.cluster_ips.clone().unwrap().len(),
        )
    };
    let single = svcs
        .create(&pp, &with("v4-prefer", "PreferDualStack", &["IPv4"]))
        .await
        .unwrap();
    assert_eq!(
        families(&single),
        ("PreferDualStack".into(), vec!["IPv4".into()], 1)
    );
    // An IPv6 family on an IPv4-only cluster is refused, whatever the policy.
    let status = api_status(
        svcs.create(
            &pp,
            &with("v6-prefer", "PreferDualStack", &["IPv4", "IPv6"]),
        )
        .await
        .unwrap_err(),
    );
    assert_eq!(
        causes(&status),
        vec![(
            "spec.ipFamilies[1]".to_owned(),
            "Invalid value: \"IPv6\": not configured on this cluster".to_owned()
        )]
    );

    fake.dual_stack();
    let dual = svcs
        .create(&pp, &with("dual", "PreferDualStack", &["IPv4"]))
        .await
        .unwrap();
    assert_eq!(
        families(&dual),
        (
            "PreferDualStack".into(),
            vec!["IPv4".into(), "IPv6".into()],
            2
        )
    );
    let v6_first = svcs
        .create(&pp, &with("v6-first", "PreferDualStack", &["IPv6", "IPv4"]))
        .await
        .unwrap();
    let ips = v6_first.spec.as_ref().unwrap().cluster_ips.clone().unwrap();
    assert!(ips[0].parse::<std::net::Ipv6Addr>().is_ok(), "{ips:?}");
    let one = svcs
        .create(&pp, &with("one", "SingleStack", &["IPv4"]))
        .await
        .unwrap();
    assert_eq!(
        families(&one),
        ("SingleStack".into(), vec!["IPv4".into()], 1)
    );

    // Releasing the secondary family: refused while the policy is dual-stack, done by
    // SingleStack with the ClusterIPs left as they were.
    let mut reduced = dual.clone();
    let spec = reduced.spec.as_mut().unwrap();
    spec.ip_families = Some(vec!["IPv4".into()]);
    let status = api_status(svcs.replace("dual", &pp, &reduced).await.unwrap_err());
    assert!(
        causes(&status)
            .iter()
            .any(|(f, m)| f == "spec.ipFamilyPolicy"
                && m.contains("release the secondary IP family")),
        "{status:?}"
    );
    reduced.spec.as_mut().unwrap().ip_family_policy = Some("SingleStack".into());
    let released = svcs.replace("dual", &pp, &reduced).await.unwrap();
    assert_eq!(
        families(&released),
        ("SingleStack".into(), vec!["IPv4".into()], 1)
    );
    assert_eq!(
        released.spec.unwrap().cluster_ip,
        dual.spec.unwrap().cluster_ip,
        "the primary ClusterIP stays"
    );
}

#[tokio::test]
async fn an_ipv6_only_fake_allocates_ipv6_and_refuses_ipv4() {
    let fake = FakeApiServer::start().await;
    fake.ipv6_only();
    let svcs: Api<Service> = Api::namespaced(fake.client(), "default");
    let pp = PostParams::default();
    let plain = svcs
        .create(&pp, &service("plain", json!([{"port": 80}])))
        .await
        .unwrap();
    let spec = plain.spec.unwrap();
    assert_eq!(spec.ip_families, Some(vec!["IPv6".to_owned()]));
    assert!(
        spec.cluster_ip
            .unwrap()
            .parse::<std::net::Ipv6Addr>()
            .is_ok()
    );
    let mut prefer = service("prefer", json!([{"port": 80}]));
    prefer.spec.as_mut().unwrap().ip_family_policy = Some("PreferDualStack".into());
    let spec = svcs.create(&pp, &prefer).await.unwrap().spec.unwrap();
    assert_eq!(spec.ip_families, Some(vec!["IPv6".to_owned()]));
    assert_eq!(spec.cluster_ips.unwrap().len(), 1);
    let mut v4 = service("v4", json!([{"port": 80}]));
    v4.spec.as_mut().unwrap().ip_families = Some(vec!["IPv4".into()]);
    let status = api_status(svcs.create(&pp, &v4).await.unwrap_err());
    assert_eq!(causes(&status)[0].0, "spec.ipFamilies[0]");
}

#[tokio::test]
async fn invalid_objects_are_refused_with_the_real_servers_causes() {
    let fake = FakeApiServer::start().await;
    let pp = PostParams::default();
    let svcs: Api<Service> = Api::namespaced(fake.client(), "default");
    let cms: Api<ConfigMap> = Api::namespaced(fake.client(), "default");
    let refused = |result: Result<Service, kube::Error>| causes(&api_status(result.unwrap_err()));

    // Service names are DNS-1035 labels: no leading digit, at most 63 characters.
    let fields = refused(
        svcs.create(&pp, &service("1web", json!([{"port": 80}])))
            .await,
    );
    assert_eq!(fields[0].0, "metadata.name");
    assert!(fields[0].1.contains("DNS-1035 label"), "{fields:?}");
    let long = "a".repeat(64);
    let fields = refused(
        svcs.create(&pp, &service(&long, json!([{"port": 80}])))
            .await,
    );
    assert!(
        fields[0].1.ends_with("must be no more than 63 characters"),
        "{fields:?}"
    );

    // Ports: missing, unnamed when several, duplicated.
    let fields = refused(svcs.create(&pp, &service("none", json!([]))).await);
    assert_eq!(
        fields,
        vec![("spec.ports".to_owned(), "Required value".to_owned())]
    );
    let fields = refused(
        svcs.create(
            &pp,
            &service("two", json!([{"name": "a", "port": 80}, {"port": 81}])),
        )
        .await,
    );
    assert_eq!(
        fields,
        vec![("spec.ports[1].name".to_owned(), "Required value".to_owned())]
    );
    let fields = refused(
        svcs.create(
            &pp,
            &service(
                "dup",
                json!([{"name": "a", "port": 80}, {"name": "a", "port": 80}]),
            ),
        )
        .await,
    );
    let fields: Vec<&str> = fields.iter().map(|(f, _)| f.as_str()).collect();
    assert_eq!(fields, ["spec.ports[1].name", "spec.ports[1]"]);

    // Label values: at most 63 characters of [-A-Za-z0-9_.], alphanumeric at both ends.
    let mut labelled = config_map("default", "labelled", json!({}));
    labelled.metadata.labels = Some([("app".to_owned(), "x".repeat(64))].into());
    let status = api_status(cms.create(&pp, &labelled).await.unwrap_err());
    assert_eq!(causes(&status)[0].0, "metadata.labels");
    labelled.metadata.labels = Some([("app".to_owned(), "-x".to_owned())].into());
    assert_eq!(
        api_status(cms.create(&pp, &labelled).await.unwrap_err()).code,
        422
    );

    // ConfigMap names are DNS-1123 subdomains; keys match [-._a-zA-Z0-9]+.
    let status = api_status(
        cms.create(&pp, &config_map("default", "Bad_Name", json!({})))
            .await
            .unwrap_err(),
    );
    assert!(
        causes(&status)[0].1.contains("RFC 1123 subdomain"),
        "{status:?}"
    );
    let status = api_status(
        cms.create(&pp, &config_map("default", "keys", json!({"a/b": "x"})))
            .await
            .unwrap_err(),
    );
    assert_eq!(
        status.message,
        "ConfigMap \"keys\" is invalid: data[a/b]: Invalid value: \"a/b\": a valid config key must consist of alphanumeric characters, '-', '_' or '.' (e.g. 'key.name',  or 'KEY_NAME',  or 'key-name', regex used for validation is '[-._a-zA-Z0-9]+')"
    );

    // The 1 MiB limit is on all values together, not on any one key.
    let half = "x".repeat(600 * 1024);
    let status = api_status(
        cms.create(
            &pp,
            &config_map(
                "default",
                "big",
                json!({"Corefile": half, "NodeHosts": half}),
            ),
        )
        .await
        .unwrap_err(),
    );
    assert_eq!(
        causes(&status),
        vec![(
            "[]".to_owned(),
            "Too long: must have at most 1048576 bytes".to_owned()
        )]
    );
    cms.create(
        &pp,
        &config_map("default", "fits", json!({"Corefile": half})),
    )
    .await
    .unwrap();

    // An immutable ConfigMap keeps its data.
    let mut frozen = config_map("default", "frozen", json!({"k": "v"}));
    frozen.immutable = Some(true);
    let frozen = cms.create(&pp, &frozen).await.unwrap();
    let mut changed = frozen.clone();
    changed.data = Some([("k".to_owned(), "w".to_owned())].into());
    let status = api_status(cms.replace("frozen", &pp, &changed).await.unwrap_err());
    assert_eq!(
        causes(&status),
        vec![(
            "data".to_owned(),
            "Forbidden: field is immutable when `immutable` is set".to_owned()
        )]
    );

    // Leases: a positive duration, non-negative transitions.
    let leases: Api<Lease> = Api::namespaced(fake.client(), "default");
    let lease: Lease = typed(object(
        "coordination.k8s.io/v1",
        "Lease",
        None,
        "l",
        json!({"spec": {"leaseDurationSeconds": 0, "leaseTransitions": -1}}),
    ));
    let status = api_status(leases.create(&pp, &lease).await.unwrap_err());
    assert!(
        status
            .message
            .starts_with("Lease.coordination.k8s.io \"l\" is invalid: ["),
        "{}",
        status.message
    );
    let fields: Vec<String> = causes(&status).into_iter().map(|(f, _)| f).collect();
    assert_eq!(
        fields,
        ["spec.leaseDurationSeconds", "spec.leaseTransitions"]
    );
}

#[tokio::test]
async fn events_over_the_servers_limits_are_refused() {
    let fake = FakeApiServer::start().await;
    let events: Api<k8s_openapi::api::events::v1::Event> =
        Api::namespaced(fake.client(), "default");
    let event = |note: String, reason: String| -> k8s_openapi::api::events::v1::Event {
        typed(object(
            "events.k8s.io/v1",
            "Event",
            None,
            "e.1",
            json!({
                "eventTime": "2026-01-01T00:00:00.000000Z",
                "type": "Normal",
                "action": "Reconciling",
                "reason": reason,
                "note": note,
                "reportingController": "hairpin-controller",
                "reportingInstance": "pod-a",
                "regarding": {"kind": "Service", "namespace": "default", "name": "web"},
            }),
        ))
    };
    let pp = PostParams::default();
    let status = api_status(
        events
            .create(&pp, &event("n".repeat(1025), "Configured".into()))
            .await
            .unwrap_err(),
    );
    assert_eq!(
        causes(&status),
        vec![(
            "note".to_owned(),
            "Invalid value: \"\": can have at most 1024 characters".to_owned()
        )]
    );
    // The limit counts bytes (Go's len), whatever the message's "characters" says: 513
    // two-byte characters (1026 bytes) are refused.
    let status = api_status(
        events
            .create(&pp, &event("ü".repeat(513), "Configured".into()))
            .await
            .unwrap_err(),
    );
    assert_eq!(status.code, 422);
    assert_eq!(causes(&status)[0].0, "note");
    let status = api_status(
        events
            .create(&pp, &event("ok".into(), "R".repeat(129)))
            .await
            .unwrap_err(),
    );
    assert_eq!(causes(&status)[0].0, "reason");
    events
        .create(&pp, &event("n".repeat(1024), "Configured".into()))
        .await
        .unwrap();
}

#[tokio::test]
async fn every_page_of_a_list_is_read_at_the_first_pages_resource_version() {
    let fake = FakeApiServer::start().await;
    for i in 0..5 {
        fake.apply(object(
            "v1",
            "ConfigMap",
            Some("default"),
            &format!("cm-{i}"),
            json!({"data": {"v": "0"}}),
        ));
    }
    let cms: Api<ConfigMap> = Api::namespaced(fake.client(), "default");
    let first = cms.list(&ListParams::default().limit(2)).await.unwrap();
    let rv = first.metadata.resource_version.clone().unwrap();
    assert_eq!(first.items.len(), 2);
    assert_eq!(first.metadata.remaining_item_count, Some(3));

    // Between pages: one listed object changes, one not yet listed is deleted, one added.
    fake.apply(object(
        "v1",
        "ConfigMap",
        Some("default"),
        "cm-0",
        json!({"data": {"v": "1"}}),
    ));
    fake.delete("v1", "ConfigMap", Some("default"), "cm-3");
    fake.apply(object(
        "v1",
        "ConfigMap",
        Some("default"),
        "cm-9",
        json!({}),
    ));

    let mut names = Vec::new();
    let mut token = first.metadata.continue_.clone();
    while let Some(next) = token.filter(|t| !t.is_empty()) {
        let page = cms
            .list(&ListParams::default().limit(2).continue_token(&next))
            .await
            .unwrap();
        assert_eq!(page.metadata.resource_version.as_deref(), Some(rv.as_str()));
        names.extend(
            page.items
                .iter()
                .map(|cm| cm.metadata.name.clone().unwrap()),
        );
        token = page.metadata.continue_;
    }
    assert_eq!(
        names,
        ["cm-2", "cm-3", "cm-4"],
        "the snapshot, not the live store"
    );

    // A watch from the snapshot's resourceVersion replays exactly what changed since.
    let mut stream = cms
        .watch(&WatchParams::default(), &rv)
        .await
        .unwrap()
        .boxed();
    let mut seen = Vec::new();
    while seen.len() < 3 {
        let event = tokio::time::timeout(Duration::from_secs(5), stream.next())
            .await
            .expect("the replay arrives")
            .unwrap()
            .unwrap();
        seen.push(match event {
            WatchEvent::Added(cm) => format!("added {}", cm.metadata.name.unwrap()),
            WatchEvent::Modified(cm) => format!("modified {}", cm.metadata.name.unwrap()),
            WatchEvent::Deleted(cm) => format!("deleted {}", cm.metadata.name.unwrap()),
            other => format!("{other:?}"),
        });
    }
    assert_eq!(seen, ["modified cm-0", "deleted cm-3", "added cm-9"]);

    // Once the history is compacted, continuing the old list is 410 Expired.
    fake.compact();
    let status = api_status(
        cms.list(
            &ListParams::default()
                .limit(2)
                .continue_token(first.metadata.continue_.as_deref().unwrap()),
        )
        .await
        .unwrap_err(),
    );
    assert_eq!((status.code, status.reason.as_str()), (410, "Expired"));
}

#[tokio::test]
async fn a_body_that_contradicts_the_url_is_refused() {
    let fake = FakeApiServer::start().await;
    let pp = PostParams::default();
    let cms: Api<ConfigMap> = Api::namespaced(fake.client(), "default");
    let status = api_status(
        cms.create(&pp, &config_map("kube-system", "a", json!({})))
            .await
            .unwrap_err(),
    );
    assert_eq!((status.code, status.reason.as_str()), (400, "BadRequest"));
    assert_eq!(
        status.message,
        "the namespace of the provided object does not match the namespace sent on the request"
    );
    assert!(
        fake.get("v1", "ConfigMap", Some("kube-system"), "a")
            .is_none()
    );

    let stored = cms
        .create(&pp, &config_map("default", "a", json!({})))
        .await
        .unwrap();
    let uid = stored.metadata.uid.clone().unwrap();
    let mut other = stored.clone();
    other.metadata.uid = Some("00000000-0000-4000-8000-0000000000ff".into());
    let status = api_status(cms.replace("a", &pp, &other).await.unwrap_err());
    assert_eq!((status.code, status.reason.as_str()), (409, "Conflict"));
    assert_eq!(
        status.message,
        format!(
            "Operation cannot be fulfilled on configmaps \"a\": Precondition failed: UID in precondition: 00000000-0000-4000-8000-0000000000ff, UID in object meta: {uid}"
        )
    );
    let mut moved = stored.clone();
    moved.metadata.namespace = Some("kube-system".into());
    let status = api_status(cms.replace("a", &pp, &moved).await.unwrap_err());
    assert_eq!(status.code, 400);
    assert_eq!(
        status.message,
        "the namespace of the object (kube-system) does not match the namespace on the URL (default)"
    );
    let patch = json!({"metadata": {"uid": "00000000-0000-4000-8000-0000000000ff"}});
    let status = api_status(
        cms.patch("a", &PatchParams::default(), &Patch::Merge(&patch))
            .await
            .unwrap_err(),
    );
    assert_eq!(causes(&status)[0].0, "metadata.uid");
}

#[tokio::test]
async fn absent_resources_answer_plain_text_and_discovery_lists_what_is_served() {
    let fake = FakeApiServer::start().await;
    let client = fake.client();
    let request = hyper::Request::get("/apis/gateway.networking.k8s.io/v1/gateways")
        .body(kube::client::Body::from(Vec::new()))
        .unwrap();
    let response = client.send(request).await.unwrap();
    assert_eq!(response.status(), 404);
    assert_eq!(
        response.headers()["content-type"],
        "text/plain; charset=utf-8"
    );
    let body = response.into_body().collect().await.unwrap().to_bytes();
    assert_eq!(&body[..], b"404 page not found\n");

    let groups = client.list_api_groups().await.unwrap();
    let names: Vec<&str> = groups.groups.iter().map(|g| g.name.as_str()).collect();
    assert!(names.contains(&"networking.k8s.io"), "{names:?}");
    assert!(!names.contains(&"gateway.networking.k8s.io"), "{names:?}");
    fake.install_gateway_api();
    let resources = client
        .list_api_group_resources("gateway.networking.k8s.io/v1")
        .await
        .unwrap();
    assert!(resources.resources.iter().any(|r| r.name == "gateways"));
    let core = client.list_core_api_resources("v1").await.unwrap();
    assert!(
        core.resources
            .iter()
            .any(|r| r.name == "configmaps" && r.namespaced)
    );
}

/// external-dns's DNSEndpoint CRD: absent until installed (404 page not found, not in
/// discovery), then namespaced, with `metadata.generation` bumped only by spec changes, a
/// status subresource, and resourceVersion conflicts.
#[tokio::test]
async fn the_dns_endpoint_crd_is_served_as_a_custom_resource() {
    use kube::api::{ApiResource, DynamicObject, GroupVersionKind};
    let fake = FakeApiServer::start().await;
    let client = fake.client();
    let ar = ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("externaldns.k8s.io", "v1alpha1", "DNSEndpoint"),
        "dnsendpoints",
    );
    let api: Api<DynamicObject> = Api::namespaced_with(client.clone(), "default", &ar);
    let err = api.list(&ListParams::default()).await.unwrap_err();
    assert_eq!(api_status(err).code, 404);
    let groups = client.list_api_groups().await.unwrap();
    assert!(!groups.groups.iter().any(|g| g.name == "externaldns.k8s.io"));

    fake.install_external_dns_crd();
    let resources = client
        .list_api_group_resources("externaldns.k8s.io/v1alpha1")
        .await
        .unwrap();
    let listed = &resources.resources[0];
    assert_eq!(
        (listed.name.as_str(), listed.namespaced),
        ("dnsendpoints", true)
    );

    let record = |target: &str| json!({"endpoints": [{"dnsName": "a.example.com", "recordType": "A", "targets": [target]}]});
    let mut object: DynamicObject = serde_json::from_value(object(
        "externaldns.k8s.io/v1alpha1",
        "DNSEndpoint",
        Some("default"),
        "a",
        json!({"spec": record("10.96.0.1"), "status": {"observedGeneration": 9}}),
    ))
    .unwrap();
    // A client cannot set the generation.
    object.metadata.generation = Some(7);
    let created = api.create(&PostParams::default(), &object).await.unwrap();
    assert_eq!(created.metadata.generation, Some(1));
    assert!(
        created.data.get("status").is_none(),
        "status is the subresource's"
    );

    // external-dns writes its status through the subresource: the generation stays.
    let status = json!({"status": {"observedGeneration": 1}});
    let seen = api
        .patch_status("a", &PatchParams::default(), &Patch::Merge(&status))
        .await
        .unwrap();
    assert_eq!(seen.metadata.generation, Some(1));
    assert_eq!(seen.data["status"]["observedGeneration"], 1);

    // A label change is metadata: same generation; a new target is a spec change: one more.
    let mut relabelled = seen.clone();
    relabelled
        .metadata
        .labels
        .get_or_insert_with(Default::default)
        .insert("x".into(), "y".into());
    let relabelled = api
        .replace("a", &PostParams::default(), &relabelled)
        .await
        .unwrap();
    assert_eq!(relabelled.metadata.generation, Some(1));
    let mut retargeted = relabelled.clone();
    retargeted.data["spec"] = record("10.96.0.2");
    let retargeted = api
        .replace("a", &PostParams::default(), &retargeted)
        .await
        .unwrap();
    assert_eq!(retargeted.metadata.generation, Some(2));
    // The status is kept by an update of the object, and now lags the generation.
    assert_eq!(retargeted.data["status"]["observedGeneration"], 1);

    // A write with the resourceVersion read before is a conflict.
    let mut stale = relabelled.clone();
    stale.data["spec"] = record("10.96.0.3");
    let err = api
        .replace("a", &PostParams::default(), &stale)
        .await
        .unwrap_err();
    assert_eq!(api_status(err).code, 409);
}

#[tokio::test]
async fn writes_keep_managed_fields_naming_who_changed_what() {
    let fake = FakeApiServer::start().await;
    let api: Api<ConfigMap> = Api::namespaced(fake.client(), "default");
    let by = |manager: &str| PostParams {
        field_manager: Some(manager.into()),
        ..PostParams::default()
    };
    let created = api
        .create(
            &by("hairpin"),
            &config_map("default", "cm", json!({"a": "1", "b": "2"})),
        )
        .await
        .unwrap();
    let entries = created.metadata.managed_fields.clone().unwrap();
    assert_eq!(entries.len(), 1);
    assert_eq!(entries[0].manager.as_deref(), Some("hairpin"));
    assert_eq!(entries[0].operation.as_deref(), Some("Update"));
    assert_eq!(entries[0].fields_type.as_deref(), Some("FieldsV1"));
    assert!(entries[0].time.is_some());

    // Another manager changes one key: it owns that key, hairpin keeps the other. The update
    // sends no managedFields, and the stored ones are kept.
    let mut changed = created.clone();
    changed.metadata.managed_fields = None;
    changed
        .data
        .as_mut()
        .unwrap()
        .insert("a".into(), "9".into());
    let changed = api
        .replace("cm", &by("kubectl-edit"), &changed)
        .await
        .unwrap();
    let entries = changed.metadata.managed_fields.clone().unwrap();
    let fields = |m: &str| {
        entries
            .iter()
            .find(|e| e.manager.as_deref() == Some(m))
            .and_then(|e| e.fields_v1.clone())
            .map(|f| f.0)
    };
    assert_eq!(fields("kubectl-edit"), Some(json!({"f:data": {"f:a": {}}})));
    assert_eq!(fields("hairpin"), Some(json!({"f:data": {"f:b": {}}})));

    // A no-op update changes nothing, managedFields included.
    let again = api.replace("cm", &by("third"), &changed).await.unwrap();
    assert_eq!(
        again.metadata.managed_fields,
        changed.metadata.managed_fields
    );
    assert_eq!(
        again.metadata.resource_version,
        changed.metadata.resource_version
    );

    // Without a fieldManager, the manager is the User-Agent up to its first `/`.
    let request = hyper::Request::patch("/api/v1/namespaces/default/configmaps/cm")
        .header("content-type", "application/merge-patch+json")
        .header(
            "user-agent",
            "kubectl/v1.31.0 (linux/amd64) kubernetes/abcdef",
        )
        .body(kube::client::Body::from(br#"{"data":{"b":"7"}}"#.to_vec()))
        .unwrap();
    let response = fake.client().send(request).await.unwrap();
    assert_eq!(response.status(), 200);
    let body = response.into_body().collect().await.unwrap().to_bytes();
    let patched: Value = serde_json::from_slice(&body).unwrap();
    let managers: Vec<&str> = patched["metadata"]["managedFields"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["manager"].as_str().unwrap())
        .collect();
    assert!(managers.contains(&"kubectl"), "{managers:?}");
    assert!(
        !managers.contains(&"hairpin"),
        "hairpin owned only b: {managers:?}"
    );
}

/// With grants, the fake authorizes as RBAC does: a `resourceNames` rule allows gets of
/// those objects and lists or watches selecting exactly one of them by `metadata.name`,
/// nothing else; a Role's rule applies in its namespace only. Denials carry kube-apiserver's
/// 403 Status.
#[tokio::test]
async fn grants_authorize_as_rbac_does() {
    use hairpin_fake_apiserver::Grant;
    let fake = FakeApiServer::start().await;
    fake.apply_many([
        object("v1", "ConfigMap", Some("kube-system"), "coredns", json!({})),
        object("v1", "ConfigMap", Some("kube-system"), "other", json!({})),
    ]);
    fake.authorize_only([Grant::namespaced(
        "kube-system",
        "",
        "configmaps",
        &["get", "list"],
        &["coredns"],
    )]);
    let cms: Api<ConfigMap> = Api::namespaced(fake.client(), "kube-system");
    assert!(cms.get("coredns").await.is_ok());
    let named = cms
        .list(&ListParams::default().fields("metadata.name=coredns"))
        .await
        .unwrap();
    assert_eq!(named.items.len(), 1);

    let status = api_status(cms.list(&ListParams::default()).await.unwrap_err());
    assert_eq!((status.code, status.reason.as_str()), (403, "Forbidden"));
    assert_eq!(
        status.message,
        "configmaps is forbidden: User \"system:serviceaccount:hairpin:hairpin\" cannot list \
         resource \"configmaps\" in API group \"\" in the namespace \"kube-system\""
    );
    let status = api_status(cms.get("other").await.unwrap_err());
    assert_eq!(
        status.message,
        "configmaps \"other\" is forbidden: User \"system:serviceaccount:hairpin:hairpin\" \
         cannot get resource \"configmaps\" in API group \"\" in the namespace \"kube-system\""
    );
    assert_eq!(status.details.unwrap().name, "other");
    // Not a verb granted, even by name.
    let status = api_status(
        cms.delete("coredns", &kube::api::DeleteParams::default())
            .await
            .unwrap_err(),
    );
    assert_eq!(status.code, 403);
    // Another namespace, and the cluster scope, are not the Role's.
    let elsewhere: Api<ConfigMap> = Api::namespaced(fake.client(), "default");
    assert_eq!(
        api_status(elsewhere.get("coredns").await.unwrap_err()).code,
        403
    );
    let all: Api<Service> = Api::all(fake.client());
    let status = api_status(all.list(&ListParams::default()).await.unwrap_err());
    assert_eq!(
        status.message,
        "services is forbidden: User \"system:serviceaccount:hairpin:hairpin\" cannot list \
         resource \"services\" in API group \"\" at the cluster scope"
    );
    let leases: Api<Lease> = Api::namespaced(fake.client(), "kube-system");
    let status = api_status(leases.get("x").await.unwrap_err());
    assert_eq!(
        status.message,
        "leases.coordination.k8s.io \"x\" is forbidden: User \
         \"system:serviceaccount:hairpin:hairpin\" cannot get resource \"leases\" in API \
         group \"coordination.k8s.io\" in the namespace \"kube-system\""
    );
}
