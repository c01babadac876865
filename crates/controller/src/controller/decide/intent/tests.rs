//! The intent of a plan, decided without a client: which objects and keys are written, in
//! which order, for each DNS mode and after a mode switch.

use hairpin_planner::dns::KeyChange;
use hairpin_planner::{ClusterSnapshot, DnsMode, WriteEdit};
use k8s_openapi::api::core::v1::ConfigMap;

use super::*;
use crate::edits::{dns_edit, remove_block_edit};

use crate::test_support::{example_cluster as example, planner};

/// Each key edit as (namespace/name, key, what it makes of the key).
fn summary(keys: &[&KeyEdit]) -> Vec<(String, String, String)> {
    keys.iter()
        .map(|k| {
            let change = match &k.change {
                KeyChange::Set(Some(_)) => "set",
                KeyChange::Set(None) => "remove key",
                KeyChange::RemoveBlock => "remove block",
                KeyChange::Blocks(_) => "blocks",
            };
            (k.config_map(), k.key.clone(), change.to_owned())
        })
        .collect()
}

/// Sets key `key` of ConfigMap `namespace/name` in `snapshot` (creating the ConfigMap).
fn put(snapshot: &mut ClusterSnapshot, namespace: &str, name: &str, key: &str, value: &str) {
    let index = snapshot.config_maps.iter().position(|cm| {
        cm.metadata.namespace.as_deref() == Some(namespace)
            && cm.metadata.name.as_deref() == Some(name)
    });
    let index = index.unwrap_or_else(|| {
        let mut cm = ConfigMap::default();
        cm.metadata.namespace = Some(namespace.into());
        cm.metadata.name = Some(name.into());
        snapshot.config_maps.push(cm);
        snapshot.config_maps.len() - 1
    });
    snapshot.config_maps[index]
        .data
        .get_or_insert_default()
        .insert(key.into(), value.into());
}

#[test]
fn a_corefile_plan_writes_its_services_own_keys_and_corefile_block_in_order() {
    let snapshot = example();
    let planner = planner(DnsMode::Corefile);
    let plan = hairpin_planner::desired(&snapshot, &planner);
    let intent = super::intent(&plan, &snapshot, &planner, &Reported::default());
    assert_eq!(intent.services.len(), plan.load_balancers.len());
    assert!(!intent.services.is_empty());
    assert_eq!(intent.gauges, plan_gauges(&plan));
    let DnsIntent::Planned {
        change,
        effects,
        clean_ups,
        target: DnsTarget::Keys(dns_keys),
    } = &intent.dns
    else {
        panic!("a DNS change in keys: {:?}", intent.dns);
    };
    assert_eq!(change.mode, DnsMode::Corefile);
    assert_eq!(*effects, [Effect::Set(Gauge::DnsPlanErrors, 0)]);
    assert!(clean_ups.is_empty(), "{clean_ups:?}");
    assert!(dns_keys[0].primary);
    assert!(dns_keys[1..].iter().all(|k| !k.primary));
    assert!(matches!(dns_keys[0].write.edit, WriteEdit::Blocks { .. }));
    assert_eq!(
        summary(&intent.keys()),
        [
            (
                "hairpin/hairpin-routes".into(),
                "routes.json".into(),
                "set".into()
            ),
            (
                "kube-system/coredns".into(),
                "Corefile".into(),
                "blocks".into()
            ),
        ]
    );
    // The DNS key is the planner's write, edited from the text read at write time; a
    // Corefile key is never created.
    let corefile = intent.keys()[1];
    assert_eq!(*corefile, dns_edit(dns_keys[0].write));
    assert!(!corefile.create_if_missing && !corefile.delete_if_empty_and_ours);
    // hairpin's own key: created when missing, never written over someone else's ConfigMap.
    let routes = intent.keys()[0];
    assert!(routes.create_if_missing && routes.ours_only);
    let (own, edit) = &intent.own_keys[0];
    assert_eq!(own.target(), "hairpin/hairpin-routes/routes.json");
    assert_eq!(edit.as_ref(), Some(routes));
    // The hosts block waits for the hairpin Services' ClusterIPs (none cached yet).
    assert_eq!(intent.own_keys[1].1, None);
}

/// The DNS part's clean-ups and the key edits of the intent.
fn clean_ups<'a>(intent: &'a Intent<'_>) -> &'a [KeyEdit] {
    match &intent.dns {
        DnsIntent::Planned { clean_ups, .. } => clean_ups,
        DnsIntent::NotPlanned { .. } => panic!("no DNS change planned"),
    }
}

#[test]
fn a_mode_switch_removes_what_the_other_mode_wrote_before_the_dns_write() {
    // Corefile mode after custom mode: our coredns-custom key goes, before the Corefile block.
    let mut snapshot = example();
    put(
        &mut snapshot,
        "kube-system",
        "coredns-custom",
        "hairpin.override",
        "# hairpin",
    );
    put(
        &mut snapshot,
        "kube-system",
        "coredns-custom",
        "other.override",
        "# theirs",
    );
    let corefile = planner(DnsMode::Corefile);
    let plan = hairpin_planner::desired(&snapshot, &corefile);
    let intent = super::intent(&plan, &snapshot, &corefile, &Reported::default());
    assert_eq!(
        clean_ups(&intent),
        [KeyEdit::set(
            "kube-system",
            "coredns-custom",
            "hairpin.override",
            None
        )]
    );
    assert_eq!(
        summary(&intent.keys()),
        [
            (
                "hairpin/hairpin-routes".into(),
                "routes.json".into(),
                "set".into()
            ),
            (
                "kube-system/coredns-custom".into(),
                "hairpin.override".into(),
                "remove key".into()
            ),
            (
                "kube-system/coredns".into(),
                "Corefile".into(),
                "blocks".into()
            ),
        ]
    );

    // Custom mode after corefile mode: our Corefile block goes (every other byte kept).
    let mut snapshot = example();
    let written = plan.dns.as_ref().expect("a DNS change").writes[0]
        .desired
        .clone();
    put(
        &mut snapshot,
        "kube-system",
        "coredns",
        "Corefile",
        &written,
    );
    let custom = planner(DnsMode::Custom);
    let plan = hairpin_planner::desired(&snapshot, &custom);
    let intent = super::intent(&plan, &snapshot, &custom, &Reported::default());
    assert_eq!(
        clean_ups(&intent),
        [remove_block_edit("kube-system", "coredns", "Corefile")]
    );
    let keys = summary(&intent.keys());
    assert_eq!(
        keys[1],
        (
            "kube-system/coredns".into(),
            "Corefile".into(),
            "remove block".into()
        )
    );
    assert_eq!(
        keys[2],
        (
            "kube-system/coredns-custom".into(),
            "hairpin.override".into(),
            "set".into()
        ),
        "{keys:?}"
    );

    // external-dns mode: the Corefile block goes, and the DNSEndpoints are the DNS change.
    let external = planner(DnsMode::ExternalDns);
    let plan = hairpin_planner::desired(&snapshot, &external);
    let intent = super::intent(&plan, &snapshot, &external, &Reported::default());
    assert_eq!(
        clean_ups(&intent),
        [remove_block_edit("kube-system", "coredns", "Corefile")]
    );
    let DnsIntent::Planned {
        target: DnsTarget::Endpoints(endpoints),
        ..
    } = &intent.dns
    else {
        panic!("DNSEndpoints: {:?}", intent.dns);
    };
    let planned = plan.dns.as_ref().and_then(|dns| dns.dns_endpoints.as_ref());
    assert!(planned.is_some_and(|planned| std::ptr::eq(planned, *endpoints)));
    assert_eq!(intent.keys().len(), 2, "{:?}", summary(&intent.keys()));
}

#[test]
fn keys_already_as_planned_are_not_written() {
    let mut snapshot = example();
    let planner = planner(DnsMode::Corefile);
    let plan = hairpin_planner::desired(&snapshot, &planner);
    let routes = plan.routes_config_map.data.as_ref().unwrap()[&planner.routes_key].clone();
    let corefile = plan.dns.as_ref().unwrap().writes[0].desired.clone();
    put(
        &mut snapshot,
        "hairpin",
        "hairpin-routes",
        "routes.json",
        &routes,
    );
    put(
        &mut snapshot,
        "kube-system",
        "coredns",
        "Corefile",
        &corefile,
    );
    let plan = hairpin_planner::desired(&snapshot, &planner);
    let intent = super::intent(&plan, &snapshot, &planner, &Reported::default());
    assert!(intent.keys().is_empty(), "{:?}", summary(&intent.keys()));
    // Still listed: a key as planned is where a write fight is seen to be over.
    assert_eq!(intent.own_keys.len(), 2);
    let DnsIntent::Planned {
        target: DnsTarget::Keys(dns_keys),
        ..
    } = &intent.dns
    else {
        panic!("a DNS change in keys: {:?}", intent.dns);
    };
    assert!(dns_keys[0].primary && dns_keys[0].edit.is_none());
}

#[test]
fn no_dns_change_planned_writes_no_dns_key_and_says_why() {
    let snapshot = example();
    let planner = planner(DnsMode::Corefile);
    let mut plan = hairpin_planner::desired(&snapshot, &planner);
    plan.dns = None;
    let intent = super::intent(&plan, &snapshot, &planner, &Reported::default());
    let DnsIntent::NotPlanned { verdict, state } = &intent.dns else {
        panic!("no DNS change: {:?}", intent.dns);
    };
    let (said, why) = dns_not_planned(&plan);
    assert_eq!((verdict, state), (&said, &why));
    assert_eq!(summary(&intent.keys()).len(), 1, "only the routes");
    // The Events of the plan are decided with the rest.
    assert_eq!(
        intent.reports,
        reports(&plan, &snapshot, &Reported::default())
    );
}
