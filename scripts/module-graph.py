#!/usr/bin/env python3
"""Print the planner's module dependency graph; with --check, fail on a cycle.

Reads crates/planner/src (or the directory given) without building anything. A module
depends on another when its non-test code names it: `use crate::x`, `crate::x::item`,
`super::x` (resolved from the file's place), and a child module's bare `x::` path (in
lib.rs or a folder's mod.rs). `#[cfg(test)]` modules and comments are left out: a test
may use any stage.

A folder (`corefile/`) is one node in the graph of its parent, and its files are the nodes
of a graph of their own, printed and checked the same way. A module naming its own
ancestor or descendant draws no edge: a folder's mod.rs declares and re-exports its files,
and they use the items it keeps (their shared error type). lib.rs, the crate root, is not
a node.

Usage: scripts/module-graph.py [--check] [SRC_DIR]
"""

import importlib.util
import os
import re
import sys

IDENT = r"[A-Za-z_][A-Za-z0-9_]*"


def load_lexer():
    """The Rust tokenizer of scripts/fn-lengths.py (one lexer for both scripts)."""
    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "fn-lengths.py")
    spec = importlib.util.spec_from_file_location("fn_lengths", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


LEX = load_lexer()


def non_test_code(text):
    """The code outside `#[cfg(test)]` modules as one line of tokens (`::` kept whole,
    literals blanked, comments gone), and the names of `#[cfg(test)] mod x;` files."""
    toks = list(LEX.tokens(text))
    mods = LEX.cfg_test_modules(toks, LEX.matching_braces(toks))
    skip = set()
    for _, body in mods:
        if body:
            skip.update(range(body[0], body[1] + 1))
    test_files = {name for name, body in mods if body is None}
    parts = []
    for k, (kind, value, _) in enumerate(toks):
        if k in skip:
            continue
        if kind == "punct" and value == ":" and parts and parts[-1] == ":":
            parts[-1] = "::"
        else:
            parts.append('""' if kind == "literal" else value)
    # Paths come out whole (`crate::x::y`), every other token apart.
    return re.sub(r" ?:: ?", "::", " ".join(parts)), test_files


def expand_use(tree):
    """`a::{b, c::{d, e}}` -> ['a::b', 'a::c::d', 'a::c::e'] (renames and globs kept as paths)."""
    tree = re.sub(r"\s+as\s+" + IDENT, "", tree)
    tree = re.sub(r"\s+", "", tree)

    def split_top(s):
        parts, depth, cur = [], 0, ""
        for ch in s:
            if ch == "," and depth == 0:
                parts.append(cur)
                cur = ""
                continue
            depth += {"{": 1, "}": -1}.get(ch, 0)
            cur += ch
        if cur:
            parts.append(cur)
        return parts

    def walk(prefix, s):
        if "{" not in s:
            return [prefix + s]
        head, rest = s.split("{", 1)
        inner = rest[: rest.rfind("}")]
        paths = []
        for part in split_top(inner):
            paths.extend(walk(prefix + head, part))
        return paths

    return walk("", tree)


def modules(src):
    """Map module path tuple -> file, from the file tree."""
    found = {}
    for root, _dirs, files in os.walk(src):
        for f in files:
            if not f.endswith(".rs"):
                continue
            rel = os.path.relpath(os.path.join(root, f), src)
            parts = rel[:-3].split(os.sep)
            if parts == ["lib"] or parts == ["main"]:
                path = ()
            elif parts[-1] == "mod":
                path = tuple(parts[:-1])
            else:
                path = tuple(parts)
            found[path] = os.path.join(src, rel)
    return found


def references(module, code, known):
    """Module paths that `code` (of `module`) names, resolved to the longest known module."""
    children = {m[-1] for m in known if len(m) == len(module) + 1 and m[: len(module)] == module}
    raw = []
    for m in re.finditer(r"\buse\s+([^;]+);", code):
        raw.extend(expand_use(m.group(1)))
    raw.extend(m.group(0) for m in re.finditer(r"\b(?:crate|super|self)(?:::" + IDENT + r")+", code))
    raw.extend(
        m.group(0)
        for m in re.finditer(r"(?<![:\w])(" + IDENT + r")(?:::" + IDENT + r")+", code)
        if m.group(1) in children
    )
    targets = set()
    for path in raw:
        segs = [s for s in path.split("::") if s and s != "*"]
        if not segs:
            continue
        if segs[0] == "crate":
            base, segs = (), segs[1:]
        elif segs[0] in ("super", "self"):
            base = module
            while segs and segs[0] in ("super", "self"):
                if segs[0] == "super":
                    base = base[:-1]
                segs = segs[1:]
        elif segs[0] in children:
            base = module
        else:
            continue  # an external crate or a name brought in by a `use` already counted
        resolved = base
        for s in segs:
            if base + (s,) in known or resolved + (s,) in known:
                resolved = resolved + (s,)
            else:
                break
        targets.add(resolved)
    return targets


def graphs(src):
    known_files = modules(src)
    known = set(known_files)
    tests = set()
    codes = {}
    for mod, path in known_files.items():
        with open(path, encoding="utf-8") as fh:
            code, skipped = non_test_code(fh.read())
        codes[mod] = code
        tests.update(mod + (name,) for name in skipped)
    known -= {m for m in known if any(m[: len(t)] == t for t in tests)}
    by_parent = {}
    for mod in sorted(known):
        if mod:
            by_parent.setdefault(mod[:-1], {}).setdefault(mod[-1], set())
    for mod in sorted(known):
        for target in references(mod, codes[mod], known):
            k = 0
            while k < min(len(mod), len(target)) and mod[k] == target[k]:
                k += 1
            if k == len(mod) or k == len(target):
                continue  # an ancestor or descendant (or itself)
            by_parent[mod[:k]][mod[k]].add(target[k])
    return by_parent


def cycles(graph):
    """Strongly connected components with more than one node (Tarjan)."""
    index, low, stack, on, out, counter = {}, {}, [], set(), [], [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    sys.setrecursionlimit(10000)
    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def layers(graph):
    """Each node's depth: 0 for a module that uses none of its siblings (acyclic graphs only)."""
    depth = {}

    def d(v):
        if v not in depth:
            depth[v] = 0
            depth[v] = 1 + max((d(w) for w in graph[v]), default=-1)
        return depth[v]

    for v in graph:
        d(v)
    return depth


def main(argv):
    check = "--check" in argv
    rest = [a for a in argv if a != "--check"]
    if any(a.startswith("-") for a in rest) or len(rest) > 1:
        print(__doc__.strip().splitlines()[-1], file=sys.stderr)
        return 2
    src = rest[0] if rest else os.path.join(os.path.dirname(__file__), "..", "crates", "planner", "src")
    by_parent = graphs(src)
    failed = False
    for parent in sorted(by_parent):
        graph = by_parent[parent]
        if len(graph) < 2:
            continue
        where = "crate" if not parent else "::".join(parent)
        found = cycles(graph)
        print(f"[{where}]")
        if found:
            for v in sorted(graph):
                print(f"  {v} -> {', '.join(sorted(graph[v])) or '(none)'}")
            for comp in found:
                print(f"  CYCLE: {' <-> '.join(comp)}")
            failed = True
        else:
            depth = layers(graph)
            for v in sorted(graph, key=lambda v: (depth[v], v)):
                print(f"  {depth[v]:>2} {v} -> {', '.join(sorted(graph[v])) or '(none)'}")
    if failed:
        print("module-graph: import cycle", file=sys.stderr)
    return 1 if failed and check else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
