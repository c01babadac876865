//! Corefile editor: reads a CoreDNS Corefile and keeps one marked block in each server block
//! that receives hairpin's names ([`place`] decides which, and in which form: `rewrite` rules
//! where the block's `kubernetes` plugin resolves the rewritten name, `template` answers
//! elsewhere).
//!
//! Pure: string in, string out. Every byte outside the markers is preserved; removing the
//! blocks restores the original exactly; applying the same entries twice changes nothing.
//! Damaged markers (begin without end, end without begin, nested or duplicated blocks, lines
//! hairpin does not write between the markers) are refused with
//! [`CorefileError::Damaged`], never repaired: hairpin only ever removes lines it can prove it
//! wrote.
//!
//! ```
//! use hairpin_planner::corefile::{self, DnsEntry};
//! let original = ".:53 {\n    errors\n    kubernetes cluster.local in-addr.arpa ip6.arpa\n    reload\n}\n";
//! let info = corefile::analyze(original).unwrap();
//! assert_eq!(info.cluster_domain, "cluster.local");
//! let entries = [DnsEntry::new("foo.example.com", "hairpin-lb.hairpin.svc.cluster.local").unwrap()];
//! let edit = corefile::apply(original, &entries).unwrap();
//! assert!(edit.text.contains("    rewrite stop name exact foo.example.com hairpin-lb.hairpin.svc.cluster.local\n"));
//! assert_eq!(corefile::remove(&edit.text).unwrap().text, original);
//! ```

mod imports;
mod nodelocal;
mod parse;
mod placement;
mod rules;
pub mod shapes;
mod upstream;

pub use imports::{ImportedFile, ImportedPlacement, imported_key_suffixes, place_with_imports};
pub use nodelocal::{NodeLocalDnsInfo, NodeLocalServer, analyze_node_local_dns, bypassed};
pub use placement::{BlockInsert, DEFAULT_DNS_PORT, Form, PlaceOptions, Placement, ServerRef};
pub use rules::{
    ANSWER_TTL, DnsEntry, EXACT_RULES_MAX_PER_TARGET, HostPattern, REGEX_PATTERN_BUDGET, RuleStyle,
    bypass_pays, cluster_bypass, render_answers, render_rules, render_rules_with, service_fqdn,
};
pub use upstream::upstreams;

pub(crate) use rules::{EntryRef, normalize_target};

use crate::escape::Text;
use crate::forward::ZoneUpstreams;
use crate::markers::{self, Block};
use crate::markers::{Edit, MarkerDamage, Warning};
use parse::{Corefile, ServerBlock, leading_indent, line_start};
use rules::is_managed_line;

/// Largest value a ConfigMap can hold (the API server rejects bigger objects).
pub const CONFIGMAP_MAX_BYTES: usize = 1024 * 1024;

/// The first line of hairpin's own `coredns-custom` key ([`render_override`]).
pub const OVERRIDE_HEADER: &str = "# managed by hairpin; do not edit\n";

/// Default cluster domain when the `kubernetes` plugin line does not name one.
pub const DEFAULT_CLUSTER_DOMAIN: &str = "cluster.local";

/// Errors of the Corefile editor. Nothing is written when one is returned.
///
/// Their fields hold the Corefile's text and the names as they are (a `message` is hairpin's
/// words around them); the `Display` escapes every one of them once ([`crate::escape::text`]),
/// so the message is one line of printable text, printed as it is wherever it goes: the
/// plan's errors and warnings, the controller's logs, Events and conditions.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum CorefileError {
    #[error("invalid hostname `{}`: {reason}", Text(name))]
    InvalidHostname { name: String, reason: &'static str },
    #[error("invalid target `{}`: {reason}", Text(target))]
    InvalidTarget {
        target: String,
        reason: &'static str,
    },
    #[error(
        "hostname `{}` is mapped to two targets: `{}` and `{}`",
        Text(name),
        Text(first),
        Text(second)
    )]
    ConflictingTargets {
        name: String,
        first: String,
        second: String,
    },
    #[error("Corefile line {line}: {}", Text(message))]
    Syntax { line: usize, message: String },
    #[error(
        "the Corefile has no server block with the `kubernetes` plugin; nothing to edit \
         (is this the cluster's CoreDNS configuration?)"
    )]
    NoKubernetesBlock,
    #[error("Corefile line {line}: {}", Text(message))]
    UnsupportedLayout { line: usize, message: String },
    #[error(
        "`{}`: wildcards need `answer auto` in the rewrite plugin (CoreDNS 1.10 or later); \
         upgrade CoreDNS or list the names",
        Text(name)
    )]
    WildcardNeedsAnswerAuto { name: String },
    #[error(
        "the result would be {bytes} bytes, over the {limit}-byte ConfigMap limit; \
         use wildcards or fewer hostnames"
    )]
    TooLarge { bytes: usize, limit: usize },
    /// Its lines are escaped by [`MarkerDamage`]'s own `Display`.
    #[error("{0}")]
    Damaged(#[from] MarkerDamage),
    #[error(
        "Corefile line {line}: {}; nothing is written rather than guessing",
        Text(message)
    )]
    Ambiguous { line: usize, message: String },
    #[error(
        "the server block {} is no longer in the Corefile; planning again",
        Text(&server.to_string())
    )]
    ServerBlockGone { server: ServerRef },
}

impl CorefileError {
    /// Stable label for metrics and events.
    pub fn metric_label(&self) -> &'static str {
        match self {
            CorefileError::InvalidHostname { .. } => "invalid_hostname",
            CorefileError::InvalidTarget { .. } => "invalid_target",
            CorefileError::ConflictingTargets { .. } => "conflicting_targets",
            CorefileError::Syntax { .. } => "corefile_syntax",
            CorefileError::NoKubernetesBlock => "no_kubernetes_block",
            CorefileError::UnsupportedLayout { .. } => "unsupported_layout",
            CorefileError::WildcardNeedsAnswerAuto { .. } => "wildcard_needs_answer_auto",
            CorefileError::TooLarge { .. } => "too_large",
            CorefileError::Damaged(d) => d.kind.metric_label(),
            CorefileError::Ambiguous { .. } => "ambiguous_layout",
            CorefileError::ServerBlockGone { .. } => "server_block_gone",
        }
    }
}

/// An `import` inside the server block whose glob names a file extension, such as
/// `import custom/*.override` (AKS, DOKS, Gardener), `import /etc/coredns/custom/*.override`
/// (k3s) or `import custom/*.include` (LKE).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CustomImport {
    /// The import argument as written.
    pub path: String,
    /// The ConfigMap key suffix it picks up, with its dot: `.override`, `.include`.
    pub key_suffix: String,
}

/// What [`analyze`] learnt about a Corefile.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CorefileInfo {
    /// First zone of the `kubernetes` plugin (`cluster.local` when none can be read).
    pub cluster_domain: String,
    /// Every zone a `kubernetes` plugin serves: those on the chosen block's plugin line
    /// first, then those of the other server blocks' `kubernetes` plugins (their server
    /// block's zones when the line names none), lowercased, without trailing dot or port.
    pub kubernetes_zones: Vec<String>,
    /// Keys of the chosen server block, as written (`.:53`).
    pub server_block_keys: Vec<String>,
    /// 1-based line of the chosen server block's `{`.
    pub server_block_line: usize,
    /// The server block serves the root zone `.`.
    pub serves_root: bool,
    /// The server block has the `reload` plugin.
    pub has_reload: bool,
    /// Imports inside the server block that read per-key files (coredns-custom style).
    pub custom_imports: Vec<CustomImport>,
    /// A hairpin block is present (complete or damaged).
    pub has_hairpin_block: bool,
    /// Every zone with a `forward`, most specific first ([`upstreams`]).
    pub forward_zones: Vec<ZoneUpstreams>,
    /// Problems worth reporting: missing `reload`, damaged markers, defaulted domain...
    pub warnings: Vec<Warning>,
}

impl CorefileInfo {
    /// The Corefile imports `*.override` files into the `kubernetes` server block.
    pub fn imports_custom_override(&self) -> bool {
        self.custom_imports
            .iter()
            .any(|i| i.key_suffix == ".override")
    }

    /// Key suffix to use in the `coredns-custom` ConfigMap: `.override` if imported, else
    /// another per-key import (`.include` on LKE), else `None` (edit the Corefile itself).
    pub fn custom_key_suffix(&self) -> Option<&str> {
        self.custom_imports
            .iter()
            .find(|i| i.key_suffix == ".override")
            .or_else(|| self.custom_imports.first())
            .map(|i| i.key_suffix.as_str())
    }
}

/// The server block chosen for our rules and facts about it.
struct Target<'a> {
    block: &'a ServerBlock,
    kubernetes: &'a parse::Directive,
}

fn key_serves_root(key: &str) -> bool {
    let key = key
        .strip_prefix("dns://")
        .or_else(|| key.strip_prefix("tls://"))
        .or_else(|| key.strip_prefix("https://"))
        .or_else(|| key.strip_prefix("grpc://"))
        .unwrap_or(key);
    key == "." || key.starts_with(".:")
}

/// The server block holding `kubernetes`: the first one that serves `.`, else the first.
fn find_target<'a>(src: &str, cf: &'a Corefile) -> Result<Target<'a>, CorefileError> {
    let with_k8s = cf.blocks.iter().filter_map(|b| {
        b.directives
            .iter()
            .find(|d| d.name.text(src) == "kubernetes")
            .map(|k| Target {
                block: b,
                kubernetes: k,
            })
    });
    let mut first = None;
    for t in with_k8s {
        if t.block.keys.iter().any(|k| key_serves_root(k.text(src))) {
            return Ok(t);
        }
        first.get_or_insert(t);
    }
    first.ok_or(CorefileError::NoKubernetesBlock)
}

pub(super) fn normalize_zone(z: &str) -> String {
    let z = z.strip_prefix("dns://").unwrap_or(z);
    let z = z.split(':').next().unwrap_or(z);
    let z = z.trim_end_matches('.');
    z.to_ascii_lowercase()
}

/// Read a Corefile: the server block holding `kubernetes`, the cluster domain, `reload`,
/// imports. Same as [`analyze_with`] without `--cluster-domain`.
pub fn analyze(corefile: &str) -> Result<CorefileInfo, CorefileError> {
    analyze_with(corefile, None)
}

/// The cluster domain: the `kubernetes` plugin's first zone; else (no zone, or a placeholder
/// such as `{$CLUSTER_DOMAIN}`) `flag` (`--cluster-domain`); else the server block's zone;
/// else [`DEFAULT_CLUSTER_DOMAIN`] with a warning.
fn cluster_domain(
    src: &str,
    t: &Target<'_>,
    keys: &[String],
    flag: Option<&str>,
    warnings: &mut Vec<Warning>,
) -> (String, Vec<String>) {
    let zones: Vec<String> = t
        .kubernetes
        .args
        .iter()
        .map(|a| a.word(src).into_owned())
        .collect();
    let usable = |z: &str| !z.is_empty() && !z.contains(['{', '"']) && !z.ends_with("arpa");
    let from_plugin = zones
        .first()
        .map(|z| normalize_zone(z))
        .filter(|z| usable(z));
    // Without zones the plugin serves the server block's zones.
    let from_block = || {
        zones
            .is_empty()
            .then(|| keys.iter().map(|k| normalize_zone(k)).find(|z| usable(z)))
            .flatten()
    };
    let flag = flag
        .map(|f| f.trim_end_matches('.').to_ascii_lowercase())
        .filter(|f| !f.is_empty());
    let domain = from_plugin
        .or_else(|| flag.clone())
        .or_else(from_block)
        .unwrap_or_else(|| {
            warnings.push(Warning::ClusterDomainDefaulted {
                line: t.kubernetes.name.line,
                default: DEFAULT_CLUSTER_DOMAIN.into(),
            });
            DEFAULT_CLUSTER_DOMAIN.to_owned()
        });
    (domain, zones.iter().map(|z| normalize_zone(z)).collect())
}

/// [`analyze`], with the `--cluster-domain` flag's value when one was given.
pub fn analyze_with(
    corefile: &str,
    cluster_domain_flag: Option<&str>,
) -> Result<CorefileInfo, CorefileError> {
    analyze_parsed(corefile, &parse::parse(corefile)?, cluster_domain_flag)
}

/// A Corefile read once ([`analyze_with`]): its text, what the analysis says of it, and its
/// parse, which the planner's placement and edit use again rather than parse the Corefile
/// anew (with hairpin's block in it, at 20,000 names, it is about 700 KiB).
#[derive(Debug)]
pub(crate) struct Analyzed<'a> {
    pub(crate) text: &'a str,
    pub(crate) info: CorefileInfo,
    cf: Corefile,
}

impl<'a> Analyzed<'a> {
    /// [`analyze_with`], keeping the parse.
    pub(crate) fn new(
        text: &'a str,
        cluster_domain_flag: Option<&str>,
    ) -> Result<Self, CorefileError> {
        let cf = parse::parse(text)?;
        let info = analyze_parsed(text, &cf, cluster_domain_flag)?;
        Ok(Self { text, info, cf })
    }

    /// [`imported_key_suffixes`].
    pub(crate) fn imported_key_suffixes(&self) -> Vec<String> {
        imports::key_suffixes(self.text, &self.cf)
    }

    /// [`place_with_imports`].
    pub(crate) fn place_with_imports(
        &self,
        imported: &[ImportedFile],
        entries: &[EntryRef<'_>],
        opts: &PlaceOptions,
    ) -> Result<ImportedPlacement, CorefileError> {
        imports::place_parsed(self.text, &self.cf, imported, entries, opts)
    }

    /// [`write_blocks`].
    pub(crate) fn write_blocks(&self, inserts: &[BlockInsert]) -> Result<Edit, CorefileError> {
        write_blocks_parsed(self.text, &self.cf, inserts)
    }
}

/// [`analyze_with`] of a Corefile already parsed (`cf`).
fn analyze_parsed(
    corefile: &str,
    cf: &Corefile,
    cluster_domain_flag: Option<&str>,
) -> Result<CorefileInfo, CorefileError> {
    let t = find_target(corefile, cf)?;
    let src = corefile;
    let mut warnings = Vec::new();

    let keys: Vec<String> = t
        .block
        .keys
        .iter()
        .map(|k| k.text(src).to_owned())
        .collect();
    let serves_root = t.block.keys.iter().any(|k| key_serves_root(&k.word(src)));
    if !serves_root {
        warnings.push(Warning::ServerBlockNotRoot {
            line: t.block.open.line,
            keys: keys.clone(),
        });
    }
    let key_words: Vec<String> = t
        .block
        .keys
        .iter()
        .map(|k| k.word(src).into_owned())
        .collect();
    let (cluster_domain, mut kubernetes_zones) =
        cluster_domain(src, &t, &key_words, cluster_domain_flag, &mut warnings);
    // Every `kubernetes` plugin serves its zones from the cluster, not only the chosen one's.
    add_kubernetes_zones(cf, src, &mut kubernetes_zones);

    let has_reload = t
        .block
        .directives
        .iter()
        .any(|d| d.name.text(src) == "reload");
    if !has_reload {
        warnings.push(Warning::ReloadMissing {
            server_block_line: t.block.open.line,
        });
    }

    let custom_imports = custom_imports(&t, src);

    let lines = markers::lines(corefile);
    let blocks = find_blocks(corefile, &lines, cf)?;

    Ok(CorefileInfo {
        cluster_domain,
        kubernetes_zones,
        server_block_keys: keys,
        server_block_line: t.block.open.line,
        serves_root,
        has_reload,
        custom_imports,
        has_hairpin_block: !blocks.is_empty(),
        forward_zones: upstream::upstreams_in(cf, corefile),
        warnings,
    })
}

/// Adds to `zones` the zones of every `kubernetes` plugin of `cf` (its arguments, else its
/// server block's keys), each once.
fn add_kubernetes_zones(cf: &Corefile, src: &str, zones: &mut Vec<String>) {
    for (block, k8s) in cf.blocks.iter().filter_map(|b| {
        b.directives
            .iter()
            .find(|d| d.name.text(src) == "kubernetes")
            .map(|d| (b, d))
    }) {
        let found: Vec<String> = if k8s.args.is_empty() {
            block
                .keys
                .iter()
                .map(|k| normalize_zone(&k.word(src)))
                .collect()
        } else {
            k8s.args
                .iter()
                .map(|a| normalize_zone(&a.word(src)))
                .collect()
        };
        for z in found {
            if !z.is_empty() && !z.contains(['{', '"', '/']) && !zones.contains(&z) {
                zones.push(z);
            }
        }
    }
}

/// The `import` lines of the chosen server block that read a glob of `coredns-custom` keys
/// (`import custom/*.override`), with the key suffix each reads.
fn custom_imports(t: &Target<'_>, src: &str) -> Vec<CustomImport> {
    t.block
        .directives
        .iter()
        .filter(|d| d.name.text(src) == "import")
        .flat_map(|d| d.args.first())
        .filter_map(|a| {
            let path = a.value(src);
            let file = path.rsplit('/').next().unwrap_or(path);
            let ext = file.strip_prefix('*')?;
            (ext.starts_with('.') && ext.len() > 1 && !ext.contains(['*', '?', '['])).then(|| {
                CustomImport {
                    path: path.to_owned(),
                    key_suffix: ext.to_owned(),
                }
            })
        })
        .collect()
}

/// The hairpin blocks of a Corefile (`src`, its `lines` and its parse `cf`). A marker line
/// inside a quoted string (which may span lines) is part of that string, not a marker.
fn find_blocks(
    src: &str,
    lines: &[markers::Line],
    cf: &Corefile,
) -> Result<Vec<Block>, CorefileError> {
    let spans = &cf.multiline;
    let in_string = |at: usize| spans.iter().any(|&(s, e)| at > s && at < e);
    Ok(markers::find_blocks(
        src,
        lines,
        in_string,
        is_managed_line,
    )?)
}

/// Index of the server block a hairpin block sits in directly (not inside a plugin's own
/// block, where its lines would be read as options of that plugin).
fn owner(src: &str, lines: &[markers::Line], b: &Block, cf: &Corefile) -> Option<usize> {
    let (start, end) = (lines[b.first].start, lines[b.last].end);
    cf.blocks.iter().position(|sb: &ServerBlock| {
        let in_server = start > sb.open.start && end <= line_start(src, sb.close.start);
        let in_plugin = sb
            .directives
            .iter()
            .filter_map(|d| d.block)
            .any(|(open, close)| start > open.start && start < close.start);
        in_server && !in_plugin
    })
}

/// Insert or update the hairpin blocks so that they hold exactly the rules for `entries`
/// ([`RuleStyle::Compact`], default [`PlaceOptions`]). Empty `entries` removes them (same as
/// [`remove`]).
pub fn apply(corefile: &str, entries: &[DnsEntry]) -> Result<Edit, CorefileError> {
    apply_with(corefile, entries, RuleStyle::Compact)
}

/// [`apply`] with an explicit [`RuleStyle`].
pub fn apply_with(
    corefile: &str,
    entries: &[DnsEntry],
    style: RuleStyle,
) -> Result<Edit, CorefileError> {
    let opts = PlaceOptions {
        style,
        ..PlaceOptions::default()
    };
    apply_placed(corefile, entries, &opts)
}

/// [`place`] then [`write_blocks`]; the warnings of both.
pub fn apply_placed(
    corefile: &str,
    entries: &[DnsEntry],
    opts: &PlaceOptions,
) -> Result<Edit, CorefileError> {
    let placement = place(corefile, entries, opts)?;
    let mut edit = write_blocks(corefile, &placement.inserts)?;
    let mut warnings = placement.warnings;
    warnings.append(&mut edit.warnings);
    edit.warnings = warnings;
    Ok(edit)
}

/// Decide which server blocks receive `entries`, and what each one's hairpin block holds.
/// Empty `entries` place nothing (every hairpin block is then removed by [`write_blocks`]).
pub fn place(
    corefile: &str,
    entries: &[DnsEntry],
    opts: &PlaceOptions,
) -> Result<Placement, CorefileError> {
    place_refs(corefile, &EntryRef::all(entries), opts)
}

/// [`place`] of borrowed entries.
pub(crate) fn place_refs(
    corefile: &str,
    entries: &[EntryRef<'_>],
    opts: &PlaceOptions,
) -> Result<Placement, CorefileError> {
    place_parsed(corefile, &parse::parse(corefile)?, entries, opts)
}

/// [`place`] in a Corefile already parsed (`cf`).
fn place_parsed(
    corefile: &str,
    cf: &Corefile,
    entries: &[EntryRef<'_>],
    opts: &PlaceOptions,
) -> Result<Placement, CorefileError> {
    let domain = placement_domain(corefile, cf, opts)?;
    if entries.is_empty() {
        return Ok(Placement {
            inserts: Vec::new(),
            warnings: Vec::new(),
            cluster_domain: domain,
            port: opts.dns_port.unwrap_or(DEFAULT_DNS_PORT),
        });
    }
    placement::place(corefile, cf, &domain, entries, opts)
}

/// The cluster domain placement works with: the `kubernetes` plugin's (or `--cluster-domain`),
/// from the Corefile and its parse `cf`.
fn placement_domain(
    corefile: &str,
    cf: &Corefile,
    opts: &PlaceOptions,
) -> Result<String, CorefileError> {
    Ok(if opts.without_kubernetes {
        opts.cluster_domain
            .clone()
            .unwrap_or_else(|| DEFAULT_CLUSTER_DOMAIN.to_owned())
    } else {
        analyze_parsed(corefile, cf, opts.cluster_domain.as_deref())?.cluster_domain
    })
}

/// Make the Corefile's hairpin blocks exactly `inserts`: each listed server block holds one
/// block with the given lines (updated in place, or inserted), and every other hairpin block
/// is removed (an intact block is provably hairpin's). Damaged markers, or two blocks in one
/// server block, are refused. Nothing outside the markers changes.
pub fn write_blocks(corefile: &str, inserts: &[BlockInsert]) -> Result<Edit, CorefileError> {
    write_blocks_parsed(corefile, &parse::parse(corefile)?, inserts)
}

/// [`write_blocks`] into a Corefile already parsed (`cf`).
fn write_blocks_parsed(
    corefile: &str,
    cf: &Corefile,
    inserts: &[BlockInsert],
) -> Result<Edit, CorefileError> {
    let lines = markers::lines(corefile);
    let blocks = find_blocks(corefile, &lines, cf)?;
    let refs = placement::server_refs(corefile, cf);
    let index_of = |server: &ServerRef| {
        refs.iter()
            .position(|r| r == server)
            .ok_or_else(|| CorefileError::ServerBlockGone {
                server: server.clone(),
            })
    };
    let targets: Vec<usize> = inserts
        .iter()
        .map(|i| index_of(&i.server))
        .collect::<Result<_, _>>()?;

    let mut warnings = Vec::new();
    let placed = Placed {
        corefile,
        lines: &lines,
        cf,
        inserts,
        targets: &targets,
    };
    let fate = placed.fate(&blocks, &mut warnings)?;
    let eol = markers::line_ending(corefile);
    let mut text = corefile.to_owned();
    for (b, insert) in &fate {
        text = match insert {
            Some(i) => {
                markers::replace_block(&text, &lines, b, i.lines.iter().map(String::as_str), eol)
            }
            None => {
                let mut t = text;
                t.replace_range(b.byte_range(corefile, &lines), "");
                t
            }
        };
    }
    let text = placed.insert_fresh(text, &fate, eol)?;
    check_size(&text)?;
    debug_assert!(
        parse::parse(&text).is_ok(),
        "our edit must keep the Corefile parseable"
    );
    Ok(Edit {
        changed: text != corefile,
        text,
        warnings,
    })
}

/// A Corefile (its text, lines and parse) and the blocks to write into it, each with the
/// index of its server block (`targets`).
struct Placed<'a> {
    corefile: &'a str,
    lines: &'a [markers::Line],
    cf: &'a Corefile,
    inserts: &'a [BlockInsert],
    targets: &'a [usize],
}

impl<'a> Placed<'a> {
    /// What becomes of each hairpin block already there: the insert it now holds, or `None`
    /// (removed; warned about when hairpin still writes elsewhere: the block moved). Last
    /// block first, so that the byte offsets of the earlier ones stay valid while editing.
    fn fate(
        &self,
        blocks: &[Block],
        warnings: &mut Vec<Warning>,
    ) -> Result<Vec<(Block, Option<&'a BlockInsert>)>, CorefileError> {
        let (corefile, lines) = (self.corefile, self.lines);
        let mut fate: Vec<(Block, Option<&BlockInsert>)> = Vec::new();
        for (insert, &target) in self.inserts.iter().zip(self.targets) {
            let here: Vec<&Block> = blocks
                .iter()
                .filter(|b| owner(corefile, lines, b, self.cf) == Some(target))
                .collect();
            if here.len() > 1 {
                return Err(markers::duplicate(corefile, lines, &here).into());
            }
            if let Some(b) = here.first() {
                fate.push(((*b).clone(), Some(insert)));
            }
        }
        for b in blocks {
            if !fate.iter().any(|(kept, _)| kept == b) {
                if !self.inserts.is_empty() {
                    warnings.push(Warning::BlockMisplaced {
                        line: b.line_number(),
                    });
                }
                fate.push((b.clone(), None));
            }
        }
        fate.sort_by_key(|(b, _)| std::cmp::Reverse(b.first));
        Ok(fate)
    }

    /// `text` with the fresh blocks: those no block of `fate` holds, into their server blocks
    /// (from the end, so that earlier offsets stay valid). The edited text is parsed again (for
    /// the offsets of the fresh blocks' server blocks, and to refuse an edit that leaves it
    /// unreadable), unless it is the Corefile unchanged, as in the steady state: that one
    /// parsed already.
    fn insert_fresh(
        &self,
        mut text: String,
        fate: &[(Block, Option<&BlockInsert>)],
        eol: &str,
    ) -> Result<String, CorefileError> {
        let fresh: Vec<(&BlockInsert, usize)> = self
            .inserts
            .iter()
            .zip(self.targets.iter().copied())
            .filter(|(insert, _)| !fate.iter().any(|(_, i)| *i == Some(*insert)))
            .collect();
        if fresh.is_empty() && text == self.corefile {
            return Ok(text);
        }
        let cf = parse::parse(&text)?;
        let mut rendered: Vec<(usize, String)> = Vec::new();
        for (insert, target) in fresh {
            let (at, indent) = insertion_point(&text, &cf.blocks[target], insert.form)?;
            let lines = insert.lines.iter().map(String::as_str);
            rendered.push((at, markers::render_block(lines, &indent, eol, true)));
        }
        rendered.sort_by_key(|(at, _)| std::cmp::Reverse(*at));
        for (at, block) in rendered {
            text.insert_str(at, &block);
        }
        Ok(text)
    }
}

/// Where a fresh block goes in server block `sb`, and its indentation: rewrite rules right
/// before `kubernetes`; answers right before the block's first `template` (CoreDNS tries the
/// templates of a block in Corefile order, and a template without `fallthrough` answers
/// NXDOMAIN for what it does not match); otherwise right before the closing `}` line.
fn insertion_point(
    src: &str,
    sb: &ServerBlock,
    form: Form,
) -> Result<(usize, String), CorefileError> {
    let anchor = match form {
        Form::Rewrite => "kubernetes",
        Form::Answer => "template",
    };
    let anchor = sb.directives.iter().find(|d| d.name.text(src) == anchor);
    if let Some(d) = anchor
        && d.name.first_on_line
        && let Some(indent) = leading_indent(src, d.name.start)
    {
        return Ok((line_start(src, d.name.start), indent.to_owned()));
    }
    let close = &sb.close;
    if close.first_on_line
        && let Some(close_indent) = leading_indent(src, close.start)
    {
        // Indent like the first directive that starts its own line, else one level deeper
        // than the closing brace.
        let indent = sb
            .directives
            .iter()
            .filter(|d| d.name.first_on_line)
            .find_map(|d| leading_indent(src, d.name.start))
            .map_or_else(|| format!("{close_indent}    "), str::to_owned);
        return Ok((line_start(src, close.start), indent));
    }
    Err(CorefileError::UnsupportedLayout {
        line: anchor.map_or(sb.open.line, |d| d.name.line),
        message: "the plugins and the closing `}` of this server block share their lines; \
                  put the closing `}` on its own line"
            .into(),
    })
}

fn check_size(text: &str) -> Result<(), CorefileError> {
    if text.len() > CONFIGMAP_MAX_BYTES {
        return Err(CorefileError::TooLarge {
            bytes: text.len(),
            limit: CONFIGMAP_MAX_BYTES,
        });
    }
    Ok(())
}

/// Remove every hairpin block. A Corefile that only ever received hairpin blocks through
/// [`apply`] comes back byte for byte. Damaged markers are refused, as by [`apply`].
pub fn remove(corefile: &str) -> Result<Edit, CorefileError> {
    write_blocks(corefile, &[])
}

/// Content of the `hairpin.override` key for `coredns-custom` mode: the same rules, one per
/// line, without markers (the whole key is ours). Empty `entries` give an empty string.
/// Its length is what counts against the ConfigMap size limit.
pub fn render_override(entries: &[DnsEntry]) -> Result<String, CorefileError> {
    render_override_with(entries, RuleStyle::Compact)
}

/// [`render_override`] with an explicit [`RuleStyle`].
pub fn render_override_with(
    entries: &[DnsEntry],
    style: RuleStyle,
) -> Result<String, CorefileError> {
    render_override_of(&EntryRef::all(entries), style)
}

/// [`render_override_with`] of borrowed entries.
pub(crate) fn render_override_of(
    entries: &[EntryRef<'_>],
    style: RuleStyle,
) -> Result<String, CorefileError> {
    let rules = rules::render_rules_of(entries, style)?;
    if rules.is_empty() {
        return Ok(String::new());
    }
    let mut out = String::from(OVERRIDE_HEADER);
    for r in rules {
        out.push_str(&r);
        out.push('\n');
    }
    check_size(&out)?;
    Ok(out)
}

#[cfg(test)]
mod tests;
