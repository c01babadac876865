#!/usr/bin/env python3
"""Tests of scripts/sizes.py: impl blocks and file lengths, tests aside."""

import contextlib
import importlib.util
import io
import pathlib
import tempfile
import textwrap
import unittest

HERE = pathlib.Path(__file__).resolve().parent
spec = importlib.util.spec_from_file_location("sizes", HERE / "sizes.py")
sizes = importlib.util.module_from_spec(spec)
spec.loader.exec_module(sizes)


def impls(source):
    return {what: (line, count) for what, line, count in sizes.impls(textwrap.dedent(source))}


class Impls(unittest.TestCase):
    def test_inherent_trait_and_generic_impls_with_their_lines(self):
        found = impls(
            """\
            struct A;
            /// Docs and attributes do not count.
            #[allow(dead_code)]
            impl A {
                fn f(&self) -> &'static str {
                    "}}}"
                }
            }
            impl std::fmt::Display for A {
                fn fmt(&self, _: &mut std::fmt::Formatter<'_>) -> std::fmt::Result { Ok(()) }
            }
            unsafe impl Send for A {}
            impl<'a, T: Fn() -> u8> Wrap<'a, T> where T: Clone {
                // }
            }
            """
        )
        self.assertEqual(
            found,
            {
                "A": (4, 5),
                "std::fmt::Display for A": (9, 3),
                "Send for A": (12, 1),
                "<'a, T:Fn()-> u8> Wrap<'a, T> where T:Clone": (13, 3),
            },
        )

    def test_impl_trait_in_a_type_is_not_an_impl_block(self):
        found = impls(
            """\
            fn takes(f: impl Fn(u8), g: &mut impl FnMut(), h: Box<impl Send>) -> impl Iterator<Item = u8> {
                let v: Vec<(u8, impl Sized)> = Vec::new();
                std::iter::empty()
            }
            fn nested() {
                struct Local;
                impl Local {
                }
            }
            """
        )
        self.assertEqual(found, {"Local": (7, 2)})

    def test_impls_in_test_modules_are_left_out(self):
        found = impls(
            """\
            impl Real {}
            #[cfg(test)]
            #[allow(clippy::unwrap_used)]
            mod tests {
                impl Helper {
                }
            }
            """
        )
        self.assertEqual(found, {"Real": (1, 1)})


class FileLength(unittest.TestCase):
    def test_inline_test_modules_do_not_count_but_test_files_are_named(self):
        text = textwrap.dedent(
            """\
            fn a() {}

            #[cfg(test)]
            mod tests {
                #[test]
                fn t() { let _ = "}"; }
            }
            #[cfg(test)]
            pub(crate) mod more;
            fn b() {}
            """
        )
        self.assertEqual(sizes.file_length(text), (5, ["more"]))

    def test_a_last_line_without_newline_counts(self):
        self.assertEqual(sizes.file_length("fn a() {}\nfn b() {}"), (2, []))
        self.assertEqual(sizes.file_length(""), (0, []))

    def test_unbalanced_source_is_an_error(self):
        with self.assertRaises(sizes.ScanError):
            sizes.impls("impl A {\n")


class Cli(unittest.TestCase):
    def run_on(self, files, *args):
        with tempfile.TemporaryDirectory() as root:
            for rel, text in files.items():
                path = pathlib.Path(root, rel)
                path.parent.mkdir(parents=True, exist_ok=True)
                path.write_text(textwrap.dedent(text))
            out, err = io.StringIO(), io.StringIO()
            with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
                code = sizes.main(["--root", root, *args])
            return code, out.getvalue(), err.getvalue()

    FILES = {
        # 7 lines, tests aside: the test module's 4 do not count.
        "crates/a/src/lib.rs": "mod big;\nmod small;\nimpl A {\n\n\n}\n#[cfg(test)]\nmod tests {\nimpl T {}\n}\nfn x() {}\n",
        # 9 lines with an impl of 6; its test file is not counted.
        "crates/a/src/big.rs": "impl B {\n\n\n\n\n}\nfn y() {}\n#[cfg(test)]\nmod tests;\n",
        "crates/a/src/big/tests.rs": "impl InTests {\n\n\n\n\n\n\n\n\n\n}\n",
        # A test module's folder: its files are tests too.
        "crates/a/src/small.rs": "#[cfg(test)]\nmod tests;\n",
        "crates/a/src/small/tests/mod.rs": "mod deep;\n",
        "crates/a/src/small/tests/deep.rs": "\n" * 50,
        "crates/a/tests/t.rs": "impl InTestsFolder {\n\n\n\n\n\n\n\n\n\n}\n",
        "crates/b/src/lib.rs": "impl C {\n\n\n\n\n\n\n\n}\n",
    }

    def test_lists_longest_impls_then_files_tests_aside(self):
        code, out, _ = self.run_on(self.FILES, "--crate", "a", "--top", "2")
        self.assertEqual(code, 0)
        self.assertEqual(
            out.splitlines(),
            [
                "    6  crates/a/src/big.rs:1  impl B",
                "    4  crates/a/src/lib.rs:3  impl A",
                "    9  crates/a/src/big.rs  file",
                "    7  crates/a/src/lib.rs  file",
            ],
        )

    def test_by_type_sums_every_impl_of_a_type_over_its_files(self):
        files = {
            "crates/a/src/lib.rs": "mod more;\nimpl<'a> W<'a> {\n\n}\nimpl fmt::Display for W<'_> {\n}\nimpl V {}\n",
            "crates/a/src/more.rs": "impl W<'_> {\n\n\n}\n#[cfg(test)]\nmod tests {\nimpl W {\n}\n}\n",
        }
        code, out, _ = self.run_on(files, "--by-type")
        self.assertEqual(code, 0)
        self.assertEqual(
            out.splitlines(),
            [
                "    9  a::W  (2 file(s): crates/a/src/lib.rs, crates/a/src/more.rs)",
                "    1  a::V  (1 file(s): crates/a/src/lib.rs)",
            ],
        )

    def test_every_crate_by_default(self):
        code, out, _ = self.run_on(self.FILES, "--top", "1")
        self.assertEqual(code, 0)
        self.assertEqual(out.splitlines()[0], "    9  crates/b/src/lib.rs:1  impl C")

    def test_max_impl_fails_listing_every_longer_impl(self):
        code, out, err = self.run_on(self.FILES, "--max-impl", "3")
        self.assertEqual(code, 1)
        self.assertEqual(
            out.splitlines(),
            [
                "    9  crates/b/src/lib.rs:1  impl C",
                "    6  crates/a/src/big.rs:1  impl B",
                "    4  crates/a/src/lib.rs:3  impl A",
            ],
        )
        self.assertIn("3 impl block(s) longer than 3 lines", err)
        code, _, _ = self.run_on(self.FILES, "--crate", "a", "--max-impl", "6")
        self.assertEqual(code, 0)

    def test_max_file_fails_on_a_longer_file_and_both_limits_apply(self):
        code, out, err = self.run_on(self.FILES, "--crate", "a", "--max-impl", "6", "--max-file", "8")
        self.assertEqual(code, 1)
        self.assertIn("    9  crates/a/src/big.rs  file", out.splitlines())
        self.assertIn("1 file(s) longer than 8 lines", err)
        code, _, _ = self.run_on(self.FILES, "--crate", "a", "--max-impl", "6", "--max-file", "9")
        self.assertEqual(code, 0)

    def test_an_unknown_crate_is_an_error(self):
        code, _, err = self.run_on(self.FILES, "--crate", "nope")
        self.assertEqual(code, 2)
        self.assertIn("no crate at crates/nope/src", err)


if __name__ == "__main__":
    unittest.main()
