//! In-place editing of one hosts file.

use std::io::{Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};

use hairpin_planner::hosts::{self, HostsEntry};

use crate::AgentError;

/// Larger than any real hosts file; a bigger one is more likely a wrong path than a hosts file.
pub const MAX_HOSTS_FILE_BYTES: usize = 4 << 20;

/// What a sync did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SyncOutcome {
    /// The file already held the block.
    Unchanged,
    /// The file was rewritten and verified.
    Written {
        /// Bytes before.
        old_len: usize,
        /// Bytes after.
        new_len: usize,
    },
}

/// A hosts file edited in place.
#[derive(Debug, Clone)]
pub struct HostsFile {
    path: PathBuf,
}

impl HostsFile {
    /// The hosts file at `path` (not opened yet).
    pub fn new(path: impl Into<PathBuf>) -> Self {
        Self { path: path.into() }
    }

    /// The file's path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Makes the hairpin block hold exactly `entries` (none: no block).
    ///
    /// # Errors
    /// A clear [`AgentError`]; the file is unchanged unless the error is [`AgentError::Verify`]
    /// or a failed write.
    pub fn sync(&self, entries: &[HostsEntry]) -> Result<SyncOutcome, AgentError> {
        self.edit(|text| hosts::apply(text, entries))
    }

    /// Removes the hairpin block, restoring the file as it was before the agent wrote it.
    ///
    /// # Errors
    /// As [`HostsFile::sync`].
    pub fn remove(&self) -> Result<SyncOutcome, AgentError> {
        self.edit(hosts::remove)
    }

    fn edit(
        &self,
        change: impl FnOnce(&str) -> Result<hairpin_planner::markers::Edit, hosts::HostsError>,
    ) -> Result<SyncOutcome, AgentError> {
        let path = &self.path;
        // Opening for writing up front turns a read-only mount or missing permission into an
        // error before anything is computed, and keeps one inode for read and write.
        let mut file = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open(path)
            .map_err(|source| AgentError::Open {
                path: path.clone(),
                source,
            })?;
        let metadata = file.metadata().map_err(|source| AgentError::Read {
            path: path.clone(),
            source,
        })?;
        if !metadata.is_file() {
            return Err(AgentError::Malformed {
                path: path.clone(),
                reason: "not a regular file".into(),
            });
        }
        let current = read_all(&mut file, path)?;
        let text = validate(&current, path)?;
        let edit = change(text)?;
        for warning in &edit.warnings {
            // It may quote a line of the hosts file: control characters escaped.
            let warning = hairpin_planner::escape::controls(&warning.to_string()).into_owned();
            tracing::warn!(path = %path.display(), %warning, "hosts file");
        }
        if !edit.changed {
            return Ok(SyncOutcome::Unchanged);
        }
        let write_err = |source| AgentError::Write {
            path: path.clone(),
            source,
        };
        // Write first, then cut: the file is never shorter than its new content, so a crash
        // cannot lose lines outside the block (at worst old bytes linger after the new end).
        file.seek(SeekFrom::Start(0)).map_err(write_err)?;
        file.write_all(edit.text.as_bytes()).map_err(write_err)?;
        file.set_len(edit.text.len() as u64).map_err(write_err)?;
        file.sync_data().map_err(write_err)?;
        drop(file);

        let written = std::fs::read(path).map_err(|source| AgentError::Read {
            path: path.clone(),
            source,
        })?;
        if written != edit.text.as_bytes() {
            return Err(AgentError::Verify { path: path.clone() });
        }
        Ok(SyncOutcome::Written {
            old_len: current.len(),
            new_len: edit.text.len(),
        })
    }
}

fn read_all(file: &mut std::fs::File, path: &Path) -> Result<Vec<u8>, AgentError> {
    let mut buf = Vec::new();
    Read::by_ref(file)
        .take(MAX_HOSTS_FILE_BYTES as u64 + 1)
        .read_to_end(&mut buf)
        .map_err(|source| AgentError::Read {
            path: path.to_owned(),
            source,
        })?;
    Ok(buf)
}

fn validate<'a>(bytes: &'a [u8], path: &Path) -> Result<&'a str, AgentError> {
    let malformed = |reason: String| AgentError::Malformed {
        path: path.to_owned(),
        reason,
    };
    if bytes.len() > MAX_HOSTS_FILE_BYTES {
        return Err(malformed(format!(
            "larger than {} MiB: is this really a hosts file?",
            MAX_HOSTS_FILE_BYTES >> 20
        )));
    }
    if let Some(at) = bytes.iter().position(|b| *b == 0) {
        return Err(malformed(format!(
            "contains a NUL byte at offset {at}: binary, not a hosts file"
        )));
    }
    std::str::from_utf8(bytes).map_err(|err| {
        malformed(format!(
            "not valid UTF-8 at byte {}: the agent only edits text files it can keep byte-identical",
            err.valid_up_to()
        ))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const ORIGINAL: &str =
        "127.0.0.1\tlocalhost\n::1\tlocalhost ip6-localhost\n# a comment\n10.0.0.5 node-1\n";

    fn entries(ip: &str, names: &[&str]) -> Vec<HostsEntry> {
        vec![HostsEntry::new(ip.parse().unwrap(), names.iter().copied())]
    }

    #[test]
    fn sync_writes_in_place_and_remove_restores_the_original() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("hosts");
        std::fs::write(&path, ORIGINAL).unwrap();
        let inode = std::os::unix::fs::MetadataExt::ino(&std::fs::metadata(&path).unwrap());
        let file = HostsFile::new(&path);

        let outcome = file
            .sync(&entries(
                "10.96.0.20",
                &["shop.example.com", "api.example.com"],
            ))
            .unwrap();
        assert!(
            matches!(outcome, SyncOutcome::Written { .. }),
            "{outcome:?}"
        );
        let text = std::fs::read_to_string(&path).unwrap();
        assert!(text.starts_with(ORIGINAL), "{text}");
        assert!(
            text.contains("10.96.0.20\tapi.example.com shop.example.com\n"),
            "{text}"
        );
        // Same inode: written in place, not renamed over (a bind mount would keep the old file).
        assert_eq!(
            std::os::unix::fs::MetadataExt::ino(&std::fs::metadata(&path).unwrap()),
            inode
        );

        assert_eq!(
            file.sync(&entries(
                "10.96.0.20",
                &["api.example.com", "shop.example.com"]
            ))
            .unwrap(),
            SyncOutcome::Unchanged
        );

        // A shorter block: the file is truncated to the new length.
        file.sync(&entries("10.96.0.21", &["a.example.com"]))
            .unwrap();
        let text = std::fs::read_to_string(&path).unwrap();
        assert!(
            text.ends_with("10.96.0.21\ta.example.com\n# END hairpin\n"),
            "{text}"
        );
        assert!(!text.contains("shop.example.com"));

        // Lines added by someone else after our block survive the next sync.
        std::fs::write(&path, format!("{text}192.0.2.1 added-later\n")).unwrap();
        file.sync(&entries("10.96.0.22", &["a.example.com"]))
            .unwrap();
        assert!(
            std::fs::read_to_string(&path)
                .unwrap()
                .contains("192.0.2.1 added-later\n")
        );

        file.remove().unwrap();
        assert_eq!(
            std::fs::read_to_string(&path).unwrap(),
            format!("{ORIGINAL}192.0.2.1 added-later\n")
        );
        assert_eq!(file.remove().unwrap(), SyncOutcome::Unchanged);
    }

    #[test]
    fn empty_entries_remove_the_block() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("hosts");
        std::fs::write(&path, ORIGINAL).unwrap();
        let file = HostsFile::new(&path);
        file.sync(&entries("10.96.0.20", &["shop.example.com"]))
            .unwrap();
        file.sync(&[]).unwrap();
        assert_eq!(std::fs::read_to_string(&path).unwrap(), ORIGINAL);
    }

    #[test]
    fn malformed_files_are_left_alone_with_a_clear_error() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("hosts");
        for (content, needle) in [
            (
                b"127.0.0.1 localhost\n\xff\xfe\n".to_vec(),
                "not valid UTF-8",
            ),
            (b"127.0.0.1 localhost\n\0\0\0".to_vec(), "NUL byte"),
        ] {
            std::fs::write(&path, &content).unwrap();
            let err = HostsFile::new(&path)
                .sync(&entries("10.96.0.20", &["a.example.com"]))
                .unwrap_err();
            assert!(err.to_string().contains(needle), "{err}");
            assert_eq!(err.metric_label(), "malformed");
            assert_eq!(
                std::fs::read(&path).unwrap(),
                content,
                "the file must be unchanged"
            );
        }
        let err = HostsFile::new(dir.path()).sync(&[]).unwrap_err();
        assert!(
            matches!(err, AgentError::Open { .. } | AgentError::Malformed { .. }),
            "{err}"
        );
    }

    #[test]
    fn invalid_entries_leave_the_file_unchanged() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("hosts");
        std::fs::write(&path, ORIGINAL).unwrap();
        let err = HostsFile::new(&path)
            .sync(&entries("10.96.0.20", &["*.example.com"]))
            .unwrap_err();
        assert!(err.to_string().contains("wildcards"), "{err}");
        assert_eq!(std::fs::read_to_string(&path).unwrap(), ORIGINAL);
    }

    #[test]
    fn a_stray_begin_marker_leaves_the_users_lines_alone() {
        // Before: the entry-like lines after a stray `# BEGIN hairpin` were taken for the
        // remains of hairpin's block and deleted on the next sync.
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("hosts");
        let text = format!("{ORIGINAL}# BEGIN hairpin\n10.0.0.7\tmine.example.com\n");
        std::fs::write(&path, &text).unwrap();
        let hosts = HostsFile::new(&path);
        for err in [
            hosts
                .sync(&entries("10.96.0.20", &["a.example.com"]))
                .unwrap_err(),
            hosts.remove().unwrap_err(),
        ] {
            let shown = err.to_string();
            assert!(shown.contains("line 5: # BEGIN hairpin"), "{shown}");
            assert!(shown.contains("fixed by hand"), "{shown}");
        }
        assert_eq!(std::fs::read_to_string(&path).unwrap(), text);
    }

    #[test]
    fn a_missing_file_is_a_clear_error_and_is_not_created() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("absent");
        let err = HostsFile::new(&path)
            .sync(&entries("10.96.0.20", &["a.example.com"]))
            .unwrap_err();
        assert!(err.to_string().contains("hostPath of type File"), "{err}");
        assert!(!path.exists());
    }

    fn running_as_root() -> bool {
        std::fs::read_to_string("/proc/self/status").is_ok_and(|status| {
            status
                .lines()
                .find_map(|line| line.strip_prefix("Uid:"))
                .and_then(|ids| ids.split_whitespace().nth(1))
                == Some("0")
        })
    }

    #[test]
    fn an_unwritable_file_is_a_clear_error() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("hosts");
        std::fs::write(&path, ORIGINAL).unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o444)).unwrap();
        let result = HostsFile::new(&path).sync(&entries("10.96.0.20", &["a.example.com"]));
        if running_as_root() {
            // Root bypasses file modes (DAC_OVERRIDE): the write succeeds, as the agent relies on.
            assert!(result.is_ok(), "{result:?}");
        } else {
            let err = result.unwrap_err();
            assert!(err.to_string().contains("CAP_DAC_OVERRIDE"), "{err}");
            assert_eq!(std::fs::read_to_string(&path).unwrap(), ORIGINAL);
        }
    }
}
