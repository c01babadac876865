//! The doctor's judgement: pure functions from check results to a verdict and fixes, so every
//! rule is unit-tested without a network or a cluster.

use serde::Serialize;

use crate::probe::{HostsFileNote, ProbeOutcome, Probes, Resolution};
use crate::providers::Provider;

/// The verdict for one host.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum Status {
    /// Clients here reach the host.
    Ok,
    /// Clients here cannot reach the host, or in-cluster clients bypass its load balancer.
    Broken,
    /// The host's load balancer needs no hairpin (no PROXY protocol, `ipMode: Proxy`, or a
    /// hostname in its status), and the host answers.
    NotNeeded,
}

impl Status {
    /// The word printed in reports.
    pub fn as_str(self) -> &'static str {
        match self {
            Status::Ok => "OK",
            Status::Broken => "BROKEN",
            Status::NotNeeded => "NOT NEEDED",
        }
    }
}

/// Where the doctor runs: it changes what a successful plain request proves.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Vantage {
    /// In a pod (the in-cluster path is the one probed).
    Pod,
    /// A laptop or a node: the path probed may go through the real load balancer.
    Machine,
}

/// The network checks of one host.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct NetworkChecks {
    /// How the host resolved.
    pub resolution: Resolution,
    /// What the local hosts file says about it.
    pub hosts_file: Option<HostsFileNote>,
    /// The probes of its first address (absent when it did not resolve).
    pub probes: Option<Probes>,
}

/// What the cluster checks found, or why they did not run.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(tag = "state", rename_all = "snake_case")]
pub enum ClusterView {
    /// No API access: what could not be checked, and why.
    NotChecked {
        /// Why (no kubeconfig, unreachable, forbidden...).
        reason: String,
    },
    /// The API was read.
    Checked(ClusterFacts),
}

/// Facts read from the Kubernetes API for one host.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct ClusterFacts {
    /// `major.minor` from `/version`.
    pub kubernetes_version: Option<(u32, u32)>,
    /// The LoadBalancer Service behind the host, when one was found.
    pub load_balancer: Option<LoadBalancerFacts>,
    /// CoreDNS and node-local-dns.
    pub dns: DnsFacts,
    /// hairpin's own Services and proxies.
    pub hairpin: HairpinFacts,
    /// Things that could not be read (forbidden lists...).
    pub gaps: Vec<String>,
}

/// One LoadBalancer Service.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct LoadBalancerFacts {
    /// `namespace/name`.
    pub service: String,
    /// The cloud, from the annotations.
    pub provider: Option<Provider>,
    /// The PROXY version the load balancer sends (`v1`/`v2`), when it sends one.
    pub proxy_protocol: Option<String>,
    /// `status.loadBalancer.ingress[]`: IP (with `ipMode`) or hostname.
    pub ingress: Vec<LbIngress>,
    /// `spec.externalTrafficPolicy`.
    pub external_traffic_policy: Option<String>,
    /// True when in-cluster clients bypass it and a hairpin is needed.
    pub needs_hairpin: bool,
    /// Why no hairpin is needed, when it is not.
    pub not_needed_reason: Option<String>,
}

/// One entry of `status.loadBalancer.ingress`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct LbIngress {
    /// The IP, if any.
    pub ip: Option<String>,
    /// The hostname, if any.
    pub hostname: Option<String>,
    /// `ipMode` (`VIP`, `Proxy`), if set.
    pub ip_mode: Option<String>,
}

/// CoreDNS and node-local-dns state.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct DnsFacts {
    /// A CoreDNS configuration was found.
    pub coredns_found: bool,
    /// hairpin's markers are present (Corefile block or `coredns-custom` key).
    pub markers_present: bool,
    /// The host is rewritten inside hairpin's block.
    pub host_in_block: bool,
    /// The Corefile has the `reload` plugin (None: unknown).
    pub reload_plugin: Option<bool>,
    /// A node-local-dns cache runs (it answers pods before CoreDNS).
    pub node_local_dns: bool,
}

/// hairpin's own objects.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct HairpinFacts {
    /// hairpin Services found (`namespace/name`).
    pub services: Vec<String>,
    /// Ready proxy endpoints behind them.
    pub ready_endpoints: usize,
}

/// The verdict for one host, with its cause and fixes in order of preference.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Verdict {
    /// OK, BROKEN or NOT NEEDED.
    pub status: Status,
    /// One sentence.
    pub summary: String,
    /// Why it is broken.
    pub cause: Option<String>,
    /// What fixes it, cleanest first.
    pub fixes: Vec<String>,
    /// Context worth knowing (source addresses, traffic policy, what was not checked).
    pub notes: Vec<String>,
}

const SOURCE_ADDRESS_NOTE: &str = "Without the PROXY header the ingress cannot learn the client: \
     traffic that skips the load balancer shows up with a node or pod address, which breaks \
     allow-lists, rate limits and logs keyed on the client address.";

const LOCAL_POLICY_NOTE: &str = "`externalTrafficPolicy: Local` keeps client addresses without \
     the PROXY protocol, but the load balancer then sends only to nodes that run an ingress pod \
     (uneven spreading, failed health checks on the others), and in-cluster clients still \
     bypass the load balancer.";

/// Judges one host from its checks.
pub fn diagnose(network: &NetworkChecks, cluster: &ClusterView, vantage: Vantage) -> Verdict {
    let mut notes = Vec::new();
    if let Some(hosts) = &network.hosts_file
        && hosts.in_hairpin_block
    {
        notes.push(format!(
            "{} maps this host inside hairpin's block (the node agent's entry).",
            hosts.path
        ));
    }
    let lb = match cluster {
        ClusterView::Checked(facts) => {
            notes.extend(facts.gaps.iter().map(|gap| format!("not checked: {gap}")));
            facts.load_balancer.as_ref()
        }
        ClusterView::NotChecked { reason } => {
            notes.push(format!(
                "cluster checks skipped ({reason}): the load balancer, its PROXY annotation, \
                 ipMode, CoreDNS and hairpin's proxies were not checked; the verdict rests on \
                 the network checks from here"
            ));
            None
        }
    };
    if let Some(lb) = lb
        && lb.external_traffic_policy.as_deref() == Some("Local")
    {
        notes.push(LOCAL_POLICY_NOTE.into());
    }

    let Some(probes) = &network.probes else {
        let error = match &network.resolution {
            Resolution::Failed { error } => error.clone(),
            _ => "no address to probe".into(),
        };
        return Verdict {
            status: Status::Broken,
            summary: "the host does not resolve here".into(),
            cause: Some(format!(
                "name resolution failed ({error}): clients here cannot reach the host at all; \
                 this is not the hairpin problem — check DNS (and, in a pod, CoreDNS)"
            )),
            fixes: Vec::new(),
            notes,
        };
    };

    if probes.plain.answered() {
        if let Some(lb) = lb {
            if !lb.needs_hairpin {
                let reason = lb
                    .not_needed_reason
                    .clone()
                    .unwrap_or_else(|| "in-cluster clients do not bypass it".into());
                return Verdict {
                    status: Status::NotNeeded,
                    summary: format!("answers, and {} needs no hairpin: {reason}", lb.service),
                    cause: None,
                    fixes: Vec::new(),
                    notes,
                };
            }
            if vantage == Vantage::Machine && !covered(cluster) {
                notes.push(SOURCE_ADDRESS_NOTE.into());
                return Verdict {
                    status: Status::Broken,
                    summary: "answers from here (through the load balancer), but in-cluster \
                              clients bypass it"
                        .into(),
                    cause: Some(bypass_cause(lb)),
                    fixes: fixes(cluster),
                    notes,
                };
            }
        }
        let proxy_rejected = [&probes.proxy_v1, &probes.proxy_v2].iter().any(|outcome| {
            matches!(outcome, ProbeOutcome::Answered { first_line } if first_line.contains(" 400 "))
        });
        if proxy_rejected {
            notes.push(
                "the probes that start with a PROXY header get 400: expected when the path adds \
                 its own header (hairpin's proxy or a load balancer), since ours then arrives \
                 as the request line"
                    .into(),
            );
        }
        let summary = if network
            .hosts_file
            .as_ref()
            .is_some_and(|hosts| hosts.in_hairpin_block)
            || covered(cluster)
        {
            "a plain request is answered: hairpin is in place for this host"
        } else {
            "a plain request is answered: either nothing here requires a PROXY header, or a \
             hairpin is in place"
        };
        return Verdict {
            status: Status::Ok,
            summary: summary.into(),
            cause: None,
            fixes: Vec::new(),
            notes,
        };
    }

    if probes.proxy_answered() {
        notes.push(SOURCE_ADDRESS_NOTE.into());
        let mut cause = format!(
            "a plain request to {} gets no answer ({}), but the same request after a PROXY \
             header is answered: the server requires the PROXY protocol, and this connection \
             did not pass through the load balancer that adds it. That is the hairpin \
             short-circuit: kube-proxy (or Cilium) delivers traffic for the load balancer's \
             external IP straight to the ingress.",
            probes.address,
            short(&probes.plain.describe()),
        );
        if let Some(lb) = lb {
            cause.push(' ');
            cause.push_str(&bypass_cause(lb));
        }
        cause.push_str(&dns_gaps(cluster));
        return Verdict {
            status: Status::Broken,
            summary: "in-cluster traffic bypasses the load balancer (no PROXY header)".into(),
            cause: Some(cause),
            fixes: fixes(cluster),
            notes,
        };
    }

    let cause = if probes.plain.connected() {
        format!(
            "{} accepts connections but answers neither a plain request ({}) nor one with a \
             PROXY header: not the hairpin signature; check the server behind it",
            probes.address,
            short(&probes.plain.describe())
        )
    } else {
        format!(
            "cannot reach {} ({}); not the hairpin signature: check the address, firewalls \
             and that the service is up",
            probes.address,
            short(&probes.plain.describe())
        )
    };
    Verdict {
        status: Status::Broken,
        summary: "the host does not answer from here".into(),
        cause: Some(cause),
        fixes: Vec::new(),
        notes,
    }
}

fn short(description: &str) -> &str {
    description
        .split_once(": ")
        .map_or(description, |(_, rest)| rest)
}

fn covered(cluster: &ClusterView) -> bool {
    match cluster {
        ClusterView::Checked(facts) => {
            facts.dns.host_in_block
                && !facts.dns.node_local_dns
                && facts.dns.reload_plugin != Some(false)
                && facts.hairpin.ready_endpoints > 0
        }
        ClusterView::NotChecked { .. } => false,
    }
}

fn bypass_cause(lb: &LoadBalancerFacts) -> String {
    let version = lb.proxy_protocol.as_deref().unwrap_or("the PROXY protocol");
    let ips: Vec<String> = lb
        .ingress
        .iter()
        .filter_map(|ingress| {
            ingress.ip.as_ref().map(|ip| {
                format!(
                    "{ip} (ipMode {})",
                    ingress.ip_mode.as_deref().unwrap_or("unset, i.e. VIP")
                )
            })
        })
        .collect();
    format!(
        "Service {} sends {version} through its load balancer and publishes {} in its status, \
         so kube-proxy short-circuits in-cluster traffic to it.",
        lb.service,
        if ips.is_empty() {
            "an IP".into()
        } else {
            ips.join(", ")
        }
    )
}

fn dns_gaps(cluster: &ClusterView) -> String {
    let ClusterView::Checked(facts) = cluster else {
        return String::new();
    };
    let mut text = String::new();
    if !facts.hairpin.services.is_empty() && !facts.dns.host_in_block {
        text.push_str(
            " hairpin is installed but this host is not in its CoreDNS block: check that an \
             Ingress or Gateway for it is on this load balancer (`hairpin plan` shows why).",
        );
    }
    if facts.dns.host_in_block && facts.dns.reload_plugin == Some(false) {
        text.push_str(
            " The host is in hairpin's CoreDNS block, but the Corefile has no `reload` plugin: \
             CoreDNS still serves the old configuration until it restarts.",
        );
    }
    if facts.dns.node_local_dns {
        text.push_str(
            " node-local-dns runs on the nodes and answers pods before CoreDNS, bypassing the \
             rewrite: configure its forward for the host's zone to CoreDNS, or enable hairpin's \
             node agent.",
        );
    }
    if facts.dns.host_in_block && facts.hairpin.ready_endpoints == 0 {
        text.push_str(" The host points at hairpin, but no proxy endpoint is ready.");
    }
    text
}

/// The fixes for a hairpin bypass, cleanest first, for what is known of the cluster.
pub fn fixes(cluster: &ClusterView) -> Vec<String> {
    let (lb, version) = match cluster {
        ClusterView::Checked(facts) => (facts.load_balancer.as_ref(), facts.kubernetes_version),
        ClusterView::NotChecked { .. } => (None, None),
    };
    let hairpin = "install hairpin: it points the cluster's DNS for these hostnames at an \
                   in-cluster proxy that adds the PROXY header the load balancer would \
                   (`helm install hairpin charts/hairpin`; enable `nodeAgent` for node-level \
                   clients such as the kubelet pulling from a registry behind the ingress)"
        .to_owned();
    let Some(provider) = lb.and_then(|lb| lb.provider) else {
        return vec![
            "native: if your cloud controller sets `status.loadBalancer.ingress[].ipMode: Proxy` \
             (Kubernetes 1.30+; Hetzner, OpenStack, cloudscale.ch do), in-cluster traffic goes \
             through the load balancer"
                .into(),
            "provider hostname annotation, which publishes a hostname instead of the IP: \
             DigitalOcean `service.beta.kubernetes.io/do-loadbalancer-hostname`, Hetzner \
             `load-balancer.hetzner.cloud/hostname`, OpenStack `loadbalancer.openstack.org/hostname`, \
             Scaleway `service.beta.kubernetes.io/scw-loadbalancer-use-hostname: \"true\"`, Linode \
             `service.beta.kubernetes.io/linode-loadbalancer-hostname-only-ingress: \"true\"`, \
             cloudscale.ch `k8s.cloudscale.ch/loadbalancer-force-hostname`"
                .into(),
            hairpin,
        ];
    };
    let mut out = Vec::new();
    if let Some(native) = provider.native_ip_mode() {
        match version {
            Some((major, minor)) if (major, minor) >= (1, 30) => {
                out.push(format!("native ipMode (Kubernetes {major}.{minor} supports it): {native}"));
            }
            Some((major, minor)) => out.push(format!(
                "native ipMode, after upgrading Kubernetes from {major}.{minor} to 1.30 or later: {native}"
            )),
            None => out.push(format!(
                "native ipMode (needs Kubernetes 1.30 or later): {native}"
            )),
        }
    }
    if let Some((annotation, value)) = provider.hostname_annotation() {
        out.push(format!(
            "{} hostname annotation: `{annotation}: {value}` on the Service; the status then \
             holds a hostname, kube-proxy installs no bypass, and in-cluster traffic makes a \
             round trip through the load balancer (the hostname must resolve to it)",
            provider.name()
        ));
    }
    out.push(hairpin);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn answered() -> ProbeOutcome {
        ProbeOutcome::Answered {
            first_line: "HTTP/1.1 200 OK".into(),
        }
    }

    fn network(plain: ProbeOutcome, v1: ProbeOutcome, v2: ProbeOutcome) -> NetworkChecks {
        NetworkChecks {
            resolution: Resolution::Resolved {
                addresses: vec!["198.51.100.10".parse().unwrap()],
            },
            hosts_file: None,
            probes: Some(Probes {
                address: "198.51.100.10:80".parse().unwrap(),
                plain,
                proxy_v1: v1,
                proxy_v2: v2,
            }),
        }
    }

    fn not_checked() -> ClusterView {
        ClusterView::NotChecked {
            reason: "no kubeconfig".into(),
        }
    }

    fn lb(provider: Option<Provider>, needs: bool) -> LoadBalancerFacts {
        LoadBalancerFacts {
            service: "ingress-nginx/ingress-nginx-controller".into(),
            provider,
            proxy_protocol: Some("v1".into()),
            ingress: vec![LbIngress {
                ip: Some("198.51.100.10".into()),
                hostname: None,
                ip_mode: Some("VIP".into()),
            }],
            external_traffic_policy: Some("Cluster".into()),
            needs_hairpin: needs,
            not_needed_reason: (!needs).then(|| "ipMode is Proxy".into()),
        }
    }

    fn checked(lb: LoadBalancerFacts, version: (u32, u32)) -> ClusterView {
        ClusterView::Checked(ClusterFacts {
            kubernetes_version: Some(version),
            load_balancer: Some(lb),
            ..ClusterFacts::default()
        })
    }

    #[test]
    fn plain_fails_but_proxy_works_is_the_hairpin_signature() {
        let verdict = diagnose(
            &network(ProbeOutcome::EmptyReply, answered(), answered()),
            &not_checked(),
            Vantage::Machine,
        );
        assert_eq!(verdict.status, Status::Broken);
        let cause = verdict.cause.unwrap();
        assert!(cause.contains("hairpin short-circuit"), "{cause}");
        assert!(cause.contains("empty reply"), "{cause}");
        assert_eq!(verdict.fixes.len(), 3, "{:?}", verdict.fixes);
        assert!(verdict.fixes[2].contains("install hairpin"));
        assert!(
            verdict
                .notes
                .iter()
                .any(|n| n.contains("cluster checks skipped"))
        );
        assert!(
            verdict
                .notes
                .iter()
                .any(|n| n.contains("node or pod address"))
        );
        // A reset is the same signature, and so is v2 alone.
        let reset = diagnose(
            &network(ProbeOutcome::Reset, ProbeOutcome::EmptyReply, answered()),
            &not_checked(),
            Vantage::Pod,
        );
        assert_eq!(reset.status, Status::Broken);
        assert!(reset.cause.unwrap().contains("reset"));
    }

    #[test]
    fn plain_works_is_ok() {
        let verdict = diagnose(
            &network(answered(), ProbeOutcome::Reset, ProbeOutcome::Reset),
            &not_checked(),
            Vantage::Pod,
        );
        assert_eq!(verdict.status, Status::Ok);
        assert!(verdict.cause.is_none() && verdict.fixes.is_empty());
    }

    #[test]
    fn the_node_agent_entry_is_named_when_ok() {
        let mut checks = network(answered(), answered(), answered());
        checks.hosts_file = Some(HostsFileNote {
            path: "/etc/hosts".into(),
            addresses: vec!["10.96.0.9".parse().unwrap()],
            in_hairpin_block: true,
            unreadable: None,
        });
        let verdict = diagnose(&checks, &not_checked(), Vantage::Machine);
        assert_eq!(verdict.status, Status::Ok);
        assert!(
            verdict.summary.contains("hairpin is in place"),
            "{}",
            verdict.summary
        );
        assert!(verdict.notes.iter().any(|n| n.contains("node agent")));
        assert!(!verdict.notes.iter().any(|n| n.contains("get 400")));
        // Through hairpin's proxy our own PROXY header arrives as the request line: 400.
        checks.probes.as_mut().unwrap().proxy_v1 = ProbeOutcome::Answered {
            first_line: "HTTP/1.1 400 Bad Request".into(),
        };
        let verdict = diagnose(&checks, &not_checked(), Vantage::Machine);
        assert!(
            verdict.notes.iter().any(|n| n.contains("get 400")),
            "{:?}",
            verdict.notes
        );
    }

    #[test]
    fn nothing_answers_is_broken_but_not_called_a_hairpin() {
        let refused = ProbeOutcome::ConnectFailed {
            error: "Connection refused (os error 111)".into(),
        };
        let verdict = diagnose(
            &network(refused.clone(), refused.clone(), refused),
            &not_checked(),
            Vantage::Pod,
        );
        assert_eq!(verdict.status, Status::Broken);
        let cause = verdict.cause.unwrap();
        assert!(
            cause.contains("not the hairpin signature") && cause.contains("refused"),
            "{cause}"
        );
        assert!(verdict.fixes.is_empty());

        let silent = diagnose(
            &network(
                ProbeOutcome::Timeout,
                ProbeOutcome::Timeout,
                ProbeOutcome::Timeout,
            ),
            &not_checked(),
            Vantage::Pod,
        );
        assert!(silent.cause.unwrap().contains("accepts connections"));
    }

    #[test]
    fn unresolvable_host_is_broken() {
        let checks = NetworkChecks {
            resolution: Resolution::Failed {
                error: "Name or service not known".into(),
            },
            hosts_file: None,
            probes: None,
        };
        let verdict = diagnose(&checks, &not_checked(), Vantage::Pod);
        assert_eq!(verdict.status, Status::Broken);
        assert!(verdict.cause.unwrap().contains("Name or service not known"));
    }

    #[test]
    fn a_load_balancer_that_needs_no_hairpin_is_not_needed() {
        let verdict = diagnose(
            &network(
                answered(),
                ProbeOutcome::EmptyReply,
                ProbeOutcome::EmptyReply,
            ),
            &checked(lb(Some(Provider::Hetzner), false), (1, 31)),
            Vantage::Pod,
        );
        assert_eq!(verdict.status, Status::NotNeeded);
        assert!(
            verdict.summary.contains("ipMode is Proxy"),
            "{}",
            verdict.summary
        );
    }

    #[test]
    fn from_a_laptop_the_cluster_view_reveals_the_bypass() {
        let verdict = diagnose(
            &network(
                answered(),
                ProbeOutcome::EmptyReply,
                ProbeOutcome::EmptyReply,
            ),
            &checked(lb(Some(Provider::DigitalOcean), true), (1, 31)),
            Vantage::Machine,
        );
        assert_eq!(verdict.status, Status::Broken);
        assert!(
            verdict
                .cause
                .unwrap()
                .contains("198.51.100.10 (ipMode VIP)")
        );
        assert!(
            verdict.fixes[0].contains("do-loadbalancer-hostname"),
            "{:?}",
            verdict.fixes
        );
        // In a pod, a plain answer is the in-cluster path itself.
        let in_pod = diagnose(
            &network(
                answered(),
                ProbeOutcome::EmptyReply,
                ProbeOutcome::EmptyReply,
            ),
            &checked(lb(Some(Provider::DigitalOcean), true), (1, 31)),
            Vantage::Pod,
        );
        assert_eq!(in_pod.status, Status::Ok);
    }

    #[test]
    fn fixes_prefer_native_ip_mode_where_the_version_allows() {
        let new = fixes(&checked(lb(Some(Provider::Hetzner), true), (1, 30)));
        assert!(
            new[0].starts_with("native ipMode (Kubernetes 1.30"),
            "{new:?}"
        );
        assert!(
            new[1].contains("load-balancer.hetzner.cloud/hostname"),
            "{new:?}"
        );
        assert!(new[2].contains("install hairpin"));
        let old = fixes(&checked(lb(Some(Provider::Hetzner), true), (1, 29)));
        assert!(
            old[0].contains("after upgrading Kubernetes from 1.29"),
            "{old:?}"
        );
        let linode = fixes(&checked(lb(Some(Provider::Linode), true), (1, 32)));
        assert_eq!(linode.len(), 2, "{linode:?}");
        assert!(linode[0].contains("hostname-only-ingress: true"));
        let aws = fixes(&checked(lb(Some(Provider::Aws), true), (1, 32)));
        assert_eq!(aws.len(), 1);
    }

    #[test]
    fn dns_problems_are_named_in_the_cause() {
        let mut facts = ClusterFacts {
            kubernetes_version: Some((1, 28)),
            load_balancer: Some(lb(None, true)),
            ..ClusterFacts::default()
        };
        facts.dns.host_in_block = true;
        facts.dns.reload_plugin = Some(false);
        facts.dns.node_local_dns = true;
        facts.hairpin.services = vec!["hairpin/hairpin-abc".into()];
        let verdict = diagnose(
            &network(ProbeOutcome::EmptyReply, answered(), answered()),
            &ClusterView::Checked(facts),
            Vantage::Pod,
        );
        let cause = verdict.cause.unwrap();
        assert!(cause.contains("no `reload` plugin"), "{cause}");
        assert!(cause.contains("node-local-dns"), "{cause}");
        assert!(cause.contains("no proxy endpoint is ready"), "{cause}");
    }

    #[test]
    fn local_traffic_policy_gets_its_trade_offs_noted() {
        let mut balancer = lb(Some(Provider::Scaleway), true);
        balancer.external_traffic_policy = Some("Local".into());
        let verdict = diagnose(
            &network(ProbeOutcome::EmptyReply, answered(), answered()),
            &checked(balancer, (1, 31)),
            Vantage::Pod,
        );
        assert!(
            verdict
                .notes
                .iter()
                .any(|n| n.contains("externalTrafficPolicy: Local"))
        );
    }
}
