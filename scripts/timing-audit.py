#!/usr/bin/env python3
"""Lists the timed assertions and the bare sleeps of the tests (issue 41 item 2), with counts.

Scanned: crates/*/tests/**/*.rs and, in crates/*/src, what follows a `#[cfg(test)]` line (test
modules sit at the end of their files).

- timed assertion: an `assert!`/`assert_eq!`... or `prop_assert!` whose condition compares a
  time (`elapsed()`, `Duration::from_*`, `as_millis()`, `as_secs*()`) with `<`, `<=`, `>` or
  `>=`. A literal upper bound of at most 4 s is counted as tight (a lower bound, "it waited at
  least this long", is listed but cannot fail on a slow machine); a deadline that only catches
  hangs is a loop's `Instant::now() < deadline`, not listed.
- sleep: `sleep(` (std or tokio). A sleep inside a polling loop (`loop`, `while`, `for` within
  the 12 lines before it, the loop then waiting on an observable effect) is counted as polling;
  any other is bare: it stands for "it has happened" or is a quiet window, and is listed.

Usage: scripts/timing-audit.py [--list]   (counts only without --list)
"""
import os
import re
import sys

ROOT = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
ASSERT = re.compile(r"\b(?:prop_)?assert(?:_eq|_ne)?!\s*\(")
TIME = re.compile(r"elapsed\(\)|Duration::from_\w+|as_millis\(\)|as_secs(?:_f64)?\(\)|as_micros\(\)")
COMPARE = re.compile(r"[^-=<>]\s*(<=?|>=?)\s*[^-=>]")
SLEEP = re.compile(r"\bsleep\s*\(")
LOOP = re.compile(r"^\s*(?:loop\s*\{|while\b|for\b.*\bin\b|.*=>\s*loop\b)")
BOUND = re.compile(r"Duration::from_(secs|millis|micros)\((\d+)\)|\b(\d+(?:\.\d+)?)\s*\)?\s*$")


def files():
    crates = os.path.join(ROOT, "crates")
    for crate in sorted(os.listdir(crates)):
        for sub, test_only in (("tests", False), ("src", True)):
            base = os.path.join(crates, crate, sub)
            for folder, dirs, names in os.walk(base):
                dirs[:] = [d for d in dirs if d not in ("target", "golden", "fixtures")]
                for name in sorted(names):
                    if name.endswith(".rs"):
                        yield os.path.join(folder, name), test_only


def test_text(path, test_only):
    lines = open(path, encoding="utf-8").read().split("\n")
    if not test_only:
        return 0, lines
    for i, line in enumerate(lines):
        if line.strip() == "#[cfg(test)]":
            return i, lines
    return len(lines), lines


def strip_strings(text):
    """`text` with the contents of string and char literals blanked (their parentheses and
    commas are not code)."""
    out, i, n = [], 0, len(text)
    while i < n:
        c = text[i]
        if c == '"':
            j = i + 1
            while j < n and text[j] != '"':
                j += 2 if text[j] == "\\" else 1
            inner = text[i + 1:min(j, n)]
            out.append('"' + re.sub(r"[^\n]", " ", inner) + '"')
            i = j + 1
        elif c == "'" and i + 2 < n and text[i + 2] == "'":
            out.append("' '")
            i += 3
        else:
            out.append(c)
            i += 1
    return "".join(out)


def call_span(text, start):
    """The text of the macro call opening at `start` (balanced parentheses)."""
    depth = 0
    for i in range(start, len(text)):
        c = text[i]
        if c == "(":
            depth += 1
        elif c == ")":
            depth -= 1
            if depth == 0:
                return text[start:i + 1]
    return text[start:]


def upper_bound(condition):
    """The literal upper time bound (`< Duration::from_*(N)`, maybe after `x +`) in seconds."""
    m = re.search(
        r"<=?\s*(?:[\w.()]+\s*\+\s*)?Duration::from_(secs|millis|micros)\((\d+)\)", condition
    )
    if m:
        unit = {"secs": 1.0, "millis": 1e-3, "micros": 1e-6}[m.group(1)]
        return int(m.group(2)) * unit
    m = re.search(r"as_millis\(\)\s*<=?\s*(\d+)", condition)
    if m:
        return int(m.group(1)) / 1000
    return None


def audit():
    timed, sleeps = [], []
    for path, test_only in files():
        first, lines = test_text(path, test_only)
        rel = os.path.relpath(path, ROOT)
        body = strip_strings("\n".join(lines[first:]))
        for m in ASSERT.finditer(body):
            call = call_span(body, m.end() - 1)
            # The condition: the first argument (up to a top-level comma) of the macro.
            depth, cond = 0, call
            for i, c in enumerate(call):
                if c in "([{":
                    depth += 1
                elif c in ")]}":
                    depth -= 1
                elif c == "," and depth == 1:
                    cond = call[:i]
                    break
            hang_deadline = re.search(r"(?:Instant::now\(\)|\bnow)\s*<=?\s*deadline\b", cond)
            if TIME.search(cond) and COMPARE.search(cond) and not hang_deadline:
                line = first + body.count("\n", 0, m.start()) + 1
                timed.append((rel, line, upper_bound(cond), " ".join(cond.split())[:110]))
        for i in range(first, len(lines)):
            text = lines[i]
            code = text.split("//", 1)[0]
            if not SLEEP.search(code) or "fn " in code:
                continue
            window = lines[max(first, i - 12):i]
            polling = any(LOOP.search(w.split("//", 1)[0]) for w in window)
            sleeps.append((rel, i + 1, polling, code.strip()[:110]))
    return timed, sleeps


def main():
    listing = "--list" in sys.argv[1:]
    timed, sleeps = audit()
    tight = [t for t in timed if t[2] is not None and t[2] <= 4]
    bare = [s for s in sleeps if not s[2]]
    if listing:
        for rel, line, bound, cond in timed:
            b = "-" if bound is None else ("< %gs" % bound)
            print("timed  %s:%d  upper bound %s  %s" % (rel, line, b, cond))
        for rel, line, _, code in bare:
            print("sleep  %s:%d  %s" % (rel, line, code))
    print(
        "timing-audit: %d timed assertions (%d tight upper bounds, at most 4 s); %d sleeps, %d bare "
        "(not in a polling loop), %d polling"
        % (len(timed), len(tight), len(sleeps), len(bare), len(sleeps) - len(bare))
    )


if __name__ == "__main__":
    main()
