//! Keeps a marked block of hairpin hostnames in a node's hosts file.
//!
//! The hosts file is usually a bind mount (`hostPath` of `/etc/hosts`, type `File`), so it is
//! rewritten in place — read, compute, write at offset 0, truncate to the new length, re-read
//! and compare — and never replaced by a rename, which would detach the mount from the node's
//! file. The block's content comes from the planner's hosts editor; every line outside it stays
//! byte-identical.
//!
//! In a cluster the entries are the hosts block the controller publishes in one ConfigMap
//! ([`ConfigMapSource`]); the agent watches that object only.
#![forbid(unsafe_code)]

mod agent;
mod configmap_source;
mod hostsfile;
mod source;

// One path per type: the modules are private, their public items are here.
pub use agent::{Agent, AgentOptions};
pub use configmap_source::ConfigMapSource;
pub use hostsfile::{HostsFile, MAX_HOSTS_FILE_BYTES, SyncOutcome};
pub use source::{EntrySource, SourceFile, parse_entries};

use std::path::PathBuf;

/// Errors of the node agent. When one is returned the hosts file is as it was.
#[derive(Debug, thiserror::Error)]
pub enum AgentError {
    /// The hosts file cannot be opened for reading and writing.
    #[error("cannot open hosts file {path} for reading and writing: {source}{hint}", hint = access_hint(source))]
    Open {
        /// The file.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// Reading the hosts file failed.
    #[error("cannot read hosts file {path}: {source}")]
    Read {
        /// The file.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// The hosts file does not look like a hosts file; it is left alone.
    #[error("hosts file {path} is malformed ({reason}); it was left unchanged")]
    Malformed {
        /// The file.
        path: PathBuf,
        /// What is wrong.
        reason: String,
    },
    /// The planned entries cannot be written (invalid hostname, conflicting addresses), or
    /// the file's hairpin markers are damaged (the file is left unchanged).
    #[error("cannot write the hosts block: {0}")]
    Entries(#[from] hairpin_planner::hosts::HostsError),
    /// Writing failed.
    #[error("cannot write hosts file {path}: {source}")]
    Write {
        /// The file.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// The file read back differs from what was written (a concurrent writer, or a short write).
    #[error(
        "hosts file {path} does not hold what was written (another process changed it at the same time?); will retry"
    )]
    Verify {
        /// The file.
        path: PathBuf,
    },
    /// The entries source cannot be read or parsed.
    #[error("cannot read entries from {path}: {reason}")]
    Source {
        /// The source file.
        path: PathBuf,
        /// Why.
        reason: String,
    },
}

impl AgentError {
    /// A short label for metrics and logs.
    pub fn metric_label(&self) -> &'static str {
        match self {
            AgentError::Open { .. } => "open",
            AgentError::Read { .. } => "read",
            AgentError::Malformed { .. } => "malformed",
            AgentError::Entries(_) => "entries",
            AgentError::Write { .. } => "write",
            AgentError::Verify { .. } => "verify",
            AgentError::Source { .. } => "source",
        }
    }
}

fn access_hint(err: &std::io::Error) -> &'static str {
    match err.kind() {
        std::io::ErrorKind::PermissionDenied => {
            " (the agent needs root or CAP_DAC_OVERRIDE, and a writable hostPath mount)"
        }
        std::io::ErrorKind::ReadOnlyFilesystem => " (the mount is read-only)",
        std::io::ErrorKind::NotFound => {
            " (mount the node's /etc/hosts with a hostPath of type File)"
        }
        _ => "",
    }
}
