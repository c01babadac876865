//! A change to one key of a DNS ConfigMap, as data: set a value, write the planner's blocks
//! into a Corefile ([`crate::WriteEdit::Blocks`]), or remove hairpin's block. The controller
//! applies it to the key's text read just before each write attempt, and `hairpin plan` to the
//! cached text, both with [`apply`]: nothing outside the planner parses a Corefile.

use crate::coredns::WriteEdit;
use crate::corefile::{self, BlockInsert, CorefileError};

/// What to make of one ConfigMap key, whatever it holds when the write is made.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum KeyChange {
    /// The whole key is hairpin's: set it to this value, or remove it when `None`.
    Set(Option<String>),
    /// The planner's DNS write into a Corefile: exactly these marked blocks, in these server
    /// blocks ([`corefile::write_blocks`]), every other byte kept as read.
    Blocks(Vec<BlockInsert>),
    /// Remove hairpin's blocks from a Corefile, leaving every other byte as it was (no key: no
    /// change).
    RemoveBlock,
}

impl From<&WriteEdit> for KeyChange {
    fn from(edit: &WriteEdit) -> Self {
        match edit {
            WriteEdit::Key { value } => KeyChange::Set(value.clone()),
            WriteEdit::Blocks { inserts } => KeyChange::Blocks(inserts.clone()),
        }
    }
}

/// Why a [`KeyChange`] cannot be applied to a key's current text. The message is one line
/// whose quoted text is escaped already (the Corefile editor's): printed as it is.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum DnsEditError {
    /// Blocks are to be written into a Corefile key the ConfigMap does not have.
    #[error("the ConfigMap has no Corefile key")]
    NoCorefile,
    /// The Corefile editor refused the text (damaged markers, a Corefile it cannot read).
    #[error(transparent)]
    Corefile(#[from] CorefileError),
}

/// The key's new value after `change`, from its `current` one (`None`: the key is absent);
/// `Ok(None)` removes the key.
///
/// # Errors
/// [`DnsEditError::NoCorefile`] for blocks into an absent key; the Corefile editor's error for
/// a Corefile it refuses.
pub fn apply(change: &KeyChange, current: Option<&str>) -> Result<Option<String>, DnsEditError> {
    match change {
        KeyChange::Set(value) => Ok(value.clone()),
        KeyChange::Blocks(inserts) => {
            let current = current.ok_or(DnsEditError::NoCorefile)?;
            Ok(Some(corefile::write_blocks(current, inserts)?.text))
        }
        KeyChange::RemoveBlock => match current {
            None => Ok(None),
            Some(text) => Ok(Some(corefile::remove(text)?.text)),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::corefile::{DnsEntry, PlaceOptions};

    const KUBEADM: &str = ".:53 {\n    errors\n    kubernetes cluster.local in-addr.arpa ip6.arpa\n    forward . /etc/resolv.conf\n    reload\n}\n";

    #[test]
    fn each_change_gives_the_keys_new_value_from_the_current_one() {
        let set = KeyChange::Set(Some("x".into()));
        assert_eq!(apply(&set, Some("old")).unwrap().as_deref(), Some("x"));
        assert_eq!(apply(&KeyChange::Set(None), Some("old")).unwrap(), None);

        let entries = [DnsEntry::new("shop.example.com", "lb.hairpin.svc.cluster.local").unwrap()];
        let placed = corefile::place(KUBEADM, &entries, &PlaceOptions::default()).unwrap();
        let blocks = KeyChange::Blocks(placed.inserts);
        let written = apply(&blocks, Some(KUBEADM)).unwrap().unwrap();
        assert!(written.contains("shop.example.com"), "{written}");
        // Written again on its own output: nothing changes.
        assert_eq!(apply(&blocks, Some(&written)).unwrap().unwrap(), written);
        assert_eq!(apply(&blocks, None), Err(DnsEditError::NoCorefile));

        let removed = apply(&KeyChange::RemoveBlock, Some(&written)).unwrap();
        assert_eq!(removed.as_deref(), Some(KUBEADM));
        assert_eq!(apply(&KeyChange::RemoveBlock, None).unwrap(), None);
    }

    #[test]
    fn a_damaged_corefile_is_the_editors_typed_error() {
        let damaged = format!("{KUBEADM}{}\n", crate::markers::BEGIN_PREFIX);
        let err = apply(&KeyChange::RemoveBlock, Some(&damaged)).unwrap_err();
        assert!(matches!(err, DnsEditError::Corefile(_)), "{err:?}");
        assert!(!err.to_string().contains('\n'), "{err}");
    }
}
