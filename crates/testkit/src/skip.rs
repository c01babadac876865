//! Skips that cannot hide: every test that returns early without checking anything calls
//! [`skip`] with its name and the reason first.
//!
//! - Under CI (`CI=true` or `CI=1`, as `.ci/run` sets it), a [`Cause::Missing`] skip (a peer,
//!   a privilege, a tool or a fixture the suite needs and CI provides) panics with what is
//!   missing and where it was looked for: a CI machine that lost `../shared` fails.
//! - A [`Cause::Machine`] skip (a property of this kernel or machine that a CI machine may
//!   legitimately lack, such as IPv6 on loopback) never fails.
//! - Every skip is written to stderr past the test harness's capture (a passing test's
//!   `println!` is hidden), and appended to the file named by `$HAIRPIN_TEST_SKIP_LOG` (one
//!   line per skip: cause, test, reason, tab-separated), from which `scripts/test.sh` prints
//!   how many tests skipped and why at the end of the run.

use std::io::Write as _;

/// The variable naming the file every skip is appended to (`scripts/test.sh` sets it).
pub const LOG_ENV: &str = "HAIRPIN_TEST_SKIP_LOG";

/// Why a test did not run.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Cause {
    /// A peer, privilege, tool or fixture that CI provides is absent: fails under CI.
    Missing,
    /// A property of this kernel or machine that CI may lack too: recorded, never fails.
    Machine,
}

impl Cause {
    /// The word in the skip log and the summary.
    pub fn label(self) -> &'static str {
        match self {
            Cause::Missing => "missing",
            Cause::Machine => "machine",
        }
    }
}

/// True when the `CI` variable says this is a CI run (`true` or `1`, any case).
pub fn under_ci() -> bool {
    is_ci(std::env::var("CI").ok().as_deref())
}

fn is_ci(value: Option<&str>) -> bool {
    value.is_some_and(|v| v.eq_ignore_ascii_case("true") || v == "1")
}

/// Records that `test` returns without checking anything, and why; the caller returns right
/// after. Panics instead under CI when `cause` is [`Cause::Missing`]. `reason` should name what
/// is missing and where it was looked for.
pub fn skip(test: &str, cause: Cause, reason: &str) {
    let reason = one_line(reason);
    let fails = cause == Cause::Missing && under_ci();
    if !fails {
        // Straight to the stream, past the harness's capture of print macros.
        let _ = writeln!(
            std::io::stderr(),
            "SKIPPED {test} ({}): {reason}",
            cause.label()
        );
    }
    record(test, cause, &reason);
    assert!(
        !fails,
        "{test}: {reason} (under CI=true a missing peer, privilege or fixture fails the test \
         instead of skipping it)"
    );
}

/// [`skip`] with `Cause::Missing` when `reason` is `Some`; true when the test must return.
pub fn missing(test: &str, reason: Option<String>) -> bool {
    match reason {
        Some(reason) => {
            skip(test, Cause::Missing, &reason);
            true
        }
        None => false,
    }
}

fn one_line(text: &str) -> String {
    text.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// Appends one line to the skip log, if one is named. One `write` of a short line to a file
/// opened for appending: lines from test processes running at once do not interleave.
fn record(test: &str, cause: Cause, reason: &str) {
    let Some(path) = std::env::var_os(LOG_ENV) else {
        return;
    };
    let line = format!("{}\t{}\t{reason}\n", cause.label(), one_line(test));
    let written = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(&path)
        .and_then(|mut file| file.write_all(line.as_bytes()));
    if let Err(err) = written {
        panic!(
            "{test}: cannot record the skip in {} (${LOG_ENV}): {err}",
            std::path::Path::new(&path).display()
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_line_keeps_tabs_and_newlines_out_of_the_log() {
        assert_eq!(one_line("a\tb\n  c\r\n"), "a b c");
    }

    #[test]
    fn ci_is_true_or_1() {
        for on in ["true", "TRUE", "True", "1"] {
            assert!(is_ci(Some(on)), "{on}");
        }
        for off in [None, Some(""), Some("0"), Some("false"), Some("yes")] {
            assert!(!is_ci(off), "{off:?}");
        }
    }
}
