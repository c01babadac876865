//! Corefile editor: reads a CoreDNS Corefile and writes one marked block of `rewrite` rules
//! into the server block that holds the `kubernetes` plugin.
//!
//! Pure: string in, string out. Every byte outside the markers is preserved; removing the
//! block restores the original exactly; applying the same entries twice changes nothing.
//! Damaged markers (begin without end, end without begin, two blocks, a block outside the
//! `kubernetes` server block) are repaired deterministically and reported as
//! [`Warning`]s.
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

mod nodelocal;
mod parse;
mod rules;

pub use nodelocal::{NodeLocalDnsInfo, NodeLocalServer, analyze_node_local_dns, bypassed};
pub use rules::{
    DnsEntry, EXACT_RULES_MAX_PER_TARGET, HostPattern, REGEX_PATTERN_BUDGET, RuleStyle,
    render_rules, render_rules_with, service_fqdn,
};

use crate::markers::{self, Block};
pub use crate::markers::{BEGIN_MARKER, END_MARKER, Edit, Warning};
use parse::{Corefile, ServerBlock, Tok, leading_indent, line_start};

/// Largest value a ConfigMap can hold (the API server rejects bigger objects).
pub const CONFIGMAP_MAX_BYTES: usize = 1024 * 1024;

/// Default cluster domain when the `kubernetes` plugin line does not name one.
pub const DEFAULT_CLUSTER_DOMAIN: &str = "cluster.local";

/// Errors of the Corefile editor. Nothing is written when one is returned.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum CorefileError {
    #[error("invalid hostname `{name}`: {reason}")]
    InvalidHostname { name: String, reason: &'static str },
    #[error("invalid target `{target}`: {reason}")]
    InvalidTarget {
        target: String,
        reason: &'static str,
    },
    #[error("hostname `{name}` is mapped to two targets: `{first}` and `{second}`")]
    ConflictingTargets {
        name: String,
        first: String,
        second: String,
    },
    #[error("Corefile line {line}: {message}")]
    Syntax { line: usize, message: String },
    #[error(
        "the Corefile has no server block with the `kubernetes` plugin; nothing to edit \
         (is this the cluster's CoreDNS configuration?)"
    )]
    NoKubernetesBlock,
    #[error("Corefile line {line}: {message}")]
    UnsupportedLayout { line: usize, message: String },
    #[error(
        "`{name}`: wildcards need `answer auto` in the rewrite plugin (CoreDNS 1.10 or later); \
         upgrade CoreDNS or list the names"
    )]
    WildcardNeedsAnswerAuto { name: String },
    #[error(
        "the result would be {bytes} bytes, over the {limit}-byte ConfigMap limit; \
         use wildcards or fewer hostnames"
    )]
    TooLarge { bytes: usize, limit: usize },
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
    /// All zones on the `kubernetes` plugin line.
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
    key.split(',')
        .any(|k| k == "." || k.starts_with(".:") || k.is_empty())
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

fn normalize_zone(z: &str) -> String {
    let z = z.strip_prefix("dns://").unwrap_or(z);
    let z = z.split(':').next().unwrap_or(z);
    let z = z.trim_end_matches('.');
    z.to_ascii_lowercase()
}

/// Read a Corefile: which server block we would edit, the cluster domain, `reload`, imports.
pub fn analyze(corefile: &str) -> Result<CorefileInfo, CorefileError> {
    let cf = parse::parse(corefile)?;
    let t = find_target(corefile, &cf)?;
    let src = corefile;
    let mut warnings = Vec::new();

    let keys: Vec<String> = t
        .block
        .keys
        .iter()
        .map(|k| k.text(src).to_owned())
        .collect();
    let serves_root = keys.iter().any(|k| key_serves_root(k));
    if !serves_root {
        warnings.push(Warning::ServerBlockNotRoot {
            line: t.block.open.line,
            keys: keys.clone(),
        });
    }

    let zones: Vec<String> = t
        .kubernetes
        .args
        .iter()
        .map(|a| a.value(src).to_owned())
        .collect();
    let usable = |z: &str| !z.is_empty() && !z.contains(['{', '"']) && !z.ends_with("arpa");
    let found = match zones.first() {
        Some(z) => Some(normalize_zone(z)).filter(|z| usable(z)),
        // Without zones the plugin serves the server block's zones.
        None => keys.iter().map(|k| normalize_zone(k)).find(|z| usable(z)),
    };
    let cluster_domain = found.unwrap_or_else(|| {
        warnings.push(Warning::ClusterDomainDefaulted {
            line: t.kubernetes.name.line,
            default: DEFAULT_CLUSTER_DOMAIN.into(),
        });
        DEFAULT_CLUSTER_DOMAIN.to_owned()
    });

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

    let custom_imports = t
        .block
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
        .collect();

    let lines = markers::lines(corefile);
    let blocks = markers::find_blocks(corefile, &lines, is_managed_line);
    let (_, block_warnings) = classify(corefile, &lines, &blocks, t.block);
    warnings.extend(block_warnings);

    Ok(CorefileInfo {
        cluster_domain,
        kubernetes_zones: zones.iter().map(|z| normalize_zone(z)).collect(),
        server_block_keys: keys,
        server_block_line: t.block.open.line,
        serves_root,
        has_reload,
        custom_imports,
        has_hairpin_block: !blocks.is_empty(),
        warnings,
    })
}

/// Lines the editor writes between the markers (bounds damaged blocks).
fn is_managed_line(line: &str) -> bool {
    line.trim_start().starts_with("rewrite stop name ")
}

/// Whether a block's lines lie inside the server block's braces, and not inside a plugin's
/// own block (where `rewrite` lines would be read as options of that plugin).
fn inside(src: &str, lines: &[markers::Line], b: &Block, sb: &ServerBlock) -> bool {
    let (start, end) = (lines[b.first].start, lines[b.last].end);
    let in_server = start > sb.open.start && end <= line_start(src, sb.close.start);
    let in_plugin = sb
        .directives
        .iter()
        .filter_map(|d| d.block)
        .any(|(open, close)| start > open.start && start < close.start);
    in_server && !in_plugin
}

/// Split found blocks into "keep in place" (a single complete block inside the server block)
/// and warnings for all the others, which are removed.
fn classify(
    src: &str,
    lines: &[markers::Line],
    blocks: &[Block],
    sb: &ServerBlock,
) -> (Option<Block>, Vec<Warning>) {
    let mut warnings = Vec::new();
    let mut keep = None;
    let mut seen_complete = false;
    for b in blocks {
        if let Some(w) = markers::damage_warning(b) {
            warnings.push(w);
            continue;
        }
        if !inside(src, lines, b, sb) {
            warnings.push(Warning::BlockMisplaced {
                line: b.marker_line_number(),
            });
            continue;
        }
        if seen_complete {
            warnings.push(Warning::DuplicateBlock {
                line: b.marker_line_number(),
            });
            keep = None;
            continue;
        }
        seen_complete = true;
        keep = Some(b.clone());
    }
    if !warnings.is_empty() {
        // Any damage: rebuild from scratch at the default place, deterministically.
        keep = None;
    }
    (keep, warnings)
}

/// Insert or update the hairpin block so that it holds exactly the rules for `entries`
/// ([`RuleStyle::Compact`]). Empty `entries` removes the block (same as [`remove`]).
pub fn apply(corefile: &str, entries: &[DnsEntry]) -> Result<Edit, CorefileError> {
    apply_with(corefile, entries, RuleStyle::Compact)
}

/// [`apply`] with an explicit [`RuleStyle`].
pub fn apply_with(
    corefile: &str,
    entries: &[DnsEntry],
    style: RuleStyle,
) -> Result<Edit, CorefileError> {
    let rules = render_rules_with(entries, style)?;
    if rules.is_empty() {
        return remove(corefile);
    }
    let cf = parse::parse(corefile)?;
    let t = find_target(corefile, &cf)?;
    let lines = markers::lines(corefile);
    let blocks = markers::find_blocks(corefile, &lines, is_managed_line);
    let (keep, warnings) = classify(corefile, &lines, &blocks, t.block);
    let eol = markers::line_ending(corefile);

    let text = match keep {
        Some(b) => {
            markers::replace_block(corefile, &lines, &b, rules.iter().map(String::as_str), eol)
        }
        None => {
            let cleaned = markers::remove_blocks(corefile, &lines, &blocks);
            insert_block(&cleaned, &rules, eol)?
        }
    };
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

/// Insert a fresh block into a Corefile that has none: right before the `kubernetes` line,
/// indented like it; or, when `kubernetes` shares its line with something else, right before
/// the server block's closing `}` line.
fn insert_block(src: &str, rules: &[String], eol: &str) -> Result<String, CorefileError> {
    let cf = parse::parse(src)?;
    let t = find_target(src, &cf)?;
    let (at, indent) = insertion_point(src, &t)?;
    let block = markers::render_block(rules.iter().map(String::as_str), &indent, eol, true);
    let mut out = String::with_capacity(src.len() + block.len());
    out.push_str(&src[..at]);
    out.push_str(&block);
    out.push_str(&src[at..]);
    Ok(out)
}

fn insertion_point(src: &str, t: &Target<'_>) -> Result<(usize, String), CorefileError> {
    let k: &Tok = &t.kubernetes.name;
    if k.first_on_line
        && let Some(indent) = leading_indent(src, k.start)
    {
        return Ok((line_start(src, k.start), indent.to_owned()));
    }
    let close = &t.block.close;
    if close.first_on_line
        && let Some(close_indent) = leading_indent(src, close.start)
    {
        // Indent like the first directive that starts its own line, else one level deeper
        // than the closing brace.
        let indent = t
            .block
            .directives
            .iter()
            .filter(|d| d.name.first_on_line)
            .find_map(|d| leading_indent(src, d.name.start))
            .map_or_else(|| format!("{close_indent}    "), str::to_owned);
        return Ok((line_start(src, close.start), indent));
    }
    Err(CorefileError::UnsupportedLayout {
        line: k.line,
        message: "the `kubernetes` plugin and the closing `}` of its server block share \
                  their lines with other plugins; put `kubernetes` on its own line"
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

/// Remove every hairpin block (complete or damaged). A Corefile that only ever received
/// hairpin blocks through [`apply`] comes back byte for byte.
pub fn remove(corefile: &str) -> Result<Edit, CorefileError> {
    Ok(markers::remove_all(corefile, is_managed_line))
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
    let rules = render_rules_with(entries, style)?;
    if rules.is_empty() {
        return Ok(String::new());
    }
    let mut out = String::from("# managed by hairpin; do not edit\n");
    for r in rules {
        out.push_str(&r);
        out.push('\n');
    }
    check_size(&out)?;
    Ok(out)
}

#[cfg(test)]
mod tests;
