#!/usr/bin/env python3
"""Tests of scripts/module-graph.py on small made-up crates: a cycle fails --check, test code
and comments draw no edge, `super::` and a folder's files resolve to the right nodes."""

import os
import subprocess
import sys
import tempfile
import unittest

SCRIPT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "module-graph.py")


def run(files, *args):
    with tempfile.TemporaryDirectory() as src:
        for path, text in files.items():
            full = os.path.join(src, path)
            os.makedirs(os.path.dirname(full), exist_ok=True)
            with open(full, "w", encoding="utf-8") as fh:
                fh.write(text)
        done = subprocess.run(
            [sys.executable, SCRIPT, *args, src], capture_output=True, text=True, check=False
        )
        return done.returncode, done.stdout


def crate_abc(a, b, c, **more):
    """A crate root declaring modules a, b and c, with their texts (and `more` files, by path)."""
    files = {"lib.rs": "pub mod a;\npub mod b;\npub mod c;\n", "a.rs": a, "b.rs": b, "c.rs": c}
    files.update(more)
    return files


class ModuleGraph(unittest.TestCase):
    def assert_acyclic(self, files, *lines):
        code, out = run(files, "--check")
        self.assertEqual(code, 0, out)
        for line in lines:
            self.assertIn(line, out)

    def test_a_cycle_fails_the_check_and_is_named(self):
        a, b, c = "use crate::b::B;\n", "pub struct B(crate::c::C);\n", "use crate::{a::A, b};\n"
        code, out = run(crate_abc(a, b, c), "--check")
        self.assertEqual(code, 1)
        self.assertIn("CYCLE: a <-> b <-> c", out)

    def test_one_way_uses_pass_with_each_depth(self):
        b, c = "use super::a::A as Renamed;\n", "fn f() -> crate::b::X { todo!() }\n"
        self.assert_acyclic(crate_abc("", b, c), " 0 a -> (none)", " 1 b -> a", " 2 c -> b")

    def test_tests_comments_and_strings_draw_no_edge(self):
        a = (
            '// uses crate::b\n/* crate::c /* nested */ */\nconst S: &str = "crate::b";\n'
            "#[cfg(test)]\nmod tests {\n    use crate::b::B;\n    fn t() { let _ = '{'; }\n}\n"
        )
        files = crate_abc(a, "use crate::a;\n", "#[cfg(test)]\nmod tests;\n")
        files["c/tests.rs"] = "use crate::a;\n"
        self.assert_acyclic(files, " 0 a -> (none)", " 0 c -> (none)", " 1 b -> a")

    def test_a_folder_is_one_node_and_its_files_a_graph_of_their_own(self):
        d = "mod x;\nmod y;\npub use y::Y;\npub struct Err;\n"
        y = "use super::x;\nuse crate::e::E;\npub struct Y;\n"
        files = {"lib.rs": "pub mod d;\npub mod e;\n", "d/mod.rs": d, "e.rs": ""}
        files.update({"d/x.rs": "use super::Err;\n", "d/y.rs": y})
        self.assert_acyclic(
            files, "[crate]\n   0 e -> (none)\n   1 d -> e\n", "[d]\n   0 x -> (none)\n   1 y -> x\n"
        )


if __name__ == "__main__":
    unittest.main()
