//! Escaping of untrusted strings for printing.
//!
//! Names, annotations, labels and Corefile text come from cluster objects that any namespace
//! may write. Whatever hairpin prints — `hairpin plan` text, diffs, YAML comments, Events,
//! status messages, logs — embeds them through [`text`] (or [`quoted`]), so a value can never
//! start a new line, a YAML document or key, or a section of the output of its own.
//!
//! [`text`] keeps printable ASCII as it is (a valid hostname, name or label is unchanged)
//! and writes everything else as an escape: `\\` for a backslash, `\n`, `\r`, `\t`, and
//! `\u{..}` for every other control character and every non-ASCII character (so a homoglyph
//! or a right-to-left override is visible too). The result is one line of printable ASCII.

use std::borrow::Cow;
use std::fmt::{self, Write as _};

/// Whether `c` is printed as it is by [`text`].
fn plain(c: char) -> bool {
    matches!(c, ' '..='~') && c != '\\'
}

/// `s` as one line of printable ASCII: unchanged when it already is one (and holds no
/// backslash), else with the escapes described in the [module](self) documentation.
pub fn text(s: &str) -> Cow<'_, str> {
    if s.chars().all(plain) {
        return Cow::Borrowed(s);
    }
    let mut out = String::with_capacity(s.len() + 8);
    for c in s.chars() {
        push_escaped(&mut out, c);
    }
    Cow::Owned(out)
}

/// `s` between double quotes, escaped as by [`text`] and with `"` written `\"`: for a value
/// whose ends must be visible (an empty or space-padded name) or that sits inside a sentence.
pub fn quoted(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    for c in s.chars() {
        if c == '"' {
            out.push_str("\\\"");
        } else {
            push_escaped(&mut out, c);
        }
    }
    out.push('"');
    out
}

/// Display adapter: `format!("{}", Text(s))` prints [`text(s)`](text) without an allocation
/// when `s` needs no escape.
#[derive(Debug, Clone, Copy)]
pub struct Text<'a>(pub &'a str);

impl fmt::Display for Text<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let escaped = text(self.0);
        // Padding (`{:<20}`) applies to the escaped form, so columns stay aligned.
        f.pad(&escaped)
    }
}

/// Text made of several lines on purpose (a suggested Corefile block under a warning): each
/// line escaped by [`text`], so the line breaks are only the ones given here.
pub fn lines(s: &str) -> String {
    s.split('\n')
        .map(|l| text(l.strip_suffix('\r').unwrap_or(l)).into_owned())
        .collect::<Vec<_>>()
        .join("\n")
}

/// Whether `c` may change how a line is split or read on a terminal: a control character,
/// a Unicode line or paragraph separator, a byte-order mark, a zero-width or bidirectional
/// formatting character.
pub(crate) fn invisible(c: char) -> bool {
    c.is_control()
        || matches!(
            c,
            '\u{200b}'..='\u{200f}' | '\u{2028}'..='\u{202e}' | '\u{2066}'..='\u{2069}' | '\u{feff}'
        )
}

/// `s` with only its invisible characters escaped as `\u{..}` (every control character but
/// the tab, Unicode line separators, a byte-order mark, zero-width and bidirectional
/// formatting characters); backslashes and printable non-ASCII text are kept. For text shown
/// as it is, line by line, such as a Corefile in a diff, and as the last guard of a message
/// already built from [`text`]-escaped parts (applied to those it changes nothing). A line
/// break is escaped too: split the text into lines first.
pub fn controls(s: &str) -> Cow<'_, str> {
    if !s.chars().any(|c| c != '\t' && invisible(c)) {
        return Cow::Borrowed(s);
    }
    let mut out = String::with_capacity(s.len() + 8);
    for c in s.chars() {
        if c != '\t' && invisible(c) {
            let _ = write!(out, "\\u{{{:x}}}", u32::from(c));
        } else {
            out.push(c);
        }
    }
    Cow::Owned(out)
}

fn push_escaped(out: &mut String, c: char) {
    match c {
        '\\' => out.push_str("\\\\"),
        '\n' => out.push_str("\\n"),
        '\r' => out.push_str("\\r"),
        '\t' => out.push_str("\\t"),
        c if plain(c) => out.push(c),
        c => {
            let _ = write!(out, "\\u{{{:x}}}", u32::from(c));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plain_names_are_unchanged_and_borrowed() {
        for s in [
            "shop.example.com",
            "*.example.com",
            "Ingress team-a/web",
            "",
        ] {
            assert!(matches!(text(s), Cow::Borrowed(_)), "{s}");
            assert_eq!(text(s), s);
        }
    }

    #[test]
    fn line_breaks_and_controls_become_escapes() {
        assert_eq!(
            text("a\n---\nkind: ClusterRoleBinding"),
            "a\\n---\\nkind: ClusterRoleBinding"
        );
        assert_eq!(text("a\r\n\tb\\"), "a\\r\\n\\tb\\\\");
        assert_eq!(text("\u{1b}[2J"), "\\u{1b}[2J");
        assert_eq!(text("x\u{85}y\u{2028}z"), "x\\u{85}y\\u{2028}z");
        assert_eq!(text("\u{feff}é"), "\\u{feff}\\u{e9}");
        assert_eq!(text("\u{7f}"), "\\u{7f}");
    }

    #[test]
    fn quoted_escapes_quotes_and_shows_the_ends() {
        assert_eq!(quoted(" a\"b\n"), "\" a\\\"b\\n\"");
        assert_eq!(quoted(""), "\"\"");
    }

    #[test]
    fn the_display_adapter_pads_the_escaped_form() {
        assert_eq!(format!("[{:<6}]", Text("a\nb")), "[a\\nb  ]");
    }

    #[test]
    fn lines_keeps_only_the_given_breaks() {
        assert_eq!(lines("a {\r\n  b\u{0}\n}"), "a {\n  b\\u{0}\n}");
    }

    #[test]
    fn controls_escapes_only_what_is_invisible() {
        assert_eq!(
            controls("\tforward . 1.1.1.1 # café \\d"),
            "\tforward . 1.1.1.1 # café \\d"
        );
        assert_eq!(
            controls("a\rb\u{85}c\u{202e}d\n"),
            "a\\u{d}b\\u{85}c\\u{202e}d\\u{a}"
        );
        // A message of escaped parts is left alone.
        let message = format!("hostname {} refused …", text("x\ny"));
        assert_eq!(controls(&message), message);
    }

    #[test]
    fn escaped_text_is_one_printable_line_and_decodes_back() {
        // Every char class once: the result is printable ASCII, and the escapes decode back.
        let s = "a\\\n\r\t\u{0}\u{7f}\u{85}\u{a0}\u{feff}\u{1F600}\"z";
        let e = text(s);
        assert!(e.chars().all(|c| matches!(c, ' '..='~')));
        assert_eq!(unescape(&e), s);
    }

    fn unescape(s: &str) -> String {
        let mut out = String::new();
        let mut it = s.chars();
        while let Some(c) = it.next() {
            if c != '\\' {
                out.push(c);
                continue;
            }
            match it.next() {
                Some('n') => out.push('\n'),
                Some('r') => out.push('\r'),
                Some('t') => out.push('\t'),
                Some('\\') => out.push('\\'),
                Some('u') => {
                    let hex: String = it.by_ref().skip(1).take_while(|&c| c != '}').collect();
                    out.push(char::from_u32(u32::from_str_radix(&hex, 16).unwrap()).unwrap());
                }
                other => panic!("bad escape {other:?}"),
            }
        }
        out
    }
}
