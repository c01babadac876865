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


LIB = "pub mod a;\npub mod b;\npub mod c;\n"


class ModuleGraph(unittest.TestCase):
    def test_a_cycle_fails_the_check_and_is_named(self):
        code, out = run(
            {
                "lib.rs": LIB,
                "a.rs": "use crate::b::B;\npub struct A;\n",
                "b.rs": "pub struct B(crate::c::C);\n",
                "c.rs": "use crate::{a::A, b};\npub struct C;\n",
            },
            "--check",
        )
        self.assertEqual(code, 1)
        self.assertIn("CYCLE: a <-> b <-> c", out)

    def test_one_way_uses_pass_with_each_depth(self):
        code, out = run(
            {
                "lib.rs": LIB,
                "a.rs": "pub struct A;\n",
                "b.rs": "use super::a::A as Renamed;\n",
                "c.rs": "fn f() -> crate::b::X { todo!() }\n",
            },
            "--check",
        )
        self.assertEqual(code, 0)
        self.assertIn(" 0 a -> (none)", out)
        self.assertIn(" 1 b -> a", out)
        self.assertIn(" 2 c -> b", out)

    def test_tests_comments_and_strings_draw_no_edge(self):
        code, out = run(
            {
                "lib.rs": LIB,
                "a.rs": "// uses crate::b\n/* crate::c /* nested */ */\nconst S: &str = \"crate::b\";\n"
                "#[cfg(test)]\nmod tests {\n    use crate::b::B;\n    #[test]\n    fn t() { let _ = '{'; }\n}\n",
                "b.rs": "use crate::a;\n",
                "c.rs": "#[cfg(test)]\nmod tests;\n",
                "c/tests.rs": "use crate::a;\n",
            },
            "--check",
        )
        self.assertEqual(code, 0)
        self.assertIn(" 0 a -> (none)", out)
        self.assertIn(" 0 c -> (none)", out)

    def test_a_folder_is_one_node_and_its_files_a_graph_of_their_own(self):
        code, out = run(
            {
                "lib.rs": "pub mod d;\npub mod e;\n",
                "d/mod.rs": "mod x;\nmod y;\npub use y::Y;\npub struct Err;\n",
                "d/x.rs": "use super::Err;\n",
                "d/y.rs": "use super::x;\nuse crate::e::E;\npub struct Y;\n",
                "e.rs": "pub struct E;\n",
            }
        )
        self.assertEqual(code, 0)
        self.assertIn("[crate]\n   0 e -> (none)\n   1 d -> e\n", out)
        self.assertIn("[d]\n   0 x -> (none)\n   1 y -> x\n", out)


if __name__ == "__main__":
    unittest.main()
