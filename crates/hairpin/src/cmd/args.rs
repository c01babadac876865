//! Argument groups shared by several subcommands (pulled in with `#[command(flatten)]`).

/// hairpin's namespace and the ConfigMap in it holding the node agents' hosts block: the
/// controller (and `hairpin plan`) publish it there, each node agent follows it.
#[derive(Debug, Clone, clap::Args)]
pub(crate) struct HostsConfigMapArgs {
    /// hairpin's namespace (`-n`, as with kubectl: the namespace hairpin is installed in):
    /// hairpin Services and the routes and hosts ConfigMaps live here.
    #[arg(
        long,
        short = 'n',
        env = "HAIRPIN_NAMESPACE",
        default_value = "hairpin"
    )]
    pub(crate) namespace: String,

    /// Name of the ConfigMap (in `--namespace`) holding the node agents' hosts block (key
    /// `hosts.json`).
    #[arg(
        long = "hosts-configmap",
        env = "HAIRPIN_HOSTS_CONFIGMAP",
        default_value = "hairpin-hosts"
    )]
    pub(crate) hosts_config_map: String,
}

/// A ConfigMap named on the command line: `NAMESPACE/NAME`, the form every
/// `--routes-configmap` takes, or a bare `NAME` where the command has a namespace of its own
/// to complete it with.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ConfigMapRef {
    /// None for a bare `NAME`.
    pub(crate) namespace: Option<String>,
    pub(crate) name: String,
}

/// `NAMESPACE/NAME` or a bare `NAME`.
pub(crate) fn parse_configmap_ref(value: &str) -> Result<ConfigMapRef, String> {
    let (namespace, name) = match value.split_once('/') {
        Some((namespace, name)) => (Some(namespace), name),
        None => (None, value),
    };
    if namespace.is_some_and(str::is_empty) || name.is_empty() || name.contains('/') {
        return Err(format!(
            "expected NAMESPACE/NAME, e.g. hairpin/hairpin-routes, not {value:?}"
        ));
    }
    Ok(ConfigMapRef {
        namespace: namespace.map(str::to_owned),
        name: name.to_owned(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn configmap_refs_are_namespace_slash_name_or_a_bare_name() {
        assert_eq!(
            parse_configmap_ref("hairpin/hairpin-routes"),
            Ok(ConfigMapRef {
                namespace: Some("hairpin".into()),
                name: "hairpin-routes".into()
            })
        );
        assert_eq!(
            parse_configmap_ref("hairpin-routes"),
            Ok(ConfigMapRef {
                namespace: None,
                name: "hairpin-routes".into()
            })
        );
        for bad in ["", "/name", "ns/", "a/b/c"] {
            let err = parse_configmap_ref(bad).unwrap_err();
            assert!(err.contains("NAMESPACE/NAME"), "{bad:?}: {err}");
        }
    }
}

/// The controller's own objects by name: its Deployment, its ServiceAccount and RBAC, and its
/// Role and RoleBinding in the CoreDNS namespace. The removal guard holds them with its
/// finalizer (`hairpin.io/restore`) while it restores (docs/controller.md, "Removal"); `hairpin
/// uninstall` removes that finalizer, so their deletion waits on nothing, and owns the fence
/// by the Deployment.
#[derive(Debug, Clone, clap::Args)]
pub(crate) struct OwnObjectsArgs {
    /// The controller Deployment in `--namespace`: the fence Lease is owned by it (it goes with
    /// the Deployment), and the removal guard holds it.
    #[arg(
        long,
        env = "HAIRPIN_CONTROLLER_DEPLOYMENT",
        default_value = "hairpin-controller"
    )]
    pub(crate) controller_deployment: String,

    /// The controller's ServiceAccount, Role and RoleBinding in `--namespace`, and its
    /// ClusterRole and ClusterRoleBinding.
    #[arg(long, env = "HAIRPIN_RBAC_NAME", default_value = "hairpin-controller")]
    pub(crate) rbac_name: String,

    /// The controller's Role and RoleBinding in the CoreDNS namespace.
    #[arg(
        long,
        env = "HAIRPIN_COREDNS_RBAC_NAME",
        default_value = "hairpin-coredns"
    )]
    pub(crate) coredns_rbac_name: String,
}

impl OwnObjectsArgs {
    /// The removal guard's names, in `namespace` and `coredns_namespace`; the rest defaults.
    pub(crate) fn removal_params(
        &self,
        namespace: &str,
        coredns_namespace: &str,
    ) -> hairpin_controller::removal::RemovalParams {
        hairpin_controller::removal::RemovalParams {
            deployment: self.controller_deployment.clone(),
            rbac_name: self.rbac_name.clone(),
            coredns_rbac_name: self.coredns_rbac_name.clone(),
            ..hairpin_controller::removal::RemovalParams::new(namespace, coredns_namespace)
        }
    }
}
