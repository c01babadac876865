//! Hostname admission: which hostnames hairpin may redirect, and on whose word.
//!
//! hairpin writes into the cluster's DNS on the word of Ingresses, Gateways, routes and
//! annotations that any namespace can create, so every hostname passes this policy before it
//! is planned. Never redirected, whoever asks:
//!
//! - a name in a zone the cluster DNS serves itself: every zone of every `kubernetes` plugin
//!   (in every server block) and the cluster domain, with everything under them
//!   (`kubernetes.default.svc.cluster.local`);
//! - the reverse zones `in-addr.arpa` and `ip6.arpa`;
//! - `localhost` and names under it;
//! - cloud metadata names ([`CLOUD_METADATA_NAMES`], [`CLOUD_INTERNAL_ZONES`]);
//! - single-label names (`intranet`): a bare name is resolved through the pods' search list, so
//!   a redirect would change what every short name means;
//! - a name the pods' search path completes into a cluster name (`kubernetes.default.svc`,
//!   `kubernetes.default`, `ingress-nginx-controller.ingress-nginx`): its last label is `svc`,
//!   `pod`, or a namespace of the cluster that is not a top-level domain;
//! - a public suffix (`co.uk`, `github.io`), and a wildcard directly under one (`*.co.uk`,
//!   `*.com`), from the Public Suffix List (the `psl` crate, both its ICANN and private
//!   sections). A TLD that the list does not know (`internal`, `test`, `corp`) counts as a
//!   public suffix too, by the list's implicit `*` rule: `*.internal` is refused, while
//!   `app.example.internal` and `*.example.internal` are admitted like any other name;
//! - a wildcard over public suffixes: `*.amazonaws.com` covers `s3.amazonaws.com`, and
//!   `*.compute.amazonaws.com` every `<region>.compute.amazonaws.com` (a Gateway wildcard
//!   refused for any suffix under its base, an Ingress one for a suffix one label under it);
//! - anything in a `--deny-hostnames` zone.
//!
//! A wildcard is refused when it covers any protected name, counting what its `*` stands for
//! ([`WildcardLabels`]): `*.svc.cluster.local` and `*.local` (which covers `cluster.local`)
//! are refused, `*.example.com` is not.
//!
//! Then who may claim a name: sources in any namespace by default, or only those
//! `--hostname-namespaces` allows ([`NamespacePolicy`]); and a load balancer whose Service has
//! the `allowed-hostnames` annotation gets only the names the annotation allows.
//!
//! A refused hostname is left out of the plan and reported as a [`Refusal`].

use std::collections::{BTreeMap, BTreeSet, HashSet};
use std::fmt;

use k8s_openapi::api::core::v1::Namespace;
use serde::Serialize;

use crate::config::{AdmissionConfig, NamespacePolicy};
use crate::name::WildcardLabels;
use crate::name::{DnsName, Host, head, within};
use crate::snapshot::{ClusterSnapshot, ObjectRef};
use crate::warning::Warning;

/// Cloud metadata service names: GCE and GKE (`metadata.google.internal`, and `metadata`
/// through the `google.internal` search domain), AWS EC2 (`instance-data`,
/// `instance-data.ec2.internal`; other regions are under [`CLOUD_INTERNAL_ZONES`]). Azure,
/// Alibaba Cloud, Oracle Cloud and OpenStack serve theirs on a link-local address only
/// (169.254.169.254, 100.100.100.200), which no DNS rule can redirect. Add others with
/// `--deny-hostnames`.
pub const CLOUD_METADATA_NAMES: &[&str] = &[
    "metadata",
    "metadata.google.internal",
    "instance-data",
    "instance-data.ec2.internal",
];

/// Cloud providers' own internal zones: Google's (`metadata.google.internal`), and AWS's VPC
/// zones, which hold the metadata name of every region (`instance-data.<region>.compute.internal`)
/// and the nodes' own hostnames (`ip-10-0-0-1.ec2.internal`).
pub const CLOUD_INTERNAL_ZONES: &[&str] = &["google.internal", "ec2.internal", "compute.internal"];

/// Reverse-lookup zones.
pub const REVERSE_ZONES: &[&str] = &["in-addr.arpa", "ip6.arpa"];

/// Why a hostname was refused. The label ([`RefusalReason::label`]) is stable: it is the
/// `reason` of `hairpin_hostnames_refused_total` and of the plan's `refused` list.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum RefusalReason {
    /// Not a valid hostname.
    Invalid,
    /// In a zone the cluster DNS serves itself (the cluster domain, a `kubernetes` zone).
    ClusterZone,
    /// In `in-addr.arpa` or `ip6.arpa`.
    ReverseZone,
    /// `localhost` or a name under it.
    Localhost,
    /// A cloud metadata name or a cloud provider's internal zone.
    CloudMetadata,
    /// A single-label name.
    SingleLabel,
    /// A public suffix, or a wildcard directly under one.
    PublicSuffix,
    /// In a `--deny-hostnames` zone.
    Denied,
    /// Its source is in a namespace `--hostname-namespaces` does not allow.
    NamespaceNotAllowed,
    /// Not allowed by the load balancer Service's `allowed-hostnames` annotation.
    NotInAllowList,
    /// A name that the pods' DNS search path completes into a cluster name
    /// (`kubernetes.default`, `*.default.svc`): its last label is `svc`, `pod`, or a namespace
    /// of the cluster that is not a top-level domain.
    SearchPath,
}

impl RefusalReason {
    /// Every reason, in order.
    pub const ALL: [RefusalReason; 11] = [
        RefusalReason::Invalid,
        RefusalReason::ClusterZone,
        RefusalReason::ReverseZone,
        RefusalReason::Localhost,
        RefusalReason::CloudMetadata,
        RefusalReason::SingleLabel,
        RefusalReason::PublicSuffix,
        RefusalReason::Denied,
        RefusalReason::NamespaceNotAllowed,
        RefusalReason::NotInAllowList,
        RefusalReason::SearchPath,
    ];

    /// The stable label, e.g. `cluster_zone`.
    pub fn label(self) -> &'static str {
        match self {
            RefusalReason::Invalid => "invalid",
            RefusalReason::ClusterZone => "cluster_zone",
            RefusalReason::ReverseZone => "reverse_zone",
            RefusalReason::Localhost => "localhost",
            RefusalReason::CloudMetadata => "cloud_metadata",
            RefusalReason::SingleLabel => "single_label",
            RefusalReason::PublicSuffix => "public_suffix",
            RefusalReason::Denied => "denied",
            RefusalReason::NamespaceNotAllowed => "namespace_not_allowed",
            RefusalReason::NotInAllowList => "not_in_allow_list",
            RefusalReason::SearchPath => "search_path",
        }
    }
}

impl fmt::Display for RefusalReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.label())
    }
}

/// A hostname hairpin will not redirect, and who asked for it.
///
/// `hostname` is as written (print it through [`crate::escape`]); `source` and `detail` are
/// escaped when the refusal is built, and printed as they are.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Serialize)]
pub struct Refusal {
    /// The hostname: normalized, or as written when it is not valid.
    pub hostname: String,
    /// Who asked, e.g. `Ingress tenant/web` or `HTTPRoute a/r via Gateway gw/main`.
    pub source: String,
    /// The kind of the object that asked (`Ingress`, `Service`, `Gateway`, `HTTPRoute`...).
    pub kind: String,
    /// The object that asked.
    pub object: ObjectRef,
    /// The load balancer it was claimed for.
    pub load_balancer: ObjectRef,
    /// Why, as a stable label.
    pub reason: RefusalReason,
    /// Why, for people.
    pub detail: String,
}

impl Refusal {
    /// The plan warning for this refusal: the object, the host and the reason.
    pub fn warning(&self) -> Warning {
        // `source` and `detail` are escaped already: built as is, not through `Warning::new`.
        Warning {
            subject: self.source.clone(),
            message: format!(
                "hostname {} refused ({}): {}; it is not redirected",
                crate::escape::Text(&self.hostname),
                self.reason,
                self.detail
            ),
        }
    }
}

/// Parses a comma-separated list of hostnames or `*.` wildcards (the `--deny-hostnames` flag,
/// the `allowed-hostnames` annotation).
///
/// # Errors
/// The first item that is not a hostname, and why.
pub fn parse_host_list(s: &str) -> Result<Vec<Host>, String> {
    s.split(',')
        .map(str::trim)
        .filter(|i| !i.is_empty())
        .map(|i| Host::parse(i).map_err(|e| format!("{i:?}: {e}")))
        .collect()
}

/// Who asked for a hostname.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Origin {
    /// `Ingress`, `Service`, `Gateway`, `HTTPRoute`...
    pub kind: &'static str,
    /// The object.
    pub object: ObjectRef,
    /// For people: `Ingress shop/web`, `Service a/b annotation x`...
    pub text: String,
}

impl Origin {
    /// An origin described as `<kind> <namespace>/<name>`.
    pub fn new(kind: &'static str, object: ObjectRef) -> Self {
        // Built by hand rather than with `format!`: one per Ingress on every plan.
        let mut text =
            String::with_capacity(kind.len() + object.namespace.len() + object.name.len() + 2);
        text.push_str(kind);
        text.push(' ');
        if !object.namespace.is_empty() {
            text.push_str(&object.namespace);
            text.push('/');
        }
        text.push_str(&object.name);
        Origin { kind, object, text }
    }

    /// An origin with its own description.
    pub fn with_text(kind: &'static str, object: ObjectRef, text: String) -> Self {
        Origin { kind, object, text }
    }
}

/// The policy, ready to apply to one snapshot.
#[derive(Debug)]
pub struct Admission<'a> {
    /// Cluster zones (kubernetes zones and the cluster domain), normalized.
    cluster_zones: Vec<String>,
    deny: &'a [Host],
    namespaces: &'a NamespacePolicy,
    /// Namespace name -> allowed, when the policy depends on labels.
    namespace_labels: BTreeMap<&'a str, Option<&'a BTreeMap<String, String>>>,
    /// Load balancer Service -> the hosts its annotation allows.
    allow_lists: BTreeMap<ObjectRef, Vec<Host>>,
    /// The cluster's namespaces: Namespace objects, the namespaces of every object seen, and
    /// the ones every cluster has ([`BUILT_IN_NAMESPACES`]).
    cluster_namespaces: BTreeSet<&'a str>,
    /// Bit `n` set: some namespace is `n` bytes long (`n` < 64; 63 for longer ones). Most
    /// names' last label has no namespace's length, and the set is not searched then.
    namespace_lengths: u64,
    /// Problems with the policy's inputs (an annotation that does not parse...).
    pub warnings: Vec<Warning>,
}

impl<'a> Admission<'a> {
    /// The policy for `snapshot`: `cluster_zones` are the zones the cluster DNS serves (the
    /// `kubernetes` plugin's zones and the cluster domain); `allow_key` is the annotation
    /// holding a load balancer's allow-list; `lbs` are the load balancers whose Services may
    /// carry it.
    pub fn new(
        config: &'a AdmissionConfig,
        snapshot: &'a ClusterSnapshot,
        cluster_zones: impl IntoIterator<Item = impl AsRef<str>>,
        allow_key: &str,
        lbs: &BTreeSet<&ObjectRef>,
    ) -> Self {
        let mut cluster_zones: Vec<String> = cluster_zones
            .into_iter()
            .filter_map(|z| DnsName::parse(z.as_ref()).ok())
            .map(String::from)
            .collect();
        cluster_zones.sort();
        cluster_zones.dedup();
        let mut warnings = Vec::new();
        let allow_lists = allow_lists(snapshot, allow_key, lbs, &mut warnings);
        let namespace_labels = if config.hostname_namespaces.needs_namespaces() {
            snapshot
                .namespaces
                .iter()
                .filter_map(|ns: &'a Namespace| {
                    Some((ns.metadata.name.as_deref()?, ns.metadata.labels.as_ref()))
                })
                .collect()
        } else {
            BTreeMap::new()
        };
        let cluster_namespaces = cluster_namespaces(snapshot);
        let namespace_lengths = cluster_namespaces
            .iter()
            .fold(0, |bits, ns| bits | length_bit(ns));
        Admission {
            cluster_zones,
            cluster_namespaces,
            namespace_lengths,
            deny: &config.deny_hostnames,
            namespaces: &config.hostname_namespaces,
            namespace_labels,
            allow_lists,
            warnings,
        }
    }

    /// Whether `host` (with a wildcard meaning `labels`), asked for by `origin` for the load
    /// balancer `lb`, may be redirected; `Err` says why not.
    pub fn check(
        &self,
        host: &Host,
        labels: WildcardLabels,
        origin: &Origin,
        lb: &ObjectRef,
    ) -> Result<(), (RefusalReason, String)> {
        check_name(host, labels, &self.cluster_zones, self.deny)?;
        self.check_search_path(host)?;
        let namespace = origin.object.namespace.as_str();
        let allowed = match self.namespaces {
            NamespacePolicy::Any => true,
            NamespacePolicy::Names(names) => names.contains(namespace),
            NamespacePolicy::Selector(reqs) => self
                .namespace_labels
                .get(namespace)
                .is_some_and(|labels| reqs.iter().all(|r| r.matches(*labels))),
        };
        if !allowed {
            return Err((
                RefusalReason::NamespaceNotAllowed,
                format!(
                    "namespace {namespace} may not claim hostnames (allowed: {})",
                    self.namespaces.describe()
                ),
            ));
        }
        if let Some(allowed) = self.allow_lists.get(lb)
            && !allowed.iter().any(|a| allows(a, host))
        {
            let list: Vec<String> = allowed.iter().map(ToString::to_string).collect();
            return Err((
                RefusalReason::NotInAllowList,
                format!(
                    "load balancer Service {lb} allows only {}",
                    if list.is_empty() {
                        "no hostname".to_owned()
                    } else {
                        list.join(", ")
                    }
                ),
            ));
        }
        Ok(())
    }
}

impl Admission<'_> {
    /// Names the pods' search path completes into cluster names: with `ndots` at 2 or less a
    /// pod asks `kubernetes.default.svc` as it is first, and a rule for it would answer
    /// instead of the cluster. The search path appends `<namespace>.svc.<domain>`,
    /// `svc.<domain>` and `<domain>`, so a name ending in `svc` or `pod`, or in a namespace
    /// (`<service>.<namespace>`), is refused, unless that label is a top-level domain the
    /// Public Suffix List knows (`shop.dev` stays a public name even with a namespace `dev`).
    fn check_search_path(&self, host: &Host) -> Result<(), (RefusalReason, String)> {
        let name = host.name();
        let name = name.as_str();
        let last = name.rsplit('.').next().unwrap_or(name);
        if last == name {
            return Ok(());
        }
        let why = if matches!(last, "svc" | "pod") {
            format!("`{last}` names Services and Pods of the cluster")
        } else if self.namespace_lengths & length_bit(last) != 0
            && self.cluster_namespaces.contains(last)
            && !known_tld(last)
        {
            format!("{last} is a namespace of the cluster")
        } else {
            return Ok(());
        };
        Err((
            RefusalReason::SearchPath,
            format!(
                "{why}: the pods' DNS search path completes {name} into a cluster name, and a \
                 pod with ndots 2 or less asks it as it is first"
            ),
        ))
    }
}

/// The `allowed-hostnames` annotation (`allow_key`) of each load balancer in `lbs`: the names
/// it may claim. An item that is not a hostname allows nothing, with a warning.
fn allow_lists(
    snapshot: &ClusterSnapshot,
    allow_key: &str,
    lbs: &BTreeSet<&ObjectRef>,
    warnings: &mut Vec<Warning>,
) -> BTreeMap<ObjectRef, Vec<Host>> {
    let mut allow_lists = BTreeMap::new();
    for svc in &snapshot.services {
        let Some(value) = svc
            .metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get(allow_key))
        else {
            continue;
        };
        let svc_ref = ObjectRef::from_meta(&svc.metadata);
        if !lbs.contains(&svc_ref) {
            continue;
        }
        let mut hosts = Vec::new();
        for item in value.split(',').map(str::trim).filter(|i| !i.is_empty()) {
            match Host::parse(item) {
                Ok(h) => hosts.push(h),
                Err(e) => warnings.push(Warning::new(
                    format!("Service {svc_ref}"),
                    format!(
                        "annotation {allow_key}: {item:?} is not a hostname ({e}); it allows nothing"
                    ),
                )),
            }
        }
        allow_lists.insert(svc_ref, hosts);
    }
    allow_lists
}

/// The namespaces the cluster's own objects live in (and the built-in ones): names under
/// them in the cluster domain are the cluster's.
fn cluster_namespaces(snapshot: &ClusterSnapshot) -> BTreeSet<&str> {
    // Tens of thousands of objects in a few namespaces: deduplicated by hash first (one
    // comparison each), then ordered.
    let mut cluster_namespaces: HashSet<&str> = BUILT_IN_NAMESPACES.iter().copied().collect();
    let metas = snapshot
        .services
        .iter()
        .map(|o| &o.metadata)
        .chain(snapshot.ingresses.iter().map(|o| &o.metadata))
        .chain(snapshot.gateways.iter().map(|o| &o.metadata))
        .chain(snapshot.http_routes.iter().map(|o| &o.metadata))
        .chain(snapshot.grpc_routes.iter().map(|o| &o.metadata))
        .chain(snapshot.tls_routes.iter().map(|o| &o.metadata))
        .chain(snapshot.config_maps.iter().map(|o| &o.metadata))
        .chain(snapshot.custom_sources.iter().map(|o| &o.metadata));
    cluster_namespaces.extend(metas.filter_map(|m| m.namespace.as_deref()));
    cluster_namespaces.extend(
        snapshot
            .namespaces
            .iter()
            .filter_map(|n| n.metadata.name.as_deref()),
    );
    cluster_namespaces.into_iter().collect()
}

/// Why `host` is a public suffix, or a wildcard directly under or over one; `None` when it
/// is neither.
fn public_suffix(host: &Host, labels: WildcardLabels) -> Option<String> {
    let name = host.name();
    // Public suffixes: the name itself, or a wildcard's suffix, is one. `psl` answers for
    // unknown TLDs too (the implicit `*` rule): the TLD itself is the suffix then.
    if let Some(suffix) = psl::suffix(name.as_str().as_bytes())
        && suffix.as_bytes() == name.as_str().as_bytes()
    {
        let what = if host.is_wildcard() {
            format!("a wildcard directly under the public suffix {name}")
        } else {
            format!("{name} is a public suffix")
        };
        return Some(what);
    }
    // A wildcard that covers a public suffix (`*.amazonaws.com` covers `s3.amazonaws.com`;
    // `*.compute.amazonaws.com` covers every `<region>.compute.amazonaws.com`).
    if let Host::Wildcard(base) = host
        && let Some(depth) = suffix_depth_under(base.as_str())
        && (depth == 1 || labels == WildcardLabels::OneOrMore)
    {
        return Some(format!(
            "a wildcard over public suffixes: the Public Suffix List has suffixes {} {}",
            if depth == 1 {
                "directly under"
            } else {
                "under"
            },
            base.as_str()
        ));
    }
    None
}

/// Namespaces every cluster has.
pub const BUILT_IN_NAMESPACES: &[&str] =
    &["default", "kube-system", "kube-public", "kube-node-lease"];

/// Whether `label` is a top-level domain the Public Suffix List knows (not the implicit `*`).
/// The bit of [`Admission::namespace_lengths`] for a name of `s`'s length.
fn length_bit(s: &str) -> u64 {
    1 << s.len().min(63)
}

fn known_tld(label: &str) -> bool {
    psl::suffix(label.as_bytes()).is_some_and(|s| s.is_known())
}

/// The rules about the name itself (everything but who asked).
fn check_name(
    host: &Host,
    labels: WildcardLabels,
    cluster_zones: &[String],
    deny: &[Host],
) -> Result<(), (RefusalReason, String)> {
    let touches = |zone: &str| touches_zone(host, labels, zone);
    if let Some(zone) = REVERSE_ZONES.iter().find(|z| touches(z)) {
        return Err((
            RefusalReason::ReverseZone,
            format!("reverse-lookup zone {zone}"),
        ));
    }
    if let Some(zone) = cluster_zones.iter().find(|z| touches(z)) {
        return Err((
            RefusalReason::ClusterZone,
            format!("the cluster DNS serves zone {zone} itself"),
        ));
    }
    if touches("localhost") {
        return Err((
            RefusalReason::Localhost,
            "localhost and the names under it always mean the machine itself".into(),
        ));
    }
    if let Some(name) = CLOUD_METADATA_NAMES
        .iter()
        .find(|n| covers_name(host, labels, n))
    {
        return Err((
            RefusalReason::CloudMetadata,
            format!("cloud metadata name {name}"),
        ));
    }
    if let Host::Exact(n) = host
        && n.label_count() == 1
    {
        return Err((
            RefusalReason::SingleLabel,
            "a single-label name is resolved through the pods' search list".into(),
        ));
    }
    if let Some(what) = public_suffix(host, labels) {
        return Err((RefusalReason::PublicSuffix, what));
    }
    if let Some(zone) = CLOUD_INTERNAL_ZONES.iter().find(|z| touches(z)) {
        return Err((
            RefusalReason::CloudMetadata,
            format!("cloud provider zone {zone}"),
        ));
    }
    for d in deny {
        let hit = match d {
            Host::Exact(zone) => touches(zone.as_str()),
            Host::Wildcard(zone) => touches_under(host, labels, zone),
        };
        if hit {
            return Err((RefusalReason::Denied, format!("--deny-hostnames {d}")));
        }
    }
    Ok(())
}

/// Whether `host` is strictly under `zone` or, for a wildcard, covers a name strictly under it.
fn touches_under(host: &Host, labels: WildcardLabels, zone: &DnsName) -> bool {
    match host {
        Host::Exact(n) => n.head_under(zone).is_some(),
        // `*.base` stands for names one label (or more) longer than `base`: it covers a name
        // strictly under `zone` when `base` is in the zone, or when the zone is under `base`
        // and the `*` may stand for more than one label.
        Host::Wildcard(base) => {
            base.is_within(zone)
                || (labels == WildcardLabels::OneOrMore && zone.head_under(base).is_some())
        }
    }
}

/// Whether `host` is in `zone` or, for a wildcard, covers at least one name in it (`zone`
/// normalized).
fn touches_zone(host: &Host, labels: WildcardLabels, zone: &str) -> bool {
    match host {
        Host::Exact(n) => within(n.as_str(), zone),
        Host::Wildcard(base) => within(base.as_str(), zone) || covers_name(host, labels, zone),
    }
}

/// Domains with a public suffix under them, one per line with the fewest labels down to one
/// (`amazonaws.com 1`: `s3.amazonaws.com` is a suffix). The `psl` crate answers only "what is
/// the suffix of this name", not "is there a suffix under this one", so this list is
/// generated from the same Public Suffix List (the rules of the `psl` version in Cargo.lock);
/// a test regenerates it and fails when it differs.
const PSL_PARENTS: &str = include_str!("psl_parents.txt");

/// The fewest labels between `name` and a public suffix strictly under it, if there is one.
fn suffix_depth_under(name: &str) -> Option<usize> {
    static PARENTS: std::sync::LazyLock<std::collections::HashMap<&'static str, usize>> =
        std::sync::LazyLock::new(|| {
            PSL_PARENTS
                .lines()
                .filter(|l| !l.starts_with('#'))
                .filter_map(|l| {
                    let (name, depth) = l.split_once(' ')?;
                    Some((name, depth.parse().ok()?))
                })
                .collect()
        });
    PARENTS.get(name).copied()
}

/// The lines of [`PSL_PARENTS`] (for the test that regenerates them).
#[doc(hidden)]
pub fn psl_parents_text() -> &'static str {
    PSL_PARENTS
}

/// Whether `host` is `name` or, for a wildcard, covers it (`name` normalized).
fn covers_name(host: &Host, labels: WildcardLabels, name: &str) -> bool {
    match host {
        Host::Exact(n) => n.as_str() == name,
        Host::Wildcard(base) => head(name, base.as_str()).is_some_and(|h| labels.covers(h)),
    }
}

/// Whether the allow-list entry `allowed` lets `host` through: an exact entry allows that
/// name; `*.zone` allows every name under the zone, at any depth, and wildcards within it.
fn allows(allowed: &Host, host: &Host) -> bool {
    match (allowed, host) {
        (Host::Exact(a), Host::Exact(h)) => a == h,
        (Host::Exact(_), Host::Wildcard(_)) => false,
        (Host::Wildcard(zone), Host::Exact(h)) => h.head_under(zone).is_some(),
        (Host::Wildcard(zone), Host::Wildcard(base)) => base.is_within(zone),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::LabelRequirement;

    #[test]
    fn namespace_policies_parse() {
        assert_eq!("".parse::<NamespacePolicy>(), Ok(NamespacePolicy::Any));
        assert_eq!(
            "web, shop".parse::<NamespacePolicy>(),
            Ok(NamespacePolicy::Names(BTreeSet::from([
                "web".into(),
                "shop".into()
            ])))
        );
        assert_eq!(
            "team=web,example.com/env!=dev,tier==front".parse::<NamespacePolicy>(),
            Ok(NamespacePolicy::Selector(vec![
                LabelRequirement {
                    key: "team".into(),
                    value: "web".into(),
                    equals: true
                },
                LabelRequirement {
                    key: "example.com/env".into(),
                    value: "dev".into(),
                    equals: false
                },
                LabelRequirement {
                    key: "tier".into(),
                    value: "front".into(),
                    equals: true
                },
            ]))
        );
        for bad in ["web,team=web", "Web", "a.b", "=x", "team=web!", "te am=x"] {
            assert!(bad.parse::<NamespacePolicy>().is_err(), "{bad:?}");
        }
    }

    #[test]
    fn allow_list_entries() {
        let h = |s| Host::parse(s).unwrap();
        assert!(allows(&h("*.example.com"), &h("a.b.example.com")));
        assert!(allows(&h("*.example.com"), &h("*.b.example.com")));
        assert!(allows(&h("*.example.com"), &h("*.example.com")));
        assert!(!allows(&h("*.example.com"), &h("example.com")));
        assert!(!allows(&h("*.example.com"), &h("aexample.com")));
        assert!(allows(&h("shop.example.org"), &h("shop.example.org")));
        assert!(!allows(&h("shop.example.org"), &h("a.shop.example.org")));
        assert!(!allows(&h("shop.example.org"), &h("*.shop.example.org")));
    }
}
