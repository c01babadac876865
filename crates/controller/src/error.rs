//! The controller's error type.

/// Errors of the controller's Kubernetes I/O. None of them ends the process: the control loop
/// counts them (by [`Error::metric_label`]), logs them and retries with backoff.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A Kubernetes API call failed.
    #[error("{action}: {source}")]
    Kube {
        /// What was being done, e.g. "replace ConfigMap kube-system/coredns".
        action: String,
        /// The client's error.
        #[source]
        source: kube::Error,
    },
    /// A write went to a namespace that does not exist (the server's 404 names the
    /// namespace, not the object): retrying cannot help until someone creates it.
    #[error(
        "{action}: namespace {namespace:?} does not exist; create it, or point hairpin at an existing namespace"
    )]
    NamespaceMissing {
        /// What was being done.
        action: String,
        /// The missing namespace.
        namespace: String,
        /// The client's error.
        #[source]
        source: kube::Error,
    },
    /// The CoreDNS configuration could not be edited (the editor refused it).
    #[error("cannot edit {config_map} key {key}: {source}")]
    DnsEdit {
        /// `namespace/name` of the ConfigMap.
        config_map: String,
        /// The key being edited.
        key: String,
        /// Why the editor refused (its message escapes what it quotes).
        #[source]
        source: hairpin_planner::dns::DnsEditError,
    },
    /// A write kept conflicting with other writers after every retry.
    #[error("{action}: still conflicting after {attempts} attempts")]
    ConflictRetriesExhausted {
        /// What was being written.
        action: String,
        /// How many attempts were made.
        attempts: u32,
    },
    /// An object hairpin would write is there already without hairpin's marks (the
    /// managed-by label AND hairpin's annotation): it belongs to someone else and is left
    /// as it is. Retrying cannot help until it is renamed or removed by its owner.
    #[error(
        "{kind} {object} exists and is not hairpin's (it lacks the label {label}=hairpin or the annotation {annotation}); hairpin leaves it alone: rename or remove it, or point hairpin at another name"
    )]
    NotOwned {
        /// The kind, e.g. `Service`.
        kind: &'static str,
        /// `namespace/name`.
        object: String,
        /// The label hairpin requires.
        label: &'static str,
        /// The annotation hairpin requires.
        annotation: String,
    },
    /// JSON encoding failed (a bug, reported rather than panicking).
    #[error("cannot encode {what}: {source}")]
    Encode {
        /// What was being encoded.
        what: &'static str,
        /// The encoder's error.
        #[source]
        source: serde_json::Error,
    },
    /// A one-shot read of the cluster (`hairpin plan`) could not list what it needs.
    #[error("cannot read the cluster: {0}")]
    Read(String),
    /// A write the API server accepted but its answer does not hold (read back).
    #[error("{0}: the API server's answer does not hold the change")]
    NotApplied(String),
    /// The Kubernetes client could not be configured (kubeconfig, context, in-cluster env).
    #[error("cannot configure the Kubernetes client: {0}")]
    Config(String),
}

impl Error {
    /// Wraps a client error with what was being done (a missing namespace becomes
    /// [`Error::NamespaceMissing`]).
    pub fn kube(action: impl Into<String>, source: kube::Error) -> Self {
        let action = action.into();
        match missing_namespace(&source) {
            Some(namespace) => Error::NamespaceMissing {
                action,
                namespace: namespace.to_owned(),
                source,
            },
            None => Error::Kube { action, source },
        }
    }

    /// A short, bounded label for the `errors_total{kind}` metric.
    pub fn metric_label(&self) -> &'static str {
        match self {
            Error::Kube { source, .. } => kube_error_label(source),
            Error::NamespaceMissing { .. } => "namespace_missing",
            Error::DnsEdit { .. } => "dns_edit",
            Error::NotOwned { .. } => "not_owned",
            Error::ConflictRetriesExhausted { .. } => "conflict_retries_exhausted",
            Error::Encode { .. } => "encode",
            Error::Config(_) => "config",
            Error::Read(_) => "read",
            Error::NotApplied(_) => "not_applied",
        }
    }

    /// The API status code, when the server answered with an error status.
    pub fn status_code(&self) -> Option<u16> {
        match self {
            Error::Kube {
                source: kube::Error::Api(status),
                ..
            }
            | Error::NamespaceMissing {
                source: kube::Error::Api(status),
                ..
            } => Some(status.code),
            _ => None,
        }
    }
}

/// A bounded label for a client error: by HTTP status class, or the transport failure.
pub(crate) fn kube_error_label(error: &kube::Error) -> &'static str {
    match error {
        kube::Error::Api(status) => match status.code {
            401 => "api_unauthorized",
            403 => "api_forbidden",
            404 => "api_not_found",
            409 => "api_conflict",
            410 => "api_gone",
            422 => "api_invalid",
            429 => "api_throttled",
            500..=599 => "api_server_error",
            _ => "api_other",
        },
        kube::Error::HyperError(_) | kube::Error::Service(_) => "api_transport",
        kube::Error::SerdeError(_) => "api_decode",
        _ => "api_client",
    }
}

/// True when the error is the server's 404 NotFound for the object itself (not for its
/// namespace: see [`missing_namespace`]).
pub(crate) fn is_not_found(error: &kube::Error) -> bool {
    matches!(error, kube::Error::Api(status) if status.code == 404)
        && missing_namespace(error).is_none()
}

/// The namespace a create was refused for because it does not exist: the server answers 404
/// with `details.kind: namespaces` and the namespace as `details.name`.
pub(crate) fn missing_namespace(error: &kube::Error) -> Option<&str> {
    let kube::Error::Api(status) = error else {
        return None;
    };
    let details = status.details.as_ref()?;
    (status.code == 404 && details.kind == "namespaces" && details.group.is_empty())
        .then_some(details.name.as_str())
}

/// True when the error is the server's 409 (Conflict or AlreadyExists).
pub(crate) fn is_conflict(error: &kube::Error) -> bool {
    matches!(error, kube::Error::Api(status) if status.code == 409)
}
