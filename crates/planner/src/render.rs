//! Printable forms of a [`Plan`]: a human summary, unified diffs of the ConfigMaps that would
//! change, and the objects to write as multi-document YAML for `kubectl apply -f -`.
//!
//! Every string that comes from a cluster object is printed through [`crate::escape`], so no
//! name, annotation or Corefile line can add a line, a section or a YAML document: the
//! values of plan fields that name things (hostnames, object names, Corefile keys and
//! servers) are escaped here; the free-text fields (warnings, refusal details and sources)
//! were escaped when they were built, and an error's `Display` escapes what it quotes.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::net::IpAddr;

use k8s_openapi::api::core::v1::ConfigMap;
use serde::Serialize;

use crate::corefile::Form;
use crate::escape::{self, Text};
use crate::external_dns::DnsEndpoints;
use crate::kube_dns::StubDomains;
use crate::native::{Cure, CureChoice, NativeProgress};
use crate::snapshot::{ClusterSnapshot, ObjectRef};
use crate::{DnsChange, DnsWrite, LoadBalancerPlan, Plan, ProxyHeader, WriteEdit};

/// A hairpin Service's families as planned: `SingleStack IPv4`, `PreferDualStack IPv4, IPv6`.
fn families(service: &k8s_openapi::api::core::v1::Service) -> String {
    let spec = service.spec.as_ref();
    let policy = spec.and_then(|s| s.ip_family_policy.as_deref());
    let families = spec.and_then(|s| s.ip_families.as_ref());
    format!(
        "{} {}",
        Text(policy.unwrap_or("SingleStack")),
        families.map_or_else(
            || "IPv4".to_owned(),
            |f| escape::text(&f.join(", ")).into_owned()
        )
    )
}

/// The human summary.
pub fn text(plan: &Plan) -> String {
    let mut out = String::new();
    let needed = plan.load_balancers.len();
    let _ = writeln!(
        out,
        "hairpin plan: {needed} load balancer{} need{} a hairpin, {} do{} not",
        plural(needed),
        if needed == 1 { "s" } else { "" },
        plan.not_needed.len(),
        if plan.not_needed.len() == 1 { "es" } else { "" },
    );
    let cluster_ips = plan.known_cluster_ips();
    for lb in &plan.load_balancers {
        let cure = plan
            .cures
            .iter()
            .find(|c| c.service == lb.load_balancer.service);
        load_balancer_text(&mut out, lb, cure, &cluster_ips);
    }
    not_needed_text(&mut out, plan);
    conflicts_text(&mut out, plan);
    refused_text(&mut out, plan);
    crate::verify::text(&plan.verification, &mut out);
    dns_text(&mut out, plan.dns.as_ref());
    if let Some(stub) = &plan.stub_domains {
        stub_domains_text(&mut out, stub);
    }
    hosts_text(&mut out, plan, &cluster_ips);
    closing_text(&mut out, plan);
    out
}

/// The `cure` row of a load balancer: the cure in effect, where native stands, and why.
/// The reason was escaped when the planner built it (it quotes the probe's outcome).
pub fn cure_text(choice: &CureChoice) -> String {
    let why = &choice.reason;
    let detail = match (choice.cure, choice.native) {
        (Cure::Dns, Some(NativeProgress::ToProve)) => "native to be proven by probe".to_owned(),
        (Cure::Dns, Some(NativeProgress::Probing)) => format!("native probing: {why}"),
        (Cure::Dns, Some(NativeProgress::Failed)) => format!("native failed: {why}"),
        (_, Some(NativeProgress::NotNeeded)) => format!("native not tried: {why}"),
        (Cure::Dns, Some(NativeProgress::Unsupported)) => format!("native not possible: {why}"),
        (Cure::Native, Some(NativeProgress::Proven)) => format!("proven: {why}"),
        (Cure::Native, Some(NativeProgress::ToProve)) => format!("to be proven by probe: {why}"),
        (Cure::Native, Some(NativeProgress::Probing)) => format!("probing: {why}"),
        (Cure::Native, Some(NativeProgress::Failed)) => format!("probe failed: {why}"),
        _ => why.clone(),
    };
    format!("{} ({detail})", choice.cure.as_str())
}

/// One load balancer: its addresses, cure, hairpin Service, routes and hostnames.
fn load_balancer_text(
    out: &mut String,
    lb: &LoadBalancerPlan,
    cure: Option<&CureChoice>,
    cluster_ips: &BTreeMap<ObjectRef, Vec<IpAddr>>,
) {
    let l = &lb.load_balancer;
    let svc = lb.service_ref();
    let _ = writeln!(out, "\nLoad balancer {}", Text(&l.service.to_string()));
    let ips: Vec<String> = l.ips.iter().map(ToString::to_string).collect();
    let rows = [
        ("addresses", ips.join(", ")),
        (
            "PROXY from",
            escape::text(&l.proxy_sources.join(", ")).into_owned(),
        ),
        (
            "hairpin Service",
            format!(
                "{} ({}; ClusterIP {})",
                Text(&svc.to_string()),
                families(&lb.service),
                cluster_ips.get(&svc).map_or_else(
                    || "assigned when created".to_owned(),
                    |ips| ips
                        .iter()
                        .map(ToString::to_string)
                        .collect::<Vec<_>>()
                        .join(", ")
                )
            ),
        ),
    ];
    for (k, v) in rows {
        let _ = writeln!(out, "  {k:<16} {v}");
    }
    if let Some(cure) = cure {
        let _ = writeln!(out, "  {:<16} {}", "cure", cure_text(cure));
        // Escaped by the planner (it quotes the Service's annotations).
        let _ = writeln!(
            out,
            "  {:<16} {}: {}",
            "delivery", cure.delivery.kind, cure.delivery.evidence
        );
    }
    if let Some(why) = &l.forced {
        let _ = writeln!(out, "  {:<16} {}", "forced", Text(why));
    }
    if let Some(receiver) = &l.receiver {
        let _ = writeln!(out, "  {:<16} {}", "receiver", Text(&receiver.describe()));
    }
    if let Some(why) = &l.receiver_mismatch {
        // Escaped by the planner (a warning's text).
        let _ = writeln!(out, "  {:<16} {why}", "mismatch");
    }
    routes_text(out, lb);
    hostnames_text(out, lb);
}

/// A load balancer's routes, aligned.
fn routes_text(out: &mut String, lb: &LoadBalancerPlan) {
    let _ = writeln!(out, "  routes");
    let width = lb
        .routes
        .iter()
        .map(|r| escape::text(&r.upstream).len())
        .max()
        .unwrap_or(0);
    // `PROXY none`: a port of the load balancer without the PROXY protocol, forwarded as
    // is (its hostnames resolve to the hairpin Service, so it is served there too).
    let proxy_width = lb
        .routes
        .iter()
        .map(|r| r.proxy_protocol.as_str().len())
        .max()
        .unwrap_or(0);
    for r in &lb.routes {
        let tail = match r.proxy_protocol {
            ProxyHeader::None => "no header, bytes forwarded as they are".to_owned(),
            _ if r.destinations.is_empty() => {
                format!("destination {}", Text(&r.destination))
            }
            _ => format!("destinations {}", Text(&r.destinations.join(", "))),
        };
        let _ = writeln!(
            out,
            "    {:<15} -> {:<width$}  PROXY {:<proxy_width$}  {tail}",
            Text(&r.listen),
            Text(&r.upstream),
            r.proxy_protocol.as_str(),
        );
    }
}

/// A load balancer's hostnames, with their sources.
fn hostnames_text(out: &mut String, lb: &LoadBalancerPlan) {
    let _ = writeln!(out, "  hostnames ({})", lb.hostnames.len());
    // A wildcard says how many labels it covers: `*.example.com (one label)`.
    let names: Vec<String> = lb
        .hostnames
        .iter()
        .map(|h| match h.wildcard_labels {
            Some(labels) => format!("{} ({})", Text(&h.name), labels.describe()),
            None => escape::text(&h.name).into_owned(),
        })
        .collect();
    let width = names.iter().map(String::len).max().unwrap_or(0);
    for (name, h) in names.iter().zip(&lb.hostnames) {
        let _ = writeln!(out, "    {name:<width$}  {}", Text(&h.sources.join("; ")));
    }
}

/// The load balancers that need no hairpin, and why.
fn not_needed_text(out: &mut String, plan: &Plan) {
    if !plan.not_needed.is_empty() {
        let _ = writeln!(out, "\nNot needed");
        let width = plan
            .not_needed
            .iter()
            .map(|n| escape::text(&n.service.to_string()).len())
            .max()
            .unwrap_or(0);
        for n in &plan.not_needed {
            let _ = writeln!(
                out,
                "  {:<width$}  {}",
                Text(&n.service.to_string()),
                n.reason.describe()
            );
            if let Some(receiver) = &n.receiver {
                let _ = writeln!(
                    out,
                    "  {:<width$}  receiver: {}",
                    "",
                    Text(&receiver.describe())
                );
            }
        }
    }
}

/// The hostnames several load balancers claim.
fn conflicts_text(out: &mut String, plan: &Plan) {
    if !plan.conflicts.is_empty() {
        let _ = writeln!(out, "\nConflicts (hostnames planned for no load balancer)");
        let width = plan
            .conflicts
            .iter()
            .map(|c| escape::text(&c.hostname).len())
            .max()
            .unwrap_or(0);
        for c in &plan.conflicts {
            let lbs: Vec<String> = c.load_balancers.iter().map(ToString::to_string).collect();
            let _ = writeln!(
                out,
                "  {:<width$}  {}",
                Text(&c.hostname),
                Text(&lbs.join(", "))
            );
        }
    }
}

/// The hostnames admission refused, and why.
fn refused_text(out: &mut String, plan: &Plan) {
    if !plan.refused.is_empty() {
        let _ = writeln!(out, "\nRefused (hostnames hairpin will not redirect)");
        let width = plan
            .refused
            .iter()
            .map(|r| escape::text(&r.hostname).len())
            .max()
            .unwrap_or(0);
        let reason_width = plan
            .refused
            .iter()
            .map(|r| r.reason.label().len())
            .max()
            .unwrap_or(0);
        for r in &plan.refused {
            let _ = writeln!(
                out,
                "  {:<width$}  {:<reason_width$}  {}: {}",
                Text(&r.hostname),
                r.reason.label(),
                r.source,
                r.detail
            );
        }
    }
}

/// The DNS change: the mode, and each key written.
fn dns_text(out: &mut String, dns: Option<&DnsChange>) {
    let _ = writeln!(out, "\nDNS");
    match dns {
        Some(d) => {
            let _ = writeln!(
                out,
                "  mode {} (cluster domain {}), {} hostname{}",
                d.mode.as_str(),
                Text(&d.cluster_domain),
                d.entries.len(),
                plural(d.entries.len()),
            );
            for w in &d.writes {
                let what = write_text(w);
                let _ = writeln!(
                    out,
                    "  ConfigMap {} key {}: {what}; {}",
                    Text(&w.config_map.to_string()),
                    Text(&w.key),
                    if w.changed {
                        "changes (see -o diff)"
                    } else {
                        "unchanged"
                    }
                );
            }
            if let Some(endpoints) = &d.dns_endpoints {
                dns_endpoints_text(out, endpoints);
            }
        }
        None => {
            let _ = writeln!(out, "  not planned (see errors)");
        }
    }
}

/// What a DNS write does to its key.
fn write_text(w: &DnsWrite) -> String {
    match &w.edit {
        WriteEdit::Key { .. } => "the whole key".to_owned(),
        WriteEdit::Blocks { inserts } if inserts.is_empty() => "no block".to_owned(),
        WriteEdit::Blocks { inserts } => inserts
            .iter()
            .map(|i| {
                let form = match i.form {
                    Form::Rewrite => "rewrite",
                    Form::Answer => "answers",
                };
                format!("block in {} ({form})", Text(&i.server.to_string()))
            })
            .collect::<Vec<_>>()
            .join(", "),
    }
}

/// The hosts-file block the node agents write; names whose hairpin Service has no ClusterIP yet
/// under a placeholder.
fn hosts_text(out: &mut String, plan: &Plan, cluster_ips: &BTreeMap<ObjectRef, Vec<IpAddr>>) {
    let _ = writeln!(out, "\nHosts-file block (node agent)");
    let (entries, missing) = plan.hosts.hosts_entries(cluster_ips);
    let mut rows: Vec<(String, String)> = entries
        .iter()
        .map(|e| {
            (
                e.ip.to_string(),
                escape::text(&e.names.join(" ")).into_owned(),
            )
        })
        .collect();
    let mut pending: std::collections::BTreeMap<String, Vec<&str>> =
        std::collections::BTreeMap::new();
    for m in &missing {
        pending
            .entry(format!("<ClusterIP of {}>", Text(&m.service.to_string())))
            .or_default()
            .push(&m.hostname);
    }
    rows.extend(
        pending
            .into_iter()
            .map(|(ip, names)| (ip, escape::text(&names.join(" ")).into_owned())),
    );
    if rows.is_empty() {
        let _ = writeln!(out, "  (empty)");
    }
    let width = rows.iter().map(|(ip, _)| ip.len()).max().unwrap_or(0);
    for (ip, names) in &rows {
        let _ = writeln!(out, "  {ip:<width$}  {names}");
    }
    if !missing.is_empty() {
        let _ = writeln!(
            out,
            "  (a hairpin Service gets its ClusterIP when it is created; the node agent fills it in)"
        );
    }
}

/// Hairpin Services to delete, warnings and errors.
fn closing_text(out: &mut String, plan: &Plan) {
    if !plan.orphaned_services.is_empty() {
        let _ = writeln!(out, "\nTo delete (hairpin Services no longer needed)");
        for o in &plan.orphaned_services {
            let _ = writeln!(out, "  Service {}", Text(&o.to_string()));
        }
    }
    if !plan.warnings.is_empty() {
        let _ = writeln!(out, "\nWarnings");
        for w in &plan.warnings {
            // Escaped when built; a line break in it is hairpin's own (a suggested block).
            let _ = writeln!(out, "  - {}", indent_rest(&w.to_string(), "    "));
        }
    }
    if !plan.errors.is_empty() {
        let _ = writeln!(out, "\nErrors (nothing is written for these)");
        for e in &plan.errors {
            // Its `Display` escapes what it quotes, once: one line.
            let _ = writeln!(out, "  - {e}");
        }
    }
}

/// The `stubDomains` alternative on a kube-dns cluster: the value when the nameservers are
/// known, else the hostnames and the flag that prints it.
fn stub_domains_text(out: &mut String, stub: &StubDomains) {
    let _ = writeln!(
        out,
        "\nkube-dns stubDomains (hairpin does not write ConfigMap {}: merge this yourself)",
        Text(&stub.config_map.to_string())
    );
    match stub.value() {
        Some(value) => {
            let servers: Vec<String> = stub.nameservers.iter().map(ToString::to_string).collect();
            let _ = writeln!(
                out,
                "  kube-dns forwards each hostname to {}, which must answer it with the hairpin \
                 Service's ClusterIP",
                servers.join(", ")
            );
            let _ = writeln!(
                out,
                "  data.{}:\n    {}",
                crate::kube_dns::STUB_DOMAINS_KEY,
                // JSON of admitted hostnames and addresses: its backslashes are meant.
                escape::controls(&value)
            );
            match (&stub.existing, stub.patch_command()) {
                (Some(existing), _) => {
                    let _ = writeln!(
                        out,
                        "  the ConfigMap already has {} {}: add these entries to it (a \
                         merge patch would replace it)",
                        crate::kube_dns::STUB_DOMAINS_KEY,
                        Text(existing)
                    );
                }
                (None, Some(patch)) => {
                    let _ = writeln!(out, "  with kubectl: {}", escape::controls(&patch));
                }
                (None, None) => {}
            }
        }
        None => {
            let _ = writeln!(
                out,
                "  kube-dns can forward each hostname to a DNS server that answers it with the \
                 hairpin Service's ClusterIP (such as the private zone's server that \
                 --dns-mode external-dns publishes to); hairpin is not a DNS server, so it \
                 knows of none"
            );
            if !stub.hostnames.is_empty() {
                let _ = writeln!(out, "  hostnames: {}", Text(&stub.hostnames.join(", ")));
                let _ = writeln!(
                    out,
                    "  to print the value: rerun with --stub-domain-nameserver <IP of that server>"
                );
            }
        }
    }
    if !stub.wildcards.is_empty() {
        let _ = writeln!(
            out,
            "  left out (a stub domain for the parent would take the parent name too): {}",
            Text(&stub.wildcards.join(", "))
        );
    }
    if let Some(example) = stub.hostnames.first() {
        let _ = writeln!(
            out,
            "  caveat: a stub domain also captures every name under it (a.{} goes to the \
             same servers), so they must answer or forward those names too",
            Text(example)
        );
    }
}

/// The `DNSEndpoint`s of the external-dns mode: each object with its records, the hostnames
/// still waiting for a ClusterIP, and the objects deleted.
fn dns_endpoints_text(out: &mut String, endpoints: &DnsEndpoints) {
    let _ = writeln!(
        out,
        "  no DNS ConfigMap is written: external-dns publishes these DNSEndpoints (label {}=true)",
        crate::external_dns::DNS_ENDPOINT_LABEL
    );
    for o in &endpoints.objects {
        let records = &o.object.spec.endpoints;
        let _ = writeln!(
            out,
            "  DNSEndpoint {} ({}): {} record{}, TTL {}s; {}",
            Text(&o.object.object_ref().to_string()),
            Text(&o.load_balancer.to_string()),
            records.len(),
            plural(records.len()),
            crate::external_dns::RECORD_TTL,
            match &o.current {
                None => "created (see -o diff)",
                Some(_) if o.changed => "changes (see -o diff)",
                Some(_) => "unchanged",
            }
        );
        let width = records
            .iter()
            .map(|e| escape::text(&e.dns_name).len())
            .max()
            .unwrap_or(0);
        for e in records {
            let _ = writeln!(
                out,
                "    {:<width$}  {:<4}  {}",
                Text(&e.dns_name),
                Text(&e.record_type),
                Text(&e.targets.join(", "))
            );
        }
    }
    if !endpoints.pending.is_empty() {
        let names: Vec<&str> = endpoints
            .pending
            .iter()
            .map(|p| p.hostname.as_str())
            .collect();
        let _ = writeln!(
            out,
            "  waiting for their hairpin Service's ClusterIP (published once it is created): {}",
            Text(&names.join(", "))
        );
    }
    for stale in &endpoints.stale {
        let _ = writeln!(
            out,
            "  DNSEndpoint {}: deleted (no longer needed)",
            Text(&stale.to_string())
        );
    }
}

fn plural(n: usize) -> &'static str {
    if n == 1 { "" } else { "s" }
}

fn indent_rest(s: &str, indent: &str) -> String {
    s.trim_end().replace('\n', &format!("\n{indent}"))
}

/// Unified diffs of every ConfigMap key the plan would change, with
/// `--- a/<namespace>/<name>/<key>` headers. Empty when nothing changes.
pub fn diff(plan: &Plan, snapshot: &ClusterSnapshot) -> String {
    let mut out = String::new();
    let writes = plan.dns.iter().flat_map(|d| &d.writes);
    for w in writes.filter(|w| w.changed) {
        push_diff(
            &mut out,
            &w.config_map,
            &w.key,
            w.current.as_deref(),
            Some(&w.desired),
        );
    }
    let cm = &plan.routes_config_map;
    let cm_ref = ObjectRef::from_meta(&cm.metadata);
    let current = snapshot.config_map(&cm_ref.namespace, &cm_ref.name);
    for (key, desired) in cm.data.iter().flatten() {
        let now = current
            .and_then(|c| c.data.as_ref())
            .and_then(|d| d.get(key))
            .map(String::as_str);
        if now != Some(desired.as_str()) {
            push_diff(&mut out, &cm_ref, key, now, Some(desired));
        }
    }
    out
}

fn push_diff(out: &mut String, cm: &ObjectRef, key: &str, old: Option<&str>, new: Option<&str>) {
    let path = format!("{}/{}/{key}", cm.namespace, cm.name);
    out.push_str(&unified_diff(&path, old, new));
}

/// A unified diff with `--- a/<path>` / `+++ b/<path>` headers (`/dev/null` for an absent
/// side), three lines of context; empty when both sides are equal.
///
/// The path is escaped ([`escape::text`]); in the lines of the texts compared, only the
/// characters that could split or hide a line are ([`escape::controls`]; a `\r` that ends a
/// line is kept), so every line of the diff is one line of the texts.
pub fn unified_diff(path: &str, old: Option<&str>, new: Option<&str>) -> String {
    let path = escape::text(path);
    let mut out = String::new();
    let old_header = if old.is_some() {
        format!("a/{path}")
    } else {
        "/dev/null".into()
    };
    let new_header = if new.is_some() {
        format!("b/{path}")
    } else {
        "/dev/null".into()
    };
    let diff = similar::TextDiff::from_lines(old.unwrap_or_default(), new.unwrap_or_default());
    let _ = write!(
        out,
        "{}",
        diff.unified_diff()
            .context_radius(3)
            .header(&old_header, &new_header)
    );
    if out
        .chars()
        .all(|c| c == '\n' || c == '\t' || !escape::invisible(c))
    {
        return out;
    }
    let mut safe = String::with_capacity(out.len() + 16);
    for line in out.split_inclusive('\n') {
        let body = line.strip_suffix('\n').unwrap_or(line);
        let (body, cr) = match body.strip_suffix('\r') {
            Some(b) if line.ends_with('\n') => (b, "\r"),
            _ => (body, ""),
        };
        safe.push_str(&escape::controls(body));
        safe.push_str(cr);
        if line.ends_with('\n') {
            safe.push('\n');
        }
    }
    safe
}

/// The objects to write, as multi-document YAML: hairpin Services, the DNS ConfigMaps (those
/// that change) or `DNSEndpoint`s, and the routes ConfigMap. Orphaned hairpin Services and
/// stale `DNSEndpoint`s are listed in a comment.
pub fn yaml(plan: &Plan) -> Result<String, String> {
    let mut docs: Vec<String> = Vec::new();
    for lb in &plan.load_balancers {
        docs.push(to_yaml(&lb.service)?);
    }
    let writes = plan.dns.iter().flat_map(|d| &d.writes);
    for cm in writes.filter_map(|w| w.object.as_ref()) {
        docs.push(to_yaml::<ConfigMap>(cm)?);
    }
    let endpoints = plan.dns.iter().filter_map(|d| d.dns_endpoints.as_ref());
    for endpoints in endpoints.clone() {
        for o in endpoints.objects.iter().filter(|o| o.changed) {
            docs.push(to_yaml(&o.object)?);
        }
    }
    docs.push(to_yaml(&plan.routes_config_map)?);
    let mut out = String::new();
    for o in &plan.orphaned_services {
        let _ = writeln!(
            out,
            "# delete: Service {} (no longer needed)",
            Text(&o.to_string())
        );
    }
    for stale in endpoints.flat_map(|e| &e.stale) {
        let _ = writeln!(
            out,
            "# delete: DNSEndpoint {} (no longer needed)",
            Text(&stale.to_string())
        );
    }
    for r in &plan.refused {
        let _ = writeln!(
            out,
            "# refused: hostname {} ({}) from {}: {}",
            Text(&r.hostname),
            r.reason,
            r.source,
            r.detail
        );
    }
    for d in docs {
        out.push_str("---\n");
        out.push_str(&d);
        if !d.ends_with('\n') {
            out.push('\n');
        }
    }
    Ok(out)
}

/// `obj` as one YAML document that parses back to exactly `obj`.
///
/// Block scalars keep a Corefile readable, but not every string survives them (a value of
/// only line breaks, trailing blank lines, some control characters): each document is read
/// back, and one that differs is written again with every string double-quoted.
fn to_yaml<T: Serialize>(obj: &T) -> Result<String, String> {
    let want = serde_json::to_value(obj).map_err(|e| e.to_string())?;
    let reads_back =
        |yaml: &str| serde_saphyr::from_str::<serde_json::Value>(yaml).is_ok_and(|v| v == want);
    let yaml = serde_saphyr::to_string(obj).map_err(|e| e.to_string())?;
    if reads_back(&yaml) {
        return Ok(yaml);
    }
    let options = serde_saphyr::ser_options! {
        prefer_block_scalars: false,
        quote_all: true,
    };
    let quoted = serde_saphyr::to_string_with_options(obj, options).map_err(|e| e.to_string())?;
    if reads_back(&quoted) {
        return Ok(quoted);
    }
    Err("an object does not survive YAML serialization; use -o json".to_owned())
}
