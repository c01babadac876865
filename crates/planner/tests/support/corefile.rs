//! Shared by the Corefile placement tests: two hairpin Services with their ClusterIPs, golden
//! files, and reading hairpin's marked blocks by plain line filtering (independent of the
//! editor under test).

use std::collections::BTreeMap;
use std::fs;
use std::net::IpAddr;
use std::path::{Path, PathBuf};

use hairpin_planner::corefile::PlaceOptions;

/// A hairpin Service with an IPv4 ClusterIP.
pub const LB1: &str = "hairpin-lb-1.hairpin.svc.cluster.local";
/// A hairpin Service with an IPv4 and an IPv6 ClusterIP.
pub const LB2: &str = "hairpin-lb-2.hairpin.svc.cluster.local";

/// `tests/golden/<sub>`.
pub fn golden_dir(sub: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/golden")
        .join(sub)
}

/// The files in `dir` that `keep` takes, as (file stem, text), sorted.
pub fn read_fixtures(dir: &Path, keep: impl Fn(&Path) -> bool) -> Vec<(String, String)> {
    let mut out: Vec<(String, String)> = fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| keep(p))
        .map(|p| {
            let stem = p.file_stem().unwrap().to_string_lossy().into_owned();
            (stem, fs::read_to_string(&p).unwrap())
        })
        .collect();
    out.sort();
    out
}

/// Compares `actual` with the file at `path`; `HAIRPIN_BLESS=1` rewrites the file instead.
pub fn check_golden(path: &Path, actual: &str) {
    if hairpin_testkit::golden::blessing() {
        hairpin_testkit::golden::bless(path, actual);
        return;
    }
    let expected = fs::read_to_string(path)
        .unwrap_or_else(|e| panic!("{}: {e}; run with HAIRPIN_BLESS=1", path.display()));
    assert_eq!(
        actual,
        expected,
        "{} differs from its golden file",
        path.display()
    );
}

/// The ClusterIPs of [`LB1`] and [`LB2`].
pub fn addresses() -> BTreeMap<String, Vec<IpAddr>> {
    BTreeMap::from([
        (LB1.to_owned(), vec!["10.96.0.20".parse().unwrap()]),
        (
            LB2.to_owned(),
            vec!["10.96.0.21".parse().unwrap(), "fd00::21".parse().unwrap()],
        ),
    ])
}

/// Placement options knowing [`addresses`].
pub fn opts() -> PlaceOptions {
    PlaceOptions {
        addresses: addresses(),
        ..PlaceOptions::default()
    }
}

/// The text without its marked blocks.
pub fn strip_blocks(text: &str) -> String {
    let mut out = String::new();
    let mut inside = false;
    for line in text.split_inclusive('\n') {
        let t = line.trim();
        if t.starts_with("# BEGIN hairpin") {
            inside = true;
        } else if t.starts_with("# END hairpin") {
            inside = false;
        } else if !inside {
            out.push_str(line);
        }
    }
    out
}

/// The marked blocks' lines, trimmed, markers left out.
pub fn block_lines(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut inside = false;
    for line in text.lines() {
        let t = line.trim();
        if t.starts_with("# BEGIN hairpin") {
            inside = true;
        } else if t.starts_with("# END hairpin") {
            inside = false;
        } else if inside {
            out.push(t.to_owned());
        }
    }
    out
}
