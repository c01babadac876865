//! A Corefile reader that keeps byte offsets, enough to find server blocks and directives.
//!
//! It follows the Caddyfile lexer CoreDNS uses: tokens are separated by whitespace, `#` at the
//! start of a token comments out the rest of the line, `"` quotes (with `\` escapes) may span
//! lines, and only a token that is exactly `{` or `}` opens or closes a block (so `{$ENV}` and
//! `{1}` are ordinary words).

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
}

pub(super) fn tokenize(src: &str) -> Result<Vec<Tok>, CorefileError> {
    let b = src.as_bytes();
    let mut toks = Vec::new();
    let mut i = 0;
    let mut line = 1;
    let mut newline_seen = true;
    while i < b.len() {
        let c = b[i];
        match c {
            b'\n' => {
                line += 1;
                newline_seen = true;
                i += 1;
            }
            b' ' | b'\t' | b'\r' | b'\x0b' | b'\x0c' => i += 1,
            b'#' => {
                while i < b.len() && b[i] != b'\n' {
                    i += 1;
                }
            }
            _ => {
                let start = i;
                let start_line = line;
                // As in the Caddyfile lexer, a quote only opens at the start of a token, and
                // the closing quote ends the token.
                let mut quoted = c == b'"';
                if quoted {
                    i += 1;
                }
                while i < b.len() {
                    let c = b[i];
                    if quoted {
                        if c == b'\\' && i + 1 < b.len() {
                            if b[i + 1] == b'\n' {
                                line += 1;
                            }
                            i += 2;
                            continue;
                        }
                        i += 1;
                        if c == b'"' {
                            quoted = false;
                            break;
                        }
                        if c == b'\n' {
                            line += 1;
                        }
                        continue;
                    }
                    if c.is_ascii_whitespace() {
                        break;
                    }
                    i += 1;
                }
                if quoted {
                    return Err(CorefileError::Syntax {
                        line: start_line,
                        message: "unterminated quoted string".into(),
                    });
                }
                let kind = match &src[start..i] {
                    "{" => TokKind::Open,
                    "}" => TokKind::Close,
                    _ => TokKind::Word,
                };
                toks.push(Tok {
                    kind,
                    start,
                    end: i,
                    line: start_line,
                    first_on_line: newline_seen,
                });
                newline_seen = false;
            }
        }
    }
    Ok(toks)
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
}

pub(super) fn parse(src: &str) -> Result<Corefile, CorefileError> {
    let toks = tokenize(src)?;
    let mut out = Corefile::default();
    let mut pending: Vec<Tok> = Vec::new();
    let mut i = 0;
    while i < toks.len() {
        let t = toks[i];
        match t.kind {
            TokKind::Word => {
                if pending.is_empty() && t.first_on_line && t.text(src) == "import" {
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
                pending.push(t);
                i += 1;
            }
            TokKind::Open => {
                if pending.is_empty() {
                    return Err(CorefileError::Syntax {
                        line: t.line,
                        message: "`{` without server block keys".into(),
                    });
                }
                let keys = std::mem::take(&mut pending);
                let (directives, close, next) = parse_body(src, &toks, i)?;
                out.blocks.push(ServerBlock {
                    keys,
                    open: t,
                    close,
                    directives,
                });
                i = next;
            }
            TokKind::Close => {
                return Err(CorefileError::Syntax {
                    line: t.line,
                    message: "`}` without a matching `{`".into(),
                });
            }
        }
    }
    if let Some(t) = pending.first() {
        return Err(CorefileError::Syntax {
            line: t.line,
            message: format!(
                "`{}` is not followed by a `{{ ... }}` server block",
                t.text(src)
            ),
        });
    }
    Ok(out)
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
            Err(CorefileError::Syntax { .. })
        ));
    }
}
