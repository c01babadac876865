//! What each cloud's controller offers against the hairpin bypass, and how to ask for it.
//!
//! Sources (checked against the controllers' code and docs): hcloud-cloud-controller-manager
//! sets `ipMode: Proxy` itself for PROXY-protocol load balancers since v1.21 (PR #783);
//! cloud-provider-openstack since 1.30 (PR #2587) unless its `enable-ingress-hostname` option
//! is on; Oracle's oci-cloud-controller-manager with `oci.oraclecloud.com/ingress-ip-mode:
//! "proxy"` (Kubernetes 1.30+); STACKIT's cloud-provider-stackit with
//! `lb.stackit.cloud/ip-mode-proxy: "true"`; Scaleway's ipMode support is pending (PR #185);
//! DigitalOcean, Linode, OVH's legacy IOLB controller and cloudscale.ch (its controller reports
//! one `ingress[].ip` per VIP, no ipMode annotation) have none. The hostname annotations make
//! the controller publish a hostname instead of an IP, so kube-proxy installs no bypass.

use std::collections::BTreeMap;

use hairpin_planner::{HETZNER_PROXY_PROTOCOL, OPENSTACK_PROXY_PROTOCOL, STACKIT_PROXY_PROTOCOL};
use serde::Serialize;

/// A cloud whose load balancer controller we know.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Provider {
    /// Hetzner Cloud (hcloud-cloud-controller-manager).
    Hetzner,
    /// DigitalOcean (digitalocean-cloud-controller-manager).
    DigitalOcean,
    /// OpenStack Octavia (cloud-provider-openstack), also OVHcloud MKS from 1.31.
    OpenStack,
    /// OVHcloud's legacy IOLB load balancers.
    Ovh,
    /// Scaleway Kapsule.
    Scaleway,
    /// Linode / Akamai LKE NodeBalancers.
    Linode,
    /// cloudscale.ch.
    Cloudscale,
    /// AWS ELB / NLB.
    Aws,
    /// Oracle Cloud (oci-cloud-controller-manager).
    Oracle,
    /// STACKIT (cloud-provider-stackit; yawol before it).
    Stackit,
}

impl Provider {
    /// Recognises the provider from the Service's annotation prefixes.
    pub fn detect(annotations: &BTreeMap<String, String>) -> Option<Provider> {
        const PREFIXES: &[(&str, Provider)] = &[
            ("load-balancer.hetzner.cloud/", Provider::Hetzner),
            (
                "service.beta.kubernetes.io/do-loadbalancer-",
                Provider::DigitalOcean,
            ),
            ("kubernetes.digitalocean.com/", Provider::DigitalOcean),
            ("loadbalancer.openstack.org/", Provider::OpenStack),
            (
                "service.beta.kubernetes.io/ovh-loadbalancer-",
                Provider::Ovh,
            ),
            (
                "service.beta.kubernetes.io/scw-loadbalancer-",
                Provider::Scaleway,
            ),
            (
                "service.beta.kubernetes.io/linode-loadbalancer-",
                Provider::Linode,
            ),
            ("k8s.cloudscale.ch/loadbalancer-", Provider::Cloudscale),
            (
                "service.beta.kubernetes.io/aws-load-balancer-",
                Provider::Aws,
            ),
            ("oci.oraclecloud.com/", Provider::Oracle),
            (
                "service.beta.kubernetes.io/oci-load-balancer-",
                Provider::Oracle,
            ),
            ("lb.stackit.cloud/", Provider::Stackit),
            ("yawol.stackit.cloud/", Provider::Stackit),
        ];
        annotations.keys().find_map(|key| {
            PREFIXES
                .iter()
                .find(|(prefix, _)| key.starts_with(prefix))
                .map(|(_, provider)| *provider)
        })
    }

    /// The provider's name for people.
    pub fn name(self) -> &'static str {
        match self {
            Provider::Hetzner => "Hetzner Cloud",
            Provider::DigitalOcean => "DigitalOcean",
            Provider::OpenStack => "OpenStack (Octavia)",
            Provider::Ovh => "OVHcloud (IOLB)",
            Provider::Scaleway => "Scaleway",
            Provider::Linode => "Linode/Akamai",
            Provider::Cloudscale => "cloudscale.ch",
            Provider::Aws => "AWS",
            Provider::Oracle => "Oracle Cloud",
            Provider::Stackit => "STACKIT",
        }
    }

    /// How to get `ipMode: Proxy` from this provider's controller, when it can set it.
    pub fn native_ip_mode(self) -> Option<String> {
        let fix = match self {
            Provider::Hetzner => format!(
                "hcloud-cloud-controller-manager v1.21 or later sets `ipMode: Proxy` on its own for \
                 load balancers with `{HETZNER_PROXY_PROTOCOL}: \"true\"`: upgrade the controller",
            ),
            Provider::OpenStack => format!(
                "cloud-provider-openstack 1.30 or later sets `ipMode: Proxy` for load balancers \
                 with `{OPENSTACK_PROXY_PROTOCOL}`: upgrade it, and turn its \
                 `enable-ingress-hostname` option off",
            ),
            Provider::Oracle => {
                "annotate the Service `oci.oraclecloud.com/ingress-ip-mode: \"proxy\"`: \
                 the Oracle cloud controller then sets `ipMode: Proxy`"
                    .to_owned()
            }
            Provider::Stackit => format!(
                "annotate the Service `lb.stackit.cloud/ip-mode-proxy: \"true\"`: the STACKIT \
                 cloud controller then reports `ipMode: Proxy` (it recommends this together \
                 with `{STACKIT_PROXY_PROTOCOL}`)",
            ),
            Provider::Ovh => format!(
                "on OVHcloud MKS 1.31 or later, move to the Public Cloud Load Balancer \
                 (`{OPENSTACK_PROXY_PROTOCOL}`), whose OpenStack controller sets `ipMode: Proxy`",
            ),
            Provider::DigitalOcean
            | Provider::Scaleway
            | Provider::Linode
            | Provider::Aws
            | Provider::Cloudscale => return None,
        };
        Some(fix)
    }

    /// The annotation (and value) that makes the controller publish a hostname instead of an
    /// IP in the Service status.
    pub fn hostname_annotation(self) -> Option<(&'static str, &'static str)> {
        match self {
            Provider::Hetzner => Some((
                "load-balancer.hetzner.cloud/hostname",
                "<a hostname resolving to the LB>",
            )),
            Provider::DigitalOcean => Some((
                "service.beta.kubernetes.io/do-loadbalancer-hostname",
                "<a hostname resolving to the LB>",
            )),
            Provider::OpenStack => Some((
                "loadbalancer.openstack.org/hostname",
                "<a hostname resolving to the LB>",
            )),
            Provider::Scaleway => Some((
                "service.beta.kubernetes.io/scw-loadbalancer-use-hostname",
                "true",
            )),
            Provider::Linode => Some((
                "service.beta.kubernetes.io/linode-loadbalancer-hostname-only-ingress",
                "true",
            )),
            Provider::Cloudscale => Some((
                "k8s.cloudscale.ch/loadbalancer-force-hostname",
                "<a hostname resolving to the LB>",
            )),
            Provider::Ovh | Provider::Aws | Provider::Oracle | Provider::Stackit => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn annotations(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect()
    }

    #[test]
    fn providers_are_recognised_by_their_annotations() {
        for (key, provider) in [
            (
                "load-balancer.hetzner.cloud/uses-proxyprotocol",
                Provider::Hetzner,
            ),
            (
                "service.beta.kubernetes.io/do-loadbalancer-enable-proxy-protocol",
                Provider::DigitalOcean,
            ),
            (
                "loadbalancer.openstack.org/proxy-protocol",
                Provider::OpenStack,
            ),
            (
                "service.beta.kubernetes.io/ovh-loadbalancer-proxy-protocol",
                Provider::Ovh,
            ),
            (
                "service.beta.kubernetes.io/scw-loadbalancer-proxy-protocol-v2",
                Provider::Scaleway,
            ),
            (
                "service.beta.kubernetes.io/linode-loadbalancer-proxy-protocol",
                Provider::Linode,
            ),
            (
                "k8s.cloudscale.ch/loadbalancer-pool-protocol",
                Provider::Cloudscale,
            ),
            (
                "service.beta.kubernetes.io/aws-load-balancer-proxy-protocol",
                Provider::Aws,
            ),
            ("oci.oraclecloud.com/load-balancer-type", Provider::Oracle),
            (
                "service.beta.kubernetes.io/oci-load-balancer-shape",
                Provider::Oracle,
            ),
            ("lb.stackit.cloud/tcp-proxy-protocol", Provider::Stackit),
            ("yawol.stackit.cloud/tcpProxyProtocol", Provider::Stackit),
        ] {
            assert_eq!(
                Provider::detect(&annotations(&[(key, "x")])),
                Some(provider),
                "{key}"
            );
        }
        assert_eq!(
            Provider::detect(&annotations(&[("example.com/x", "y")])),
            None
        );
    }

    #[test]
    fn every_provider_offers_a_way_out_or_none_is_claimed() {
        // DigitalOcean and Linode have no native ipMode; their hostname annotations are the fix.
        assert!(Provider::DigitalOcean.native_ip_mode().is_none());
        assert_eq!(
            Provider::DigitalOcean.hostname_annotation().map(|(k, _)| k),
            Some("service.beta.kubernetes.io/do-loadbalancer-hostname")
        );
        assert_eq!(
            Provider::Scaleway.hostname_annotation(),
            Some((
                "service.beta.kubernetes.io/scw-loadbalancer-use-hostname",
                "true"
            ))
        );
        assert!(Provider::Hetzner.native_ip_mode().is_some());
        // The native fixes of Oracle and STACKIT are annotations on the Service.
        assert!(
            Provider::Oracle
                .native_ip_mode()
                .unwrap()
                .contains("`oci.oraclecloud.com/ingress-ip-mode: \"proxy\"`")
        );
        assert!(
            Provider::Stackit
                .native_ip_mode()
                .unwrap()
                .contains("`lb.stackit.cloud/ip-mode-proxy: \"true\"`")
        );
        // cloudscale.ch's controller has no ipMode annotation: none is claimed.
        assert!(Provider::Cloudscale.native_ip_mode().is_none());
        assert!(Provider::Aws.hostname_annotation().is_none());
    }
}
