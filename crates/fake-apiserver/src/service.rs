//! What kube-apiserver does to a Service on its way in: the defaults, the ClusterIP and
//! NodePort allocation, keeping allocated values a client left out of an update, and refusing
//! a changed ClusterIP (`pkg/registry/core/service`, 1.31).

use std::collections::BTreeSet;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use serde_json::Value;

use super::validation::Cause;

/// The fake's service CIDRs: IPv4 `10.96.0.0/12` (kubeadm's default, unless a test sets
/// another) and, when dual-stack, IPv6 `fd00:10:96::/108`.
const V4_DEFAULT: (Ipv4Addr, u8) = (Ipv4Addr::new(10, 96, 0, 0), 12);
const V6_BASE: u128 = 0xfd00_0010_0096_0000_0000_0000_0000_0000;
const V6_SIZE: u128 = 1 << 20;
/// The lowest addresses are left alone (the `kubernetes` Service, DNS): allocation starts here.
const FIRST_HOST: u32 = 10;
const NODE_PORTS: std::ops::RangeInclusive<i64> = 30000..=32767;

/// The cluster's service networking, as the fake pretends it is configured: its service
/// CIDRs' families, the primary (the default family) first.
#[derive(Clone, Copy, Debug)]
pub(crate) struct ServiceNet {
    pub(crate) families: &'static [&'static str],
    /// The IPv4 range (`--service-cluster-ip-range`), when not the default.
    pub(crate) v4: Option<(Ipv4Addr, u8)>,
    /// The `LoadBalancerIPMode` feature gate (on by default since 1.30). Off, the server
    /// neither defaults `ipMode` nor keeps one a client writes, unless the old object already
    /// had one (`dropDisabledStatusFields`, `pkg/api/service/util.go`).
    pub(crate) ip_mode_gate: bool,
}

impl Default for ServiceNet {
    /// IPv4 only, as most clusters are.
    fn default() -> Self {
        Self::IPV4
    }
}

impl ServiceNet {
    pub(crate) const IPV4: Self = Self {
        families: &["IPv4"],
        v4: None,
        ip_mode_gate: true,
    };
    pub(crate) const IPV6: Self = Self {
        families: &["IPv6"],
        v4: None,
        ip_mode_gate: true,
    };
    pub(crate) const DUAL_STACK: Self = Self {
        families: &["IPv4", "IPv6"],
        v4: None,
        ip_mode_gate: true,
    };

    fn dual_stack(self) -> bool {
        self.families.len() == 2
    }

    fn has(self, family: &str) -> bool {
        self.families.contains(&family)
    }

    /// First address and size of the IPv4 range.
    fn v4_range(self) -> (u32, u32) {
        let (base, prefix) = self.v4.unwrap_or(V4_DEFAULT);
        (
            u32::from(base),
            1u32 << (32 - u32::from(prefix.clamp(8, 30))),
        )
    }

    fn in_range(self, ip: &IpAddr) -> bool {
        match ip {
            IpAddr::V4(v4) => {
                let (base, size) = self.v4_range();
                u32::from(*v4).wrapping_sub(base) < size
            }
            IpAddr::V6(v6) => u128::from(*v6).wrapping_sub(V6_BASE) < V6_SIZE,
        }
    }

    fn range_of(self, family: &str) -> String {
        if family == "IPv4" {
            let (base, prefix) = self.v4.unwrap_or(V4_DEFAULT);
            format!("{base}/{prefix}")
        } else {
            "fd00:10:96::/108".into()
        }
    }
}

fn other_family(family: &str) -> &'static str {
    if family == "IPv4" { "IPv6" } else { "IPv4" }
}

fn strings(value: &Value) -> Vec<String> {
    value
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|v| v.as_str().map(str::to_owned))
        .collect()
}

/// Addresses and node ports already taken by other Services.
#[derive(Debug, Default)]
pub(crate) struct Allocated {
    pub(crate) ips: BTreeSet<IpAddr>,
    pub(crate) node_ports: BTreeSet<i64>,
}

impl Allocated {
    /// Collects what `services` hold.
    pub(crate) fn of<'a>(services: impl Iterator<Item = &'a Value>) -> Self {
        let mut taken = Self::default();
        for svc in services {
            for ip in svc["spec"]["clusterIPs"].as_array().into_iter().flatten() {
                if let Some(ip) = ip.as_str().and_then(|ip| ip.parse().ok()) {
                    taken.ips.insert(ip);
                }
            }
            for port in svc["spec"]["ports"].as_array().into_iter().flatten() {
                if let Some(node_port) = port["nodePort"].as_i64() {
                    taken.node_ports.insert(node_port);
                }
            }
        }
        taken
    }
}

fn family(ip: &IpAddr) -> &'static str {
    if ip.is_ipv4() { "IPv4" } else { "IPv6" }
}

fn needs_cluster_ip(svc: &Value) -> bool {
    svc["spec"]["type"].as_str() != Some("ExternalName")
}

fn needs_node_port(svc: &Value) -> bool {
    matches!(
        svc["spec"]["type"].as_str(),
        Some("NodePort" | "LoadBalancer")
    )
}

fn absent(value: &Value) -> bool {
    match value {
        Value::Null => true,
        Value::String(s) => s.is_empty(),
        Value::Array(a) => a.is_empty(),
        _ => false,
    }
}

fn set_default(target: &mut Value, key: &str, value: impl Into<Value>) {
    if absent(&target[key]) {
        target[key] = value.into();
    }
}

/// Defaults `svc`, allocates what it needs, and (on update) keeps what `old` had allocated.
/// Returns why the real server would refuse it (as 422 causes).
pub(crate) fn admit(
    net: ServiceNet,
    taken: &Allocated,
    svc: &mut Value,
    old: Option<&Value>,
) -> Vec<Cause> {
    if !svc["spec"].is_object() {
        svc["spec"] = serde_json::json!({});
    }
    set_default(&mut svc["spec"], "type", "ClusterIP");
    set_default(&mut svc["spec"], "sessionAffinity", "None");
    if let Some(ports) = svc["spec"]["ports"].as_array_mut() {
        for port in ports {
            set_default(port, "protocol", "TCP");
            if absent(&port["targetPort"]) {
                port["targetPort"] = port["port"].clone();
            }
        }
    }
    if let Some(old) = old {
        keep_allocated(svc, old);
    }
    let mut causes = Vec::new();
    if needs_cluster_ip(svc) {
        causes.extend(cluster_ips(net, taken, svc, old));
        set_default(&mut svc["spec"], "internalTrafficPolicy", "Cluster");
    }
    if needs_node_port(svc) {
        set_default(&mut svc["spec"], "externalTrafficPolicy", "Cluster");
        if svc["spec"]["type"] == "LoadBalancer" {
            set_default(&mut svc["spec"], "allocateLoadBalancerNodePorts", true);
        }
        let mut next = *NODE_PORTS.start();
        let mut used = taken.node_ports.clone();
        for port in svc["spec"]["ports"].as_array_mut().into_iter().flatten() {
            if port["nodePort"].as_i64().is_none_or(|p| p == 0) {
                while used.contains(&next) {
                    next += 1;
                }
                port["nodePort"] = next.into();
                used.insert(next);
            }
        }
    }
    if svc["status"].is_null() {
        svc["status"] = serde_json::json!({ "loadBalancer": {} });
    }
    if !net.ip_mode_gate && !ip_mode_in_use(old) {
        let points = svc
            .pointer_mut("/status/loadBalancer/ingress")
            .and_then(Value::as_array_mut);
        for ingress in points.into_iter().flatten() {
            if let Some(point) = ingress.as_object_mut() {
                point.remove("ipMode");
            }
        }
        return causes;
    }
    // `ipMode` defaults to `VIP` wherever an ingress point has an `ip` (LoadBalancerIPMode,
    // on by default since 1.30).
    let points = svc
        .pointer_mut("/status/loadBalancer/ingress")
        .and_then(Value::as_array_mut);
    for ingress in points.into_iter().flatten() {
        if !absent(&ingress["ip"]) && absent(&ingress["ipMode"]) {
            ingress["ipMode"] = "VIP".into();
        }
    }
    causes
}

/// Whether `old`'s status has an `ipMode` anywhere (`loadbalancerIPModeInUse`).
fn ip_mode_in_use(old: Option<&Value>) -> bool {
    old.and_then(|o| o.pointer("/status/loadBalancer/ingress"))
        .and_then(Value::as_array)
        .is_some_and(|points| points.iter().any(|p| !absent(&p["ipMode"])))
}

/// `patchAllocatedValues` and `NormalizeClusterIPs` of an update: values the server allocated
/// and the client left out are kept, so resubmitting a manifest works.
fn keep_allocated(svc: &mut Value, old: &Value) {
    if needs_cluster_ip(svc) && needs_cluster_ip(old) {
        let (old_ip, old_ips) = (&old["spec"]["clusterIP"], &old["spec"]["clusterIPs"]);
        let spec = &mut svc["spec"];
        if absent(&spec["clusterIP"]) {
            spec["clusterIP"] = old_ip.clone();
            if absent(&spec["clusterIPs"]) {
                spec["clusterIPs"] = old_ips.clone();
            }
        } else if absent(&spec["clusterIPs"]) {
            spec["clusterIPs"] = if spec["clusterIP"] == *old_ip {
                old_ips.clone()
            } else {
                Value::from(vec![spec["clusterIP"].clone()])
            };
        }
        for key in ["ipFamilies", "ipFamilyPolicy"] {
            if absent(&spec[key]) {
                spec[key] = old["spec"][key].clone();
            }
        }
    }
    if needs_node_port(svc) && needs_node_port(old) {
        let old_ports = old["spec"]["ports"].as_array().cloned().unwrap_or_default();
        for port in svc["spec"]["ports"].as_array_mut().into_iter().flatten() {
            if port["nodePort"].as_i64().is_none_or(|p| p == 0)
                && let Some(before) = old_ports
                    .iter()
                    .find(|o| o["port"] == port["port"] && o["protocol"] == port["protocol"])
            {
                port["nodePort"] = before["nodePort"].clone();
            }
        }
        if absent(&svc["spec"]["healthCheckNodePort"]) {
            svc["spec"]["healthCheckNodePort"] = old["spec"]["healthCheckNodePort"].clone();
        }
    }
}

/// The ClusterIP fields: families and policy inferred, addresses allocated or checked
/// (`initIPFamilyFields` and `allocClusterIPs` of the real server's `alloc.go`).
fn cluster_ips(
    net: ServiceNet,
    taken: &Allocated,
    svc: &mut Value,
    old: Option<&Value>,
) -> Vec<Cause> {
    let mut causes = Vec::new();
    let spec = &mut svc["spec"];
    if absent(&spec["clusterIPs"]) && !absent(&spec["clusterIP"]) {
        spec["clusterIPs"] = Value::from(vec![spec["clusterIP"].clone()]);
    }
    let headless = spec["clusterIP"] == "None";
    let policy = spec["ipFamilyPolicy"].as_str().map(str::to_owned);
    let mut requested = strings(&spec["clusterIPs"]);
    let mut families = strings(&spec["ipFamilies"]);
    if let Some(old) = old {
        release_secondary(
            old,
            policy.as_deref(),
            &mut requested,
            &mut families,
            &mut causes,
        );
    }
    let parsed = parse_requested(&requested, headless, &mut causes);
    // Without a policy: dual-stack when two addresses or families are asked for.
    let policy = policy.unwrap_or_else(|| {
        let dual = requested.len() == 2 || families.len() == 2;
        if dual {
            "RequireDualStack"
        } else {
            "SingleStack"
        }
        .to_owned()
    });
    if !check_policy(&policy, requested.len(), families.len(), &mut causes) {
        return causes;
    }
    infer_families(net, &requested, &parsed, &mut families, &mut causes);
    if !causes.is_empty() {
        return causes;
    }
    check_families(net, &policy, &families, &mut causes);
    if !causes.is_empty() {
        return causes;
    }
    if families.is_empty() {
        families.push(net.families[0].to_owned());
    }
    // Dual-stack asked for and offered: the missing family is added.
    if policy != "SingleStack" && families.len() == 1 && net.dual_stack() {
        families.push(other_family(&families[0]).to_owned());
    }
    let mut ips: Vec<Value> = requested
        .iter()
        .map(|ip| Value::from(ip.as_str()))
        .collect();
    if !headless {
        for f in families.iter().skip(ips.len()) {
            ips.push(allocate(net, taken, f, &ips).to_string().into());
        }
        if old.is_none() {
            check_requested_free(net, taken, &requested, &parsed, &mut causes);
        }
    }
    spec["clusterIPs"] = Value::from(ips.clone());
    spec["clusterIP"] = ips.first().cloned().unwrap_or(Value::Null);
    spec["ipFamilies"] = families.into();
    spec["ipFamilyPolicy"] = policy.into();
    if let Some(old) = old
        && needs_cluster_ip(old)
        && old["spec"]["clusterIP"] != "None"
    {
        check_unchanged(old, &spec["clusterIPs"], &mut causes);
    }
    causes
}

/// The ClusterIPs asked for, parsed; each one that is not an address (nor `None` for a
/// headless Service) is a cause.
fn parse_requested(
    requested: &[String],
    headless: bool,
    causes: &mut Vec<Cause>,
) -> Vec<Option<IpAddr>> {
    let parsed: Vec<Option<IpAddr>> = requested.iter().map(|ip| ip.parse().ok()).collect();
    for (i, (text, ip)) in requested.iter().zip(&parsed).enumerate() {
        if ip.is_none() && !(headless && text == "None") {
            causes.push(Cause::invalid(
                format!("spec.clusterIPs[{i}]"),
                &text.as_str().into(),
                "must be a valid IP address, (e.g. 10.9.8.7 or 2001:db8::ffff)",
            ));
        }
    }
    parsed
}

/// An update: going single-stack with the ClusterIPs (families) left as they were releases
/// the secondary one; any other policy may not drop it.
fn release_secondary(
    old: &Value,
    policy: Option<&str>,
    requested: &mut Vec<String>,
    families: &mut Vec<String>,
    causes: &mut Vec<Cause>,
) {
    let (old_ips, old_families) = (
        strings(&old["spec"]["clusterIPs"]),
        strings(&old["spec"]["ipFamilies"]),
    );
    if policy == Some("SingleStack") {
        if *requested == old_ips && requested.len() > 1 {
            requested.truncate(1);
        }
        if *families == old_families && families.len() > 1 {
            families.truncate(1);
        }
        return;
    }
    if requested.len() < old_ips.len() {
        causes.push(Cause::invalid(
            "spec.ipFamilyPolicy",
            &policy.into(),
            "must be 'SingleStack' to release the secondary cluster IP",
        ));
    }
    if families.len() < old_families.len() {
        causes.push(Cause::invalid(
            "spec.ipFamilyPolicy",
            &policy.into(),
            "must be 'SingleStack' to release the secondary IP family",
        ));
    }
}

/// The policy is a known one, and a single-stack one asks for one address and one family.
/// False when the policy is unknown: nothing more can be checked.
fn check_policy(policy: &str, ips: usize, families: usize, causes: &mut Vec<Cause>) -> bool {
    const POLICIES: [&str; 3] = ["SingleStack", "PreferDualStack", "RequireDualStack"];
    if !POLICIES.contains(&policy) {
        causes.push(Cause::invalid(
            "spec.ipFamilyPolicy",
            &policy.into(),
            "must be one of SingleStack, PreferDualStack, RequireDualStack",
        ));
        return false;
    }
    if policy == "SingleStack" {
        for (what, count) in [("cluster IPs", ips), ("IP families", families)] {
            if count == 2 {
                causes.push(Cause::invalid(
                    "spec.ipFamilyPolicy",
                    &policy.into(),
                    &format!("must be 'RequireDualStack' or 'PreferDualStack' when multiple {what} are specified"),
                ));
            }
        }
    }
    true
}

/// Families inferred from the ClusterIPs given beyond the families given.
fn infer_families(
    net: ServiceNet,
    requested: &[String],
    parsed: &[Option<IpAddr>],
    families: &mut Vec<String>,
    causes: &mut Vec<Cause>,
) {
    for (i, ip) in parsed.iter().enumerate().skip(families.len()) {
        let Some(ip) = ip else { break };
        if net.has(family(ip)) {
            families.push(family(ip).to_owned());
        } else {
            causes.push(Cause::invalid(
                format!("spec.clusterIPs[{i}]"),
                &Value::from(requested.to_vec()),
                &format!("{} is not configured on this cluster", family(ip)),
            ));
        }
    }
}

/// The families (and dual-stack, when required) are configured on this cluster.
fn check_families(net: ServiceNet, policy: &str, families: &[String], causes: &mut Vec<Cause>) {
    if policy == "RequireDualStack" && !net.dual_stack() {
        causes.push(Cause::invalid(
            "spec.ipFamilyPolicy",
            &policy.into(),
            "this cluster is not configured for dual-stack services",
        ));
    }
    for (i, f) in families.iter().enumerate() {
        if !net.has(f) {
            causes.push(Cause::invalid(
                format!("spec.ipFamilies[{i}]"),
                &f.as_str().into(),
                "not configured on this cluster",
            ));
        }
    }
}

/// On create, each address asked for is in the service range and not allocated yet.
fn check_requested_free(
    net: ServiceNet,
    taken: &Allocated,
    requested: &[String],
    parsed: &[Option<IpAddr>],
    causes: &mut Vec<Cause>,
) {
    for ip in parsed.iter().flatten() {
        let why = if !net.in_range(ip) {
            format!(
                "failed to allocate IP {ip}: provided IP is not in the valid range. The range of valid IPs is {}",
                net.range_of(family(ip))
            )
        } else if taken.ips.contains(ip) {
            format!("failed to allocate IP {ip}: provided IP is already allocated")
        } else {
            continue;
        };
        causes.push(Cause::invalid(
            "spec.clusterIPs",
            &Value::from(requested.to_vec()),
            &why,
        ));
    }
}

/// On update, an allocated ClusterIP may not change.
fn check_unchanged(old: &Value, cluster_ips: &Value, causes: &mut Vec<Cause>) {
    for (i, before) in old["spec"]["clusterIPs"]
        .as_array()
        .into_iter()
        .flatten()
        .enumerate()
    {
        if cluster_ips.get(i).is_some_and(|now| now != before) {
            causes.push(Cause::invalid(
                format!("spec.clusterIPs[{i}]"),
                cluster_ips,
                "may not change once set",
            ));
        }
    }
}

/// The lowest free address of `family` (and not among `also`).
fn allocate(net: ServiceNet, taken: &Allocated, family: &str, also: &[Value]) -> IpAddr {
    let used = |ip: &IpAddr| {
        taken.ips.contains(ip) || also.iter().any(|v| v.as_str() == Some(&ip.to_string()))
    };
    (u128::from(FIRST_HOST)..)
        .map(|offset| {
            if family == "IPv4" {
                IpAddr::V4(Ipv4Addr::from(net.v4_range().0 + offset as u32))
            } else {
                IpAddr::V6(Ipv6Addr::from(V6_BASE + offset))
            }
        })
        .find(|ip| !used(ip))
        .expect("the service range is far larger than any test")
}
