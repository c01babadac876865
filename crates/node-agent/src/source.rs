//! Where the agent learns the entries: a file of `{ip, hostnames}` items (JSON or YAML), polled
//! for changes.

use std::net::IpAddr;
use std::path::{Path, PathBuf};

use hairpin_planner::hosts::HostsEntry;
use serde::Deserialize;

use crate::AgentError;

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawEntry {
    ip: String,
    hostnames: Vec<String>,
}

/// Parses a list of entries:
///
/// ```yaml
/// - ip: 10.96.0.20
///   hostnames: [shop.example.com, api.example.com]
/// ```
///
/// JSON (`[{"ip": "10.96.0.20", "hostnames": ["shop.example.com"]}]`) is read the same way.
///
/// # Errors
/// A message naming the problem (syntax, unknown field, bad address).
pub fn parse_entries(text: &str) -> Result<Vec<HostsEntry>, String> {
    if text.trim().is_empty() {
        return Ok(Vec::new());
    }
    let raw: Vec<RawEntry> = serde_saphyr::from_str(text).map_err(|err| {
        format!("expected a list of {{ip, hostnames}} entries (JSON or YAML): {err}")
    })?;
    raw.into_iter()
        .enumerate()
        .map(|(i, entry)| {
            let ip: IpAddr = entry
                .ip
                .trim()
                .parse()
                .map_err(|_| format!("entry {}: {:?} is not an IP address", i + 1, entry.ip))?;
            Ok(HostsEntry::new(ip, entry.hostnames))
        })
        .collect()
}

/// Where the agent gets the entries from.
pub trait EntrySource: Send + Sync + std::fmt::Debug {
    /// The entries the block must hold now.
    ///
    /// # Errors
    /// [`AgentError::Source`] when they cannot be known (the block is then left as it is).
    fn entries(&self) -> Result<Vec<HostsEntry>, AgentError>;
}

impl EntrySource for SourceFile {
    fn entries(&self) -> Result<Vec<HostsEntry>, AgentError> {
        self.load()
    }
}

/// A file of entries, re-read on every poll.
#[derive(Debug, Clone)]
pub struct SourceFile {
    path: PathBuf,
}

impl SourceFile {
    /// The file at `path`.
    pub fn new(path: impl Into<PathBuf>) -> Self {
        Self { path: path.into() }
    }

    /// The file's path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Reads and parses the file.
    ///
    /// # Errors
    /// [`AgentError::Source`] naming the file and the problem.
    pub fn load(&self) -> Result<Vec<HostsEntry>, AgentError> {
        let text = std::fs::read_to_string(&self.path).map_err(|err| AgentError::Source {
            path: self.path.clone(),
            reason: err.to_string(),
        })?;
        parse_entries(&text).map_err(|reason| AgentError::Source {
            path: self.path.clone(),
            reason,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn yaml_and_json_lists_parse() {
        let yaml = "- ip: 10.96.0.20\n  hostnames: [shop.example.com, api.example.com]\n- ip: fd00::20\n  hostnames:\n    - shop.example.com\n";
        let entries = parse_entries(yaml).unwrap();
        assert_eq!(entries.len(), 2);
        assert_eq!(entries[0].ip, "10.96.0.20".parse::<IpAddr>().unwrap());
        assert_eq!(entries[1].names, vec!["shop.example.com"]);
        let json = r#"[{"ip": "10.96.0.21", "hostnames": ["a.example.com"]}]"#;
        assert_eq!(parse_entries(json).unwrap()[0].names, vec!["a.example.com"]);
        assert!(parse_entries("").unwrap().is_empty());
        assert!(parse_entries("[]").unwrap().is_empty());
    }

    #[test]
    fn bad_sources_get_clear_errors() {
        let err = parse_entries("- ip: not-an-ip\n  hostnames: [a.example.com]\n").unwrap_err();
        assert!(
            err.contains("entry 1") && err.contains("not an IP address"),
            "{err}"
        );
        let err = parse_entries("- ip: 10.0.0.1\n  names: [a]\n").unwrap_err();
        assert!(err.contains("{ip, hostnames}"), "{err}");
        let err = parse_entries("{ this is: [not").unwrap_err();
        assert!(err.contains("expected a list"), "{err}");
        let missing = SourceFile::new("/nonexistent/hairpin-entries.yaml")
            .load()
            .unwrap_err();
        assert!(
            missing
                .to_string()
                .contains("/nonexistent/hairpin-entries.yaml"),
            "{missing}"
        );
    }
}
