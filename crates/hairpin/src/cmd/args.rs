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
