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

/// Result of an edit: the new text, whether it differs from the input, and what was repaired.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Edit {
    /// The complete new file content.
    pub text: String,
    /// `text` differs from the input.
    pub changed: bool,
    /// Damage that was repaired, or conditions the caller should report.
    pub warnings: Vec<Warning>,
}

/// Something worth reporting that did not prevent the edit. Line numbers are 1-based and refer
/// to the input text.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Warning {
    /// A begin marker without its end marker; the marker and the managed-looking lines after
    /// it were removed.
    MissingEnd { line: usize, removed_lines: usize },
    /// An end marker without its begin marker; the marker and the managed-looking lines
    /// before it were removed.
    MissingBegin { line: usize, removed_lines: usize },
    /// Lines between the markers that hairpin does not write; they were kept, the markers and
    /// hairpin's lines were removed and the block was written again.
    ForeignLines { line: usize, kept_lines: usize },
    /// More than one managed block; all were removed and one was written.
    DuplicateBlock { line: usize },
    /// A managed block outside the server block that holds the `kubernetes` plugin; it was
    /// removed and the block was written in the right place.
    BlockMisplaced { line: usize },
    /// The server block has no `reload` plugin, so CoreDNS only sees a change on restart.
    ReloadMissing { server_block_line: usize },
    /// The cluster domain could not be read from the `kubernetes` plugin line.
    ClusterDomainDefaulted { line: usize, default: String },
    /// The server block holding `kubernetes` does not serve the root zone, so queries for
    /// names outside its zones never reach the rewrite rules.
    ServerBlockNotRoot { line: usize, keys: Vec<String> },
}

impl Warning {
    /// Stable label for metrics and events.
    pub fn metric_label(&self) -> &'static str {
        match self {
            Warning::MissingEnd { .. } => "missing_end_marker",
            Warning::MissingBegin { .. } => "missing_begin_marker",
            Warning::ForeignLines { .. } => "foreign_lines_in_block",
            Warning::DuplicateBlock { .. } => "duplicate_block",
            Warning::BlockMisplaced { .. } => "block_misplaced",
            Warning::ReloadMissing { .. } => "reload_missing",
            Warning::ClusterDomainDefaulted { .. } => "cluster_domain_defaulted",
            Warning::ServerBlockNotRoot { .. } => "server_block_not_root",
        }
    }
}

impl fmt::Display for Warning {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Warning::MissingEnd {
                line,
                removed_lines,
            } => write!(
                f,
                "line {line}: `{BEGIN_PREFIX}` without `{END_MARKER}`; removed the marker and \
                 {removed_lines} managed line(s) after it and rewrote the block"
            ),
            Warning::MissingBegin {
                line,
                removed_lines,
            } => write!(
                f,
                "line {line}: `{END_MARKER}` without `{BEGIN_PREFIX}`; removed the marker and \
                 {removed_lines} managed line(s) before it and rewrote the block"
            ),
            Warning::ForeignLines { line, kept_lines } => write!(
                f,
                "line {line}: the hairpin block holds {kept_lines} line(s) hairpin did not write; \
                 kept them outside the block and rewrote the block"
            ),
            Warning::DuplicateBlock { line } => write!(
                f,
                "line {line}: a second hairpin block; all hairpin blocks were replaced by one"
            ),
            Warning::BlockMisplaced { line } => write!(
                f,
                "line {line}: hairpin block outside the server block that holds the \
                 `kubernetes` plugin; moved it inside"
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
                 line; assuming `{default}` (set the cluster domain explicitly if it differs)"
            ),
            Warning::ServerBlockNotRoot { line, keys } => write!(
                f,
                "line {line}: the server block holding `kubernetes` serves {} only, not the \
                 root zone `.`: queries for hostnames outside those zones never reach the \
                 rewrite rules; use a server block for `.` that also holds `kubernetes`",
                keys.join(" ")
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
        let (content_end, end) = match memchr_newline(&bytes[start..]) {
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

fn memchr_newline(bytes: &[u8]) -> Option<usize> {
    bytes.iter().position(|&b| b == b'\n')
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

/// How a found block is framed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Framing {
    /// Begin and end marker.
    Complete,
    /// Begin marker only: the block is the marker plus managed-looking lines after it.
    MissingEnd,
    /// End marker only: the block is the managed-looking lines before it plus the marker.
    MissingBegin,
}

/// A managed block (or the remains of one) as whole lines `first..=last` (indices into
/// [`lines`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Block {
    pub(crate) framing: Framing,
    /// Index of the marker line (begin, or end for [`Framing::MissingBegin`]).
    pub(crate) marker: usize,
    pub(crate) first: usize,
    pub(crate) last: usize,
    /// Lines between complete markers that the editor would not have written (someone else's
    /// configuration, or markers wrapped around it by mistake); they are kept on removal.
    pub(crate) foreign: Vec<usize>,
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

    /// 1-based line number of the marker.
    pub(crate) fn marker_line_number(&self) -> usize {
        self.marker + 1
    }

    /// A complete block holding only lines the editor writes: safe to update in place.
    pub(crate) fn is_intact(&self) -> bool {
        self.framing == Framing::Complete && self.foreign.is_empty()
    }
}

/// Find every managed block, complete or damaged, in order. `is_managed_line` recognises the
/// lines an editor writes between the markers; it bounds the damaged blocks.
pub(crate) fn find_blocks(
    text: &str,
    lines: &[Line],
    is_managed_line: impl Fn(&str) -> bool,
) -> Vec<Block> {
    let markers: Vec<(usize, MarkerKind)> = lines
        .iter()
        .enumerate()
        .filter_map(|(i, l)| marker_kind(l.text(text)).map(|k| (i, k)))
        .collect();
    let mut blocks = Vec::new();
    let mut k = 0;
    while k < markers.len() {
        let (i, kind) = markers[k];
        match kind {
            MarkerKind::Begin => {
                if let Some(&(j, MarkerKind::End)) = markers.get(k + 1) {
                    let foreign = (i + 1..j)
                        .filter(|&n| !is_managed_line(lines[n].text(text)))
                        .collect();
                    blocks.push(Block {
                        framing: Framing::Complete,
                        marker: i,
                        first: i,
                        last: j,
                        foreign,
                    });
                    k += 2;
                    continue;
                }
                let mut last = i;
                while last + 1 < lines.len()
                    && marker_kind(lines[last + 1].text(text)).is_none()
                    && is_managed_line(lines[last + 1].text(text))
                {
                    last += 1;
                }
                blocks.push(Block {
                    framing: Framing::MissingEnd,
                    marker: i,
                    first: i,
                    last,
                    foreign: Vec::new(),
                });
            }
            MarkerKind::End => {
                // Lines already claimed by the previous block are not ours to take again.
                let floor = blocks.last().map_or(0, |b: &Block| b.last + 1);
                let mut first = i;
                while first > floor
                    && marker_kind(lines[first - 1].text(text)).is_none()
                    && is_managed_line(lines[first - 1].text(text))
                {
                    first -= 1;
                }
                blocks.push(Block {
                    framing: Framing::MissingBegin,
                    marker: i,
                    first,
                    last: i,
                    foreign: Vec::new(),
                });
            }
        }
        k += 1;
    }
    blocks
}

/// Warning for a damaged block, `None` for a complete one.
pub(crate) fn damage_warning(block: &Block) -> Option<Warning> {
    let removed_lines = block.last - block.first;
    match block.framing {
        Framing::Complete if block.foreign.is_empty() => None,
        Framing::Complete => Some(Warning::ForeignLines {
            line: block.marker_line_number(),
            kept_lines: block.foreign.len(),
        }),
        Framing::MissingEnd => Some(Warning::MissingEnd {
            line: block.marker_line_number(),
            removed_lines,
        }),
        Framing::MissingBegin => Some(Warning::MissingBegin {
            line: block.marker_line_number(),
            removed_lines,
        }),
    }
}

/// The warnings of removing `blocks`: each damaged block, and each complete block after the
/// first (a duplicate).
pub(crate) fn removal_warnings(blocks: &[Block]) -> Vec<Warning> {
    let mut warnings: Vec<Warning> = blocks.iter().filter_map(damage_warning).collect();
    warnings.extend(
        blocks
            .iter()
            .filter(|b| b.framing == Framing::Complete)
            .skip(1)
            .map(|b| Warning::DuplicateBlock {
                line: b.marker_line_number(),
            }),
    );
    warnings
}

/// Remove every block (complete or damaged) from `text`, as both editors' `remove` does;
/// `is_managed_line` is the editor's, as for [`find_blocks`].
pub(crate) fn remove_all(text: &str, is_managed_line: impl Fn(&str) -> bool) -> Edit {
    let lines = lines(text);
    let blocks = find_blocks(text, &lines, is_managed_line);
    let warnings = removal_warnings(&blocks);
    let out = remove_blocks(text, &lines, &blocks);
    Edit {
        changed: out != text,
        text: out,
        warnings,
    }
}

/// Remove the given blocks' lines from `text`, keeping their foreign lines. When the text's
/// last line is removed and has no terminator, the terminator before it goes too, mirroring
/// [`append_block`].
pub(crate) fn remove_blocks(text: &str, lines: &[Line], blocks: &[Block]) -> String {
    let mut removed = vec![false; lines.len()];
    for b in blocks {
        for (n, flag) in removed
            .iter_mut()
            .enumerate()
            .take(b.last + 1)
            .skip(b.first)
        {
            *flag = b.foreign.binary_search(&n).is_err();
        }
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
    if tail_removed {
        if out.ends_with("\r\n") {
            out.truncate(out.len() - 2);
        } else if out.ends_with('\n') {
            out.truncate(out.len() - 1);
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
    let mut out = String::with_capacity(text.len() + rendered.len());
    out.push_str(&text[..r.start]);
    if r.start < lines[block.first].start {
        // The range took the previous line's terminator; give it back.
        out.push_str(&text[r.start..lines[block.first].start]);
    }
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

    #[test]
    fn damaged_blocks_are_bounded_by_managed_lines() {
        let t = "x\n# BEGIN hairpin\nm1\nm2\nuser\n# END hairpin\n";
        let ls = lines(t);
        let bs = find_blocks(t, &ls, |l| l.starts_with('m'));
        assert_eq!(bs.len(), 1);
        assert_eq!(bs[0].framing, Framing::Complete);

        let t = "x\n# BEGIN hairpin\nm1\nm2\nuser\n";
        let ls = lines(t);
        let bs = find_blocks(t, &ls, |l| l.starts_with('m'));
        assert_eq!(bs[0].framing, Framing::MissingEnd);
        assert_eq!(remove_blocks(t, &ls, &bs), "x\nuser\n");

        let t = "user\nm1\n# END hairpin\ny\n";
        let ls = lines(t);
        let bs = find_blocks(t, &ls, |l| l.starts_with('m'));
        assert_eq!(bs[0].framing, Framing::MissingBegin);
        assert_eq!(remove_blocks(t, &ls, &bs), "user\ny\n");
    }

    #[test]
    fn a_block_at_the_end_without_terminator_takes_the_previous_terminator() {
        let t = "a\n# BEGIN hairpin\nm\n# END hairpin";
        let ls = lines(t);
        let bs = find_blocks(t, &ls, |_| true);
        assert_eq!(remove_blocks(t, &ls, &bs), "a");
    }
}
