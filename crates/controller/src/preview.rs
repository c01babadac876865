//! `hairpin plan` against a running cluster: what the controller would write now.
//!
//! [`observe`] reads the cluster through the controller's own caches ([`Caches`]: the same
//! LIST and WATCH requests, nothing else, nothing written) and stops them once they have
//! listed. [`changes`] compares the plan with what is live, object by object, the way the
//! controller's writers decide: a hairpin Service is written when [`service_matches`] says
//! it differs, a ConfigMap key when the controller's own edit ([`dns_edit`],
//! [`mode_switch_edits`], [`routes_edit`], [`hosts_edit`]) gives another value, and a `Hairpin` when the
//! part of its status the plan decides differs. [`json`] is the stable `-o json` form.

use std::time::Duration;

use futures::FutureExt as _;
use hairpin_planner::DnsEndpoint;
use hairpin_planner::external_dns;
use hairpin_planner::receivers::Receiver;
use hairpin_planner::render::unified_diff;
use hairpin_planner::verify::Verification;
use hairpin_planner::{
    ClusterSnapshot, DnsChange, HAIRPIN_API_GROUP, HAIRPIN_API_VERSION, LoadBalancerPlan,
    MANAGED_BY_LABEL, Plan, PlannerConfig,
};
use k8s_openapi::api::core::v1::{Service, ServiceSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::ResourceExt as _;
use serde::Serialize;
use serde_json::{Value, json};

use crate::Error;
use crate::apply::{CREATED_BY_ANNOTATION, config_map_is_ours, service_matches};
use crate::context::Context;
use crate::crd::{Hairpin, HairpinStatus};
use crate::edits::{KeyEdit, dns_edit, hosts_edit, mode_switch_edits, routes_edit};
use crate::metrics::Metrics;
use crate::status::desired_hairpins;
use crate::watch::Caches;
use hairpin_planner::escape::Text;
use hairpin_planner::is_managed;

/// What was read from the cluster.
#[derive(Clone, Debug, Default)]
pub struct Observed {
    /// Everything the planner reads.
    pub snapshot: ClusterSnapshot,
    /// The `Hairpin` objects; `None` when their CRD is not installed (or, for files, not
    /// given): then no `Hairpin` is written.
    pub hairpins: Option<Vec<Hairpin>>,
}

/// Reads what the controller watches, with its caches, and stops them.
///
/// Fails on the first list or watch error (a missing permission, an unreachable server), or
/// when the caches have not listed within `timeout`, naming what is missing.
///
/// # Errors
/// [`Error::Read`].
pub async fn observe(
    client: &kube::Client,
    planner: &PlannerConfig,
    timeout: Duration,
) -> Result<Observed, Error> {
    let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
    let stop = async move {
        let _ = stop_rx.await;
    }
    .boxed()
    .shared();
    let metrics = Metrics::register(&mut prometheus_client::registry::Registry::default());
    let context = Context::read_only(client.clone(), planner.clone(), metrics);
    let caches = Caches::start(&context, stop);
    let deadline = tokio::time::Instant::now() + timeout;
    loop {
        tokio::select! {
            () = caches.wait_synced() => break,
            () = tokio::time::sleep(Duration::from_millis(50)) => {}
        }
        let unsynced = caches.unsynced();
        if let Some(failed) = unsynced.iter().find(|u| u.error.is_some()) {
            return Err(Error::Read(format!("cannot list {failed}")));
        }
        if tokio::time::Instant::now() >= deadline {
            let waiting: Vec<String> = unsynced.iter().map(ToString::to_string).collect();
            return Err(Error::Read(format!(
                "timed out after {timeout:?} still listing {}",
                waiting.join(", ")
            )));
        }
    }
    if !caches.is_synced() {
        return Err(Error::Read("the watches ended before they listed".into()));
    }
    // The ConfigMaps the receivers name, as the controller reads them before it plans.
    let snapshot = loop {
        let snapshot = caches.snapshot();
        let waiting = caches.follow_receivers(&snapshot);
        if waiting.is_empty() {
            break snapshot;
        }
        if tokio::time::Instant::now() >= deadline {
            return Err(Error::Read(format!(
                "timed out after {timeout:?} still listing {}",
                waiting.join(", ")
            )));
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    // The Nodes, for the native cure's gate (a read refused leaves them out: nothing tells).
    let mut snapshot = snapshot;
    let left = deadline.saturating_duration_since(tokio::time::Instant::now());
    if let Ok(nodes) = tokio::time::timeout(left, crate::watch::list_nodes(client.clone())).await {
        snapshot.nodes = nodes;
    }
    // The node agents' reports, as the controller reads them (`None` where none reports).
    let left = deadline.saturating_duration_since(tokio::time::Instant::now());
    let reports = crate::watch::list_node_reports(client.clone(), &planner.namespace);
    if let Ok(reports) = tokio::time::timeout(left, reports).await {
        snapshot.node_probes = reports;
    }
    let observed = Observed {
        snapshot,
        hairpins: caches.hairpins(),
    };
    drop(stop_tx);
    Ok(observed)
}

/// What a change does to its object (for a ConfigMap: to its key).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Action {
    /// Created (a ConfigMap key: added).
    Create,
    /// Replaced, or its status patched.
    Update,
    /// Deleted (a ConfigMap key: removed).
    Delete,
}

impl Action {
    fn as_str(self) -> &'static str {
        match self {
            Action::Create => "create",
            Action::Update => "update",
            Action::Delete => "delete",
        }
    }
}

/// One write the controller would make.
#[derive(Clone, Debug, PartialEq)]
pub struct Change {
    /// What the write does.
    pub action: Action,
    /// `Service`, `ConfigMap`, `DNSEndpoint` or `Hairpin`.
    pub kind: &'static str,
    /// The object's namespace.
    pub namespace: String,
    /// The object's name.
    pub name: String,
    /// For a ConfigMap, the key written.
    pub key: Option<String>,
    /// The live form: the key's value, or the object's fields the controller sets, as YAML.
    pub before: Option<String>,
    /// The written form, in the same terms; `None` when deleted.
    pub after: Option<String>,
    /// The same, as JSON (the key's value as a string, the object's fields as an object).
    pub written: Option<Value>,
}

impl Change {
    /// `Service hairpin/x`, `ConfigMap kube-system/coredns key Corefile`.
    pub fn describe(&self) -> String {
        let key = self
            .key
            .as_ref()
            .map(|k| format!(" key {k}"))
            .unwrap_or_default();
        format!("{} {}/{}{key}", self.kind, self.namespace, self.name)
    }

    fn path(&self) -> String {
        match &self.key {
            // The form `hairpin plan -f -o diff` has always printed for ConfigMap keys.
            Some(key) => format!("{}/{}/{key}", self.namespace, self.name),
            None => format!(
                "{}/{}/{}",
                self.kind.to_lowercase(),
                self.namespace,
                self.name
            ),
        }
    }
}

/// Every write the controller would make for `plan` on what was observed, in the order it
/// makes them per kind: DNS keys, then the routes and hosts ConfigMaps, hairpin Services, `Hairpin`
/// objects. An edit the Corefile editor refuses is returned in the second list (the
/// controller reports it and writes nothing there).
pub fn changes(
    plan: &Plan,
    observed: &Observed,
    planner: &PlannerConfig,
) -> (Vec<Change>, Vec<String>) {
    let snapshot = &observed.snapshot;
    let mut edits: Vec<KeyEdit> = Vec::new();
    if let Some(dns) = &plan.dns {
        edits.extend(dns.writes.iter().filter(|w| w.changed).map(dns_edit));
        edits.extend(mode_switch_edits(dns, snapshot, planner));
    }
    edits.extend(routes_edit(plan, snapshot, planner));
    edits.extend(hosts_edit(plan, snapshot, planner));
    let mut out = Vec::new();
    let mut refused = Vec::new();
    for edit in &edits {
        match key_change(edit, snapshot) {
            Ok(change) => out.extend(change),
            // The reason quotes the ConfigMap's text escaped already (the editor's error):
            // only guarded, so that nothing is escaped twice.
            Err(reason) => refused.push(format!(
                "cannot edit ConfigMap {} key {}: {}",
                Text(&edit.config_map()),
                Text(&edit.key),
                hairpin_planner::escape::controls(&reason)
            )),
        }
    }
    out.extend(service_changes(plan, snapshot, planner, &mut refused));
    out.extend(dns_endpoint_changes(plan, snapshot));
    if let Some(live) = &observed.hairpins {
        out.extend(hairpin_changes(plan, snapshot, live, planner));
    }
    (out, refused)
}

/// The key's change, as [`crate::apply::write_key`] would make it from the cached value.
fn key_change(edit: &KeyEdit, snapshot: &ClusterSnapshot) -> Result<Option<Change>, String> {
    let cm = snapshot.config_map(&edit.namespace, &edit.name);
    let before = cm
        .and_then(|cm| cm.data.as_ref())
        .and_then(|d| d.get(&edit.key))
        .cloned();
    if edit.ours_only && cm.is_some_and(|cm| !config_map_is_ours(cm)) {
        return Err(format!(
            "the ConfigMap exists and is not hairpin's (it lacks the label {MANAGED_BY_LABEL}=hairpin or the annotation {CREATED_BY_ANNOTATION}=hairpin); hairpin leaves it alone"
        ));
    }
    let after = edit
        .after(before.as_deref())
        .map_err(|err| err.to_string())?;
    if after == before || (cm.is_none() && !edit.create_if_missing) {
        return Ok(None);
    }
    let action = match (&before, &after) {
        (None, _) => Action::Create,
        (_, None) => Action::Delete,
        _ => Action::Update,
    };
    Ok(Some(Change {
        action,
        kind: "ConfigMap",
        namespace: edit.namespace.clone(),
        name: edit.name.clone(),
        key: Some(edit.key.clone()),
        written: after.clone().map(Value::String),
        before,
        after,
    }))
}

/// The fields of a hairpin Service the controller sets (and compares).
fn service_view(svc: &Service) -> Service {
    let spec = svc.spec.clone().unwrap_or_default();
    Service {
        metadata: ObjectMeta {
            name: svc.metadata.name.clone(),
            namespace: svc.metadata.namespace.clone(),
            labels: svc.metadata.labels.clone(),
            annotations: svc.metadata.annotations.clone(),
            ..ObjectMeta::default()
        },
        spec: Some(ServiceSpec {
            type_: spec.type_,
            selector: spec.selector,
            ports: spec.ports,
            cluster_ip: spec.cluster_ip,
            cluster_ips: spec.cluster_ips,
            ..ServiceSpec::default()
        }),
        status: None,
    }
}

fn service_changes(
    plan: &Plan,
    snapshot: &ClusterSnapshot,
    planner: &PlannerConfig,
    refused: &mut Vec<String>,
) -> Vec<Change> {
    let source_annotation = planner.annotation("source");
    let mut out = Vec::new();
    for lb in &plan.load_balancers {
        let svc = lb.service_ref();
        let want = service_view(&lb.service);
        let change = |action, before: Option<&Service>, after: &Service| Change {
            action,
            kind: "Service",
            namespace: svc.namespace.clone(),
            name: svc.name.clone(),
            key: None,
            before: before.map(yaml),
            after: Some(yaml(after)),
            written: serde_json::to_value(after).ok(),
        };
        match snapshot.service(&svc.namespace, &svc.name) {
            None => out.push(change(Action::Create, None, &want)),
            Some(have) if !is_managed(&have.metadata, &source_annotation) => refused.push(format!(
                "cannot write Service {svc}: it exists and is not hairpin's (it lacks the label {MANAGED_BY_LABEL}=hairpin or the annotation {source_annotation}); hairpin leaves it alone"
            )),
            Some(have) if service_matches(have, &lb.service) => {}
            Some(have) => {
                // Replaced with the allocated ClusterIPs kept (they are immutable).
                let mut after = want.clone();
                if let (Some(spec), Some(have_spec)) = (after.spec.as_mut(), have.spec.as_ref()) {
                    spec.cluster_ip.clone_from(&have_spec.cluster_ip);
                    spec.cluster_ips.clone_from(&have_spec.cluster_ips);
                }
                out.push(change(Action::Update, Some(&service_view(have)), &after));
            }
        }
    }
    for orphan in &plan.orphaned_services {
        let before = snapshot
            .service(&orphan.namespace, &orphan.name)
            .map(|s| yaml(&service_view(s)));
        out.push(Change {
            action: Action::Delete,
            kind: "Service",
            namespace: orphan.namespace.clone(),
            name: orphan.name.clone(),
            key: None,
            before,
            after: None,
            written: None,
        });
    }
    out
}

/// The fields of a `DNSEndpoint` the controller sets (and compares): identity, labels,
/// annotations and the records; not the status external-dns writes.
fn dns_endpoint_view(object: &DnsEndpoint) -> Value {
    json!({
        "apiVersion": object.api_version,
        "kind": object.kind,
        "metadata": {
            "name": object.metadata.name,
            "namespace": object.metadata.namespace,
            "labels": object.metadata.labels,
            "annotations": object.metadata.annotations,
        },
        "spec": object.spec,
    })
}

/// The `DNSEndpoint`s of the external-dns mode: created, replaced, or deleted when stale.
fn dns_endpoint_changes(plan: &Plan, snapshot: &ClusterSnapshot) -> Vec<Change> {
    let Some(endpoints) = plan.dns.as_ref().and_then(|d| d.dns_endpoints.as_ref()) else {
        return Vec::new();
    };
    let mut out = Vec::new();
    for o in endpoints.objects.iter().filter(|o| o.changed) {
        let target = o.object.object_ref();
        let after = dns_endpoint_view(&o.object);
        out.push(Change {
            action: if o.current.is_some() {
                Action::Update
            } else {
                Action::Create
            },
            kind: external_dns::KIND,
            namespace: target.namespace,
            name: target.name,
            key: None,
            before: o.current.as_ref().map(|c| yaml(&dns_endpoint_view(c))),
            after: Some(yaml(&after)),
            written: Some(after),
        });
    }
    for stale in &endpoints.stale {
        let before = snapshot
            .dns_endpoints
            .iter()
            .find(|e| e.object_ref() == *stale)
            .map(|e| yaml(&dns_endpoint_view(e)));
        out.push(Change {
            action: Action::Delete,
            kind: external_dns::KIND,
            namespace: stale.namespace.clone(),
            name: stale.name.clone(),
            key: None,
            before,
            after: None,
            written: None,
        });
    }
    out
}

/// The part of a `Hairpin` the plan decides: its identity, and on creation its labels and
/// owner; in the status everything but what is measured at run time (ready endpoints,
/// conditions, the DNS word, write and propagation times).
fn hairpin_view(hairpin: &Hairpin, with_metadata: bool) -> Value {
    let status = hairpin.status.clone().unwrap_or_default();
    let planned = HairpinStatus {
        proxy: status.proxy,
        cure: status.cure,
        native_cure: status.native_cure,
        cure_reason: status.cure_reason,
        host_count: status.host_count,
        service: status.service,
        cluster_ip: status.cluster_ip,
        hostnames: status.hostnames,
        refused: status.refused,
        unverified: status.unverified,
        dns_mode: status.dns_mode,
        config_maps: status.config_maps,
        dns_endpoints: status.dns_endpoints,
        ..HairpinStatus::default()
    };
    let mut status = serde_json::to_value(planned).unwrap_or(Value::Null);
    if let Some(fields) = status.as_object_mut() {
        for runtime in ["dns", "readyEndpoints", "conditions"] {
            fields.remove(runtime);
        }
    }
    let mut metadata = json!({
        "name": hairpin.name_any(),
        "namespace": hairpin.namespace().unwrap_or_default(),
    });
    if with_metadata {
        metadata["labels"] = json!(hairpin.metadata.labels);
        metadata["annotations"] = json!(hairpin.metadata.annotations);
        metadata["ownerReferences"] = json!(hairpin.metadata.owner_references);
    }
    json!({
        "apiVersion": format!("{HAIRPIN_API_GROUP}/{HAIRPIN_API_VERSION}"),
        "kind": "Hairpin",
        "metadata": metadata,
        "status": status,
    })
}

fn hairpin_changes(
    plan: &Plan,
    snapshot: &ClusterSnapshot,
    live: &[Hairpin],
    planner: &PlannerConfig,
) -> Vec<Change> {
    let key = |h: &Hairpin| (h.namespace().unwrap_or_default(), h.name_any());
    let source_annotation = planner.annotation("source");
    let ours = |h: &Hairpin| is_managed(&h.metadata, &source_annotation);
    let desired = desired_hairpins(plan, snapshot, &source_annotation);
    let mut out = Vec::new();
    for want in &desired {
        let (namespace, name) = key(want);
        let have = live.iter().find(|h| key(h) == key(want));
        let (action, before, after) = match have {
            // Without the Service's uid there is no owner to collect it with: the
            // controller waits for it.
            None if want.metadata.owner_references.is_none() => continue,
            None => (Action::Create, None, hairpin_view(want, true)),
            // Someone else's object of that name: the controller leaves it alone.
            Some(have) if !ours(have) => continue,
            Some(have) => {
                let after = hairpin_view(want, false);
                let before = hairpin_view(have, false);
                if before == after {
                    continue;
                }
                (Action::Update, Some(before), after)
            }
        };
        out.push(Change {
            action,
            kind: "Hairpin",
            namespace,
            name,
            key: None,
            before: before.as_ref().map(yaml),
            after: Some(yaml(&after)),
            written: Some(after),
        });
    }
    for stale in live {
        if ours(stale) && !desired.iter().any(|d| key(d) == key(stale)) {
            let (namespace, name) = key(stale);
            out.push(Change {
                action: Action::Delete,
                kind: "Hairpin",
                namespace,
                name,
                key: None,
                before: Some(yaml(&hairpin_view(stale, false))),
                after: None,
                written: None,
            });
        }
    }
    out
}

fn yaml<T: Serialize>(value: &T) -> String {
    serde_saphyr::to_string(value).unwrap_or_else(|err| format!("# cannot render: {err}\n"))
}

/// Unified diffs of every change: `--- a/<namespace>/<name>/<key>` for ConfigMap keys (the
/// form `hairpin plan -f` has always printed), `--- a/service/<namespace>/<name>` and
/// `--- a/dnsendpoint/<namespace>/<name>`, `--- a/hairpin/<namespace>/<name>` for objects
/// (the fields the controller sets, as YAML).
/// Empty when nothing would be written.
pub fn diff(changes: &[Change]) -> String {
    changes
        .iter()
        .map(|c| unified_diff(&c.path(), c.before.as_deref(), c.after.as_deref()))
        .collect()
}

/// One line per change, for the text output.
pub fn summary(changes: &[Change]) -> String {
    if changes.is_empty() {
        return "  none: the cluster already matches the plan\n".into();
    }
    changes
        .iter()
        .map(|c| {
            format!(
                "  {:<6}  {}\n",
                c.action.as_str(),
                hairpin_planner::escape::text(&c.describe())
            )
        })
        .collect()
}

/// The `-o json` document (its shape is documented in `docs/plan.md`; fields are only ever
/// added to it).
pub fn json(plan: &Plan, changes: &[Change], source: &str) -> Value {
    let cluster_ips = plan.known_cluster_ips();
    let (hosts, pending) = plan.hosts.hosts_entries(&cluster_ips);
    let mut document = json!({
        "apiVersion": "hairpin.io/v1alpha1",
        "kind": "Plan",
        "source": source,
        "complete": !plan.has_errors(),
        "loadBalancers": plan.load_balancers.iter().map(load_balancer_json).collect::<Vec<_>>(),
        "notNeeded": plan.not_needed.iter().map(|n| {
            let mut entry = json!({
                "service": n.service.to_string(),
                "reason": n.reason,
                "message": n.reason.describe(),
            });
            if let Some(receiver) = &n.receiver {
                entry["receiver"] = receiver_json(receiver, None);
            }
            entry
        }).collect::<Vec<_>>(),
        "conflicts": plan.conflicts.iter().map(|c| json!({
            "hostname": c.hostname,
            "loadBalancers": c.load_balancers.iter().map(ToString::to_string).collect::<Vec<_>>(),
        })).collect::<Vec<_>>(),
        "refused": plan.refused.iter().map(|r| json!({
            "hostname": r.hostname,
            "reason": r.reason,
            "source": r.source,
            "loadBalancer": r.load_balancer.to_string(),
            "message": r.detail,
        })).collect::<Vec<_>>(),
        "cures": plan.cures.iter().map(|c| {
            let mut cure = json!({
                "service": c.service.to_string(),
                "cure": c.cure,
                "mode": c.mode,
                "reason": c.reason,
                "delivery": c.delivery,
            });
            if let Some(native) = c.native {
                cure["native"] = json!(native);
            }
            cure
        }).collect::<Vec<_>>(),
        "verification": verification_json(&plan.verification),
        "dns": plan.dns.as_ref().map(dns_json),
        "hostsFile": hosts.iter().map(|e| json!({
            "ip": e.ip,
            "names": e.names,
        })).collect::<Vec<_>>(),
        "hostsFilePending": pending.iter().map(|m| json!({
            "hostname": m.hostname,
            "service": m.service.to_string(),
        })).collect::<Vec<_>>(),
        "changes": changes.iter().map(|c| json!({
            "action": c.action,
            "kind": c.kind,
            "namespace": c.namespace,
            "name": c.name,
            "key": c.key,
            "written": c.written,
        })).collect::<Vec<_>>(),
        "warnings": plan.warnings.iter().map(|w| json!({
            "subject": w.subject,
            "message": w.message,
        })).collect::<Vec<_>>(),
        "errors": plan.errors,
    });
    // Only on kube-dns clusters, so that other documents keep their exact shape.
    if let Some(stub) = &plan.stub_domains {
        document["kubeDnsStubDomains"] = json!({
            "configMap": stub.config_map.to_string(),
            "hostnames": stub.hostnames,
            "wildcardsLeftOut": stub.wildcards,
            "nameservers": stub.nameservers,
            "value": stub.value(),
            "existing": stub.existing,
        });
    }
    document
}

/// One load balancer of `loadBalancers`: its hairpin Service, routes and hostnames.
fn load_balancer_json(lb: &LoadBalancerPlan) -> Value {
    let l = &lb.load_balancer;
    let mut value = json!({
        "service": l.service.to_string(),
        "addresses": l.ips,
        "proxySources": l.proxy_sources,
        "hairpinService": lb.service_ref().to_string(),
        "clusterIPs": hairpin_planner::cluster_ips(&lb.service),
        "routes": lb.routes.iter().map(|r| json!({
            "listen": r.listen,
            "upstream": r.upstream,
            "proxyProtocol": r.proxy_protocol,
            "destination": r.destination,
        })).collect::<Vec<_>>(),
        "hostnames": lb.hostnames.iter().map(|h| json!({
            "name": h.name,
            "wildcardLabels": h.wildcard_labels,
            "sources": h.sources,
        })).collect::<Vec<_>>(),
    });
    // Only where one was found, so that other documents keep their exact shape.
    if let Some(receiver) = &l.receiver {
        value["receiver"] = receiver_json(receiver, l.receiver_mismatch.as_deref());
    }
    value
}

/// `receiver` of a load balancer: the implementation, what receives the traffic, its PROXY
/// setting (`required`, `optional`, `off`, `unknown`) and where it was read, as the `Hairpin`
/// status shows them; `mismatch` while it and the load balancer disagree.
fn receiver_json(receiver: &Receiver, mismatch: Option<&str>) -> Value {
    let mut value = json!({
        "implementation": receiver.implementation,
        "name": receiver.implementation.name(),
        "workload": receiver.workload,
        "proxyProtocol": receiver.requirement.as_str(),
        "setting": receiver.setting,
        "readFrom": receiver.read_from,
    });
    if let Some(mismatch) = mismatch {
        value["mismatch"] = json!(mismatch);
    }
    if !receiver.ports.is_empty() {
        value["ports"] = receiver
            .ports
            .iter()
            .map(|p| {
                json!({
                    "port": p.port,
                    "name": p.name,
                    "proxyProtocol": p.requirement.as_str(),
                    "setting": p.setting,
                    "readFrom": p.read_from,
                })
            })
            .collect();
    }
    value
}

/// `verification`: the mode, the names not verified, the wildcards passed through.
fn verification_json(verification: &Verification) -> Value {
    json!({
        "mode": verification.mode,
        "unverified": verification.unverified.iter().map(|u| json!({
            "hostname": u.hostname,
            "loadBalancer": u.load_balancer.to_string(),
            "reason": u.reason,
            "message": u.detail,
            "sources": u.sources,
        })).collect::<Vec<_>>(),
        "passthrough": verification.passthrough.iter().map(|p| json!({
            "hostname": p.hostname,
            "wildcard": p.wildcard,
            "why": p.why,
        })).collect::<Vec<_>>(),
    })
}

/// `dns`: the records, the ConfigMap keys written, the DNSEndpoints in external-dns mode.
fn dns_json(dns: &DnsChange) -> Value {
    json!({
        "mode": dns.mode,
        "clusterDomain": dns.cluster_domain,
        "hostnames": dns.entries.iter().map(|e| json!({
            "name": e.hostname,
            "target": e.target,
        })).collect::<Vec<_>>(),
        "writes": dns.writes.iter().map(|w| json!({
            "configMap": w.config_map.to_string(),
            "key": w.key,
            "changed": w.changed,
        })).collect::<Vec<_>>(),
        "dnsEndpoints": dns.dns_endpoints.as_ref().map(|e| json!({
            "objects": e.objects.iter().map(|o| json!({
                "name": o.object.object_ref().to_string(),
                "loadBalancer": o.load_balancer.to_string(),
                "changed": o.changed,
                "endpoints": o.object.spec.endpoints,
            })).collect::<Vec<_>>(),
            "pending": e.pending.iter().map(|p| json!({
                "hostname": p.hostname,
                "service": p.service.to_string(),
            })).collect::<Vec<_>>(),
            "stale": e.stale.iter().map(ToString::to_string).collect::<Vec<_>>(),
        })),
    })
}
