//! The planner's errors: why part of a plan cannot be made ([`crate::Plan::errors`]).
//!
//! Their fields hold what was read, as it was (unescaped). Their `Display` escapes each part
//! that comes from a cluster object or a flag once ([`crate::escape::text`]), so a message is
//! one line of printable text that every outlet prints as it is: the text plan, `-o json` (a
//! JSON string), the controller's condition messages, Events and logs. Metrics count them by
//! [`PlanError::metric_label`], never by their text.

use serde::{Serialize, Serializer};

use crate::corefile::CorefileError;
use crate::escape::Text;
use crate::snapshot::ObjectRef;

/// What [`PlanError::NoCorednsConfigMap`] adds on a kube-dns cluster.
const KUBE_DNS_HINT: &str = ": the cluster DNS is kube-dns, which has no Corefile; use --dns-mode external-dns, or kube-dns's stubDomains (the plan's `kube-dns stubDomains` part)";

/// A problem that stops part of the plan from being applied: nothing is written for that
/// part. Today every one is about the DNS change (the plan's `dns` is then `None`).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum PlanError {
    /// None of the configured CoreDNS ConfigMaps holds a Corefile.
    #[error(
        "no CoreDNS ConfigMap found (looked for {} in namespace {} with key {}); DNS is not planned{}",
        Text(&config_maps.join(", ")),
        Text(namespace),
        Text(key),
        if *kube_dns { KUBE_DNS_HINT } else { "" }
    )]
    NoCorednsConfigMap {
        /// The ConfigMaps looked for (`--coredns-configmap`), in order.
        config_maps: Vec<String>,
        /// Their namespace.
        namespace: String,
        /// The Corefile key looked for.
        key: String,
        /// The cluster DNS is kube-dns (no Corefile; its `stubDomains` alternative is planned).
        kube_dns: bool,
    },
    /// A key hairpin writes cannot be edited: its Corefile cannot be read, or the editor
    /// refuses to place hairpin's blocks in it.
    /// The editor's error escapes what it quotes itself: printed as it is.
    #[error(
        "ConfigMap {} key {}: {source}; nothing is written to it",
        Text(&config_map.to_string()),
        Text(key)
    )]
    Corefile {
        /// The ConfigMap.
        config_map: ObjectRef,
        /// The key.
        key: String,
        /// Why the editor refuses (boxed: it is large, and errors are rare).
        #[source]
        source: Box<CorefileError>,
    },
    /// With hairpin's rules in `key`, the ConfigMap's keys together would exceed the API
    /// server's limit for one object.
    #[error(
        "ConfigMap {}: with the hairpin rules in key {} its keys would hold {bytes} bytes together, over the {limit}-byte ConfigMap limit (the API server counts every key, not only {}); use wildcards or fewer hostnames, or make room in the other keys; nothing is written to it",
        Text(&config_map.to_string()),
        Text(key),
        Text(key)
    )]
    ConfigMapTooLarge {
        /// The ConfigMap.
        config_map: ObjectRef,
        /// The key hairpin writes.
        key: String,
        /// The size of every key together, hairpin's rules included.
        bytes: usize,
        /// The limit.
        limit: usize,
    },
}

impl PlanError {
    /// A short, stable label for metrics (the controller's `errors_total{kind}`): one per
    /// variant, and the editor's own label ([`CorefileError::metric_label`]) for a Corefile
    /// it refuses.
    pub fn metric_label(&self) -> &'static str {
        match self {
            PlanError::NoCorednsConfigMap { .. } => "no_coredns_config_map",
            PlanError::Corefile { source, .. } => source.metric_label(),
            PlanError::ConfigMapTooLarge { .. } => "config_map_too_large",
        }
    }
}

/// As its message (`-o json`'s `errors` is a list of strings).
impl Serialize for PlanError {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_str(self)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A Corefile key with an escape sequence, a quote and a backslash.
    const KEYS: &str = "ex\u{1b}[2J\"am\\ple.com:53";

    #[test]
    fn the_message_escapes_what_it_quotes_once() {
        let error = PlanError::Corefile {
            config_map: ObjectRef::new("kube-system", "coredns"),
            key: "Core\nfile".into(),
            source: Box::new(CorefileError::UnsupportedLayout {
                line: 1,
                message: format!("the server block `{KEYS}` has no braces"),
            }),
        };
        assert_eq!(
            error.to_string(),
            "ConfigMap kube-system/coredns key Core\\nfile: Corefile line 1: the server block \
             `ex\\u{1b}[2J\"am\\\\ple.com:53` has no braces; nothing is written to it"
        );
        assert_eq!(error.metric_label(), "unsupported_layout");
        // -o json: the message, JSON-encoded (decoding gives it back, escaped once).
        let json = serde_json::to_value(&error).unwrap();
        assert_eq!(json, serde_json::Value::String(error.to_string()));
    }

    #[test]
    fn every_variant_has_its_label() {
        let cm = ObjectRef::new("kube-system", "coredns");
        let missing = PlanError::NoCorednsConfigMap {
            config_maps: vec!["coredns".into(), "kube-dns".into()],
            namespace: "kube-system".into(),
            key: "Corefile".into(),
            kube_dns: true,
        };
        assert_eq!(missing.metric_label(), "no_coredns_config_map");
        assert!(
            missing
                .to_string()
                .starts_with("no CoreDNS ConfigMap found (looked for coredns, kube-dns in namespace kube-system with key Corefile); DNS is not planned: the cluster DNS is kube-dns"),
            "{missing}"
        );
        let large = PlanError::ConfigMapTooLarge {
            config_map: cm,
            key: "x\ty".into(),
            bytes: 2,
            limit: 1,
        };
        assert_eq!(large.metric_label(), "config_map_too_large");
        assert!(
            large
                .to_string()
                .contains("in key x\\ty its keys would hold 2 bytes")
        );
    }
}
