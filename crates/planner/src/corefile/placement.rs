//! Which server blocks answer hairpin's names, and in which form.
//!
//! CoreDNS sends a query to the server block whose zone is the most specific match for the
//! query name, among the blocks listening on the port the query arrived on. Plugin order
//! inside a block is fixed when CoreDNS is compiled (`rewrite` runs before `template`, which
//! runs before `hosts`, `kubernetes` and `forward`), and a `rewrite` never hands the query to
//! another server block. So each name must be handled in the block that receives it:
//!
//! * a block whose `kubernetes` plugin serves the cluster domain gets `rewrite` rules (the
//!   rewritten Service name is resolved right there);
//! * any other block (a `forward`-only `.:53` beside `cluster.local:53`, a zone block such as
//!   `example.com:53`, the node-local-dns cache) gets `template` directives answering the
//!   hairpin Services' ClusterIPs directly ([`super::render_answers`]).
//!
//! A layout where the right block cannot be told without guessing (several ports and none is
//! 53, a block whose zone is a placeholder) is an error: nothing is written.

use std::collections::BTreeMap;
use std::net::IpAddr;

use serde::Serialize;

use super::parse::{Corefile, Directive, ServerBlock};
use super::rules::{
    EntryRef, RuleStyle, bypass_pays, cluster_bypass, render_answers_of, render_rules_of,
};
use super::{CorefileError, Warning};
use crate::forward::in_zone;
use crate::name::WildcardLabels;

/// The port CoreDNS listens on when a server block key names none.
pub const DEFAULT_DNS_PORT: u16 = 53;

/// Settings of [`super::place`].
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PlaceOptions {
    /// Syntax of the `rewrite` rules.
    pub style: RuleStyle,
    /// `--cluster-domain`: used when the `kubernetes` plugin names no readable zone.
    pub cluster_domain: Option<String>,
    /// The port the cluster DNS Service targets; `None`: 53 when a server block serves it,
    /// else the only port served.
    pub dns_port: Option<u16>,
    /// Known addresses (ClusterIPs) of each target, by target FQDN, for answer-form blocks.
    pub addresses: BTreeMap<String, Vec<IpAddr>>,
    /// A Corefile without a `kubernetes` plugin is fine (node-local-dns); every block gets
    /// the answer form.
    pub without_kubernetes: bool,
}

/// A server block, named so that it can be found again in a fresh copy of the Corefile: its
/// keys as written, and which of the blocks with exactly these keys it is (0 for the first).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
pub struct ServerRef {
    /// The keys, as written, joined by one space (`.:53`, `cluster.local:53 in-addr.arpa:53`).
    pub keys: String,
    /// Index among the blocks with the same keys.
    pub occurrence: usize,
}

impl std::fmt::Display for ServerRef {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.occurrence == 0 {
            write!(f, "`{}`", self.keys)
        } else {
            write!(f, "`{}` (#{})", self.keys, self.occurrence + 1)
        }
    }
}

/// How a block handles hairpin's names.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Form {
    /// `rewrite` rules to the hairpin Service names (the block has `kubernetes`).
    Rewrite,
    /// `template` directives answering the hairpin Services' ClusterIPs.
    Answer,
}

/// The marked block hairpin keeps in one server block.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct BlockInsert {
    /// The server block.
    pub server: ServerRef,
    /// How it handles the names.
    pub form: Form,
    /// The lines between the markers, without indentation or terminators.
    pub lines: Vec<String>,
}

/// What [`super::place`] decided.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Placement {
    /// One block per server block that answers hairpin's names, in Corefile order.
    pub inserts: Vec<BlockInsert>,
    /// Names left out (address unknown, no block serves them).
    pub warnings: Vec<Warning>,
    /// The cluster domain used to decide where a rewrite works.
    pub cluster_domain: String,
    /// The DNS port.
    pub port: u16,
}

/// One zone a server block serves on the DNS port.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Zone {
    /// `.` or a domain, lowercase, without trailing dot.
    Name(String),
    /// A reverse zone written as a CIDR: never holds a hostname.
    Reverse,
    /// A placeholder (`{$ZONE}`): unknown.
    Unknown,
}

/// A key's transport, zone and port.
fn parse_key(key: &str) -> Option<(Zone, Option<u16>)> {
    let rest = match key.split_once("://") {
        Some(("dns", rest)) => rest,
        // tls://, https://, grpc://, quic://: other transports, other ports.
        Some(_) => return None,
        None => key,
    };
    let (zone, port) = match rest.rsplit_once(':') {
        Some((zone, port)) if !zone.contains(']') || zone.ends_with(']') => (zone, Some(port)),
        _ => (rest, None),
    };
    let port = match port {
        None => Some(DEFAULT_DNS_PORT),
        Some(p) => p.parse().ok(),
    };
    let zone = if zone.contains('{') {
        Zone::Unknown
    } else if zone.contains('/') {
        Zone::Reverse
    } else {
        // Not lowercased: CoreDNS matches lowercased query names against the key as written,
        // so a block keyed `Example.COM.` never receives a query (checked in real CoreDNS).
        let z = zone.trim_end_matches('.');
        Zone::Name(if z.is_empty() {
            ".".into()
        } else {
            z.to_owned()
        })
    };
    Some((zone, port))
}

/// How many labels `zone` has (0 for the root).
pub(super) fn labels(zone: &str) -> usize {
    if zone == "." {
        0
    } else {
        zone.split('.').count()
    }
}

/// A server block as placement sees it.
struct Server<'a> {
    block: &'a ServerBlock,
    server: ServerRef,
    /// Zones served on the DNS port (empty: the block is on another port or transport).
    zones: Vec<String>,
    /// The block's `kubernetes` plugin resolves names in the cluster domain.
    resolves_cluster: bool,
}

/// Refs for every server block, in order.
pub(super) fn server_refs(src: &str, cf: &Corefile) -> Vec<ServerRef> {
    let mut seen: BTreeMap<String, usize> = BTreeMap::new();
    cf.blocks
        .iter()
        .map(|b| {
            let keys = b
                .keys
                .iter()
                .map(|k| k.text(src))
                .collect::<Vec<_>>()
                .join(" ");
            let n = seen.entry(keys.clone()).or_default();
            let occurrence = *n;
            *n += 1;
            ServerRef { keys, occurrence }
        })
        .collect()
}

fn kubernetes<'a>(src: &str, b: &'a ServerBlock) -> Option<&'a Directive> {
    b.directives
        .iter()
        .find(|d| d.name.text(src) == "kubernetes")
}

fn ambiguous(line: usize, message: String) -> CorefileError {
    CorefileError::Ambiguous { line, message }
}

/// The DNS port: the one asked for; else the port of the blocks holding `kubernetes` (the
/// cluster DNS Service must target a port where cluster names resolve); else (no
/// `kubernetes`, as in node-local-dns) the ports served. Among several, 53 when served, else
/// the only one.
fn dns_port(src: &str, cf: &Corefile, asked: Option<u16>) -> Result<u16, CorefileError> {
    if let Some(p) = asked {
        return Ok(p);
    }
    let with_k8s = cf.blocks.iter().any(|b| kubernetes(src, b).is_some());
    let mut ports: Vec<u16> = cf
        .blocks
        .iter()
        .filter(|b| !with_k8s || kubernetes(src, b).is_some())
        .flat_map(|b| b.keys.iter())
        .filter_map(|k| parse_key(&k.word(src)))
        .filter_map(|(_, port)| port)
        .collect();
    ports.sort_unstable();
    ports.dedup();
    match ports.as_slice() {
        [] => Err(ambiguous(
            1,
            "no server block serves plain DNS on a known port".into(),
        )),
        [only] => Ok(*only),
        _ if ports.contains(&DEFAULT_DNS_PORT) => Ok(DEFAULT_DNS_PORT),
        _ => Err(ambiguous(
            cf.blocks.first().map_or(1, |b| b.open.line),
            format!(
                "server blocks listen on ports {} and none on 53: hairpin cannot tell which \
                 one the cluster DNS Service targets",
                ports
                    .iter()
                    .map(u16::to_string)
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
        )),
    }
}

/// The blocks on the DNS port with the zones they serve there.
fn servers<'a>(
    src: &str,
    cf: &'a Corefile,
    port: u16,
    cluster_domain: &str,
) -> Result<Vec<Server<'a>>, CorefileError> {
    let refs = server_refs(src, cf);
    let mut out = Vec::new();
    for (b, server) in cf.blocks.iter().zip(refs) {
        let k8s = kubernetes(src, b);
        let mut zones = Vec::new();
        let mut unknown = false;
        for key in b.keys.iter().map(|k| k.word(src)) {
            let Some((zone, key_port)) = parse_key(&key).filter(|_| !key.is_empty()) else {
                continue;
            };
            match key_port {
                Some(p) if p != port => continue,
                // A placeholder port: the block may or may not be on the DNS port.
                None => unknown = true,
                Some(_) => {}
            }
            match zone {
                Zone::Name(z) => zones.push(z),
                Zone::Reverse => {}
                Zone::Unknown => unknown = true,
            }
        }
        if unknown {
            // A block with `kubernetes` and a placeholder key serves the cluster domain (the
            // placeholder layout); hairpin never redirects names there.
            if k8s.is_none() {
                return Err(ambiguous(
                    b.open.line,
                    format!(
                        "server block {server} uses a placeholder for its zone or port: hairpin \
                         cannot tell whether its names are answered there"
                    ),
                ));
            }
            zones.push(cluster_domain.to_owned());
        }
        let resolves_cluster = k8s.is_some_and(|d| {
            let args: Vec<&str> = d.args.iter().map(|a| a.value(src)).collect();
            if args.is_empty() {
                zones.iter().any(|z| in_zone(cluster_domain, z))
            } else {
                args.iter()
                    .any(|a| a.contains('{') || in_zone(cluster_domain, &super::normalize_zone(a)))
            }
        });
        out.push(Server {
            block: b,
            server,
            zones,
            resolves_cluster,
        });
    }
    Ok(out)
}

/// The servers that receive the names of `pattern`, into `out` (cleared first): those with the
/// most specific zone covering its name (or a wildcard's suffix), plus, for a wildcard, those
/// whose zone lies under the suffix where the wildcard reaches it.
fn receivers(servers: &[Server<'_>], pattern: &EntryRef<'_>, out: &mut Vec<usize>) {
    out.clear();
    let name = pattern.name;
    let best = servers
        .iter()
        .flat_map(|s| s.zones.iter())
        .filter(|z| in_zone(name, z))
        .map(|z| labels(z))
        .max();
    out.extend(
        servers
            .iter()
            .enumerate()
            .filter(|(_, s)| {
                s.zones
                    .iter()
                    .any(|z| in_zone(name, z) && Some(labels(z)) == best)
            })
            .map(|(i, _)| i),
    );
    if let Some(kind) = pattern.labels {
        for (i, s) in servers.iter().enumerate() {
            let below = s.zones.iter().any(|z| {
                z != name
                    && in_zone(z, name)
                    && (kind == WildcardLabels::OneOrMore || labels(z) == labels(name) + 1)
            });
            if below && !out.contains(&i) {
                out.push(i);
            }
        }
        out.sort_unstable();
    }
}

/// Whether hairpin's rules in `block` may open with [`cluster_bypass`], the rule that sends
/// every name of the cluster domain on at once (a `stop` rule that rewrites nothing), so that
/// cluster names and search-path NXDOMAINs never reach the regexes: only where no other
/// `rewrite` rule could see those names after it (the block has no `rewrite` of the user's
/// and no `import`, whose file might hold some) and none of `entries` lies in or covers the
/// cluster domain (the planner never asks for such names; checked all the same).
fn may_bypass(src: &str, block: &ServerBlock, domain: &str, entries: &[EntryRef<'_>]) -> bool {
    if domain.is_empty() || domain == "." {
        return false;
    }
    let own = hairpin_lines(src);
    let foreign = block.directives.iter().any(|d| {
        matches!(d.name.text(src), "rewrite" | "import")
            && !own.iter().any(|r| r.contains(&d.name.line))
    });
    let touches = entries
        .iter()
        .any(|e| in_zone(e.name, domain) || (e.labels.is_some() && in_zone(domain, e.name)));
    !foreign && !touches
}

/// The 1-based line ranges of hairpin's marked blocks in `src` (markers included).
fn hairpin_lines(src: &str) -> Vec<std::ops::RangeInclusive<usize>> {
    let mut out = Vec::new();
    let mut begin = None;
    for (i, line) in src.lines().enumerate() {
        let t = line.trim();
        if t.starts_with(crate::markers::BEGIN_PREFIX) {
            begin = Some(i + 1);
        } else if t == crate::markers::END_MARKER
            && let Some(b) = begin.take()
        {
            out.push(b..=i + 1);
        }
    }
    out
}

/// Decide the blocks for `entries` in a parsed Corefile.
pub(super) fn place(
    src: &str,
    cf: &Corefile,
    cluster_domain: &str,
    entries: &[EntryRef<'_>],
    opts: &PlaceOptions,
) -> Result<Placement, CorefileError> {
    let port = dns_port(src, cf, opts.dns_port)?;
    let servers = servers(src, cf, port, cluster_domain)?;
    if !opts.without_kubernetes && !servers.iter().any(|s| kubernetes(src, s.block).is_some()) {
        return Err(CorefileError::NoKubernetesBlock);
    }
    if !servers.iter().any(|s| !s.zones.is_empty()) {
        return Err(ambiguous(
            1,
            format!("no server block serves plain DNS on port {port}"),
        ));
    }
    // Per server (by index), its entries.
    let mut per_server: Vec<Vec<EntryRef<'_>>> = vec![Vec::new(); servers.len()];
    let mut not_served = Vec::new();
    let mut to = Vec::new();
    for e in entries {
        receivers(&servers, e, &mut to);
        if to.is_empty() {
            not_served.push(e.pattern());
        }
        for &i in &to {
            per_server[i].push(*e);
        }
    }
    let mut warnings = Vec::new();
    if !not_served.is_empty() {
        not_served.sort();
        not_served.dedup();
        warnings.push(Warning::NotServed {
            port,
            names: not_served,
        });
    }
    let mut inserts = Vec::new();
    for (s, entries) in servers.iter().zip(per_server) {
        if entries.is_empty() {
            continue;
        }
        let (form, lines) = if s.resolves_cluster && !opts.without_kubernetes {
            let mut lines = render_rules_of(&entries, opts.style)?;
            if bypass_pays(&lines) && may_bypass(src, s.block, cluster_domain, &entries) {
                lines.insert(0, cluster_bypass(cluster_domain));
            }
            (Form::Rewrite, lines)
        } else {
            let (lines, unknown) = render_answers_of(&entries, &opts.addresses)?;
            if !unknown.is_empty() {
                warnings.push(Warning::AddressUnknown {
                    line: s.block.open.line,
                    names: unknown,
                });
            }
            (Form::Answer, lines)
        };
        if !lines.is_empty() {
            inserts.push(BlockInsert {
                server: s.server.clone(),
                form,
                lines,
            });
        }
    }
    Ok(Placement {
        inserts,
        warnings,
        cluster_domain: cluster_domain.to_owned(),
        port,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_are_read_with_transport_zone_and_port() {
        let name = |z: &str| Zone::Name(z.into());
        assert_eq!(parse_key(".:53"), Some((name("."), Some(53))));
        assert_eq!(parse_key("."), Some((name("."), Some(53))));
        assert_eq!(parse_key("dns://.:5353"), Some((name("."), Some(5353))));
        // As written: CoreDNS never sends a (lowercased) query to `Example.COM.`.
        assert_eq!(
            parse_key("Example.COM.:53"),
            Some((name("Example.COM"), Some(53)))
        );
        assert_eq!(parse_key("tls://.:853"), None);
        assert_eq!(parse_key("{$ZONE}:53"), Some((Zone::Unknown, Some(53))));
        assert_eq!(parse_key(".:{$PORT}"), Some((name("."), None)));
        assert_eq!(parse_key("10.0.0.0/8:53"), Some((Zone::Reverse, Some(53))));
    }

    #[test]
    fn zones_cover_names_below_them() {
        assert!(in_zone("a.example.com", "."));
        assert!(in_zone("a.example.com", "example.com"));
        assert!(in_zone("example.com", "example.com"));
        assert!(!in_zone("aexample.com", "example.com"));
        assert!(!in_zone("example.com", "a.example.com"));
    }
}
