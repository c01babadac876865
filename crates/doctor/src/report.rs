//! A doctor run's report: one entry per host, rendered as text for people or JSON for scripts,
//! and the process exit code.

use std::fmt::Write as _;
use std::net::IpAddr;

use hairpin_planner::escape::{Text, controls};
use serde::Serialize;

use crate::dataplane::{AgentFacts, KubeProxyFacts};
use crate::probe::Resolution;
use crate::verdict::{
    ClusterFacts, ClusterView, DnsFacts, LoadBalancerFacts, NetworkChecks, Status, Vantage,
    Verdict, ip_mode_support,
};

/// Everything checked about one host.
#[derive(Clone, Debug, Serialize)]
pub struct HostReport {
    /// The host as given.
    pub host: String,
    /// The port probed.
    pub port: u16,
    /// Resolution and probes.
    pub network: NetworkChecks,
    /// What the API said.
    pub cluster: ClusterView,
    /// The judgement.
    pub verdict: Verdict,
}

/// The whole run.
#[derive(Clone, Debug, Serialize)]
pub struct Report {
    /// Where the doctor ran.
    pub vantage: Vantage,
    /// One entry per host, in the order given.
    pub hosts: Vec<HostReport>,
}

impl Report {
    /// 0 when every host is OK or NOT NEEDED, 1 when any is BROKEN.
    pub fn exit_code(&self) -> u8 {
        u8::from(
            self.hosts
                .iter()
                .any(|host| host.verdict.status == Status::Broken),
        )
    }

    /// JSON for scripts.
    pub fn to_json(&self) -> String {
        serde_json::to_string_pretty(self)
            .unwrap_or_else(|err| format!("{{\"error\": \"cannot serialise the report: {err}\"}}"))
    }

    /// The same document as [`Report::to_json`], in YAML (`-o yaml`, for kubectl users).
    pub fn to_yaml(&self) -> String {
        serde_saphyr::to_string(self)
            .unwrap_or_else(|err| format!("error: \"cannot serialise the report: {err}\"\n"))
    }

    /// Text for people. Values from the cluster (names, annotations, the Hairpin status) and
    /// the messages quoting them are escaped ([`hairpin_planner::escape`]): one line each.
    pub fn to_text(&self) -> String {
        let mut out = String::new();
        let vantage = match self.vantage {
            Vantage::Pod => "from this pod (the in-cluster path)",
            Vantage::Machine => "from this machine",
        };
        let _ = writeln!(
            out,
            "hairpin doctor: checking {} host(s) {vantage}",
            self.hosts.len()
        );
        for host in &self.hosts {
            render_host(&mut out, host);
        }
        let broken = self
            .hosts
            .iter()
            .filter(|host| host.verdict.status == Status::Broken)
            .count();
        let _ = writeln!(
            out,
            "\n{}",
            if broken == 0 {
                "result: no hairpin problem found".to_owned()
            } else {
                format!("result: {broken} host(s) BROKEN")
            }
        );
        out
    }
}

/// `a, b, c`.
fn join(addresses: &[IpAddr]) -> String {
    addresses
        .iter()
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join(", ")
}

fn render_host(out: &mut String, host: &HostReport) {
    let _ = writeln!(
        out,
        "\n{}:{}  {}\n  {}",
        Text(&host.host),
        host.port,
        host.verdict.status.as_str(),
        controls(&host.verdict.summary)
    );
    render_network(out, &host.network);
    match &host.cluster {
        ClusterView::NotChecked { reason } => {
            let _ = writeln!(out, "  cluster         not checked: {}", controls(reason));
        }
        ClusterView::Checked(facts) => render_cluster(out, facts),
    }
    if let Some(cause) = &host.verdict.cause {
        let _ = writeln!(out, "  cause: {}", controls(cause));
    }
    for (i, fix) in host.verdict.fixes.iter().enumerate() {
        let _ = writeln!(out, "  fix {}: {}", i + 1, controls(fix));
    }
    for note in &host.verdict.notes {
        let _ = writeln!(out, "  note: {}", controls(note));
    }
}

/// What this machine sees: the resolution, the hosts file, the probes.
fn render_network(out: &mut String, network: &NetworkChecks) {
    let resolution = match &network.resolution {
        Resolution::Resolved { addresses } => join(addresses),
        Resolution::Literal { address } => format!("{address} (an address, not resolved)"),
        Resolution::Failed { error } => format!("does not resolve: {}", controls(error)),
    };
    let _ = writeln!(out, "  resolves to     {resolution} (system resolver)");
    if let Some(hosts) = &network.hosts_file {
        let text = if let Some(err) = &hosts.unreadable {
            format!("unreadable: {}", controls(err))
        } else if hosts.addresses.is_empty() {
            "no entry (DNS decides)".to_owned()
        } else {
            let list = join(&hosts.addresses);
            if hosts.in_hairpin_block {
                format!("{list} (in hairpin's block)")
            } else {
                list
            }
        };
        let _ = writeln!(out, "  {:<15} {text}", hosts.path);
    }
    if let Some(probes) = &network.probes {
        let _ = writeln!(out, "  probed          {}", probes.address);
        for (label, outcome) in [
            ("plain HTTP", &probes.plain),
            ("PROXY v1 + HTTP", &probes.proxy_v1),
            ("PROXY v2 + HTTP", &probes.proxy_v2),
        ] {
            let mark = if outcome.answered() { "ok  " } else { "FAIL" };
            let _ = writeln!(out, "  {label:<15} {mark} {}", outcome.describe());
        }
    }
}

/// What the API says: the version, the load balancer, the DNS, hairpin itself.
fn render_cluster(out: &mut String, facts: &ClusterFacts) {
    if let Some((major, minor)) = facts.kubernetes_version {
        let _ = writeln!(out, "  kubernetes      {major}.{minor}");
    }
    render_load_balancer(out, facts.load_balancer.as_ref());
    render_dns(out, &facts.dns);
    render_dataplane(out, facts);
    let _ = writeln!(
        out,
        "  services by     {}",
        controls(&ip_mode_support(facts))
    );
    render_cure(out, facts);
    let _ = writeln!(
        out,
        "  hairpin         {} Service(s), {} ready proxy endpoint(s)",
        facts.hairpin.services.len(),
        facts.hairpin.ready_endpoints
    );
    if let Some(status) = &facts.hairpin.status {
        let _ = writeln!(out, "  hairpin status  {}", controls(&status.describe()));
    }
    if let Some(policy) = &facts.admission_policy {
        let _ = writeln!(out, "  status policy   {}", controls(&policy.describe()));
    }
}

fn render_load_balancer(out: &mut String, lb: Option<&LoadBalancerFacts>) {
    let Some(lb) = lb else {
        let _ = writeln!(
            out,
            "  load balancer   none found for this host (no Ingress/Gateway on a LoadBalancer Service names it)"
        );
        return;
    };
    let ingress = lb
        .ingress
        .iter()
        .map(|i| match (&i.ip, &i.hostname) {
            (Some(ip), _) => {
                format!(
                    "{ip} ipMode={}",
                    Text(i.ip_mode.as_deref().unwrap_or("unset"))
                )
            }
            (None, Some(hostname)) => format!("hostname {}", Text(hostname)),
            (None, None) => "empty".into(),
        })
        .collect::<Vec<_>>()
        .join(", ");
    let _ = writeln!(
        out,
        "  load balancer   {} ({}) PROXY {} status [{ingress}] externalTrafficPolicy {}",
        Text(&lb.service.to_string()),
        lb.provider.map_or("unknown provider", |p| p.name()),
        Text(lb.proxy_protocol.as_deref().unwrap_or("off")),
        Text(lb.external_traffic_policy.as_deref().unwrap_or("Cluster")),
    );
    if let Some(receiver) = &lb.receiver {
        let _ = writeln!(out, "  receiver        {}", Text(receiver));
    }
}

fn render_dns(out: &mut String, dns: &DnsFacts) {
    let _ = writeln!(
        out,
        "  coredns         {}; hairpin markers {}; host in block {}; reload plugin {}; node-local-dns {}",
        if dns.coredns_found {
            "found"
        } else {
            "not found"
        },
        yes_no(dns.markers_present),
        yes_no(dns.host_in_block),
        dns.reload_plugin.map_or("unknown", yes_no),
        if dns.node_local_dns {
            "running"
        } else {
            "not found"
        },
    );
    if let Some(uneditable) = &dns.uneditable {
        let _ = writeln!(
            out,
            "  dns editable    no: {}",
            controls(&uneditable.describe())
        );
    }
    if let Some(eks) = &dns.eks_add_on {
        let _ = writeln!(
            out,
            "  dns add-on      EKS CoreDNS add-on manages {}: {} (see the note)",
            Text(&eks.config_map.to_string()),
            controls(&eks.ownership())
        );
    }
}

fn yes_no(value: bool) -> &'static str {
    if value { "yes" } else { "no" }
}

/// kube-proxy and the CNI agents found, as read.
fn render_dataplane(out: &mut String, facts: &ClusterFacts) {
    let unread = facts
        .gaps
        .iter()
        .any(|gap| gap.starts_with("DaemonSet kube-system/kube-proxy:"));
    let kube_proxy = match &facts.kube_proxy {
        Some(kube_proxy) => kube_proxy_line(kube_proxy),
        None if unread => "not read (see the notes)".to_owned(),
        None => "none found (DaemonSet kube-system/kube-proxy)".to_owned(),
    };
    let _ = writeln!(out, "  kube-proxy      {}", controls(&kube_proxy));
    let mut agents = Vec::new();
    if let Some(cilium) = &facts.cni.cilium {
        agents.push(format!(
            "Cilium {} (kube-proxy-replacement={})",
            Text(cilium.version.as_deref().unwrap_or("(version unknown)")),
            Text(cilium.kube_proxy_replacement.as_deref().unwrap_or("absent"))
        ));
    }
    for (name, agent) in [
        ("Calico", &facts.cni.calico),
        ("Antrea", &facts.cni.antrea),
        ("kube-router", &facts.cni.kube_router),
    ] {
        if let Some(agent) = agent {
            agents.push(agent_line(name, agent));
        }
    }
    if !agents.is_empty() {
        let _ = writeln!(out, "  cni             {}", controls(&agents.join("; ")));
    }
}

fn kube_proxy_line(kube_proxy: &KubeProxyFacts) -> String {
    let described = kube_proxy.describe();
    let mut line = described
        .strip_prefix("kube-proxy ")
        .unwrap_or(&described)
        .to_owned();
    if let Some(from) = &kube_proxy.mode_from {
        line.push_str(&format!(", mode from {from}"));
    }
    match (kube_proxy.ip_mode_gate, &kube_proxy.gate_from) {
        (Some(gate), Some(from)) => {
            line.push_str(&format!("; LoadBalancerIPMode={gate} ({from})"));
        }
        _ => line.push_str("; LoadBalancerIPMode not set (its default)"),
    }
    line
}

fn agent_line(name: &str, agent: &AgentFacts) -> String {
    let mut line = format!(
        "{name} {}",
        Text(agent.version.as_deref().unwrap_or("(version unknown)"))
    );
    let handles = match agent.handles_services {
        Some(true) => "handles Services",
        Some(false) => "leaves Services to kube-proxy",
        None => "Services: unknown",
    };
    match &agent.setting {
        Some(setting) => line.push_str(&format!(" ({handles}: {setting})")),
        None => line.push_str(&format!(" ({handles})")),
    }
    line
}

/// The cloud controller, the cure, the plan's choice, hairpin's probe record, cert-manager.
fn render_cure(out: &mut String, facts: &ClusterFacts) {
    if let Some(ccm) = &facts.ccm {
        let _ = writeln!(
            out,
            "  cloud ctrl      {} computes ipMode itself ({})",
            controls(&ccm.describe()),
            controls(&ccm.setting)
        );
    }
    if let Some(cure) = &facts.cure {
        let _ = writeln!(out, "  cure            {}", controls(&cure.describe()));
        if let Some(delivery) = cure.describe_delivery() {
            let _ = writeln!(out, "  delivery        {}", controls(&delivery));
        }
        if let Some(plan) = &cure.plan {
            let _ = writeln!(out, "  hairpin plans   {}", controls(plan));
        }
        if let Some(probe) = &cure.probe {
            let _ = writeln!(
                out,
                "  native probe    {} (ConfigMap hairpin-native)",
                controls(&probe.describe())
            );
        }
    }
    if let Some(cert_manager) = &facts.cert_manager {
        let _ = writeln!(
            out,
            "  cert-manager    {} ({})",
            Text(
                cert_manager
                    .version
                    .as_deref()
                    .unwrap_or("(version unknown)")
            ),
            Text(&cert_manager.deployment)
        );
    }
}
