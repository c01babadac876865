//! The pure edits the control loop and `hairpin plan` (`preview`) both write: the proxies'
//! route table, the node agents' hosts block, the DNS keys and blocks, the clean-up after a
//! DNS mode switch, and the fix to name in a write fight. No I/O: each takes the plan, the
//! snapshot and the settings, and returns [`KeyEdit`]s (or text) for [`crate::apply`].
//! A [`KeyEdit`] is data: which key, and the planner's [`KeyChange`] to make of it.

use hairpin_planner::dns::{self, DnsEditError, KeyChange};
use hairpin_planner::{
    ClusterSnapshot, DnsChange, DnsMode, DnsWrite, EKS_FIELD_MANAGER, Plan, PlannerConfig,
    WriteEdit,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ManagedFieldsEntry;

/// A change to one key of one ConfigMap, applied to the key as read before every write attempt
/// ([`crate::apply::write_key`]) or as cached (`hairpin plan`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KeyEdit {
    /// Namespace of the ConfigMap.
    pub namespace: String,
    /// Name of the ConfigMap.
    pub name: String,
    /// The key edited.
    pub key: String,
    /// Create the ConfigMap when it does not exist (for `coredns-custom` and our own).
    pub create_if_missing: bool,
    /// Delete the ConfigMap when the edit leaves it empty and we created it.
    pub delete_if_empty_and_ours: bool,
    /// The ConfigMap is hairpin's own (the routes and hosts tables): an existing one without
    /// hairpin's marks is someone else's and is not written ([`crate::Error::NotOwned`]).
    pub ours_only: bool,
    /// What to make of the key.
    pub change: KeyChange,
}

impl KeyEdit {
    /// `namespace/name`.
    pub fn config_map(&self) -> String {
        format!("{}/{}", self.namespace, self.name)
    }

    /// An edit that sets the key to `value` (or removes it when `None`).
    pub fn set(namespace: &str, name: &str, key: &str, value: Option<String>) -> Self {
        Self {
            namespace: namespace.into(),
            name: name.into(),
            key: key.into(),
            create_if_missing: value.is_some(),
            delete_if_empty_and_ours: true,
            ours_only: false,
            change: KeyChange::Set(value),
        }
    }

    /// The key's value after this edit, from its `current` one: `Ok(None)` removes the key.
    ///
    /// # Errors
    /// The planner's [`DnsEditError`] when the Corefile editor refuses the text (one line whose
    /// quoted text is escaped already: printed as it is).
    pub fn after(&self, current: Option<&str>) -> Result<Option<String>, DnsEditError> {
        dns::apply(&self.change, current)
    }
}

/// An edit that removes our block from a Corefile (leaving every other byte as it was).
pub fn remove_block_edit(namespace: &str, name: &str, key: &str) -> KeyEdit {
    KeyEdit {
        namespace: namespace.into(),
        name: name.into(),
        key: key.into(),
        create_if_missing: false,
        delete_if_empty_and_ours: false,
        ours_only: false,
        change: KeyChange::RemoveBlock,
    }
}

/// The fix to name when another writer keeps reverting hairpin's change to `write`'s
/// ConfigMap. It depends on that writer: the EKS CoreDNS add-on when a `managedFields` entry
/// of the ConfigMap (as read before hairpin's write) is field manager `eks`; else on the
/// ConfigMap (node-local-dns's, `coredns-custom`, CoreDNS's own) and, for CoreDNS's, on
/// whether the Corefile imports `coredns-custom` keys at all (`custom_key_suffix`, from
/// [`hairpin_planner::CorednsFacts`]; kubeadm's and EKS's import none, so `--dns-mode custom`
/// would write a key CoreDNS never reads).
pub fn fight_fix(
    write: &DnsWrite,
    managed_fields: &[ManagedFieldsEntry],
    custom_key_suffix: Option<&str>,
    planner: &PlannerConfig,
) -> String {
    let config_map = &write.config_map;
    let custom = &planner.coredns_custom_config_map;
    let eks = managed_fields
        .iter()
        .any(|entry| entry.manager.as_deref() == Some(EKS_FIELD_MANAGER));
    if eks {
        return format!(
            "ConfigMap {config_map} belongs to the EKS CoreDNS add-on (field manager `{EKS_FIELD_MANAGER}`), which puts its own {key} back: update the add-on with `aws eks update-addon --cluster-name <cluster> --addon-name coredns --resolve-conflicts PRESERVE`, which keeps hairpin's block, or run hairpin with `--dns-mode external-dns`, which writes no kube-system ConfigMap.",
            key = write.key
        );
    }
    if config_map.namespace == planner.node_local_dns_namespace
        && planner
            .node_local_dns_config_maps
            .contains(&config_map.name)
    {
        return format!(
            "ConfigMap {config_map} is node-local-dns's configuration, and whatever installed node-local-dns puts it back (an addon manager in Reconcile mode, kubespray, RKE): exclude it from that tool's reconciliation (e.g. `addonmanager.kubernetes.io/mode: EnsureExists`), or run hairpin with `--node-local-dns off`, which leaves node-local-dns alone and warns about the names it answers from upstream."
        );
    }
    if config_map.namespace == planner.coredns_namespace && config_map.name == *custom {
        return format!(
            "Something also manages {config_map}: exclude it from that tool's reconciliation (e.g. the addon manager's `addonmanager.kubernetes.io/mode: EnsureExists`)."
        );
    }
    match custom_key_suffix {
        Some(suffix) => format!(
            "The CoreDNS ConfigMap is managed by the distribution or an addon manager, and its Corefile imports `{custom}` keys (`*{suffix}`): run hairpin with `--dns-mode custom`, which writes only `{custom}`, or set the addon's mode to EnsureExists."
        ),
        None => format!(
            "The CoreDNS ConfigMap is managed by the distribution or an addon manager, and its Corefile imports no `{custom}` keys: set the addon's mode to EnsureExists (`addonmanager.kubernetes.io/mode`), add hairpin's rules through the distribution's own CoreDNS customization, or run hairpin with `--dns-mode external-dns`, which writes no kube-system ConfigMap."
        ),
    }
}

/// The proxies' route table, when the plan's differs from the cached copy.
pub fn routes_edit(
    plan: &Plan,
    snapshot: &ClusterSnapshot,
    planner: &PlannerConfig,
) -> Option<KeyEdit> {
    let routes = plan
        .routes_config_map
        .data
        .as_ref()
        .and_then(|d| d.get(&planner.routes_key))
        .cloned()
        .unwrap_or_else(|| "[]".into());
    let cached_routes = snapshot
        .config_map(&planner.namespace, &planner.routes_config_map)
        .and_then(|cm| cm.data.as_ref())
        .and_then(|d| d.get(&planner.routes_key));
    (cached_routes != Some(&routes)).then(|| KeyEdit {
        delete_if_empty_and_ours: false,
        ours_only: true,
        ..KeyEdit::set(
            &planner.namespace,
            &planner.routes_config_map,
            &planner.routes_key,
            Some(routes),
        )
    })
}

/// The node agents' hosts block ([`Plan::hosts_block`], both families) as published in our
/// hosts ConfigMap, when it differs from the cached copy. Nothing is published while a
/// hostname still waits for its hairpin Service's ClusterIP (the Service was just created, or
/// its ClusterIP is not cached yet): the node agents would otherwise get a block without those
/// names (an empty one on the first reconcile) and the complete one a moment later. The
/// Service's watch event re-plans once the ClusterIP is known.
pub fn hosts_edit(
    plan: &Plan,
    snapshot: &ClusterSnapshot,
    planner: &PlannerConfig,
) -> Option<KeyEdit> {
    let (entries, waiting) = plan.hosts_block();
    if !waiting.is_empty() {
        tracing::debug!(
            waiting = waiting.len(),
            "hosts block not published yet: hairpin Services without a ClusterIP"
        );
        return None;
    }
    let hosts = hairpin_planner::hosts::entries_json(&entries);
    let cached = snapshot
        .config_map(&planner.namespace, &planner.hosts_config_map)
        .and_then(|cm| cm.data.as_ref())
        .and_then(|d| d.get(&planner.hosts_key));
    (cached != Some(&hosts)).then(|| KeyEdit {
        delete_if_empty_and_ours: false,
        ours_only: true,
        ..KeyEdit::set(
            &planner.namespace,
            &planner.hosts_config_map,
            &planner.hosts_key,
            Some(hosts),
        )
    })
}

/// Leaving the other mode's location clean after a mode switch: our `coredns-custom` key in
/// `corefile` mode, our Corefile block in `custom` mode, and in `external-dns` mode every
/// DNS ConfigMap key hairpin wrote (the same places `hairpin uninstall` cleans).
pub fn mode_switch_edits(
    dns: &DnsChange,
    snapshot: &ClusterSnapshot,
    planner: &PlannerConfig,
) -> Vec<KeyEdit> {
    if dns.mode == DnsMode::ExternalDns {
        return external_dns_cleanup_edits(snapshot, planner);
    }
    let mut edits = Vec::new();
    let custom_has_ours = snapshot
        .config_map(
            &planner.coredns_namespace,
            &planner.coredns_custom_config_map,
        )
        .and_then(|cm| cm.data.as_ref())
        .is_some_and(|d| d.contains_key(&planner.coredns_custom_key));
    if dns.mode == DnsMode::Corefile && custom_has_ours {
        edits.push(KeyEdit::set(
            &planner.coredns_namespace,
            &planner.coredns_custom_config_map,
            &planner.coredns_custom_key,
            None,
        ));
    }
    if dns.mode == DnsMode::Custom {
        for name in &planner.coredns_config_maps {
            let has_block = snapshot
                .config_map(&planner.coredns_namespace, name)
                .and_then(|cm| cm.data.as_ref())
                .and_then(|d| d.get(&planner.corefile_key))
                .is_some_and(|text| text.contains(hairpin_planner::markers::BEGIN_PREFIX));
            if has_block {
                edits.push(remove_block_edit(
                    &planner.coredns_namespace,
                    name,
                    &planner.corefile_key,
                ));
            }
        }
    }
    edits
}

/// In `external-dns` mode hairpin writes no DNS ConfigMap: the blocks and keys an earlier mode
/// left are removed (each by the editor that gives back the original bytes), so the cluster
/// DNS and the DNSEndpoints do not both answer.
fn external_dns_cleanup_edits(snapshot: &ClusterSnapshot, planner: &PlannerConfig) -> Vec<KeyEdit> {
    let has_block = |namespace: &str, name: &str, key: &str| {
        snapshot
            .config_map(namespace, name)
            .and_then(|cm| cm.data.as_ref())
            .and_then(|d| d.get(key))
            .is_some_and(|text| text.contains(hairpin_planner::markers::BEGIN_PREFIX))
    };
    let corefiles = planner.corefile_config_maps();
    let mut edits: Vec<KeyEdit> = corefiles
        .filter(|(namespace, name)| has_block(namespace, name, &planner.corefile_key))
        .map(|(namespace, name)| remove_block_edit(namespace, name, &planner.corefile_key))
        .collect();
    let custom = snapshot
        .config_map(
            &planner.coredns_namespace,
            &planner.coredns_custom_config_map,
        )
        .and_then(|cm| cm.data.as_ref());
    for key in custom.iter().flat_map(|d| d.keys()) {
        if *key == planner.coredns_custom_key {
            edits.push(KeyEdit::set(
                &planner.coredns_namespace,
                &planner.coredns_custom_config_map,
                key,
                None,
            ));
        } else if has_block(
            &planner.coredns_namespace,
            &planner.coredns_custom_config_map,
            key,
        ) {
            edits.push(remove_block_edit(
                &planner.coredns_namespace,
                &planner.coredns_custom_config_map,
                key,
            ));
        }
    }
    edits
}

/// The DNS edit, recomputed from a fresh read on every attempt (so a conflict retry edits
/// what is there now, not what the cache held).
pub fn dns_edit(write: &DnsWrite) -> KeyEdit {
    let (namespace, name) = (&write.config_map.namespace, &write.config_map.name);
    match &write.edit {
        WriteEdit::Key { value } => KeyEdit::set(namespace, name, &write.key, value.clone()),
        WriteEdit::Blocks { .. } => KeyEdit {
            namespace: namespace.clone(),
            name: name.clone(),
            key: write.key.clone(),
            create_if_missing: false,
            delete_if_empty_and_ours: false,
            ours_only: false,
            change: KeyChange::from(&write.edit),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use hairpin_planner::ObjectRef;

    fn write_to(namespace: &str, name: &str, key: &str) -> DnsWrite {
        DnsWrite {
            config_map: ObjectRef {
                namespace: namespace.into(),
                name: name.into(),
            },
            key: key.into(),
            edit: WriteEdit::Key { value: None },
            current: None,
            desired: String::new(),
            changed: true,
            object: None,
        }
    }

    #[test]
    fn the_dns_edit_of_each_write_makes_the_planners_text_from_the_one_read() {
        let snapshot = crate::test_support::example_cluster();
        for mode in [DnsMode::Corefile, DnsMode::Custom] {
            let planner = crate::test_support::planner(mode);
            let plan = hairpin_planner::desired(&snapshot, &planner);
            let dns = plan.dns.as_ref().expect("a DNS change");
            let changed: Vec<&DnsWrite> = dns.writes.iter().filter(|w| w.changed).collect();
            assert!(!changed.is_empty(), "{mode:?}: nothing to write");
            for write in changed {
                let edit = dns_edit(write);
                let after = edit.after(write.current.as_deref()).unwrap();
                assert_eq!(
                    after.as_deref().unwrap_or_default(),
                    write.desired,
                    "{mode:?} {}",
                    write.target()
                );
                // A Corefile key is never created: a missing one is the editor's typed error.
                if let WriteEdit::Blocks { .. } = write.edit {
                    assert!(!edit.create_if_missing);
                    assert_eq!(edit.after(None), Err(DnsEditError::NoCorefile));
                }
            }
        }
        // Removing our block gives back the Corefile as it was before hairpin's write.
        let planner = PlannerConfig {
            dns_mode: DnsMode::Corefile,
            ..PlannerConfig::default()
        };
        let plan = hairpin_planner::desired(&snapshot, &planner);
        let write = &plan.dns.as_ref().unwrap().writes[0];
        assert!(matches!(write.edit, WriteEdit::Blocks { .. }), "{write:?}");
        let edit = remove_block_edit("kube-system", "coredns", &write.key);
        assert_eq!(
            edit.after(Some(&write.desired)).unwrap(),
            write.current.clone()
        );
    }

    #[test]
    fn the_fight_fix_depends_on_the_config_map_and_its_writer() {
        let planner = PlannerConfig::default();
        let node_local = write_to("kube-system", "nodelocaldns", "Corefile");
        let fix = fight_fix(&node_local, &[], None, &planner);
        assert!(
            fix.starts_with("ConfigMap kube-system/nodelocaldns is node-local-dns's configuration")
                && fix.contains("--node-local-dns off"),
            "{fix}"
        );
        assert!(!fix.contains("coredns-custom"), "{fix}");

        let custom = write_to("kube-system", "coredns-custom", "hairpin.override");
        let fix = fight_fix(&custom, &[], None, &planner);
        assert!(
            fix.starts_with("Something also manages kube-system/coredns-custom"),
            "{fix}"
        );

        // EKS's field manager decides, whatever the ConfigMap.
        let eks = ManagedFieldsEntry {
            manager: Some(EKS_FIELD_MANAGER.into()),
            operation: Some("Apply".into()),
            ..ManagedFieldsEntry::default()
        };
        let coredns = write_to("kube-system", "coredns", "Corefile");
        let fix = fight_fix(&coredns, &[eks], None, &planner);
        assert!(fix.contains("--resolve-conflicts PRESERVE"), "{fix}");
        // A Corefile that imports no coredns-custom keys (or one hairpin cannot read).
        let fix = fight_fix(&coredns, &[], None, &planner);
        assert!(fix.contains("imports no `coredns-custom` keys"), "{fix}");
        let fix = fight_fix(&coredns, &[], Some(".override"), &planner);
        assert!(
            fix.contains("imports `coredns-custom` keys (`*.override`)")
                && fix.contains("--dns-mode custom"),
            "{fix}"
        );
    }
}
