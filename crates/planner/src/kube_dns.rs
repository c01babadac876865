//! kube-dns (GKE Standard's cluster DNS) has no Corefile, so hairpin has nothing to edit there
//! (`--dns-mode external-dns` is its mode). kube-dns can still send single names to another DNS
//! server: `stubDomains` in ConfigMap `kube-system/kube-dns`, a JSON object from domain to a list
//! of nameservers (`ip` or `ip:port`). This module plans that alternative for `hairpin plan`
//! to print: one stub domain per hairpinned exact hostname.
//!
//! hairpin is not a DNS server, so the nameserver must be one the user runs that answers the
//! hairpinned names with the hairpin Services' ClusterIPs (the private zone's server that the
//! external-dns mode publishes to): it is given with `--stub-domain-nameserver`, and without it
//! only the hostnames and that flag are printed. hairpin never writes kube-dns's ConfigMap: it
//! is the cluster's DNS configuration, and the server it would point at is not hairpin's.

use std::collections::BTreeSet;

use serde::Serialize;

use crate::balancers::LoadBalancerPlan;
use crate::config::StubNameserver;
use crate::snapshot::{ClusterSnapshot, ObjectRef};

/// Where kube-dns reads its configuration (fixed by kube-dns).
pub const KUBE_DNS_NAMESPACE: &str = "kube-system";
/// The ConfigMap kube-dns reads `stubDomains` from.
pub const KUBE_DNS_CONFIG_MAP: &str = "kube-dns";
/// The key of the stub domains in that ConfigMap.
pub const STUB_DOMAINS_KEY: &str = "stubDomains";

/// The `stubDomains` alternative, planned when the cluster DNS is kube-dns.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct StubDomains {
    /// `kube-system/kube-dns`, where the user merges the value.
    pub config_map: ObjectRef,
    /// The exact hairpinned hostnames, one stub domain each; sorted.
    pub hostnames: Vec<String>,
    /// The wildcards, left out: a stub domain for `apps.example.com` would also take
    /// `apps.example.com` itself, which hairpin does not redirect; sorted.
    pub wildcards: Vec<String>,
    /// The nameservers of `--stub-domain-nameserver`; empty when none was given.
    pub nameservers: Vec<StubNameserver>,
    /// The ConfigMap's current `stubDomains` value, when it has one: the user adds the
    /// entries to it rather than replacing it.
    pub existing: Option<String>,
}

impl StubDomains {
    /// The `stubDomains` value, each hostname mapped to the nameservers; `None` without
    /// nameservers (hairpin knows of no DNS server to point at).
    pub fn value(&self) -> Option<String> {
        if self.nameservers.is_empty() {
            return None;
        }
        // Spaced like the kube-dns documentation's examples; each string JSON-escaped.
        let quoted = |text: String| serde_json::Value::String(text).to_string();
        let servers = self
            .nameservers
            .iter()
            .map(|server| quoted(server.to_string()))
            .collect::<Vec<_>>()
            .join(", ");
        let entries: Vec<String> = self
            .hostnames
            .iter()
            .map(|host| format!("{}: [{servers}]", quoted(host.clone())))
            .collect();
        Some(format!("{{{}}}", entries.join(", ")))
    }

    /// A `kubectl patch` that sets the value, when the ConfigMap has no `stubDomains` yet (a
    /// merge patch replaces the whole key, so with existing entries the user merges by hand).
    pub fn patch_command(&self) -> Option<String> {
        if self.existing.is_some() {
            return None;
        }
        let patch = serde_json::json!({"data": {STUB_DOMAINS_KEY: self.value()?}});
        Some(format!(
            "kubectl -n {} patch configmap {} --type merge -p '{patch}'",
            self.config_map.namespace, self.config_map.name
        ))
    }
}

/// The stub domains for the planned load balancers' hostnames, when the cluster DNS is
/// kube-dns: no CoreDNS Corefile was found (`coredns_found` false) and ConfigMap
/// `kube-system/kube-dns` exists. `None` otherwise, and when no hostname is hairpinned.
pub fn plan(
    snapshot: &ClusterSnapshot,
    coredns_found: bool,
    load_balancers: &[LoadBalancerPlan],
    nameservers: &[StubNameserver],
) -> Option<StubDomains> {
    if coredns_found {
        return None;
    }
    let config_map = snapshot.config_map(KUBE_DNS_NAMESPACE, KUBE_DNS_CONFIG_MAP)?;
    let (wildcards, hostnames): (BTreeSet<&str>, BTreeSet<&str>) = load_balancers
        .iter()
        .flat_map(|lb| &lb.hostnames)
        .map(|hostname| hostname.name.as_str())
        .partition(|name| name.starts_with("*."));
    if hostnames.is_empty() && wildcards.is_empty() {
        return None;
    }
    let mut nameservers = nameservers.to_vec();
    nameservers.dedup();
    Some(StubDomains {
        config_map: ObjectRef::new(KUBE_DNS_NAMESPACE, KUBE_DNS_CONFIG_MAP),
        hostnames: hostnames.into_iter().map(str::to_owned).collect(),
        wildcards: wildcards.into_iter().map(str::to_owned).collect(),
        nameservers,
        existing: config_map
            .data
            .as_ref()
            .and_then(|data| data.get(STUB_DOMAINS_KEY))
            .filter(|value| !value.trim().is_empty())
            .cloned(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nameservers_parse_as_kube_dns_takes_them() {
        assert_eq!(
            "10.96.0.53".parse::<StubNameserver>().unwrap().to_string(),
            "10.96.0.53"
        );
        assert_eq!(
            "10.96.0.53:5353"
                .parse::<StubNameserver>()
                .unwrap()
                .to_string(),
            "10.96.0.53:5353"
        );
        assert_eq!(
            "[fd00::53]:5353"
                .parse::<StubNameserver>()
                .unwrap()
                .to_string(),
            "[fd00::53]:5353"
        );
        assert_eq!(
            "fd00::53".parse::<StubNameserver>().unwrap().to_string(),
            "fd00::53"
        );
        for bad in [
            "",
            "dns.example.com",
            "127.0.0.1",
            "::1",
            "0.0.0.0",
            "10.96.0.53:0",
        ] {
            assert!(bad.parse::<StubNameserver>().is_err(), "{bad:?} accepted");
        }
    }

    #[test]
    fn the_value_maps_every_hostname_to_every_nameserver() {
        let mut stub = StubDomains {
            config_map: ObjectRef::new(KUBE_DNS_NAMESPACE, KUBE_DNS_CONFIG_MAP),
            hostnames: vec!["api.example.com".into(), "shop.example.com".into()],
            wildcards: Vec::new(),
            nameservers: Vec::new(),
            existing: None,
        };
        assert_eq!(stub.value(), None);
        assert_eq!(stub.patch_command(), None);
        stub.nameservers = vec![
            "10.96.0.53".parse().unwrap(),
            "10.96.0.54:5353".parse().unwrap(),
        ];
        let value = stub.value().unwrap();
        assert_eq!(
            value,
            r#"{"api.example.com": ["10.96.0.53", "10.96.0.54:5353"], "shop.example.com": ["10.96.0.53", "10.96.0.54:5353"]}"#
        );
        let parsed: serde_json::Value = serde_json::from_str(&value).unwrap();
        assert_eq!(parsed["shop.example.com"][1], "10.96.0.54:5353");
        let patch = stub.patch_command().unwrap();
        let json = patch
            .strip_prefix("kubectl -n kube-system patch configmap kube-dns --type merge -p '")
            .and_then(|rest| rest.strip_suffix('\''))
            .unwrap();
        let json: serde_json::Value = serde_json::from_str(json).unwrap();
        assert_eq!(json["data"]["stubDomains"], value.as_str());
        stub.existing = Some(r#"{"corp.internal": ["10.0.0.2"]}"#.into());
        assert_eq!(
            stub.patch_command(),
            None,
            "would replace the existing ones"
        );
    }
}
