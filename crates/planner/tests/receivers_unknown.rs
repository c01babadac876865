//! Unknown, never a false off (issue 38): over every receiver fixture, every PROXY annotation a
//! load balancer may carry and every way its setting can become unreadable (the ConfigMaps or
//! custom resources it names missing from the snapshot, the container ports a named
//! `targetPort` goes through missing, a port sent to no listener, an EnvoyFilter that may patch the listeners), a plan never
//! says BROKEN for a receiver (or a port of it) whose setting could not be read, and never
//! leaves such a load balancer alone as a mismatch: the annotations decide, as without it.

use hairpin_planner::load::load_yaml;
use hairpin_planner::receivers::{Requirement, receiver_of};
use hairpin_planner::{ClusterSnapshot, PlannerConfig, SkipReason, discover};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;

const ANNOTATIONS: &[Option<(&str, &str)>] = &[
    None,
    Some(("load-balancer.hetzner.cloud/uses-proxyprotocol", "true")),
    Some((
        "service.beta.kubernetes.io/do-loadbalancer-enable-proxy-protocol",
        "true",
    )),
    Some((
        "service.beta.kubernetes.io/aws-load-balancer-proxy-protocol",
        "*",
    )),
    Some(("hairpin.io/proxy-protocol", "v2")),
    Some(("hairpin.io/proxy-protocol", "off")),
];

/// The ways a receiver's setting becomes unreadable, as bits.
const DROP_CONFIG_MAPS: u8 = 1;
const DROP_OBJECTS: u8 = 2;
const DROP_CONTAINER_PORTS: u8 = 4;
const ADD_ENVOY_FILTER: u8 = 8;
const RETARGET_FIRST_PORT: u8 = 16;

fn fixtures() -> Vec<(String, String)> {
    let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/receivers");
    let mut out: Vec<(String, String)> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .map(|p| {
            let name = p.file_name().unwrap().to_string_lossy().into_owned();
            (name, std::fs::read_to_string(&p).unwrap())
        })
        .collect();
    out.sort();
    out
}

fn mutated(text: &str, annotation: Option<(&str, &str)>, mutation: u8) -> ClusterSnapshot {
    let mut s = ClusterSnapshot::default();
    load_yaml(&mut s, "fixture", text).unwrap();
    if let Some((k, v)) = annotation {
        s.services[0]
            .metadata
            .annotations
            .get_or_insert_with(Default::default)
            .insert(k.to_owned(), v.to_owned());
    }
    if mutation & DROP_CONFIG_MAPS != 0 {
        s.config_maps.clear();
    }
    if mutation & DROP_OBJECTS != 0 {
        s.receivers.objects.retain(|o| o.kind == "GatewayClass");
    }
    if mutation & DROP_CONTAINER_PORTS != 0 {
        for w in &mut s.receivers.workloads {
            for c in w
                .template
                .spec
                .iter_mut()
                .flat_map(|s| s.containers.iter_mut())
            {
                c.ports = None;
            }
        }
    }
    if mutation & RETARGET_FIRST_PORT != 0
        && let Some(port) = s.services[0]
            .spec
            .as_mut()
            .and_then(|spec| spec.ports.as_mut())
            .and_then(|ports| ports.first_mut())
    {
        // A container port no listener is bound to.
        port.target_port = Some(IntOrString::Int(1));
    }
    if mutation & ADD_ENVOY_FILTER != 0 {
        let namespace = s.services[0].metadata.namespace.clone();
        let filter = serde_json::json!({
            "apiVersion": "networking.istio.io/v1alpha3",
            "kind": "EnvoyFilter",
            "metadata": {"name": "proxy-protocol", "namespace": namespace},
            "spec": {"configPatches": [{"applyTo": "LISTENER", "patch": {"operation": "MERGE",
                "value": {"listener_filters": [{"name": "envoy.filters.listener.proxy_protocol"}]}}}]}
        });
        s.receivers
            .objects
            .push(hairpin_planner::workloads::ReceiverObjects::dynamic_from_value(filter).unwrap());
    }
    s
}

#[test]
fn a_setting_that_could_not_be_read_never_raises_broken() {
    let config = PlannerConfig::default();
    let (mut unknown_whole, mut unknown_ports, mut cases) = (0, 0, 0);
    for (name, text) in fixtures() {
        for annotation in ANNOTATIONS {
            for mutation in 0..32u8 {
                let s = mutated(&text, *annotation, mutation);
                let svc = &s.services[0];
                let Some(receiver) = receiver_of(&s, svc) else {
                    continue;
                };
                cases += 1;
                let d = discover(&s, &config);
                let case = format!("{name} {annotation:?} mutation {mutation}: {receiver:?}");
                let subject = format!(
                    "Service {}/{}",
                    svc.metadata.namespace.as_deref().unwrap_or_default(),
                    svc.metadata.name.as_deref().unwrap_or_default()
                );
                let broken: Vec<&str> = d
                    .warnings
                    .iter()
                    .filter(|w| w.subject == subject && w.message.starts_with("BROKEN"))
                    .map(|w| w.message.as_str())
                    .collect();
                if receiver.requirement == Requirement::Unknown {
                    unknown_whole += 1;
                    assert!(broken.is_empty(), "{case}: {broken:?}");
                    assert!(
                        d.not_needed
                            .iter()
                            .all(|n| n.reason != SkipReason::ReceiverMismatch),
                        "{case}"
                    );
                    assert!(
                        d.load_balancers
                            .iter()
                            .all(|l| l.receiver_mismatch.is_none()),
                        "{case}"
                    );
                }
                for port in &receiver.ports {
                    if port.requirement == Requirement::Unknown {
                        unknown_ports += 1;
                        let on_port = format!("on port {}:", port.port);
                        assert!(
                            broken.iter().all(|b| !b.contains(&on_port)),
                            "{case}: {broken:?}"
                        );
                    }
                }
            }
        }
    }
    // The mutations do make settings unreadable (else this test could not fail).
    println!("{cases} cases, {unknown_whole} unknown receivers, {unknown_ports} unknown ports");
    assert!(unknown_whole > cases / 10, "{unknown_whole} of {cases}");
    assert!(unknown_ports > 0);
}

/// The same property on the receivers the mutations make per port: an unknown port is never
/// warned about, while a port that is read still is (the warning is per port, not lost).
#[test]
fn an_unknown_port_is_not_warned_about_while_a_read_one_is() {
    let text = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/fixtures/receivers/kong-tls-only.yaml"
    ))
    .unwrap()
    // Port 80 now goes to a container port no listener is bound to.
    .replacen("targetPort: 8000", "targetPort: 8001", 1);
    let s = mutated(
        &text,
        Some(("load-balancer.hetzner.cloud/uses-proxyprotocol", "true")),
        0,
    );
    let r = receiver_of(&s, &s.services[0]).unwrap();
    assert_eq!(r.on_port(80).requirement, Requirement::Unknown, "{r:?}");
    let d = discover(&s, &PlannerConfig::default());
    assert!(d.warnings.is_empty(), "{:?}", d.warnings);
    assert_eq!(d.load_balancers.len(), 1);
}
