//! Warnings: things the operator should know about that do not stop the plan.

use serde::Serialize;

use crate::escape;

/// A warning about one object (or the cluster as a whole).
///
/// Both fields are escaped when built ([`escape::text`]): they quote names and values from
/// cluster objects, and are printed as they are in every output (text, Events, logs).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Serialize)]
pub struct Warning {
    /// What it is about, e.g. `Service ingress-nginx/ingress-nginx-controller`.
    pub subject: String,
    /// What is wrong and, where we know it, how to fix it. One line, unless
    /// [`Warning::with_block`] added a block of configuration under it.
    pub message: String,
}

impl Warning {
    /// Builds a warning; `subject` and `message` are escaped into one line each.
    pub fn new(subject: impl AsRef<str>, message: impl AsRef<str>) -> Self {
        Self {
            subject: escape::text(subject.as_ref()).into_owned(),
            message: escape::text(message.as_ref()).into_owned(),
        }
    }

    /// A warning whose message is made of parts escaped already: an error's `Display` (which
    /// escapes what it quotes, as [`crate::corefile::CorefileError`]'s does), hairpin's own
    /// words, and values put in through [`escape::Text`]. `subject` is escaped as by
    /// [`Warning::new`]; `message` is only guarded by [`escape::controls`], which changes
    /// nothing in escaped text: nothing is escaped twice.
    pub fn escaped_message(subject: impl AsRef<str>, message: impl AsRef<str>) -> Self {
        Self {
            subject: escape::text(subject.as_ref()).into_owned(),
            message: escape::controls(message.as_ref()).into_owned(),
        }
    }

    /// Adds a block of several lines under the message (a server block to paste into a
    /// Corefile); each of its lines is escaped ([`escape::lines`]).
    #[must_use]
    pub fn with_block(mut self, block: &str) -> Self {
        self.message.push('\n');
        self.message.push_str(&escape::lines(block.trim_end()));
        self
    }
}

impl std::fmt::Display for Warning {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}", self.subject, self.message)
    }
}
