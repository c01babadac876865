//! Server blocks a Corefile imports from other files at its top level: `import custom/*.server`
//! (AKS, k3s) reads every `coredns-custom` key ending in `.server` as more server blocks. A
//! query for a name under one of their zones goes to that block, not to the root block, so
//! hairpin's names there must be answered in that block, inside that key.
//!
//! Placement runs over the Corefile and the imported files together (CoreDNS sees them as one
//! Corefile), and each insert is then given back to the file its server block came from.

use super::parse::{self, Corefile};
use super::placement::{self, BlockInsert, PlaceOptions, Placement};
use super::rules::EntryRef;
use super::{CorefileError, DnsEntry};

/// A file of server blocks the Corefile imports (a `coredns-custom` key and its text).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ImportedFile {
    /// The key (file name), e.g. `example.server`.
    pub name: String,
    /// Its text.
    pub text: String,
}

/// What [`place_with_imports`] decided.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ImportedPlacement {
    /// The Corefile's own blocks (as [`super::place`] gives them).
    pub main: Placement,
    /// For each imported file, in the order given: the blocks it holds (server refs relative
    /// to that file), or why it cannot be read (then it is left out of placement, and must
    /// not be written).
    pub imported: Vec<Result<Vec<BlockInsert>, CorefileError>>,
}

/// The key suffixes the Corefile's top-level imports read, with their dot: `import
/// custom/*.server` and `import /etc/coredns/custom/*.server` give `.server`. Imports of one
/// named file, or globs that are not `*<suffix>`, give nothing.
///
/// # Errors
/// A Corefile that does not parse.
pub fn imported_key_suffixes(corefile: &str) -> Result<Vec<String>, CorefileError> {
    Ok(key_suffixes(corefile, &parse::parse(corefile)?))
}

/// [`imported_key_suffixes`] of a Corefile already parsed (`cf`).
pub(super) fn key_suffixes(corefile: &str, cf: &Corefile) -> Vec<String> {
    let mut out: Vec<String> = cf
        .imports
        .iter()
        .filter_map(|t| {
            let path = t.value(corefile);
            let file = path.rsplit('/').next().unwrap_or(path);
            let ext = file.strip_prefix('*')?;
            (ext.starts_with('.') && ext.len() > 1 && !ext.contains(['*', '?', '[']))
                .then(|| ext.to_owned())
        })
        .collect();
    out.sort();
    out.dedup();
    out
}

/// [`super::place`] over the Corefile and the files it imports, together.
///
/// # Errors
/// As [`super::place`] for the Corefile (a file that does not parse on its own is reported in
/// [`ImportedPlacement::imported`] instead, and left out).
pub fn place_with_imports(
    corefile: &str,
    imported: &[ImportedFile],
    entries: &[DnsEntry],
    opts: &PlaceOptions,
) -> Result<ImportedPlacement, CorefileError> {
    let entries = EntryRef::all(entries);
    place_parsed(corefile, &parse::parse(corefile)?, imported, &entries, opts)
}

/// [`place_with_imports`] over a Corefile already parsed (`cf`).
pub(super) fn place_parsed(
    corefile: &str,
    cf: &Corefile,
    imported: &[ImportedFile],
    entries: &[EntryRef<'_>],
    opts: &PlaceOptions,
) -> Result<ImportedPlacement, CorefileError> {
    let readable: Vec<Result<(), CorefileError>> = imported
        .iter()
        .map(|f| parse::parse(&f.text).map(drop))
        .collect();
    if entries.is_empty() || imported.is_empty() {
        let main = super::place_parsed(corefile, cf, entries, opts)?;
        return Ok(ImportedPlacement {
            main,
            imported: readable
                .into_iter()
                .map(|r| r.map(|()| Vec::new()))
                .collect(),
        });
    }
    // One text as CoreDNS sees it; `starts[i]` is where part `i` begins (0: the Corefile).
    let mut combined = String::from(corefile);
    let mut starts = vec![0];
    let mut parts = vec![None];
    for (i, file) in imported.iter().enumerate() {
        if readable[i].is_err() {
            continue;
        }
        if !combined.is_empty() && !combined.ends_with('\n') {
            combined.push('\n');
        }
        starts.push(combined.len());
        parts.push(Some(i));
        combined.push_str(&file.text);
    }
    let domain = super::placement_domain(corefile, cf, opts)?;
    let all = parse::parse(&combined)?;
    let placed = placement::place(&combined, &all, &domain, entries, opts)?;
    let refs = placement::server_refs(&combined, &all);
    let part_of = |block: usize| {
        let at = all.blocks[block].open.start;
        starts.iter().rposition(|&s| s <= at).unwrap_or(0)
    };
    // Each part's own refs, by its blocks' order in the combined text.
    let local_refs: Vec<Vec<crate::corefile::ServerRef>> = parts
        .iter()
        .map(|p| {
            let text = p.map_or(corefile, |i| imported[i].text.as_str());
            let own: Corefile = parse::parse(text).unwrap_or_default();
            placement::server_refs(text, &own)
        })
        .collect();
    let first_block: Vec<usize> = (0..parts.len())
        .map(|p| {
            (0..all.blocks.len())
                .find(|&b| part_of(b) >= p)
                .unwrap_or(all.blocks.len())
        })
        .collect();
    let mut main = Vec::new();
    let mut per_file: Vec<Vec<BlockInsert>> = vec![Vec::new(); imported.len()];
    for insert in placed.inserts {
        let Some(block) = refs.iter().position(|r| *r == insert.server) else {
            continue;
        };
        let part = part_of(block);
        let Some(server) = local_refs[part].get(block - first_block[part]).cloned() else {
            continue;
        };
        let insert = BlockInsert { server, ..insert };
        match parts[part] {
            None => main.push(insert),
            Some(i) => per_file[i].push(insert),
        }
    }
    Ok(ImportedPlacement {
        main: Placement {
            inserts: main,
            ..placed
        },
        imported: readable
            .into_iter()
            .zip(per_file)
            .map(|(r, inserts)| r.map(|()| inserts))
            .collect(),
    })
}
