#!/usr/bin/env python3
"""The end of scripts/test.sh's output: how many tests skipped and why, per reason, then the
whole suite's counts in cargo's own `test result:` form, so that the last line is still the
'N passed; N failed' line a reader (or CI) looks at.

Usage: test-summary.py OUTPUT SKIP_LOG STATUS
  OUTPUT    cargo test's standard output (its `test result:` lines are summed)
  SKIP_LOG  the lines crates/testkit/src/skip.rs appended: cause TAB test TAB reason
  STATUS    cargo's exit status (non-zero: the suite failed, whatever the counts say)
"""
import re
import sys
from collections import OrderedDict

RESULT = re.compile(
    r"^test result: (\w+)\. (\d+) passed; (\d+) failed; (\d+) ignored; (\d+) measured; (\d+) filtered out"
)


def totals(output_path):
    sums = [0, 0, 0, 0, 0]
    runs = 0
    failed_run = False
    try:
        with open(output_path, encoding="utf-8", errors="replace") as f:
            for line in f:
                m = RESULT.match(line.strip())
                if not m:
                    continue
                runs += 1
                failed_run |= m.group(1) != "ok"
                for i in range(5):
                    sums[i] += int(m.group(i + 2))
    except FileNotFoundError:
        pass
    return runs, sums, failed_run


def skips(log_path):
    """(cause, reason) -> test names, in the order first seen; a test named once per reason."""
    groups = OrderedDict()
    try:
        with open(log_path, encoding="utf-8", errors="replace") as f:
            for line in f:
                parts = line.rstrip("\n").split("\t", 2)
                if len(parts) != 3:
                    continue
                cause, test, reason = parts
                names = groups.setdefault((cause, reason), [])
                if test not in names:
                    names.append(test)
    except FileNotFoundError:
        pass
    return groups


def main():
    output, log, status = sys.argv[1], sys.argv[2], int(sys.argv[3])
    runs, (passed, failed, ignored, measured, filtered), failed_run = totals(output)
    groups = skips(log)
    tests = sorted({t for names in groups.values() for t in names})
    print()
    if tests:
        print(
            f"skipped: {len(tests)} test(s) returned without checking anything "
            "(counted as passed by cargo; under CI=true a 'missing' one fails):"
        )
        for (cause, reason), names in sorted(groups.items(), key=lambda kv: (kv[0][0], -len(kv[1]))):
            print(f"  {len(names)} {cause}: {reason}")
            for name in names:
                print(f"      {name}")
    else:
        print("skipped: 0 tests")
    word = "ok" if status == 0 and not failed_run and failed == 0 else "FAILED"
    print(
        f"test result: {word}. {passed} passed; {failed} failed; {ignored} ignored; "
        f"{measured} measured; {filtered} filtered out; {len(tests)} skipped "
        f"(whole run: {runs} test binaries)"
    )


if __name__ == "__main__":
    main()
