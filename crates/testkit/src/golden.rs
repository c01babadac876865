//! Golden files are written by the code under test (`HAIRPIN_BLESS=1`), so a rewrite must be
//! seen: [`bless`] prints the unified diff of every golden it changes, and [`blessing`] refuses
//! to bless under CI (`CI=true`), where a golden that differs from what the code renders fails
//! its test.

use std::io::Write as _;
use std::path::Path;

/// The variable that makes golden tests rewrite their files instead of comparing.
pub const BLESS_ENV: &str = "HAIRPIN_BLESS";

/// True when this run rewrites goldens (`HAIRPIN_BLESS=1`). Panics under CI: there the goldens
/// are compared, never written.
pub fn blessing() -> bool {
    let bless = std::env::var_os(BLESS_ENV).is_some_and(|v| v == "1");
    assert!(
        !(bless && crate::skip::under_ci()),
        "{BLESS_ENV}=1 under CI=true: CI compares goldens with what the code renders and never \
         rewrites them (bless on a developer machine and commit the reviewed diff)"
    );
    bless
}

/// Writes `actual` to `path` where it differs from the file, after printing the change as a
/// unified diff (`diff -u`) to stderr, past the test harness's capture, so that every rewritten
/// golden is reviewed in the run's output.
pub fn bless(path: &Path, actual: &str) {
    let old = std::fs::read_to_string(path).ok();
    if old.as_deref() == Some(actual) {
        return;
    }
    let diff = match &old {
        Some(_) => unified_diff(path, actual),
        None => format!("new golden {}:\n{actual}", path.display()),
    };
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir).unwrap_or_else(|e| panic!("create {}: {e}", dir.display()));
    }
    std::fs::write(path, actual).unwrap_or_else(|e| panic!("write {}: {e}", path.display()));
    let _ = writeln!(
        std::io::stderr(),
        "BLESSED {} (review this change before committing it):\n{diff}",
        path.display()
    );
}

/// `diff -u path <actual>`, or why it could not be made.
fn unified_diff(path: &Path, actual: &str) -> String {
    let run = || -> std::io::Result<String> {
        let dir = tempfile::tempdir()?;
        let new = dir.path().join("rendered");
        std::fs::write(&new, actual)?;
        let out = std::process::Command::new("diff")
            .arg("-u")
            .arg("--label")
            .arg(format!("{} (golden)", path.display()))
            .arg("--label")
            .arg(format!("{} (rendered)", path.display()))
            .arg(path)
            .arg(&new)
            .output()?;
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    };
    run().unwrap_or_else(|e| format!("(no diff: `diff -u` failed: {e})"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bless_writes_only_a_change_and_shows_it_as_a_diff() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("sub/x.golden");
        bless(&path, "a\nb\n");
        assert_eq!(std::fs::read_to_string(&path).unwrap(), "a\nb\n");
        let diff = unified_diff(&path, "a\nc\n");
        assert!(diff.contains("-b\n") && diff.contains("+c\n"), "{diff}");
        assert!(
            diff.contains("(golden)") && diff.contains("(rendered)"),
            "{diff}"
        );
        bless(&path, "a\nc\n");
        assert_eq!(std::fs::read_to_string(&path).unwrap(), "a\nc\n");
    }
}
