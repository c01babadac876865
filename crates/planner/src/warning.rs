//! Warnings: things the operator should know about that do not stop the plan.

use serde::Serialize;

/// A warning about one object (or the cluster as a whole).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Serialize)]
pub struct Warning {
    /// What it is about, e.g. `Service ingress-nginx/ingress-nginx-controller`.
    pub subject: String,
    /// What is wrong and, where we know it, how to fix it.
    pub message: String,
}

impl Warning {
    /// Builds a warning.
    pub fn new(subject: impl Into<String>, message: impl Into<String>) -> Self {
        Self {
            subject: subject.into(),
            message: message.into(),
        }
    }
}

impl std::fmt::Display for Warning {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}", self.subject, self.message)
    }
}
