//! The marked block shared by the Corefile and hosts-file editors.
//!
//! Both editors own exactly one block of whole lines, framed by [`BEGIN_MARKER`] and
//! [`END_MARKER`] comment lines, and never touch a byte outside it. This module finds such
//! blocks (and damaged ones), removes them so that the original text comes back exactly, and
//! renders a new block in the file's line-ending convention.

use std::fmt;

/// First line of a managed block (any line whose trimmed text starts with [`BEGIN_PREFIX`]
/// is recognised as a begin marker, so a hand-edited suffix still matches).
pub const BEGIN_MARKER: &str = "# BEGIN hairpin (managed by hairpin; do not edit)";
/// Prefix that identifies a begin marker.
pub const BEGIN_PREFIX: &str = "# BEGIN hairpin";
/// Last line of a managed block.
pub const END_MARKER: &str = "# END hairpin";

/// Result of an edit: the new text, whether it differs from the input, and what to report.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Edit {
    /// The complete new file content.
    pub text: String,
    /// `text` differs from the input.
    pub changed: bool,
    /// Conditions the caller should report.
    pub warnings: Vec<Warning>,
}

/// Something worth reporting that did not prevent the edit. Line numbers are 1-based and refer
/// to the input text.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Warning {
    /// An intact hairpin block in a place that no longer needs one (outside every server
    /// block hairpin writes to, or inside a plugin's own block); it was removed.
    BlockMisplaced { line: usize },
    /// The server block has no `reload` plugin, so CoreDNS only sees a change on restart.
    ReloadMissing { server_block_line: usize },
    /// The cluster domain could not be read from the `kubernetes` plugin line.
    ClusterDomainDefaulted { line: usize, default: String },
    /// The server block holding `kubernetes` does not serve the root zone, so queries for
    /// names outside its zones never reach it.
    ServerBlockNotRoot { line: usize, keys: Vec<String> },
    /// A server block answers hairpin's names itself (it cannot resolve a rewritten name),
    /// but the ClusterIP of their hairpin Service is not known yet: these names are left out
    /// of that block until it is.
    AddressUnknown { line: usize, names: Vec<String> },
    /// No server block on the DNS port answers these names: nothing to redirect them in.
    NotServed { port: u16, names: Vec<String> },
}

impl Warning {
    /// Stable label for metrics and events.
    pub fn metric_label(&self) -> &'static str {
        match self {
            Warning::BlockMisplaced { .. } => "block_misplaced",
            Warning::ReloadMissing { .. } => "reload_missing",
            Warning::ClusterDomainDefaulted { .. } => "cluster_domain_defaulted",
            Warning::ServerBlockNotRoot { .. } => "server_block_not_root",
            Warning::AddressUnknown { .. } => "address_unknown",
            Warning::NotServed { .. } => "not_served",
        }
    }
}

impl fmt::Display for Warning {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Warning::BlockMisplaced { line } => write!(
                f,
                "line {line}: hairpin block in a place that does not need it (outside the \
                 server blocks hairpin writes to, or inside a plugin's block); removed it"
            ),
            Warning::ReloadMissing { server_block_line } => write!(
                f,
                "the server block at line {server_block_line} has no `reload` plugin: CoreDNS \
                 will not pick up changes until it restarts; add a `reload` line to that \
                 server block (or restart CoreDNS after each change)"
            ),
            Warning::ClusterDomainDefaulted { line, default } => write!(
                f,
                "line {line}: could not read the cluster domain from the `kubernetes` plugin \
                 line; assuming `{default}` (set --cluster-domain if it differs)"
            ),
            Warning::ServerBlockNotRoot { line, keys } => write!(
                f,
                "line {line}: the server block holding `kubernetes` serves {} only, not the \
                 root zone `.`; hairpin's names are answered in the server blocks that serve \
                 them",
                keys.join(" ")
            ),
            Warning::AddressUnknown { line, names } => write!(
                f,
                "line {line}: this server block answers {} itself (it has no `kubernetes` \
                 plugin to resolve a rewritten name), and the ClusterIP of their hairpin \
                 Service is not known yet; they are added once the Service exists",
                names.join(", ")
            ),
            Warning::NotServed { port, names } => write!(
                f,
                "no server block on port {port} answers {}; they are not redirected",
                names.join(", ")
            ),
        }
    }
}

/// The line terminator a file uses: the first terminator found decides, `\n` by default.
pub(crate) fn line_ending(text: &str) -> &'static str {
    match text.find('\n') {
        Some(i) if i > 0 && text.as_bytes()[i - 1] == b'\r' => "\r\n",
        _ => "\n",
    }
}

/// One line of a text: `start..content_end` is the line without its terminator,
/// `start..end` includes it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Line {
    pub(crate) start: usize,
    pub(crate) content_end: usize,
    pub(crate) end: usize,
}

impl Line {
    pub(crate) fn text<'a>(&self, src: &'a str) -> &'a str {
        &src[self.start..self.content_end]
    }

    pub(crate) fn has_terminator(&self) -> bool {
        self.end > self.content_end
    }
}

/// Split into lines; a final line without terminator is kept, an empty tail is not a line.
pub(crate) fn lines(text: &str) -> Vec<Line> {
    let bytes = text.as_bytes();
    let mut out = Vec::new();
    let mut start = 0;
    while start < bytes.len() {
        // `str::find` of one ASCII byte is `memchr`, word by word (the Corefile holding
        // hairpin's block has lines of 256 KiB).
        let (content_end, end) = match text[start..].find('\n') {
            Some(i) => {
                let nl = start + i;
                let content_end = if nl > start && bytes[nl - 1] == b'\r' {
                    nl - 1
                } else {
                    nl
                };
                (content_end, nl + 1)
            }
            None => (bytes.len(), bytes.len()),
        };
        out.push(Line {
            start,
            content_end,
            end,
        });
        start = end;
    }
    out
}

/// Leading spaces and tabs of a line.
pub(crate) fn indent_of(line: &str) -> &str {
    let n = line.len() - line.trim_start_matches([' ', '\t']).len();
    &line[..n]
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum MarkerKind {
    Begin,
    End,
}

fn marker_kind(line: &str) -> Option<MarkerKind> {
    let t = line.trim();
    if t == BEGIN_PREFIX || t.starts_with("# BEGIN hairpin ") {
        Some(MarkerKind::Begin)
    } else if t == END_MARKER || t.starts_with("# END hairpin ") {
        Some(MarkerKind::End)
    } else {
        None
    }
}

/// What is wrong with a text's markers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum DamageKind {
    /// A begin marker whose end marker is missing.
    BeginWithoutEnd,
    /// An end marker without a begin marker before it.
    EndWithoutBegin,
    /// A begin marker inside an open block.
    Nested,
    /// More than one block where one is allowed.
    Duplicate,
    /// Lines between the markers that hairpin does not write.
    ForeignLines,
}

impl DamageKind {
    fn describe(self) -> &'static str {
        match self {
            DamageKind::BeginWithoutEnd => "a `# BEGIN hairpin` marker without its `# END hairpin`",
            DamageKind::EndWithoutBegin => {
                "a `# END hairpin` marker without a `# BEGIN hairpin` before it"
            }
            DamageKind::Nested => "a hairpin block opened inside another one",
            DamageKind::Duplicate => "more than one hairpin block where hairpin writes one",
            DamageKind::ForeignLines => {
                "lines inside the hairpin block that hairpin does not write"
            }
        }
    }

    /// Stable label for metrics and events.
    pub fn metric_label(self) -> &'static str {
        match self {
            DamageKind::BeginWithoutEnd => "missing_end_marker",
            DamageKind::EndWithoutBegin => "missing_begin_marker",
            DamageKind::Nested => "nested_block",
            DamageKind::Duplicate => "duplicate_block",
            DamageKind::ForeignLines => "foreign_lines_in_block",
        }
    }
}

/// Damaged markers. hairpin cannot prove which lines it wrote, so it refuses to edit (or
/// remove) anything until a person fixes the markers: a repair could delete someone's lines.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MarkerDamage {
    /// What is wrong.
    pub kind: DamageKind,
    /// The offending lines: 1-based number and text.
    pub lines: Vec<(usize, String)>,
}

impl MarkerDamage {
    pub(crate) fn new(kind: DamageKind, text: &str, lines: &[Line], at: &[usize]) -> Self {
        Self {
            kind,
            lines: at
                .iter()
                .map(|&i| (i + 1, lines[i].text(text).to_owned()))
                .collect(),
        }
    }
}

impl fmt::Display for MarkerDamage {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "damaged hairpin markers ({}); hairpin changes nothing until they are fixed by hand \
             (delete the hairpin lines, or restore the missing marker):",
            self.kind.describe()
        )?;
        // One line: the damaged lines are text of the file, escaped here once.
        for (i, (n, line)) in self.lines.iter().enumerate() {
            let sep = if i == 0 { " " } else { "; " };
            write!(f, "{sep}line {n}: {}", crate::escape::Text(line))?;
        }
        Ok(())
    }
}

impl std::error::Error for MarkerDamage {}

/// A complete managed block as whole lines `first..=last` (indices into [`lines`]): a begin
/// marker, lines the editor writes, an end marker.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Block {
    pub(crate) first: usize,
    pub(crate) last: usize,
}

impl Block {
    /// Byte range covering the block's lines. When the block ends the text without a final
    /// terminator, the terminator of the line before it belongs to the block too: the editors
    /// append a block to a text without final newline as `terminator + block` (with no
    /// terminator after the end marker), so removing both restores the original.
    pub(crate) fn byte_range(&self, text: &str, lines: &[Line]) -> std::ops::Range<usize> {
        let first = lines[self.first];
        let last = lines[self.last];
        let mut start = first.start;
        if !last.has_terminator() && self.first > 0 {
            start = lines[self.first - 1].content_end;
        }
        debug_assert!(start <= first.start && last.end <= text.len());
        start..last.end
    }

    /// 1-based line number of the begin marker.
    pub(crate) fn line_number(&self) -> usize {
        self.first + 1
    }
}

/// Find every managed block, in order. A marker line for which `not_a_line` is true (for
/// instance a line inside a quoted Corefile string) is text, not a marker. Every block must be
/// complete and hold only lines `is_managed_line` recognises; anything else is refused.
pub(crate) fn find_blocks(
    text: &str,
    lines: &[Line],
    not_a_line: impl Fn(usize) -> bool,
    is_managed_line: impl Fn(&str) -> bool,
) -> Result<Vec<Block>, MarkerDamage> {
    let markers: Vec<(usize, MarkerKind)> = lines
        .iter()
        .enumerate()
        .filter(|(_, l)| !not_a_line(l.start))
        .filter_map(|(i, l)| marker_kind(l.text(text)).map(|k| (i, k)))
        .collect();
    let damage = |kind, at: &[usize]| MarkerDamage::new(kind, text, lines, at);
    let mut blocks = Vec::new();
    let mut k = 0;
    while k < markers.len() {
        let (i, kind) = markers[k];
        match (kind, markers.get(k + 1)) {
            (MarkerKind::End, _) => return Err(damage(DamageKind::EndWithoutBegin, &[i])),
            (MarkerKind::Begin, None) => return Err(damage(DamageKind::BeginWithoutEnd, &[i])),
            (MarkerKind::Begin, Some(&(j, MarkerKind::Begin))) => {
                let mut at = vec![i, j];
                at.extend(markers.get(k + 2).map(|m| m.0));
                return Err(damage(DamageKind::Nested, &at));
            }
            (MarkerKind::Begin, Some(&(j, MarkerKind::End))) => {
                let foreign: Vec<usize> = (i + 1..j)
                    .filter(|&n| !is_managed_line(lines[n].text(text)))
                    .collect();
                if !foreign.is_empty() {
                    let mut at = vec![i];
                    at.extend(foreign);
                    at.push(j);
                    return Err(damage(DamageKind::ForeignLines, &at));
                }
                blocks.push(Block { first: i, last: j });
                k += 2;
            }
        }
    }
    Ok(blocks)
}

/// The error for two or more blocks where one is allowed.
pub(crate) fn duplicate(text: &str, lines: &[Line], blocks: &[&Block]) -> MarkerDamage {
    let at: Vec<usize> = blocks.iter().flat_map(|b| [b.first, b.last]).collect();
    MarkerDamage::new(DamageKind::Duplicate, text, lines, &at)
}

/// Remove the given blocks' lines from `text`. When the text's last line is removed and has
/// no terminator, the terminator before it goes too, mirroring [`append_block`].
pub(crate) fn remove_blocks(text: &str, lines: &[Line], blocks: &[Block]) -> String {
    let mut removed = vec![false; lines.len()];
    for b in blocks {
        removed[b.first..=b.last].fill(true);
    }
    let mut out = String::with_capacity(text.len());
    for (line, gone) in lines.iter().zip(&removed) {
        if !gone {
            out.push_str(&text[line.start..line.end]);
        }
    }
    let tail_removed = lines
        .last()
        .is_some_and(|l| !l.has_terminator() && removed[lines.len() - 1]);
    // A block that ends the text without a terminator was appended to a last line that had
    // none, after the terminator hairpin added: take that one back. hairpin only adds it after
    // a line with content, so a blank line's own terminator is the user's and stays.
    if tail_removed {
        let kept = out
            .strip_suffix("\r\n")
            .or_else(|| out.strip_suffix('\n'))
            .filter(|before| !before.is_empty() && !before.ends_with('\n'))
            .map(str::len);
        if let Some(len) = kept {
            out.truncate(len);
        }
    }
    out
}

/// Render a block: markers and body lines, each prefixed by `indent` and terminated by `eol`,
/// except that the end marker gets no terminator when `final_terminator` is false.
pub(crate) fn render_block<'a>(
    body: impl IntoIterator<Item = &'a str>,
    indent: &str,
    eol: &str,
    final_terminator: bool,
) -> String {
    let mut out = String::new();
    out.push_str(indent);
    out.push_str(BEGIN_MARKER);
    out.push_str(eol);
    for line in body {
        out.push_str(indent);
        out.push_str(line);
        out.push_str(eol);
    }
    out.push_str(indent);
    out.push_str(END_MARKER);
    if final_terminator {
        out.push_str(eol);
    }
    out
}

/// Replace a block in place, keeping its indentation and whether it ends with a terminator.
pub(crate) fn replace_block<'a>(
    text: &str,
    lines: &[Line],
    block: &Block,
    body: impl IntoIterator<Item = &'a str>,
    eol: &str,
) -> String {
    let r = block.byte_range(text, lines);
    let indent = indent_of(lines[block.first].text(text));
    let terminated = lines[block.last].has_terminator();
    let rendered = render_block(body, indent, eol, terminated);
    // The range took the previous line's terminator when it starts before the block's first
    // line; it is given back.
    let given_back = &text[r.start..lines[block.first].start.max(r.start)];
    // Exactly the length: the text is kept (the plan, the value written, the write-fight
    // memory), and at 20,000 names the old block is as long as the new one.
    let len = text.len() - (r.end - r.start) + given_back.len() + rendered.len();
    let mut out = String::with_capacity(len);
    out.push_str(&text[..r.start]);
    out.push_str(given_back);
    out.push_str(&rendered);
    out.push_str(&text[r.end..]);
    out
}

/// Append a block at the end of `text` (unindented). A text without final newline gets
/// `eol + block` with no terminator after the end marker, so removal restores it exactly.
pub(crate) fn append_block<'a>(
    text: &str,
    body: impl IntoIterator<Item = &'a str>,
    eol: &str,
) -> String {
    let missing_final = !text.is_empty() && !text.ends_with('\n');
    let mut out = String::from(text);
    if missing_final {
        out.push_str(eol);
    }
    out.push_str(&render_block(body, "", eol, !missing_final));
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn line_ending_follows_the_first_terminator() {
        assert_eq!(line_ending("a\r\nb\n"), "\r\n");
        assert_eq!(line_ending("a\nb\r\n"), "\n");
        assert_eq!(line_ending("abc"), "\n");
        assert_eq!(line_ending("\r\n"), "\r\n");
    }

    #[test]
    fn lines_keep_terminators_and_a_final_partial_line() {
        let t = "a\r\nb\nc";
        let ls = lines(t);
        assert_eq!(ls.len(), 3);
        assert_eq!(ls[0].text(t), "a");
        assert_eq!(&t[ls[0].start..ls[0].end], "a\r\n");
        assert_eq!(ls[2].text(t), "c");
        assert!(!ls[2].has_terminator());
        assert!(lines("").is_empty());
    }

    fn scan(t: &str) -> Result<Vec<Block>, MarkerDamage> {
        find_blocks(t, &lines(t), |_| false, |l| l.starts_with('m'))
    }

    #[test]
    fn damaged_markers_are_refused_with_the_offending_lines() {
        let ok = scan("x\n# BEGIN hairpin\nm1\nm2\n# END hairpin\n").unwrap();
        assert_eq!(ok, [Block { first: 1, last: 4 }]);

        let err = scan("x\n# BEGIN hairpin\nm1\nuser\n").unwrap_err();
        assert_eq!(err.kind, DamageKind::BeginWithoutEnd);
        assert_eq!(err.lines, [(2, "# BEGIN hairpin".to_owned())]);

        let err = scan("user\nm1\n# END hairpin\ny\n").unwrap_err();
        assert_eq!(err.kind, DamageKind::EndWithoutBegin);
        assert_eq!(err.lines, [(3, "# END hairpin".to_owned())]);

        let err =
            scan("# BEGIN hairpin\n# BEGIN hairpin\n# END hairpin\n# END hairpin\n").unwrap_err();
        assert_eq!(err.kind, DamageKind::Nested);
        assert_eq!(err.lines.iter().map(|l| l.0).collect::<Vec<_>>(), [1, 2, 3]);

        let err = scan("# BEGIN hairpin\nm1\nuser\n# END hairpin\n").unwrap_err();
        assert_eq!(err.kind, DamageKind::ForeignLines);
        assert_eq!(err.lines[1], (3, "user".to_owned()));
        let shown = err.to_string();
        assert!(shown.contains("line 3: user"), "{shown}");
        assert!(shown.contains("fixed by hand"), "{shown}");

        // A line of the file is shown escaped, once.
        let err = scan("# BEGIN hairpin\nm1\nus\u{1b}[2J\"er\\n\n# END hairpin\n").unwrap_err();
        assert_eq!(err.lines[1], (3, "us\u{1b}[2J\"er\\n".to_owned()));
        let shown = err.to_string();
        assert!(
            shown.contains("; line 3: us\\u{1b}[2J\"er\\\\n; line 4"),
            "{shown}"
        );
    }

    #[test]
    fn a_marker_inside_a_string_is_text() {
        let t = "a \"\n# BEGIN hairpin\n\"\n";
        let ls = lines(t);
        let inside = |start: usize| start > 2 && start < 21;
        assert!(find_blocks(t, &ls, inside, |_| true).unwrap().is_empty());
        assert!(find_blocks(t, &ls, |_| false, |_| true).is_err());
    }

    #[test]
    fn a_block_at_the_end_without_terminator_takes_the_previous_terminator() {
        let t = "a\n# BEGIN hairpin\nm\n# END hairpin";
        let ls = lines(t);
        let bs = find_blocks(t, &ls, |_| false, |_| true).unwrap();
        assert_eq!(remove_blocks(t, &ls, &bs), "a");
    }
}
