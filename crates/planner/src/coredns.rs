//! DNS rendering for the cluster's own DNS: the writes into the CoreDNS ConfigMaps (the
//! Corefile key or hairpin's `coredns-custom` key, the `coredns-custom` server-block keys the
//! Corefile imports, node-local-dns's Corefile) that make it answer every redirected name with
//! its load balancer's hairpin Service.
//!
//! Input: the redirects ([`redirects`]: each placed name to its hairpin Service), the
//! pass-throughs verification carved out, and the Corefile as [`ClusterDns::read`] found it.
//! [`crate::corefile`] places and renders the blocks; this module picks the keys they go to.

use std::collections::BTreeMap;
use std::net::IpAddr;

use k8s_openapi::api::core::v1::{ConfigMap, Service, ServicePort};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use serde::Serialize;

use crate::balancers::{LoadBalancerPlan, cluster_ips};
use crate::config::{
    CLUSTER_DNS_SERVICE, DnsMode, LAST_APPLIED_ANNOTATION, NodeLocalDns, PlannerConfig,
};
use crate::corefile::{
    self, BlockInsert, CorefileError, CorefileInfo, DnsEntry, EntryRef, HostPattern, Placement,
    normalize_target,
};
use crate::error::PlanError;
use crate::escape::Text;
use crate::external_dns::DnsEndpoints;
use crate::forward::ZoneUpstreams;
use crate::name::{DnsName, WildcardLabels};
use crate::snapshot::{ClusterSnapshot, ObjectRef};
use crate::verify;
use crate::warning::Warning;

/// The DNS change: every ConfigMap key hairpin writes so that the cluster's DNS answers the
/// redirected hostnames, wherever the queries for them land; in `external-dns` mode, the
/// `DNSEndpoint` objects instead.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct DnsChange {
    /// The mode actually used (`Corefile`, `Custom` or `ExternalDns`, never `Auto`).
    pub mode: DnsMode,
    /// The cluster domain: the Corefile's `kubernetes` zone, `--cluster-domain`, or the default.
    pub cluster_domain: String,
    /// Hostname -> the hairpin Service FQDN it is redirected to, sorted by hostname.
    pub entries: Vec<DnsRedirect>,
    /// The keys written: CoreDNS's first (the Corefile, or the `coredns-custom` key), then the
    /// node-local-dns Corefiles. Empty in `external-dns` mode.
    pub writes: Vec<DnsWrite>,
    /// The `DNSEndpoint` objects, in `external-dns` mode only.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub dns_endpoints: Option<DnsEndpoints>,
}

impl DnsChange {
    /// The CoreDNS write (the first one); `None` in `external-dns` mode, which writes none.
    pub fn coredns(&self) -> Option<&DnsWrite> {
        self.writes.first()
    }

    /// Whether any key (or `DNSEndpoint`) changes.
    pub fn changed(&self) -> bool {
        self.writes.iter().any(|w| w.changed)
            || self
                .dns_endpoints
                .as_ref()
                .is_some_and(DnsEndpoints::changed)
    }
}

/// How a key's new value is made from its current one (recomputed by the controller on a
/// fresh read, so a concurrent edit outside hairpin's blocks is kept).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum WriteEdit {
    /// The whole key is hairpin's (`coredns-custom`): set it, or remove it when `None`.
    Key {
        /// The value.
        value: Option<String>,
    },
    /// Marked blocks in a Corefile: exactly these, in these server blocks
    /// ([`crate::corefile::write_blocks`]).
    Blocks {
        /// One block per server block.
        inserts: Vec<BlockInsert>,
    },
}

/// One ConfigMap key hairpin writes.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct DnsWrite {
    /// The ConfigMap written.
    pub config_map: ObjectRef,
    /// The key written inside it.
    pub key: String,
    /// What hairpin writes there.
    pub edit: WriteEdit,
    /// The key's current content (`None`: the key does not exist).
    pub current: Option<String>,
    /// The key's new content.
    pub desired: String,
    /// `current != desired`.
    pub changed: bool,
    /// The full ConfigMap to write (current object with the key replaced; `resourceVersion`
    /// kept so the write is guarded), present only when `changed`.
    pub object: Option<ConfigMap>,
}

impl DnsWrite {
    /// `Err` when the ConfigMap written would not fit ([`fits_config_map`]).
    fn fits(&self) -> Result<(), PlanError> {
        fits_config_map(self.object.as_ref(), &self.config_map, &self.key)
    }

    /// `namespace/name/key`, the write's identity for fight detection.
    pub fn target(&self) -> String {
        format!("{}/{}", self.config_map, self.key)
    }
}

/// One DNS redirect: `hostname` (or `*.domain`) answers with the address of `target`.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Serialize)]
pub struct DnsRedirect {
    /// Normalized hostname, possibly a wildcard `*.example.com`.
    pub hostname: String,
    /// The hairpin Service's FQDN, `<name>.<namespace>.svc.<cluster-domain>`.
    pub target: String,
    /// For a wildcard, how many labels its `*` covers ([`Hostname::wildcard_labels`]);
    /// `None` for an exact name.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub wildcard_labels: Option<WildcardLabels>,
}

impl DnsRedirect {
    /// The Corefile editor's entry for this redirect, wildcard kind included. Use this rather
    /// than `DnsEntry::new(&hostname, &target)`, which reads every wildcard as one label.
    pub fn entry(&self) -> Result<DnsEntry, CorefileError> {
        DnsEntry::new_with(
            &self.hostname,
            &self.target,
            self.wildcard_labels.unwrap_or_default(),
        )
    }

    /// [`DnsRedirect::entry`] of each redirect, with each distinct target checked once (a
    /// plan has a few targets for up to tens of thousands of hostnames).
    pub fn entries(
        redirects: &[DnsRedirect],
    ) -> impl Iterator<Item = (&DnsRedirect, Result<DnsEntry, CorefileError>)> {
        let mut targets: Vec<(&str, Result<String, CorefileError>)> = Vec::new();
        redirects.iter().map(move |r| {
            let labels = r.wildcard_labels.unwrap_or_default();
            let entry = HostPattern::parse_with(&r.hostname, labels).and_then(|name| {
                let known = targets.iter().position(|(t, _)| *t == r.target);
                let at = known.unwrap_or_else(|| {
                    targets.push((&r.target, normalize_target(&r.target)));
                    targets.len() - 1
                });
                let target = targets[at].1.clone()?;
                Ok(DnsEntry { name, target })
            });
            (r, entry)
        })
    }
}

/// The field manager EKS applies its managed add-ons with (server-side apply), its CoreDNS
/// ConfigMap among them: the writer that puts its own Corefile back over hairpin's block.
pub const EKS_FIELD_MANAGER: &str = "eks";

/// What the controller needs to know of the cluster's CoreDNS configuration, read once by the
/// planner ([`ClusterDns::facts`]) so that nothing downstream parses a Corefile again.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct CorednsFacts {
    /// The first configured CoreDNS ConfigMap present (with a Corefile key or not).
    pub config_map: Option<ObjectRef>,
    /// Whether its Corefile's `kubernetes` server block has `reload` (`None`: no Corefile, or
    /// one hairpin cannot read).
    pub reload: Option<bool>,
    /// The key suffix of the `coredns-custom` files the Corefile imports (`.override`,
    /// `.include`), if it imports any.
    pub custom_key_suffix: Option<String>,
    /// Every zone the Corefile forwards, most specific first: where hostname verification
    /// asks (empty: no Corefile, or one that does not parse).
    pub forward_zones: Vec<ZoneUpstreams>,
    /// node-local-dns, when one of its configured ConfigMaps holds a Corefile.
    pub node_local_dns: Option<NodeLocalDnsFacts>,
}

/// The node-local-dns configuration found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeLocalDnsFacts {
    /// Its ConfigMap.
    pub config_map: ObjectRef,
    /// The addresses its server blocks `bind` (empty when its Corefile cannot be read).
    pub binds: Vec<IpAddr>,
}

/// The cluster's CoreDNS configuration, as the snapshot holds it.
pub(crate) struct ClusterDns<'a> {
    /// The first configured CoreDNS ConfigMap present, its Corefile, and what the Corefile
    /// says, with its parse (or why it cannot be read).
    pub(crate) found: Option<(
        &'a ConfigMap,
        &'a str,
        Result<corefile::Analyzed<'a>, CorefileError>,
    )>,
    /// The Corefile's cluster domain, else `--cluster-domain`, else `cluster.local`.
    pub(crate) cluster_domain: String,
}

impl<'a> ClusterDns<'a> {
    /// Finds the CoreDNS ConfigMap and reads its Corefile.
    pub(crate) fn read(snapshot: &'a ClusterSnapshot, config: &PlannerConfig) -> Self {
        let found = find_coredns(snapshot, config).map(|(cm, corefile)| {
            let read = corefile::Analyzed::new(corefile, config.cluster_domain.as_deref());
            (cm, corefile, read)
        });
        let cluster_domain = match &found {
            Some((_, _, Ok(read))) => read.info.cluster_domain.clone(),
            _ => config
                .cluster_domain
                .clone()
                .unwrap_or_else(|| corefile::DEFAULT_CLUSTER_DOMAIN.to_owned()),
        };
        Self {
            found,
            cluster_domain,
        }
    }

    /// The facts the controller needs ([`CorednsFacts`]), from what [`ClusterDns::read`]
    /// parsed (only a Corefile the analysis refuses is parsed again, for its forward zones).
    pub(crate) fn facts(&self, snapshot: &ClusterSnapshot, config: &PlannerConfig) -> CorednsFacts {
        let config_map = config.coredns_config_maps.iter().find_map(|name| {
            snapshot
                .config_map(&config.coredns_namespace, name)
                .map(|cm| ObjectRef::from_meta(&cm.metadata))
        });
        let (reload, custom_key_suffix, forward_zones) = match &self.found {
            Some((_, _, Ok(corefile::Analyzed { info, .. }))) => (
                Some(info.has_reload),
                info.custom_key_suffix().map(str::to_owned),
                info.forward_zones.clone(),
            ),
            Some((_, text, Err(_))) => (None, None, corefile::upstreams(text).unwrap_or_default()),
            None => (None, None, Vec::new()),
        };
        CorednsFacts {
            config_map,
            reload,
            custom_key_suffix,
            forward_zones,
            node_local_dns: node_local_dns_facts(snapshot, config),
        }
    }

    /// The zones the cluster DNS serves itself (the cluster domain and every `kubernetes`
    /// zone): names in them are never redirected.
    pub(crate) fn zones(&self) -> Vec<&str> {
        let mut zones: Vec<&str> = vec![self.cluster_domain.as_str()];
        if let Some((_, _, Ok(read))) = &self.found {
            zones.extend(read.info.kubernetes_zones.iter().map(String::as_str));
        }
        zones
    }
}

/// The name the hostnames of `lb` are redirected to: its hairpin Service's.
fn target(lb: &LoadBalancerPlan, config: &PlannerConfig, cluster_domain: &str) -> String {
    let name = lb.service.metadata.name.as_deref().unwrap_or_default();
    corefile::service_fqdn(name, &config.namespace, cluster_domain)
}

/// Every name placed on a load balancer, redirected to its hairpin Service's name; sorted.
pub(crate) fn redirects(
    load_balancers: &[LoadBalancerPlan],
    config: &PlannerConfig,
    cluster_domain: &str,
) -> Vec<DnsRedirect> {
    let names = load_balancers.iter().map(|lb| lb.hostnames.len()).sum();
    let mut redirects: Vec<DnsRedirect> = Vec::with_capacity(names);
    redirects.extend(load_balancers.iter().flat_map(|lb| {
        let target = target(lb, config, cluster_domain);
        lb.hostnames.iter().map(move |h| DnsRedirect {
            hostname: h.name.clone(),
            target: target.clone(),
            wildcard_labels: h.wildcard_labels,
        })
    }));
    redirects.sort();
    redirects
}

/// The writes into the CoreDNS ConfigMaps (`coredns`, its `corefile` and what it says) that
/// make the cluster DNS answer `redirects` (and pass `passthrough` through): the Corefile key, or hairpin's `coredns-custom` key in custom
/// mode; the `coredns-custom` server-block keys the Corefile imports; node-local-dns. `Err`
/// says why nothing is written.
pub(crate) fn change(
    snapshot: &ClusterSnapshot,
    config: &PlannerConfig,
    (coredns, corefile): (&ConfigMap, &corefile::Analyzed<'_>),
    redirects: Vec<DnsRedirect>,
    passthrough: &[verify::Passthrough],
    addresses: &BTreeMap<String, Vec<IpAddr>>,
    warnings: &mut Vec<Warning>,
) -> Result<DnsChange, PlanError> {
    let info = &corefile.info;
    let coredns_ref = ObjectRef::from_meta(&coredns.metadata);
    let subject = format!("ConfigMap {coredns_ref}");
    for w in &info.warnings {
        warnings.push(Warning::new(&subject, w.to_string()));
    }
    let parsed = entries(&redirects, passthrough, warnings);
    let entries = parsed.refs();
    // Auto: custom where the Corefile imports coredns-custom keys, else corefile.
    let mode = match config.dns_mode {
        DnsMode::Auto if info.custom_key_suffix().is_some() => DnsMode::Custom,
        DnsMode::Custom => DnsMode::Custom,
        DnsMode::Auto | DnsMode::Corefile | DnsMode::ExternalDns => DnsMode::Corefile,
    };
    let imported = imported_server_files(snapshot, config, &corefile.imported_key_suffixes());
    let opts = corefile::PlaceOptions {
        cluster_domain: config.cluster_domain.clone(),
        addresses: addresses.clone(),
        dns_port: cluster_dns_target_port(snapshot, config, warnings),
        ..corefile::PlaceOptions::default()
    };
    let corefile_key = (&coredns_ref, config.corefile_key.as_str());
    let placed = corefile
        .place_with_imports(&imported, &entries, &opts)
        .map_err(|e| fail(corefile_key, e))?;
    let coredns_write = if mode == DnsMode::Custom {
        custom_write(
            snapshot,
            config,
            info,
            &placed.main,
            &entries,
            &subject,
            warnings,
        )?
    } else {
        corefile_write(
            coredns,
            &config.corefile_key,
            corefile,
            placed.main,
            &subject,
            warnings,
        )
        .map_err(|e| fail(corefile_key, e))?
    };
    coredns_write.fits()?;
    let imported_writes = imported_key_writes(
        snapshot,
        config,
        &coredns_write,
        &imported,
        placed.imported,
        warnings,
    )?;
    let mut writes = vec![coredns_write];
    writes.extend(imported_writes);
    writes.extend(node_local_dns_writes(
        snapshot,
        config,
        &entries,
        &opts,
        &info.cluster_domain,
        warnings,
    ));
    Ok(DnsChange {
        mode,
        cluster_domain: info.cluster_domain.clone(),
        entries: redirects,
        writes,
        dns_endpoints: None,
    })
}

/// Why the key `key` of `config_map` is not written.
fn fail((config_map, key): (&ObjectRef, &str), source: CorefileError) -> PlanError {
    PlanError::Corefile {
        config_map: config_map.clone(),
        key: key.to_owned(),
        source: Box::new(source),
    }
}

/// The entries to render: the redirects that make valid entries (the others are warned about
/// and skipped), then the names a redirected wildcard covers that are someone else's
/// ([`verify::carve`]), passed through. An entry is read where it is when its name and target
/// are in normal form already, as the plan's are (tens of thousands of names, not copied
/// again); another is parsed as [`DnsRedirect::entry`] and [`DnsEntry::passthrough`] do.
fn entries<'a>(
    redirects: &'a [DnsRedirect],
    passthrough: &'a [verify::Passthrough],
    warnings: &mut Vec<Warning>,
) -> Entries<'a> {
    let mut out = Entries {
        slots: Vec::with_capacity(redirects.len() + passthrough.len()),
        owned: Vec::new(),
    };
    // A plan has a few targets for many names: each is checked once, and its entries all
    // read the first redirect's copy (the renderer compares targets: one place in memory).
    let mut targets: Vec<(&str, bool)> = Vec::new();
    for r in redirects {
        let (name, labels) = match r.hostname.strip_prefix("*.") {
            Some(suffix) => (suffix, Some(r.wildcard_labels.unwrap_or_default())),
            None => (r.hostname.as_str(), None),
        };
        let (target, target_normal) = match targets.iter().find(|(t, _)| *t == r.target) {
            Some(&known) => known,
            None => {
                let known = (r.target.as_str(), DnsName::is_normalized(&r.target));
                targets.push(known);
                known
            }
        };
        if target_normal && DnsName::is_normalized(name) {
            out.slots.push(Slot::Read(EntryRef {
                name,
                labels,
                target,
            }));
            continue;
        }
        match r.entry() {
            Ok(e) => out.own(e),
            Err(e) => warnings.push(Warning::escaped_message(
                format!("hostname {}", r.hostname),
                format!("{e}; skipped"),
            )),
        }
    }
    for p in passthrough {
        let name = p.hostname.as_str();
        if DnsName::is_normalized(name) {
            let (labels, target) = (None, name);
            out.slots.push(Slot::Read(EntryRef {
                name,
                labels,
                target,
            }));
        } else if let Ok(e) = DnsEntry::passthrough(name) {
            out.own(e);
        }
    }
    out
}

/// The entries of a DNS change ([`entries`]), in order: each read where it is, or parsed.
struct Entries<'a> {
    slots: Vec<Slot<'a>>,
    /// The entries parsed (not in normal form where they were).
    owned: Vec<DnsEntry>,
}

/// One of [`Entries`].
enum Slot<'a> {
    Read(EntryRef<'a>),
    /// An index into [`Entries::owned`].
    Owned(usize),
}

impl Entries<'_> {
    fn own(&mut self, entry: DnsEntry) {
        self.slots.push(Slot::Owned(self.owned.len()));
        self.owned.push(entry);
    }

    /// The entries, in order, as the Corefile editor reads them.
    fn refs(&self) -> Vec<EntryRef<'_>> {
        self.slots
            .iter()
            .map(|slot| match slot {
                Slot::Read(entry) => *entry,
                Slot::Owned(i) => EntryRef::of(&self.owned[*i]),
            })
            .collect()
    }
}

/// Corefile mode: hairpin's blocks in the Corefile's own `key`, where `main` places them.
fn corefile_write(
    coredns: &ConfigMap,
    key: &str,
    corefile: &corefile::Analyzed<'_>,
    main: Placement,
    subject: &str,
    warnings: &mut Vec<Warning>,
) -> Result<DnsWrite, CorefileError> {
    for w in &main.warnings {
        warnings.push(Warning::new(subject, w.to_string()));
    }
    let edit = corefile.write_blocks(&main.inserts)?;
    let text = corefile.text;
    Ok(inserts_write(
        coredns,
        key,
        text,
        main.inserts,
        edit,
        subject,
        warnings,
    ))
}

/// Custom mode: hairpin's own key of `coredns-custom`, the whole override rendered from
/// `entries`.
fn custom_write(
    snapshot: &ClusterSnapshot,
    config: &PlannerConfig,
    info: &CorefileInfo,
    main: &Placement,
    entries: &[EntryRef<'_>],
    subject: &str,
    warnings: &mut Vec<Warning>,
) -> Result<DnsWrite, PlanError> {
    let key = custom_key(config, info);
    warn_custom(config, info, main, &key, subject, warnings);
    let existing =
        snapshot.config_map(&config.coredns_namespace, &config.coredns_custom_config_map);
    let target = ObjectRef::new(
        config.coredns_namespace.clone(),
        config.coredns_custom_config_map.clone(),
    );
    let desired = corefile::render_override_of(entries, corefile::RuleStyle::Compact)
        .map_err(|e| fail((&target, &key), e))?;
    let current = existing
        .and_then(|c| c.data.as_ref())
        .and_then(|d| d.get(&key))
        .cloned();
    let changed = current.as_deref().unwrap_or_default() != desired;
    let object = changed.then(|| key_object(existing, &target, &key, &desired));
    // Its size is checked by `change`, as every CoreDNS write's.
    Ok(DnsWrite {
        config_map: target,
        key,
        edit: WriteEdit::Key {
            value: (!desired.is_empty()).then(|| desired.clone()),
        },
        current,
        desired,
        changed,
        object,
    })
}

/// hairpin's key in `coredns-custom`: `--coredns-custom-key`, with the suffix the Corefile
/// imports when it ends otherwise.
fn custom_key(config: &PlannerConfig, info: &CorefileInfo) -> String {
    match info.custom_key_suffix() {
        Some(suffix) if !config.coredns_custom_key.ends_with(suffix) => {
            let stem = config
                .coredns_custom_key
                .rsplit_once('.')
                .map_or(config.coredns_custom_key.as_str(), |(s, _)| s);
            format!("{stem}{suffix}")
        }
        _ => config.coredns_custom_key.clone(),
    }
}

/// What custom mode cannot do with this Corefile: a Corefile that imports no key, a hairpin
/// block left from corefile mode, server blocks that receive hairpin's names themselves.
fn warn_custom(
    config: &PlannerConfig,
    info: &CorefileInfo,
    main: &Placement,
    key: &str,
    subject: &str,
    warnings: &mut Vec<Warning>,
) {
    if info.custom_key_suffix().is_none() {
        warnings.push(Warning::new(
            subject,
            format!(
                "DNS mode is custom but the Corefile imports no coredns-custom keys; CoreDNS will not read {}/{} until it does",
                config.coredns_custom_config_map, key
            ),
        ));
    }
    if info.has_hairpin_block {
        warnings.push(Warning::new(
            subject,
            "the Corefile still holds a hairpin block from corefile mode; remove it (hairpin uninstall) to avoid duplicate rules",
        ));
    }
    // The key is imported into the block holding `kubernetes`; names that other server
    // blocks of the Corefile receive cannot be redirected from there, and the Corefile
    // itself is the distribution's in this mode (imported `.server` keys are written
    // separately).
    for insert in main
        .inserts
        .iter()
        .filter(|i| i.form == corefile::Form::Answer)
    {
        warnings.push(Warning::new(
            subject,
            format!(
                "server block {} receives some hairpin hostnames itself, and in custom mode hairpin writes only {}/{}: those names are not redirected there (use --dns-mode corefile, or forward that zone to the block holding `kubernetes`)",
                insert.server, config.coredns_custom_config_map, key
            ),
        ));
    }
}

/// The ConfigMap `target` (`existing`, or a new one) with `key` set to `value` (removed when
/// empty).
fn key_object(
    existing: Option<&ConfigMap>,
    target: &ObjectRef,
    key: &str,
    value: &str,
) -> ConfigMap {
    let mut cm = existing.cloned().unwrap_or_else(|| ConfigMap {
        metadata: ObjectMeta {
            name: Some(target.name.clone()),
            namespace: Some(target.namespace.clone()),
            ..ObjectMeta::default()
        },
        ..ConfigMap::default()
    });
    let data = cm.data.get_or_insert_with(BTreeMap::new);
    if value.is_empty() {
        data.remove(key);
    } else {
        data.insert(key.to_owned(), value.to_owned());
    }
    strip_server_fields(&mut cm.metadata);
    cm
}

/// The writes into the `coredns-custom` server-block keys the Corefile imports, on top of
/// `coredns_write` when that is a write of the same ConfigMap.
fn imported_key_writes(
    snapshot: &ClusterSnapshot,
    config: &PlannerConfig,
    coredns_write: &DnsWrite,
    imported: &[corefile::ImportedFile],
    placed: Vec<Result<Vec<BlockInsert>, CorefileError>>,
    warnings: &mut Vec<Warning>,
) -> Result<Vec<DnsWrite>, PlanError> {
    let custom_ref = ObjectRef::new(
        config.coredns_namespace.clone(),
        config.coredns_custom_config_map.clone(),
    );
    let custom_base = coredns_write
        .object
        .clone()
        .filter(|_| coredns_write.config_map == custom_ref)
        .or_else(|| {
            snapshot
                .config_map(&config.coredns_namespace, &config.coredns_custom_config_map)
                .cloned()
        });
    let writes = imported_writes(custom_base, imported, placed, warnings);
    for write in &writes {
        write.fits()?;
    }
    Ok(writes)
}

/// node-local-dns's first configured ConfigMap with a Corefile, and the addresses it binds.
fn node_local_dns_facts(
    snapshot: &ClusterSnapshot,
    config: &PlannerConfig,
) -> Option<NodeLocalDnsFacts> {
    config.node_local_dns_config_maps.iter().find_map(|name| {
        let cm = snapshot.config_map(&config.node_local_dns_namespace, name)?;
        let text = cm.data.as_ref()?.get(&config.corefile_key)?;
        let binds = corefile::analyze_node_local_dns(text, &[])
            .iter()
            .flat_map(|info| &info.servers)
            .flat_map(|server| &server.binds)
            .filter_map(|bind| bind.parse().ok())
            .collect();
        Some(NodeLocalDnsFacts {
            config_map: ObjectRef::from_meta(&cm.metadata),
            binds,
        })
    })
}

/// The first configured CoreDNS ConfigMap present, with its Corefile.
fn find_coredns<'a>(
    snapshot: &'a ClusterSnapshot,
    config: &PlannerConfig,
) -> Option<(&'a ConfigMap, &'a str)> {
    config.coredns_config_maps.iter().find_map(|name| {
        let cm = snapshot.config_map(&config.coredns_namespace, name)?;
        let corefile = cm.data.as_ref()?.get(&config.corefile_key)?;
        Some((cm, corefile.as_str()))
    })
}

/// Known ClusterIPs of the planned hairpin Services, by the FQDN their names redirect to.
pub(crate) fn target_addresses(
    load_balancers: &[LoadBalancerPlan],
    config: &PlannerConfig,
    cluster_domain: &str,
) -> BTreeMap<String, Vec<IpAddr>> {
    load_balancers
        .iter()
        .map(|lb| (target(lb, config, cluster_domain), cluster_ips(&lb.service)))
        .filter(|(_, ips)| !ips.is_empty())
        .collect()
}

/// A write of marked blocks into a Corefile key (CoreDNS or node-local-dns).
fn blocks_write(
    cm: &ConfigMap,
    key: &str,
    corefile: &str,
    entries: &[EntryRef<'_>],
    opts: &corefile::PlaceOptions,
    subject: &str,
    warnings: &mut Vec<Warning>,
) -> Result<DnsWrite, corefile::CorefileError> {
    let placement = corefile::place_refs(corefile, entries, opts)?;
    for w in &placement.warnings {
        warnings.push(Warning::new(subject, w.to_string()));
    }
    let edit = corefile::write_blocks(corefile, &placement.inserts)?;
    let inserts = placement.inserts;
    Ok(inserts_write(
        cm, key, corefile, inserts, edit, subject, warnings,
    ))
}

/// A write of placed marked blocks (`inserts`) into a key holding server blocks (`text`), as
/// `edit` makes it.
fn inserts_write(
    cm: &ConfigMap,
    key: &str,
    text: &str,
    inserts: Vec<corefile::BlockInsert>,
    edit: crate::markers::Edit,
    subject: &str,
    warnings: &mut Vec<Warning>,
) -> DnsWrite {
    for w in &edit.warnings {
        warnings.push(Warning::new(subject, w.to_string()));
    }
    let object = edit.changed.then(|| {
        let mut cm = cm.clone();
        cm.data
            .get_or_insert_with(BTreeMap::new)
            .insert(key.to_owned(), edit.text.clone());
        strip_server_fields(&mut cm.metadata);
        cm
    });
    DnsWrite {
        config_map: ObjectRef::from_meta(&cm.metadata),
        key: key.to_owned(),
        edit: WriteEdit::Blocks { inserts },
        current: Some(text.to_owned()),
        changed: edit.changed,
        desired: edit.text,
        object,
    }
}

/// The `coredns-custom` keys the Corefile imports as server blocks at its top level (`import
/// custom/*.server`: every key ending in `.server`), in key order.
fn imported_server_files(
    snapshot: &ClusterSnapshot,
    config: &PlannerConfig,
    suffixes: &[String],
) -> Vec<corefile::ImportedFile> {
    if suffixes.is_empty() {
        return Vec::new();
    }
    let Some(data) = snapshot
        .config_map(&config.coredns_namespace, &config.coredns_custom_config_map)
        .and_then(|cm| cm.data.as_ref())
    else {
        return Vec::new();
    };
    data.iter()
        .filter(|(key, _)| suffixes.iter().any(|s| key.ends_with(s.as_str())))
        .map(|(key, text)| corefile::ImportedFile {
            name: key.clone(),
            text: text.clone(),
        })
        .collect()
}

/// Writes of hairpin's answer blocks into the imported server-block keys of `coredns-custom`.
/// `base` is that ConfigMap as the writes before these leave it (so that `-o yaml` objects
/// carry every change).
fn imported_writes(
    base: Option<ConfigMap>,
    files: &[corefile::ImportedFile],
    placed: Vec<Result<Vec<corefile::BlockInsert>, corefile::CorefileError>>,
    warnings: &mut Vec<Warning>,
) -> Vec<DnsWrite> {
    let Some(mut base) = base else {
        return Vec::new();
    };
    let subject = format!("ConfigMap {}", ObjectRef::from_meta(&base.metadata));
    let mut writes = Vec::new();
    for (file, inserts) in files.iter().zip(placed) {
        let written = inserts.and_then(|inserts| {
            let edit = corefile::write_blocks(&file.text, &inserts)?;
            let text = &file.text;
            Ok(inserts_write(
                &base, &file.name, text, inserts, edit, &subject, warnings,
            ))
        });
        match written {
            Ok(write) => {
                if let Some(object) = &write.object {
                    base = object.clone();
                }
                writes.push(write);
            }
            Err(e) => warnings.push(Warning::escaped_message(
                &subject,
                format!(
                    "key {}: {e}; nothing is written to it, and hairpin's hostnames under its zones are not answered there",
                    Text(&file.name)
                ),
            )),
        }
    }
    writes
}

/// The cluster DNS Service: the one pods send their queries to (the kubelet's `clusterDNS` is
/// its ClusterIP). Its name depends on how CoreDNS was installed, so in `coredns_namespace`
/// it is `kube-dns` (kubeadm, k3s, EKS, AKS, GKE, LKE, DigitalOcean), else a Service named
/// like one of the CoreDNS ConfigMap candidates (RKE2's `rke2-coredns-rke2-coredns`, the
/// CoreDNS Helm chart's `coredns`), else the first by name labelled as CoreDNS (`k8s-app` is
/// `kube-dns` or `coredns`, or `app.kubernetes.io/name=coredns`); each must serve port 53.
/// `None` when the snapshot holds none.
pub fn cluster_dns_service<'a>(
    snapshot: &'a ClusterSnapshot,
    config: &PlannerConfig,
) -> Option<&'a Service> {
    let namespace = config.coredns_namespace.as_str();
    let serves_dns = |s: &Service| {
        s.spec
            .as_ref()
            .and_then(|spec| spec.ports.as_ref())
            .is_some_and(|ports| ports.iter().any(|p| p.port == 53))
    };
    let by_name = std::iter::once(CLUSTER_DNS_SERVICE)
        .chain(config.coredns_config_maps.iter().map(String::as_str))
        .find_map(|name| snapshot.service(namespace, name).filter(|s| serves_dns(s)));
    by_name.or_else(|| {
        let labelled = |s: &Service| {
            let label = |key: &str| {
                s.metadata
                    .labels
                    .as_ref()
                    .and_then(|l| l.get(key))
                    .map(String::as_str)
            };
            matches!(label("k8s-app"), Some("kube-dns" | "coredns"))
                || label("app.kubernetes.io/name") == Some("coredns")
        };
        snapshot
            .services
            .iter()
            .filter(|s| s.metadata.namespace.as_deref() == Some(namespace))
            .filter(|s| labelled(s) && serves_dns(s))
            .min_by(|a, b| a.metadata.name.cmp(&b.metadata.name))
    })
}

/// The port CoreDNS's pods receive cluster DNS queries on: the `targetPort` of the DNS port
/// (UDP 53, else the port named `dns`) of the cluster DNS Service, when the snapshot holds it.
/// `None` (placement then decides from the Corefile: 53 when served, else the only port) when
/// the Service is not known or names its target port (the number is in the pods' spec).
fn cluster_dns_target_port(
    snapshot: &ClusterSnapshot,
    config: &PlannerConfig,
    warnings: &mut Vec<Warning>,
) -> Option<u16> {
    let service = cluster_dns_service(snapshot, config)?;
    let service_name = service.metadata.name.as_deref().unwrap_or_default();
    let ports = service.spec.as_ref()?.ports.as_ref()?;
    let udp = |p: &&ServicePort| p.protocol.as_deref().unwrap_or("TCP") == "UDP";
    let port = ports
        .iter()
        .filter(udp)
        .find(|p| p.port == 53)
        .or_else(|| {
            ports
                .iter()
                .filter(udp)
                .find(|p| p.name.as_deref() == Some("dns"))
        })
        .or_else(|| ports.iter().find(|p| p.port == 53))?;
    match &port.target_port {
        None => u16::try_from(port.port).ok(),
        Some(IntOrString::Int(n)) => u16::try_from(*n).ok().filter(|n| *n > 0),
        Some(IntOrString::String(name)) => {
            warnings.push(Warning::new(
                format!("Service {}/{service_name}", config.coredns_namespace),
                format!(
                    "its DNS port targets the named port `{name}`, whose number only the pods know; the Corefile's server blocks on port 53 (else its only port) are assumed to receive the queries"
                ),
            ));
            None
        }
    }
}

/// The API server refuses a ConfigMap whose values (`data` and `binaryData`, every key
/// together) exceed 1 MiB, so a key that fits on its own can still not be written beside
/// large neighbours (kubeadm's `NodeHosts`, other tools' keys).
fn fits_config_map(
    cm: Option<&ConfigMap>,
    config_map: &ObjectRef,
    key: &str,
) -> Result<(), PlanError> {
    let Some(cm) = cm else { return Ok(()) };
    let text: usize = cm.data.iter().flatten().map(|(_, v)| v.len()).sum();
    let binary: usize = cm
        .binary_data
        .iter()
        .flatten()
        .map(|(_, v)| v.0.len())
        .sum();
    let total = text + binary;
    if total > corefile::CONFIGMAP_MAX_BYTES {
        return Err(PlanError::ConfigMapTooLarge {
            config_map: config_map.clone(),
            key: key.to_owned(),
            bytes: total,
            limit: corefile::CONFIGMAP_MAX_BYTES,
        });
    }
    Ok(())
}

/// Server-set metadata that must not be sent back, except `resourceVersion`, which guards the
/// write.
fn strip_server_fields(meta: &mut ObjectMeta) {
    meta.managed_fields = None;
    meta.creation_timestamp = None;
    meta.generation = None;
    meta.uid = None;
    if let Some(a) = meta.annotations.as_mut() {
        a.remove(LAST_APPLIED_ANNOTATION);
        if a.is_empty() {
            meta.annotations = None;
        }
    }
}

/// The node-local-dns Corefiles: pods on nodes running it ask it first, and its root server
/// block forwards every name outside the cluster domain straight to the node's upstream
/// servers, so hairpin's names must be answered there too (node-cache is CoreDNS with
/// `template` compiled in). Off with `--node-local-dns off`: then only a warning.
fn node_local_dns_writes(
    snapshot: &ClusterSnapshot,
    config: &PlannerConfig,
    entries: &[EntryRef<'_>],
    opts: &corefile::PlaceOptions,
    cluster_domain: &str,
    warnings: &mut Vec<Warning>,
) -> Vec<DnsWrite> {
    let mut writes = Vec::new();
    for name in &config.node_local_dns_config_maps {
        let Some(cm) = snapshot.config_map(&config.node_local_dns_namespace, name) else {
            continue;
        };
        let subject = format!("ConfigMap {}/{name}", config.node_local_dns_namespace);
        let Some(corefile) = cm.data.as_ref().and_then(|d| d.get(&config.corefile_key)) else {
            continue;
        };
        if config.node_local_dns == NodeLocalDns::Off {
            node_local_dns_warning(corefile, entries, &subject, warnings);
            continue;
        }
        let opts = corefile::PlaceOptions {
            cluster_domain: Some(cluster_domain.to_owned()),
            without_kubernetes: true,
            // Pods ask node-local-dns on the port it binds, not the port the cluster DNS
            // Service targets on CoreDNS's pods.
            dns_port: None,
            ..opts.clone()
        };
        match blocks_write(
            cm,
            &config.corefile_key,
            corefile,
            entries,
            &opts,
            &subject,
            warnings,
        ) {
            Ok(write) => writes.push(write),
            Err(e) => warnings.push(Warning::escaped_message(
                &subject,
                format!(
                    "{e}; node-local-dns is not changed, and pods on its nodes still get the public address"
                ),
            )),
        }
    }
    writes
}

/// With `--node-local-dns off`: which names node-local-dns sends upstream, and how to fix it.
fn node_local_dns_warning(
    corefile: &str,
    entries: &[EntryRef<'_>],
    subject: &str,
    warnings: &mut Vec<Warning>,
) {
    let info = match corefile::analyze_node_local_dns(corefile, &[]) {
        Ok(info) => info,
        Err(e) => {
            warnings.push(Warning::escaped_message(
                subject,
                format!("node-local-dns Corefile unreadable: {e}"),
            ));
            return;
        }
    };
    let patterns: Vec<HostPattern> = entries
        .iter()
        .filter(|e| !e.is_passthrough())
        .map(EntryRef::host_pattern)
        .collect();
    let bypassed: Vec<HostPattern> = corefile::bypassed(&info, &patterns)
        .into_iter()
        .cloned()
        .collect();
    if bypassed.is_empty() {
        return;
    }
    let zones = corefile::NodeLocalDnsInfo::zones_for(&bypassed);
    let mut message = format!(
        "node-local-dns answers {} of the hairpin hostnames from upstream DNS, bypassing CoreDNS's rewrite (pods on nodes with node-local-dns still get the public address), and --node-local-dns is off",
        bypassed.len()
    );
    let warning = match info.suggested_stanza(&zones) {
        Some(stanza) if !stanza.is_empty() => {
            message
                .push_str("; fix: add this server block to its Corefile, or run the node agent:");
            Warning::new(subject, message).with_block(&stanza)
        }
        _ => {
            message.push_str(
                "; fix: forward these zones to kube-dns in its Corefile, or run the node agent",
            );
            Warning::new(subject, message)
        }
    };
    warnings.push(warning);
}
