#!/usr/bin/env python3
"""Tests of scripts/fn-lengths.py on sources built to trip a naive brace counter."""

import contextlib
import importlib.util
import io
import pathlib
import tempfile
import textwrap
import unittest

HERE = pathlib.Path(__file__).resolve().parent
spec = importlib.util.spec_from_file_location("fn_lengths", HERE / "fn-lengths.py")
fn_lengths = importlib.util.module_from_spec(spec)
spec.loader.exec_module(fn_lengths)


def lengths(source):
    return {name: (line, count) for name, line, count in fn_lengths.functions(textwrap.dedent(source))}


class Functions(unittest.TestCase):
    def test_braces_inside_literals_and_comments_do_not_count(self):
        found = lengths(
            """\
            fn tricky<'a>(s: &'a str) -> usize {
                let open = '{';
                let close = '}';
                let quote = '\\'';
                let escaped = "}\\"}";
                let raw = r#"}"# ;
                let raw2 = br##"}"#}"##;
                // }
                /* } /* nested } */ } */
                'outer: loop { break 'outer; }
                s.len()
            }
            fn after() {}
            """
        )
        self.assertEqual(found["tricky"], (1, 12))
        self.assertEqual(found["after"], (13, 1))

    def test_lifetime_is_not_a_char_literal(self):
        found = lengths(
            """\
            impl<'a> Thing<'a> {
                fn get(&self) -> &'a str {
                    "{"
                }
            }
            """
        )
        self.assertEqual(found["get"], (2, 3))

    def test_declarations_and_fn_pointer_types_are_not_functions(self):
        found = lengths(
            """\
            trait T {
                fn declared(&self) -> u8;
            }
            fn takes(f: fn(u8) -> u8, r#type: u8) -> u8 {
                f(r#type)
            }
            """
        )
        self.assertEqual(found, {"takes": (4, 3)})

    def test_test_modules_are_left_out(self):
        found = lengths(
            """\
            fn real() {
            }
            #[cfg(test)]
            #[allow(clippy::unwrap_used)]
            mod tests {
                fn helper() {}
                #[test]
                fn case() {}
            }
            """
        )
        self.assertEqual(found, {"real": (1, 2)})

    def test_unbalanced_source_is_an_error(self):
        with self.assertRaises(fn_lengths.ScanError):
            fn_lengths.functions("fn broken() {\n")


class Cli(unittest.TestCase):
    def run_on(self, files, *args):
        with tempfile.TemporaryDirectory() as root:
            for rel, text in files.items():
                path = pathlib.Path(root, rel)
                path.parent.mkdir(parents=True, exist_ok=True)
                path.write_text(textwrap.dedent(text))
            out = io.StringIO()
            with contextlib.redirect_stdout(out), contextlib.redirect_stderr(io.StringIO()):
                code = fn_lengths.main(["--root", root, *args])
            return code, out.getvalue()

    FILES = {
        "crates/a/src/lib.rs": "fn short() {}\nfn long() {\n\n\n}\n",
        "crates/a/src/deep/mod.rs": "fn middle() {\n\n}\n",
        "crates/a/tests/t.rs": "fn in_tests() {\n\n\n\n\n\n}\n",
    }

    def test_top_lists_longest_first_and_skips_tests_folder(self):
        code, out = self.run_on(self.FILES, "--top", "2")
        self.assertEqual(code, 0)
        self.assertEqual(
            out.splitlines(),
            ["    4  crates/a/src/lib.rs:2  long", "    3  crates/a/src/deep/mod.rs:1  middle"],
        )

    def test_max_fails_listing_every_longer_function(self):
        code, out = self.run_on(self.FILES, "--max", "2")
        self.assertEqual(code, 1)
        self.assertEqual(len(out.splitlines()), 2)
        code, _ = self.run_on(self.FILES, "--max", "4")
        self.assertEqual(code, 0)


if __name__ == "__main__":
    unittest.main()
