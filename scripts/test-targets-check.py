#!/usr/bin/env python3
"""Every `cargo test ... --test X` (or `--example X`, `--bench X`) in the docs and in source
comments names a target that exists, in the package its `-p` names (in any workspace package
without `-p`). Run by scripts/docs-check.sh; prints each stale reference and exits 1.

A command may wrap over lines (a comment's `-- \n /// --nocapture`): the words after
`cargo test` are read up to the closing backtick, or the end of the line when there is none.
CHANGELOG.md is history and is not checked.
"""
import os
import re
import sys

ROOT = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
SCANNED = ["README.md", "Makefile", "docs", "crates", "bench", "scripts", "charts", "examples"]
SUFFIXES = (".md", ".rs", ".sh", ".py", ".toml", ".yaml", ".txt", "Makefile")
KINDS = {"--test": "tests", "--example": "examples", "--bench": "benches"}
COMMAND = re.compile(r"cargo\s+test\b([^`\n]*)")


def packages():
    """package name -> {kind dir: set of target names}."""
    out = {}
    crates = os.path.join(ROOT, "crates")
    for crate in sorted(os.listdir(crates)):
        manifest = os.path.join(crates, crate, "Cargo.toml")
        if not os.path.isfile(manifest):
            continue
        text = open(manifest, encoding="utf-8").read()
        name = re.search(r'^name\s*=\s*"([^"]+)"', text, re.M).group(1)
        targets = {}
        for kind in KINDS.values():
            names = set()
            folder = os.path.join(crates, crate, kind)
            if os.path.isdir(folder):
                for entry in os.listdir(folder):
                    path = os.path.join(folder, entry)
                    if entry.endswith(".rs"):
                        names.add(entry[:-3])
                    elif os.path.isfile(os.path.join(path, "main.rs")):
                        names.add(entry)
            section = {"tests": "test", "examples": "example", "benches": "bench"}[kind]
            for block in re.findall(r"\[\[%s\]\](.*?)(?=\n\[|\Z)" % section, text, re.S):
                m = re.search(r'^name\s*=\s*"([^"]+)"', block, re.M)
                if m:
                    names.add(m.group(1))
            targets[kind] = names
        out[name] = targets
    return out


def files():
    for entry in SCANNED:
        path = os.path.join(ROOT, entry)
        if os.path.isfile(path):
            yield path
            continue
        for folder, dirs, names in os.walk(path):
            dirs[:] = [d for d in dirs if d not in ("target", ".git", "golden", "fixtures")]
            for name in names:
                if name.endswith(SUFFIXES):
                    yield os.path.join(folder, name)


def references(text):
    """(line number, package or None, flag, target) for each target a `cargo test` names."""
    for m in COMMAND.finditer(text):
        words = m.group(1).split()
        # A comment wrapped the command: go on with the next line's words after `//` or `///`.
        end = m.end()
        if not m.group(0).rstrip().endswith("`") and text[end:end + 1] == "\n":
            rest = text[end + 1:].split("\n", 1)[0].strip()
            if rest.startswith("//") and "`" in rest:
                words += re.sub(r"^//[/!]?", "", rest).split("`", 1)[0].split()
        line = text.count("\n", 0, m.start()) + 1
        package = None
        for i, word in enumerate(words):
            if word == "--":
                break
            nxt = words[i + 1] if i + 1 < len(words) else ""
            if word in ("-p", "--package"):
                package = nxt
            elif word.startswith("--package="):
                package = word.split("=", 1)[1]
        for i, word in enumerate(words):
            if word == "--":
                break
            flag, _, value = word.partition("=")
            if flag in KINDS:
                target = value or (words[i + 1] if i + 1 < len(words) else "")
                yield line, package, flag, target.strip("`.,;:)")


def main():
    known = packages()
    stale = []
    checked = 0
    for path in files():
        if os.path.abspath(path) == os.path.abspath(__file__):
            continue
        text = open(path, encoding="utf-8", errors="replace").read()
        for line, package, flag, target in references(text):
            checked += 1
            where = "%s:%d" % (os.path.relpath(path, ROOT), line)
            kind = KINDS[flag]
            if package is not None and package not in known:
                stale.append("%s: `-p %s`: no such package" % (where, package))
                continue
            scope = {package: known[package]} if package else known
            if not any(target in t[kind] for t in scope.values()):
                owners = sorted(p for p, t in known.items() if target in t[kind])
                hint = " (it is in %s)" % ", ".join(owners) if owners else ""
                stale.append(
                    "%s: `%s %s`: no such target in %s%s"
                    % (where, flag, target, package or "the workspace", hint)
                )
    for s in stale:
        print("test-targets-check: " + s, file=sys.stderr)
    if stale:
        sys.exit(1)
    print("test-targets-check: %d test targets named in docs and comments, all exist" % checked)


if __name__ == "__main__":
    main()
