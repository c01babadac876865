#!/usr/bin/env python3
"""List the longest `impl` blocks and the longest files of the workspace's library and binary sources.

Scans crates/*/src/**/*.rs (never tests/, benches/, examples/ or fuzz/), or only the crates
named with --crate. Tests are left out, as scripts/fn-lengths.py does (and with its tokenizer,
so braces inside strings, char literals and comments do not count):
- an `impl` inside a `#[cfg(test)]` module is not listed;
- a file's length does not count the lines of its `#[cfg(test)] mod name { ... }` blocks
  (from the attribute's line to the closing brace), and a file that is a test module of its
  own (`#[cfg(test)] mod tests;` -> `<module>/tests.rs` or `<module>/tests/mod.rs`, and the
  files under that folder) is not counted at all.

An impl block's length runs from the line of its `impl` keyword to the line of its closing
brace, both included; one nested in a function counts as well. `impl Trait` in a type (an
argument or a return type) is not an impl block. A file's length is its number of lines.

--by-type sums, per type, the lines of every impl block of it (inherent and trait impls, in
every file of its crate), and lists the N largest with the files they are in.

Exit status: 0, or 1 with --max-impl L / --max-file L when an impl block / a file is longer
than L lines (all of them are listed), or 2 on a file that cannot be scanned or an unknown
crate.
"""

import argparse
import importlib.util
import os
import pathlib
import sys


def load_lexer():
    """The Rust tokenizer of scripts/fn-lengths.py (one lexer for every script)."""
    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "fn-lengths.py")
    spec = importlib.util.spec_from_file_location("fn_lengths", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


LEX = load_lexer()
ScanError = LEX.ScanError

# The tokens an item-level `impl` can follow: the start of the file, the end of the item or
# attribute before it, the opening of a block or module, or its own qualifiers.
IMPL_AFTER = {None, "}", ";", "{", "]", "unsafe", "default"}
WORDS = ("ident", "literal", "lifetime")


def test_module_spans(toks, pairs):
    """(name, first token, last token or None) of every `#[cfg(test)] mod name ...`: the
    attribute's `#` to the body's `}`, or None for `mod name;` (a file of its own)."""
    return [(name, k, body and pairs[body]) for name, k, body in LEX.cfg_test_items(toks)]


def header(toks):
    """An impl header's tokens as text: `LeaseManager`, `Display for Fence`, `<'a> X<'a>`."""
    out = ""
    prev = None
    for kind, value, _ in toks:
        if prev is not None and (
            (prev[0] in WORDS and kind in WORDS) or prev[1] == "," or (prev[1] == ">" and kind in WORDS)
        ):
            out += " "
        out += value
        prev = (kind, value)
    return out


def impls(text):
    """(header, first line, line count) of every impl block outside #[cfg(test)] modules."""
    toks = list(LEX.tokens(text))
    pairs = LEX.matching_braces(toks)
    excluded = [(start, end) for _, start, end in test_module_spans(toks, pairs) if end is not None]
    found = []
    for k, (kind, value, line) in enumerate(toks):
        if kind != "ident" or value != "impl":
            continue
        if (toks[k - 1][1] if k else None) not in IMPL_AFTER:
            continue  # `impl Trait` in a type
        if any(start < k < end for start, end in excluded):
            continue
        j = LEX.item_body(toks, k + 1)
        if j is None:
            continue
        found.append((header(toks[k + 1 : j]), line, toks[pairs[j]][2] - line + 1))
    return found


def file_length(text):
    """(lines tests aside, names of the `#[cfg(test)] mod name;` files it declares)."""
    toks = list(LEX.tokens(text))
    pairs = LEX.matching_braces(toks)
    total = text.count("\n") + (1 if text and not text.endswith("\n") else 0)
    test_lines = set()
    test_files = []
    for name, start, end in test_module_spans(toks, pairs):
        if end is None:
            test_files.append(name)
        else:
            test_lines.update(range(toks[start][2], toks[end][2] + 1))
    return total - len(test_lines), test_files


def child_dir(path):
    """Where the files of `path`'s child modules live."""
    if path.name in ("lib.rs", "main.rs", "mod.rs"):
        return path.parent
    return path.with_suffix("")


def scan(src):
    """(impls, files) of one crate's src folder: (count, path, line, what) and (count, path) rows."""
    paths = sorted(src.rglob("*.rs"))
    texts = {path: path.read_text(encoding="utf-8") for path in paths}
    lengths, skipped = {}, set()
    for path in paths:
        lengths[path], test_files = file_length(texts[path])
        for name in test_files:
            folder = child_dir(path) / name
            skipped.add(folder.with_suffix(".rs"))
            skipped.update(p for p in paths if folder in p.parents)
    rows_impls, rows_files = [], []
    for path in paths:
        if path in skipped:
            continue
        rows_files.append((lengths[path], path))
        rows_impls += [(count, path, line, f"impl {what}") for what, line, count in impls(texts[path])]
    return rows_impls, rows_files


def self_type(what):
    """The type an impl header is for: `impl<'a> X<'a>` -> X, `impl fmt::Display for Y` -> Y."""
    head = what[len("impl"):].strip()
    if head.startswith("<"):
        depth = 0
        for i, c in enumerate(head):
            depth += {"<": 1, ">": -1}.get(c, 0)
            if depth == 0:
                head = head[i + 1 :].strip()
                break
    if " for " in head:
        head = head.split(" for ", 1)[1]
    name = head.split("<", 1)[0].split()[0] if head else head
    return name.split("::")[-1]


def by_type(found_impls, top):
    """Prints the `top` types with the most impl lines, summed over their files."""
    totals = {}
    for count, place, what in found_impls:
        crate = place.split("/")[1]
        key = (crate, self_type(what))
        lines, files = totals.get(key, (0, set()))
        totals[key] = (lines + count, files | {place.rsplit(":", 1)[0]})
    rows = sorted(totals.items(), key=lambda kv: (-kv[1][0], kv[0]))
    for (crate, name), (lines, files) in rows[:top]:
        print(f"{lines:5}  {crate}::{name}  ({len(files)} file(s): {', '.join(sorted(files))})")


def main(argv=None):
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0],
        epilog=__doc__.split("\n\n", 1)[1],
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "--crate",
        action="append",
        metavar="NAME",
        help="only crates/NAME/src (repeatable; default: every crate)",
    )
    parser.add_argument("--top", type=int, default=10, metavar="N", help="list the N longest of each (default 10)")
    parser.add_argument(
        "--by-type", action="store_true", help="sum each type's impl lines over every file, and list the N largest"
    )
    parser.add_argument("--max-impl", type=int, metavar="L", help="fail (exit 1) on an impl block longer than L lines")
    parser.add_argument("--max-file", type=int, metavar="L", help="fail (exit 1) on a file longer than L lines")
    parser.add_argument(
        "--root",
        type=pathlib.Path,
        default=pathlib.Path(__file__).resolve().parent.parent,
        help="workspace root (default: the checkout this script is in)",
    )
    args = parser.parse_args(argv)

    if args.crate:
        sources = [args.root / "crates" / name / "src" for name in args.crate]
        for src in sources:
            if not src.is_dir():
                print(f"sizes: no crate at {src.relative_to(args.root)}", file=sys.stderr)
                return 2
    else:
        sources = sorted(args.root.glob("crates/*/src"))

    found_impls, found_files = [], []
    for src in sources:
        try:
            rows_impls, rows_files = scan(src)
        except (ScanError, UnicodeDecodeError) as err:
            print(f"sizes: {src.relative_to(args.root)}: {err}", file=sys.stderr)
            return 2
        found_impls += [(count, f"{path.relative_to(args.root)}:{line}", what) for count, path, line, what in rows_impls]
        found_files += [(count, str(path.relative_to(args.root)), "file") for count, path in rows_files]
    found_impls.sort(key=lambda f: (-f[0], f[1]))
    found_files.sort(key=lambda f: (-f[0], f[1]))

    if args.by_type:
        by_type(found_impls, args.top)
        return 0
    if args.max_impl is None and args.max_file is None:
        for count, place, what in found_impls[: args.top] + found_files[: args.top]:
            print(f"{count:5}  {place}  {what}")
        return 0

    failed = []
    for limit, found, noun in [
        (args.max_impl, found_impls, "impl block"),
        (args.max_file, found_files, "file"),
    ]:
        if limit is None:
            continue
        over = [f for f in found if f[0] > limit]
        for count, place, what in over:
            print(f"{count:5}  {place}  {what}")
        if over:
            failed.append(f"{len(over)} {noun}(s) longer than {limit} lines")
        else:
            print(f"sizes: no {noun} longer than {limit} lines ({len(found)} scanned)")
    if failed:
        print(f"sizes: {'; '.join(failed)}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
