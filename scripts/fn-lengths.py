#!/usr/bin/env python3
"""List the longest functions in the workspace's library and binary sources.

Scans crates/*/src/**/*.rs (never tests/, benches/, examples/ or fuzz/). Functions inside a
`#[cfg(test)]` module (the usual `#[cfg(test)] mod tests { ... }` block) are left out: they are
tests, not the code a reader follows. A function's length runs from the line of its `fn`
keyword to the line of its closing brace, both included; a function nested in another counts
in both. Braces are matched on tokens, so braces inside strings, raw strings, char literals
and comments do not count, and lifetimes are not mistaken for char literals.

Exit status: 0, or 1 with --max L when any function is longer than L lines (all of them are
listed), or 2 on a file that cannot be scanned.
"""

import argparse
import pathlib
import re
import sys

IDENT_START = re.compile(r"[A-Za-z_]")
IDENT_CHAR = re.compile(r"[A-Za-z0-9_]")
RAW_STRING = re.compile(r'(?:b|c)?r(#*)"')
PLAIN_STRING = re.compile(r'(?:b|c)?"')


class ScanError(Exception):
    pass


def tokens(text):
    """Yield (kind, value, line) with kind in ident, punct, literal, lifetime; skips comments."""
    i, n, line = 0, len(text), 1
    while i < n:
        c = text[i]
        if c == "\n":
            line += 1
            i += 1
        elif c.isspace():
            i += 1
        elif text.startswith("//", i):
            end = text.find("\n", i)
            i = n if end < 0 else end
        elif text.startswith("/*", i):
            # Block comments nest in Rust.
            depth, j = 1, i + 2
            while depth:
                if j >= n:
                    raise ScanError(f"line {line}: unterminated block comment")
                if text.startswith("/*", j):
                    depth, j = depth + 1, j + 2
                elif text.startswith("*/", j):
                    depth, j = depth - 1, j + 2
                else:
                    j += 1
            line += text.count("\n", i, j)
            i = j
        elif (m := RAW_STRING.match(text, i)) and (i == 0 or not IDENT_CHAR.match(text[i - 1])):
            close = '"' + m.group(1)
            end = text.find(close, m.end())
            if end < 0:
                raise ScanError(f"line {line}: unterminated raw string")
            j = end + len(close)
            yield "literal", text[i:j], line
            line += text.count("\n", i, j)
            i = j
        elif (m := PLAIN_STRING.match(text, i)) and (i == 0 or not IDENT_CHAR.match(text[i - 1])):
            j = m.end()
            while True:
                if j >= n:
                    raise ScanError(f"line {line}: unterminated string")
                if text[j] == "\\":
                    j += 2
                elif text[j] == '"':
                    j += 1
                    break
                else:
                    j += 1
            yield "literal", text[i:j], line
            line += text.count("\n", i, j)
            i = j
        elif c == "'" or (c == "b" and text.startswith("b'", i)):
            q = i + 1 if c == "'" else i + 2
            if q < n and text[q] == "\\":
                end = text.find("'", q + 2)
                if end < 0:
                    raise ScanError(f"line {line}: unterminated char literal")
                yield "literal", text[i : end + 1], line
                i = end + 1
            elif q + 1 < n and text[q + 1] == "'":
                yield "literal", text[i : q + 2], line
                i = q + 2
            else:
                # A lifetime or loop label: 'a, 'static, '_.
                j = q
                while j < n and IDENT_CHAR.match(text[j]):
                    j += 1
                yield "lifetime", text[i:j], line
                i = j
        elif IDENT_START.match(c):
            j = i + 1
            while j < n and IDENT_CHAR.match(text[j]):
                j += 1
            if text.startswith("r#", i) and j == i + 1 and i + 2 < n and IDENT_START.match(text[i + 2]):
                # A raw identifier such as r#type.
                j = i + 3
                while j < n and IDENT_CHAR.match(text[j]):
                    j += 1
                yield "ident", text[i + 2 : j], line
            else:
                yield "ident", text[i:j], line
            i = j
        elif c.isdigit():
            j = i + 1
            while j < n and IDENT_CHAR.match(text[j]):
                j += 1
            yield "literal", text[i:j], line
            i = j
        else:
            yield "punct", c, line
            i += 1


def matching_braces(toks):
    """Map the index of every `{` token to the index of its `}`."""
    pairs, stack = {}, []
    for k, (kind, value, line) in enumerate(toks):
        if kind != "punct":
            continue
        if value == "{":
            stack.append(k)
        elif value == "}":
            if not stack:
                raise ScanError(f"line {line}: unmatched '}}'")
            pairs[stack.pop()] = k
    if stack:
        raise ScanError(f"line {toks[stack[-1]][2]}: unmatched '{{'")
    return pairs


def skip_attribute(toks, k):
    """With toks[k] == '#', return the index after the attribute `#[...]` / `#![...]`."""
    k += 1
    if k < len(toks) and toks[k][1] == "!":
        k += 1
    depth = 0
    while k < len(toks):
        value = toks[k][1]
        if toks[k][0] == "punct" and value == "[":
            depth += 1
        elif toks[k][0] == "punct" and value == "]":
            depth -= 1
            if depth == 0:
                return k + 1
        k += 1
    return k


def test_module_ranges(toks, pairs):
    """Token index ranges of `#[cfg(test)] mod name { ... }` bodies."""
    return [body for _, body in cfg_test_modules(toks, pairs) if body]


def cfg_test_modules(toks, pairs):
    """`#[cfg(test)]` modules: (name, token range of the `{ ... }` body), or (name, None) for a
    `mod name;` in a file of its own. Attributes after `#[cfg(test)]` and `pub(...)` are
    skipped."""
    return [(name, body and (body, pairs[body])) for name, _, body in cfg_test_items(toks)]


def cfg_test_items(toks):
    """(name, index of the `#` of `#[cfg(test)]`, index of the body's `{` or None for
    `mod name;`) of every `#[cfg(test)]` module."""
    values = [t[1] for t in toks]
    mods = []
    for k in range(len(toks)):
        if values[k : k + 7] != ["#", "[", "cfg", "(", "test", ")", "]"]:
            continue
        j = k + 7
        while j < len(toks) and values[j] == "#":
            j = skip_attribute(toks, j)
        if j < len(toks) and values[j] == "pub":
            j += 1
            if j < len(toks) and values[j] == "(":
                while j < len(toks) and values[j] != ")":
                    j += 1
                j += 1
        if values[j : j + 1] == ["mod"] and j + 2 < len(toks):
            if values[j + 2] == "{":
                mods.append((values[j + 1], k, j + 2))
            elif values[j + 2] == ";":
                mods.append((values[j + 1], k, None))
    return mods


def item_body(toks, j):
    """From token `j` (just after an item's keyword and name), the index of the `{` opening
    the item's body, or None for a declaration without one (`;` first, outside brackets)."""
    depth = 0
    while j < len(toks):
        kind, value, _ = toks[j]
        if kind == "punct":
            if value in "([":
                depth += 1
            elif value in ")]":
                depth -= 1
            elif depth == 0 and value == ";":
                return None
            elif depth == 0 and value == "{":
                return j
        j += 1
    return None


def functions(text):
    """(name, first line, line count) of every fn with a body outside #[cfg(test)] modules."""
    toks = list(tokens(text))
    pairs = matching_braces(toks)
    excluded = test_module_ranges(toks, pairs)
    found = []
    for k, (kind, value, line) in enumerate(toks):
        if kind != "ident" or value != "fn":
            continue
        if k + 1 >= len(toks) or toks[k + 1][0] != "ident":
            continue  # a fn pointer type such as `fn(u8) -> u8`
        if any(start < k < end for start, end in excluded):
            continue
        j = item_body(toks, k + 2)
        if j is None:
            continue  # a declaration without a body
        last_line = toks[pairs[j]][2]
        found.append((toks[k + 1][1], line, last_line - line + 1))
    return found


def source_files(root):
    for crate_src in sorted(root.glob("crates/*/src")):
        yield from sorted(crate_src.rglob("*.rs"))


def main(argv=None):
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0],
        epilog=__doc__.split("\n\n", 1)[1],
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--top", type=int, default=10, metavar="N", help="list the N longest functions (default 10)")
    parser.add_argument(
        "--max", type=int, metavar="L", help="list every function longer than L lines and exit 1 if there is one"
    )
    parser.add_argument(
        "--root",
        type=pathlib.Path,
        default=pathlib.Path(__file__).resolve().parent.parent,
        help="workspace root (default: the checkout this script is in)",
    )
    args = parser.parse_args(argv)

    found = []
    for path in source_files(args.root):
        rel = path.relative_to(args.root)
        try:
            text = path.read_text(encoding="utf-8")
            found += [(count, f"{rel}:{line}", name) for name, line, count in functions(text)]
        except (ScanError, UnicodeDecodeError) as err:
            print(f"fn-lengths: {rel}: {err}", file=sys.stderr)
            return 2
    found.sort(key=lambda f: (-f[0], f[1]))

    if args.max is not None:
        over = [f for f in found if f[0] > args.max]
        for count, place, name in over:
            print(f"{count:5}  {place}  {name}")
        if over:
            print(f"fn-lengths: {len(over)} function(s) longer than {args.max} lines", file=sys.stderr)
            return 1
        print(f"fn-lengths: no function longer than {args.max} lines ({len(found)} functions)")
        return 0

    for count, place, name in found[: args.top]:
        print(f"{count:5}  {place}  {name}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
