//! A Corefile reader that keeps byte offsets, enough to find server blocks and directives.
//!
//! It reads tokens as CoreDNS 1.12's Caddyfile lexer does (checked against the real binary,
//! see `tests/corefile_reading.rs`):
//! - tokens are separated by Unicode white space (a non-breaking space too); a `\r` never
//!   separates tokens (CoreDNS drops it; one that ends a line is left out of the token here);
//! - a byte-order mark at the start of the file is ignored;
//! - `#` at the start of a token comments out the rest of the line; a `#` inside a token ends
//!   the token's value, and the rest of that word is skipped (`cluster.local#primary
//!   in-addr.arpa` is `cluster.local` and `in-addr.arpa`);
//! - `"` opens a quoted token only at a token's start; it may span lines, `\"` is a quote,
//!   and the closing quote ends the token;
//! - only a token that is exactly `{` or `}` opens or closes a block (so `{$ENV}` and `{1}` are
//!   ordinary words).
//!
//! Server block keys are read as CoreDNS's parser reads them: the keys of a block are the
//! words of its first line, and a key ending with `,` continues the list (on the next line
//! too) without the comma: `cluster.local, in-addr.arpa, ip6.arpa {` has three keys. A comma
//! inside a word does not separate keys (`a.com,b.com` is one key, a zone CoreDNS never
//! matches).

use std::borrow::Cow;

use super::CorefileError;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum TokKind {
    Word,
    Open,
    Close,
}

#[derive(Debug, Clone, Copy)]
pub(super) struct Tok {
    pub(super) kind: TokKind,
    pub(super) start: usize,
    pub(super) end: usize,
    /// 1-based line of the token's first byte.
    pub(super) line: usize,
    /// A line break (or the start of the file) lies between the previous token and this one.
    pub(super) first_on_line: bool,
}

impl Tok {
    pub(super) fn text<'a>(&self, src: &'a str) -> &'a str {
        &src[self.start..self.end]
    }

    /// The token's value with surrounding quotes removed.
    pub(super) fn value<'a>(&self, src: &'a str) -> &'a str {
        let t = self.text(src);
        if t.len() >= 2 && t.starts_with('"') && t.ends_with('"') {
            &t[1..t.len() - 1]
        } else {
            t
        }
    }

    /// The token exactly as CoreDNS reads it: [`Tok::value`], with `\"` read as `"` in a
    /// quoted token and a `\r` inside a word left out.
    pub(super) fn word<'a>(&self, src: &'a str) -> Cow<'a, str> {
        let t = self.text(src);
        if t.len() >= 2 && t.starts_with('"') && t.ends_with('"') {
            let inner = &t[1..t.len() - 1];
            if inner.contains("\\\"") {
                return Cow::Owned(inner.replace("\\\"", "\""));
            }
            return Cow::Borrowed(inner);
        }
        if t.contains('\r') {
            return Cow::Owned(t.replace('\r', ""));
        }
        Cow::Borrowed(t)
    }
}

/// Reads the tokens of `src`. It works on bytes: every byte the reader acts on (line breaks,
/// quotes, `\`, `#`, braces, ASCII white space) is ASCII, and the bytes of a multi-byte
/// character are never ASCII; such a character is decoded only to tell whether it is white
/// space. (A Corefile holding hairpin's block is mostly a few long regex words; reading it
/// char by char cost more than the rest of the steady-state plan.)
pub(super) fn tokenize(src: &str) -> Result<Vec<Tok>, CorefileError> {
    let bytes = src.as_bytes();
    let mut toks = Vec::new();
    let mut line = 1;
    let mut newline_seen = true;
    // CoreDNS ignores a byte-order mark at the start of the Corefile.
    let mut i = if src.starts_with('\u{feff}') {
        '\u{feff}'.len_utf8()
    } else {
        0
    };
    while let Some(&b) = bytes.get(i) {
        if b == b'\n' {
            line += 1;
            newline_seen = true;
            i += 1;
            continue;
        }
        if let Some(len) = space_at(src, i) {
            i += len;
            continue;
        }
        if b == b'#' {
            i = src[i..].find('\n').map_or(src.len(), |n| i + n);
            continue;
        }
        let start = i;
        let start_line = line;
        let end = if b == b'"' {
            let (end, lines) = quoted_end(&bytes[i..]).ok_or_else(|| CorefileError::Syntax {
                line: start_line,
                message: "unterminated quoted string".into(),
            })?;
            line += lines;
            i += end;
            i
        } else {
            let (after, end) = word_end(src, i);
            i = after;
            end
        };
        let kind = match &src[start..end] {
            "{" => TokKind::Open,
            "}" => TokKind::Close,
            _ => TokKind::Word,
        };
        toks.push(Tok {
            kind,
            start,
            end,
            line: start_line,
            first_on_line: newline_seen,
        });
        newline_seen = false;
    }
    Ok(toks)
}

/// The length of the white-space character at byte `i` of `src` (Unicode white space, as
/// CoreDNS's lexer reads it), if there is one.
fn space_at(src: &str, i: usize) -> Option<usize> {
    let b = src.as_bytes()[i];
    if b.is_ascii() {
        return matches!(b, b'\t'..=b'\r' | b' ').then_some(1);
    }
    let c = src[i..].chars().next().expect("a character starts here");
    c.is_whitespace().then(|| c.len_utf8())
}

/// For a quoted token at the start of `bytes`: the length of the token up to and with its
/// closing quote (`\"` is a quote inside it), and the line breaks it holds; `None` when it is
/// never closed.
fn quoted_end(bytes: &[u8]) -> Option<(usize, usize)> {
    let mut lines = 0;
    let mut escaped = false;
    for (j, &b) in bytes.iter().enumerate().skip(1) {
        if b == b'\n' {
            lines += 1;
        }
        if escaped {
            escaped = false;
        } else if b == b'\\' {
            escaped = true;
        } else if b == b'"' {
            return Some((j + 1, lines));
        }
    }
    None
}

/// For a word starting at byte `start` of `src`: where it ends (the white space after it) and
/// where its value ends. A `\r` does not end a word (CoreDNS drops it, and it is left out of
/// the value at the word's end); a `#` ends its value.
fn word_end(src: &str, start: usize) -> (usize, usize) {
    let bytes = src.as_bytes();
    let (mut j, mut end) = (start, start);
    let mut comment = false;
    loop {
        // The common bytes first, in a tight loop: visible ASCII but `#`.
        if !comment {
            let plain = bytes[j..]
                .iter()
                .position(|&b| !matches!(b, b'!'..=b'\x7f') || b == b'#')
                .unwrap_or(bytes.len() - j);
            if plain > 0 {
                j += plain;
                end = j;
            }
        }
        let Some(&b) = bytes.get(j) else {
            break;
        };
        if b.is_ascii() {
            if b == b'\r' {
                j += 1;
                continue;
            }
            if matches!(b, b'\t'..=b'\x0c' | b' ') {
                break;
            }
            comment |= b == b'#';
            j += 1;
        } else {
            let c = src[j..].chars().next().expect("a character starts here");
            if c.is_whitespace() {
                break;
            }
            j += c.len_utf8();
        }
        if !comment {
            end = j;
        }
    }
    (j, end)
}

/// A plugin line inside a server block.
#[derive(Debug, Clone)]
pub(super) struct Directive {
    pub(super) name: Tok,
    pub(super) args: Vec<Tok>,
    /// Its own `{ ... }` block, if any: (open, close).
    pub(super) block: Option<(Tok, Tok)>,
}

#[derive(Debug, Clone)]
pub(super) struct ServerBlock {
    pub(super) keys: Vec<Tok>,
    pub(super) open: Tok,
    pub(super) close: Tok,
    pub(super) directives: Vec<Directive>,
}

#[derive(Debug, Clone, Default)]
pub(super) struct Corefile {
    pub(super) blocks: Vec<ServerBlock>,
    /// The arguments of top-level `import` lines (files of more server blocks, such as
    /// `custom/*.server`).
    pub(super) imports: Vec<Tok>,
    /// The byte spans of the tokens that hold a line break (quoted strings over several
    /// lines): a marker line inside one is text, not a marker.
    pub(super) multiline: Vec<(usize, usize)>,
}

pub(super) fn parse(src: &str) -> Result<Corefile, CorefileError> {
    let toks = tokenize(src)?;
    // Only a quoted token can hold a line break (a word ends at white space).
    let multiline = toks
        .iter()
        .filter(|t| t.text(src).starts_with('"') && t.text(src).contains('\n'))
        .map(|t| (t.start, t.end))
        .collect();
    let mut out = Corefile {
        multiline,
        ..Corefile::default()
    };
    let mut i = 0;
    while i < toks.len() {
        let t = toks[i];
        match t.kind {
            TokKind::Word => {
                if t.first_on_line && t.text(src) == "import" {
                    // A top-level import: the rest of its line.
                    i += 1;
                    while i < toks.len() && !toks[i].first_on_line {
                        if toks[i].kind == TokKind::Word {
                            out.imports.push(toks[i]);
                        }
                        i += 1;
                    }
                    continue;
                }
                let (keys, next) = if starts_managed_line(src, t) {
                    // Lines of a hairpin block left outside any server block: read up to the
                    // next `{` (as before), so that the editor can move that block.
                    let mut j = i;
                    while toks.get(j).is_some_and(|t| t.kind == TokKind::Word) {
                        j += 1;
                    }
                    (toks[i..j].to_vec(), j)
                } else {
                    read_keys(src, &toks, i)
                };
                // As written: the error's `Display` escapes them.
                let listed = || {
                    let keys = keys.iter().map(|k| k.text(src)).collect::<Vec<_>>();
                    keys.join(" ")
                };
                match toks.get(next) {
                    Some(open) if open.kind == TokKind::Open => {
                        let (directives, close, after) = parse_body(src, &toks, next)?;
                        out.blocks.push(ServerBlock {
                            keys,
                            open: *open,
                            close,
                            directives,
                        });
                        i = after;
                    }
                    Some(close) if close.kind == TokKind::Close => {
                        return Err(CorefileError::Syntax {
                            line: close.line,
                            message: "`}` without a matching `{`".into(),
                        });
                    }
                    Some(_) => {
                        return Err(CorefileError::UnsupportedLayout {
                            line: t.line,
                            message: format!(
                                "the server block `{}` has no braces: CoreDNS reads such a \
                                 single-server Corefile (its plugins run to the end of the file), \
                                 but hairpin edits only server blocks written with braces; put \
                                 `{{` after the keys and `}}` at the end of the file",
                                listed()
                            ),
                        });
                    }
                    None => {
                        return Err(CorefileError::UnsupportedLayout {
                            line: t.line,
                            message: format!(
                                "the server block `{}` has no plugins and no braces; hairpin \
                                 edits only server blocks written with braces",
                                listed()
                            ),
                        });
                    }
                }
            }
            TokKind::Open => {
                return Err(CorefileError::Syntax {
                    line: t.line,
                    message: "`{` without server block keys".into(),
                });
            }
            TokKind::Close => {
                return Err(CorefileError::Syntax {
                    line: t.line,
                    message: "`}` without a matching `{`".into(),
                });
            }
        }
    }
    Ok(out)
}

/// Whether `t` starts a line the editor writes in its blocks.
fn starts_managed_line(src: &str, t: Tok) -> bool {
    let rest = &src[t.start..];
    let line = rest.split('\n').next().unwrap_or(rest);
    t.first_on_line && super::rules::is_managed_line(line)
}

/// The keys of the server block whose first key is `toks[first]`, and the index after them:
/// the words of that line, and of the next lines while a key ends with `,`. A key's trailing
/// comma is not part of it (an empty key, a lone `,`, is left out).
fn read_keys(src: &str, toks: &[Tok], first: usize) -> (Vec<Tok>, usize) {
    let mut keys = Vec::new();
    let mut more = false;
    let mut j = first;
    while let Some(&t) = toks.get(j) {
        if t.kind != TokKind::Word || (j > first && t.first_on_line && !more) {
            break;
        }
        let mut key = t;
        more = key.text(src).ends_with(',') && !key.text(src).starts_with('"');
        if more {
            key.end -= 1;
        }
        if key.start < key.end {
            keys.push(key);
        }
        j += 1;
    }
    (keys, j)
}

/// Parse the body of a server block whose `{` is `toks[open]`. Returns the directives, the
/// closing `}` and the index after it.
fn parse_body(
    src: &str,
    toks: &[Tok],
    open: usize,
) -> Result<(Vec<Directive>, Tok, usize), CorefileError> {
    let mut directives: Vec<Directive> = Vec::new();
    let mut i = open + 1;
    let mut after_open = true;
    while i < toks.len() {
        let t = toks[i];
        match t.kind {
            TokKind::Close => return Ok((directives, t, i + 1)),
            TokKind::Open => {
                // A block belongs to the directive before it, even when `{` sits on its own line.
                let Some(d) = directives.last_mut().filter(|d| d.block.is_none()) else {
                    return Err(CorefileError::Syntax {
                        line: t.line,
                        message: "`{` without a plugin name".into(),
                    });
                };
                let close = skip_block(toks, i)?;
                d.block = Some((t, toks[close]));
                i = close + 1;
                after_open = false;
            }
            TokKind::Word => {
                let continues_line = !t.first_on_line
                    && !after_open
                    && directives.last().is_some_and(|d| d.block.is_none());
                if continues_line {
                    directives.last_mut().expect("checked above").args.push(t);
                } else {
                    directives.push(Directive {
                        name: t,
                        args: Vec::new(),
                        block: None,
                    });
                }
                after_open = false;
                i += 1;
            }
        }
    }
    let o = toks[open];
    Err(CorefileError::Syntax {
        line: o.line,
        message: format!(
            "server block `{}` at line {} is never closed",
            o.text(src),
            o.line
        ),
    })
}

/// Index of the `}` matching the `{` at `open`.
fn skip_block(toks: &[Tok], open: usize) -> Result<usize, CorefileError> {
    let mut depth = 0usize;
    for (j, t) in toks.iter().enumerate().skip(open) {
        match t.kind {
            TokKind::Open => depth += 1,
            TokKind::Close => {
                depth -= 1;
                if depth == 0 {
                    return Ok(j);
                }
            }
            TokKind::Word => {}
        }
    }
    Err(CorefileError::Syntax {
        line: toks[open].line,
        message: "block is never closed".into(),
    })
}

/// Start of the line holding byte `pos`.
pub(super) fn line_start(src: &str, pos: usize) -> usize {
    src[..pos].rfind('\n').map_or(0, |i| i + 1)
}

/// The whitespace before byte `pos` on its line, if only whitespace precedes it there.
pub(super) fn leading_indent(src: &str, pos: usize) -> Option<&str> {
    let ls = line_start(src, pos);
    let before = &src[ls..pos];
    before
        .bytes()
        .all(|b| b == b' ' || b == b'\t')
        .then_some(before)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn braces_on_their_own_lines_and_after_directives() {
        let src = ".:53\n{\n  errors\n  kubernetes cluster.local\n  {\n    pods insecure\n  }\n  reload }\n";
        let cf = parse(src).unwrap();
        assert_eq!(cf.blocks.len(), 1);
        let b = &cf.blocks[0];
        assert_eq!(b.keys[0].text(src), ".:53");
        let names: Vec<_> = b.directives.iter().map(|d| d.name.text(src)).collect();
        assert_eq!(names, ["errors", "kubernetes", "reload"]);
        assert!(b.directives[1].block.is_some());
        assert_eq!(b.directives[1].args[0].text(src), "cluster.local");
    }

    #[test]
    fn placeholders_quotes_and_comments_are_words() {
        let src = "{$ZONE}:53 { # comment {\n  template ANY ANY x {\n    match \"^a{1}\\\" }\"\n  }\n  kubernetes {$DOMAIN}\n}\nimport a/*.server\n";
        let cf = parse(src).unwrap();
        let b = &cf.blocks[0];
        assert_eq!(b.keys[0].text(src), "{$ZONE}:53");
        assert_eq!(b.directives.len(), 2);
        assert_eq!(b.directives[1].args[0].text(src), "{$DOMAIN}");
    }

    #[test]
    fn quotes_open_only_at_a_token_start_and_close_it() {
        let src = ".:53 {\n  x a\"b \"c d\"e\n  kubernetes \"cluster.local\"\n}\n";
        let toks = tokenize(src).unwrap();
        let words: Vec<_> = toks.iter().map(|t| t.text(src)).collect();
        assert_eq!(
            words,
            [
                ".:53",
                "{",
                "x",
                "a\"b",
                "\"c d\"",
                "e",
                "kubernetes",
                "\"cluster.local\"",
                "}"
            ]
        );
        let cf = parse(src).unwrap();
        assert_eq!(
            cf.blocks[0].directives[1].args[0].value(src),
            "cluster.local"
        );
    }

    #[test]
    fn syntax_errors_are_reported_with_lines() {
        assert!(matches!(
            parse(".:53 {\n errors\n"),
            Err(CorefileError::Syntax { line: 1, .. })
        ));
        assert!(matches!(
            parse("}\n"),
            Err(CorefileError::Syntax { line: 1, .. })
        ));
        assert!(matches!(
            parse(".:53 {\n x \"open\n}\n"),
            Err(CorefileError::Syntax { line: 2, .. })
        ));
        assert!(matches!(
            parse(".:53\nerrors\n"),
            Err(CorefileError::UnsupportedLayout { line: 1, .. })
        ));
        // The keys it quotes are escaped once, by its `Display`: the error is one line.
        let err = parse("\".:53\n---\nkind: Secret\"\nerrors\n").unwrap_err();
        assert!(
            matches!(&err, CorefileError::UnsupportedLayout { message, .. }
                if message.contains("`\".:53\n---\nkind: Secret\"`")),
            "the field holds the keys as written: {err:?}"
        );
        assert!(!err.to_string().contains('\n'), "{err}");
        assert!(
            err.to_string()
                .contains("`\".:53\\n---\\nkind: Secret\"` has no braces"),
            "{err}"
        );
    }
}
