//! `hairpin plan`: print what hairpin would write, for cluster objects read from YAML files
//! (offline) or from the cluster itself (read-only, what the controller would write now).

use std::collections::BTreeMap;
use std::io::Read as _;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use anyhow::Context as _;
use hairpin_controller::client::ClientArgs;
use hairpin_runtime::{Builder, OnSignal};

use crate::cmd::args::{ConfigMapRef, HostsConfigMapArgs, parse_configmap_ref};
use hairpin_controller::preview::{self, Observed};
use hairpin_planner::StubNameserver;
use hairpin_planner::admission::parse_host_list;
use hairpin_planner::name::Host;
use hairpin_planner::{AdmissionConfig, NamespacePolicy};
use hairpin_planner::{
    ClusterSnapshot, CureMode, DnsMode, NodeLocalDns, PlannerConfig, VerifyMode, desired, load,
    render,
};

/// Planner settings, shared by every command that computes a plan.
#[derive(Debug, Clone, clap::Args)]
pub(crate) struct PlannerArgs {
    #[command(flatten)]
    pub(crate) hosts: HostsConfigMapArgs,
    /// Labels of the proxy pods, `key=value,...`; hairpin Services select them.
    #[arg(
        long,
        env = "HAIRPIN_PROXY_SELECTOR",
        default_value = "app.kubernetes.io/name=hairpin,app.kubernetes.io/component=proxy",
        value_parser = parse_labels
    )]
    pub(crate) proxy_selector: BTreeMap<String, String>,
    /// Namespace of the CoreDNS ConfigMaps.
    #[arg(long, env = "HAIRPIN_COREDNS_NAMESPACE", default_value = "kube-system")]
    pub(crate) coredns_namespace: String,
    /// Candidate names of the CoreDNS ConfigMap, tried in order.
    #[arg(
        long = "coredns-configmap",
        env = "HAIRPIN_COREDNS_CONFIGMAPS",
        value_delimiter = ',',
        default_value = "coredns,rke2-coredns-rke2-coredns,coredns-base,kube-dns"
    )]
    pub(crate) coredns_config_maps: Vec<String>,
    /// Key of the Corefile in the CoreDNS ConfigMap.
    #[arg(long, env = "HAIRPIN_COREFILE_KEY", default_value = "Corefile")]
    pub(crate) corefile_key: String,
    /// Name of the `coredns-custom` ConfigMap.
    #[arg(
        long = "coredns-custom-configmap",
        env = "HAIRPIN_COREDNS_CUSTOM_CONFIGMAP",
        default_value = "coredns-custom"
    )]
    pub(crate) coredns_custom_config_map: String,
    /// Our key in the `coredns-custom` ConfigMap.
    #[arg(
        long,
        env = "HAIRPIN_COREDNS_CUSTOM_KEY",
        default_value = "hairpin.override"
    )]
    pub(crate) coredns_custom_key: String,
    /// Names of node-local-dns ConfigMaps (`node-local-dns` from the Kubernetes addon and RKE,
    /// `nodelocaldns` from kubespray); each one found gets hairpin's answers in its root
    /// server block.
    #[arg(
        long = "node-local-dns-configmap",
        env = "HAIRPIN_NODE_LOCAL_DNS_CONFIGMAPS",
        value_delimiter = ',',
        default_value = "node-local-dns,nodelocaldns"
    )]
    pub(crate) node_local_dns_config_maps: Vec<String>,
    /// Namespace of the node-local-dns ConfigMaps.
    #[arg(
        long,
        env = "HAIRPIN_NODE_LOCAL_DNS_NAMESPACE",
        default_value = "kube-system"
    )]
    pub(crate) node_local_dns_namespace: String,
    /// `auto`: write hairpin's answers into node-local-dns's Corefile when it exists; `off`:
    /// leave it alone and warn about the hostnames it answers from upstream.
    #[arg(long, env = "HAIRPIN_NODE_LOCAL_DNS", default_value = "auto")]
    pub(crate) node_local_dns: NodeLocalDns,
    /// How DNS is changed: `auto` (coredns-custom where the Corefile imports it, else the
    /// Corefile), `corefile`, `custom`, or `external-dns`: for clusters whose DNS hairpin
    /// cannot edit (GKE's kube-dns, Cloud DNS for GKE, managed CoreDNS add-ons that revert
    /// edits), no DNS ConfigMap is written and the hostnames are published as external-dns
    /// `DNSEndpoint` objects in `--namespace`, pointing at the hairpin Services' ClusterIPs.
    /// Only an external-dns instance serving a PRIVATE zone may publish them
    /// (`--source=crd --label-filter=hairpin.io/dns-endpoint=true`); a public instance must
    /// exclude them (`--label-filter=hairpin.io/dns-endpoint!=true`).
    #[arg(long, env = "HAIRPIN_DNS_MODE", default_value = "auto")]
    pub(crate) dns_mode: DnsMode,
    /// First proxy listener port.
    #[arg(long, env = "HAIRPIN_LISTENER_PORT_BASE", default_value_t = 10000)]
    pub(crate) listener_port_base: u16,
    /// Prefix of hairpin's annotations (`<prefix>proxy-protocol`, `<prefix>hostnames`).
    #[arg(long, env = "HAIRPIN_ANNOTATION_PREFIX", default_value = "hairpin.io/")]
    pub(crate) annotation_prefix: String,
    /// `NAMESPACE/NAME` of the routes ConfigMap the controller writes and every `hairpin
    /// proxy` follows (the same value as its `--routes-configmap`). NAMESPACE must be
    /// hairpin's (`--namespace`), where the controller writes it; a bare NAME means that
    /// ConfigMap in hairpin's namespace. Default: `<namespace>/hairpin-routes`.
    #[arg(
        long = "routes-configmap",
        env = "HAIRPIN_ROUTES_CONFIGMAP",
        value_name = "NAMESPACE/NAME",
        value_parser = parse_configmap_ref
    )]
    pub(crate) routes_config_map: Option<ConfigMapRef>,
    /// Cluster domain, used when the Corefile's `kubernetes` plugin names none (no zone, or a
    /// placeholder such as `{$CLUSTER_DOMAIN}`); without it, `cluster.local`.
    #[arg(long, env = "HAIRPIN_CLUSTER_DOMAIN")]
    pub(crate) cluster_domain: Option<String>,
    /// Hostnames never redirected, besides the built-in ones (cluster zones, reverse zones,
    /// localhost, cloud metadata names, single labels, public suffixes), comma-separated:
    /// `corp.example` refuses that name and every name under it, `*.corp.example` only the
    /// names under it. A wildcard that covers a refused name is refused too.
    #[arg(
        long,
        env = "HAIRPIN_DENY_HOSTNAMES",
        default_value = "",
        value_parser = |s: &str| parse_host_list(s).map(HostList)
    )]
    pub(crate) deny_hostnames: HostList,
    /// Namespaces whose Ingresses, Gateways, routes and Services may claim hostnames:
    /// comma-separated names (`web,shop`), or a label selector of the Namespaces
    /// (`team=web`, `env!=dev`; the controller then watches Namespaces). Empty: any
    /// namespace. A hostname from any other namespace is refused.
    #[arg(
        long,
        env = "HAIRPIN_HOSTNAME_NAMESPACES",
        default_value = "",
        value_parser = clap::builder::ValueParser::new(|s: &str| s.parse::<NamespacePolicy>())
    )]
    pub(crate) hostname_namespaces: NamespacePolicy,
    /// `resolve`: a hostname is redirected only when the cluster's upstream DNS (the
    /// Corefile's `forward` targets, asked without hairpin's rules) resolves it to its load
    /// balancer's address; a wildcard is checked through a random name under it. The others
    /// are reported as unverified with the answer seen, and re-checked. `off`: every admitted
    /// hostname is redirected without asking, for air-gapped clusters whose upstream cannot
    /// resolve the public names. `hairpin plan` against a cluster resolves the names as the
    /// controller does, from the machine it runs on (a `forward . /etc/resolv.conf` then means
    /// this machine's resolvers). `hairpin plan -f` resolves nothing: with `resolve` it lists
    /// the names as not resolved and plans no rule for them, with `off` it plans them as if
    /// they resolved to their load balancers.
    #[arg(long, env = "HAIRPIN_VERIFY_HOSTNAMES", default_value = "resolve")]
    pub(crate) verify_hostnames: VerifyMode,
    /// How each load balancer that needs a hairpin is cured. `auto`: on a load balancer that
    /// is itself a proxy (it terminates TCP and connects to the NodePorts: known by its
    /// provider, or declared with the Service annotation `<prefix>delivery: proxy`), the
    /// controller sets `ipMode: Proxy` on its status (Kubernetes >= 1.30: kube-proxy, Cilium >=
    /// 1.17 but not 1.18.0, Antrea >= 2.0 and kube-router >= 2.9 then leave its address alone,
    /// and in-cluster traffic crosses the real load balancer, which adds the real header),
    /// probes the address from inside the cluster, and keeps it only when a request without a
    /// header is answered; until then, and on every other load balancer, the DNS cure (the
    /// names point at hairpin's proxy). `native`: `ipMode: Proxy` without DNS rules, proven or
    /// not, except on a VIP the nodes receive (MetalLB, kube-vip, Cilium LB-IPAM, k3s
    /// ServiceLB..., or `<prefix>delivery: vip`): there kube-proxy would drop every rule for
    /// that IP and cut every client outside the cluster off, so it is refused with a warning
    /// and the DNS cure applies. `dns`: the DNS cure only; no status is written. A load
    /// balancer whose cloud controller computes ipMode itself (Hetzner, OpenStack, Scaleway,
    /// cloudscale, STACKIT, Oracle) always gets `dns`. The Service annotation `<prefix>cure`
    /// (`auto`, `native`, `dns`) overrides this per load balancer. `hairpin plan -f` proves
    /// nothing: `auto` shows native as to be proven.
    #[arg(long, env = "HAIRPIN_CURE", default_value = "auto", value_parser = clap::builder::ValueParser::new(|s: &str| s.parse::<CureMode>()))]
    pub(crate) cure: CureMode,
}

impl PlannerArgs {
    /// # Errors
    /// A `--routes-configmap` outside hairpin's namespace.
    pub(crate) fn config(&self) -> anyhow::Result<PlannerConfig> {
        Ok(PlannerConfig {
            namespace: self.hosts.namespace.clone(),
            proxy_selector: self.proxy_selector.clone(),
            coredns_namespace: self.coredns_namespace.clone(),
            coredns_config_maps: self.coredns_config_maps.clone(),
            corefile_key: self.corefile_key.clone(),
            coredns_custom_config_map: self.coredns_custom_config_map.clone(),
            coredns_custom_key: self.coredns_custom_key.clone(),
            node_local_dns_config_maps: self.node_local_dns_config_maps.clone(),
            node_local_dns_namespace: self.node_local_dns_namespace.clone(),
            node_local_dns: self.node_local_dns,
            dns_mode: self.dns_mode,
            listener_port_base: self.listener_port_base,
            annotation_prefix: self.annotation_prefix.clone(),
            routes_config_map: self.routes_config_map_name()?,
            hosts_config_map: self.hosts.hosts_config_map.clone(),
            cluster_domain: self.cluster_domain.clone(),
            admission: AdmissionConfig {
                deny_hostnames: self.deny_hostnames.0.clone(),
                hostname_namespaces: self.hostname_namespaces.clone(),
            },
            verify_hostnames: self.verify_hostnames,
            cure: self.cure,
            ..PlannerConfig::default()
        })
    }

    /// The routes ConfigMap's name; it lives in hairpin's namespace.
    fn routes_config_map_name(&self) -> anyhow::Result<String> {
        let Some(routes) = &self.routes_config_map else {
            return Ok(PlannerConfig::default().routes_config_map);
        };
        let namespace = &self.hosts.namespace;
        match &routes.namespace {
            Some(other) if other != namespace => anyhow::bail!(
                "--routes-configmap {:?}: the controller writes the routes ConfigMap in hairpin's namespace, {namespace:?} (--namespace); use {:?}",
                format!("{other}/{}", routes.name),
                format!("{namespace}/{}", routes.name)
            ),
            _ => Ok(routes.name.clone()),
        }
    }
}

/// A comma-separated list of hostnames, as one flag value.
#[derive(Debug, Clone)]
pub(crate) struct HostList(pub(crate) Vec<Host>);

fn parse_labels(s: &str) -> Result<BTreeMap<String, String>, String> {
    s.split(',')
        .filter(|p| !p.trim().is_empty())
        .map(|pair| {
            pair.split_once('=')
                .map(|(k, v)| (k.trim().to_owned(), v.trim().to_owned()))
                .ok_or_else(|| format!("{pair:?} is not key=value"))
        })
        .collect()
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub(crate) enum Output {
    /// A human summary (and, read from a cluster, the writes it would make).
    Text,
    /// Unified diffs of every object that would change: DNS ConfigMap keys, the routes
    /// ConfigMap, hairpin Services, `Hairpin` objects.
    Diff,
    /// The objects to write, for `kubectl apply -f -`.
    Yaml,
    /// The plan and its changes as one JSON document (shape: docs/plan.md).
    Json,
}

#[derive(Debug, clap::Args)]
#[command(
    after_help = "Without -f, reads the cluster of --kubeconfig (or $KUBECONFIG, \
    ~/.kube/config, the pod's service account) with the controller's read permissions: it \
    only lists and watches, and writes nothing.\n\n\
    Exit status: 0 when the plan is complete; 3 when part of it cannot be applied (for \
    example a Corefile without a `kubernetes` block; see \"Errors\" in the output); 2 on a \
    usage error (a bad flag, an unusable kubeconfig); 1 when the input or the cluster \
    cannot be read."
)]
pub(crate) struct Args {
    /// YAML file of cluster objects (multi-document, or `kind: List` as printed by
    /// `kubectl get -o yaml`); `-` reads stdin. Repeat for several files. Without it, the
    /// cluster is read.
    #[arg(
        short = 'f',
        long = "filename",
        env = "HAIRPIN_PLAN_FILES",
        value_delimiter = ','
    )]
    files: Vec<PathBuf>,
    /// The cluster to read when no `-f` is given.
    #[command(flatten)]
    client: ClientArgs,
    /// How long reading the cluster may take (`30s`, `2m`).
    #[arg(
        long,
        env = "HAIRPIN_PLAN_TIMEOUT",
        default_value = "30s",
        value_parser = hairpin_runtime::parse_positive_duration
    )]
    timeout: Duration,
    /// Output format.
    #[arg(
        short,
        long,
        env = "HAIRPIN_PLAN_OUTPUT",
        value_enum,
        default_value = "text"
    )]
    output: Output,
    /// On a kube-dns cluster (GKE Standard: no Corefile to edit), the DNS server that answers
    /// the hairpinned hostnames with the hairpin Services' ClusterIPs, as `IP` or `IP:port`
    /// (repeat or comma-separate for several), such as the private zone's server that
    /// `--dns-mode external-dns` publishes to; hairpin is not a DNS server. The plan then
    /// prints the `stubDomains` value (each exact hostname -> these servers) to merge into
    /// ConfigMap kube-system/kube-dns, which hairpin never writes. Without it the plan names
    /// the hostnames only. Read from a cluster, that ConfigMap is read as one of the
    /// `--coredns-configmap` candidates (`kube-dns` is one by default; keep it in a list of
    /// your own).
    #[arg(
        long = "stub-domain-nameserver",
        env = "HAIRPIN_STUB_DOMAIN_NAMESERVERS",
        value_name = "IP[:PORT]",
        value_delimiter = ','
    )]
    stub_domain_nameservers: Vec<StubNameserver>,
    #[command(flatten)]
    planner: PlannerArgs,
}

/// Exit code of a plan with errors (what it could plan is printed, the rest is not written).
/// Distinct from 1 (an input that cannot be read) and 2 (a usage error, clap's code).
const PARTIAL_PLAN: u8 = 3;

/// Exit code of a usage error (clap's), here an unusable kubeconfig.
const USAGE_ERROR: u8 = 2;

pub(crate) fn run(args: Args) -> anyhow::Result<ExitCode> {
    let config = PlannerConfig {
        stub_domain_nameservers: args.stub_domain_nameservers.clone(),
        ..args.planner.config()?
    };
    let (observed, source) = if args.files.is_empty() {
        match observe_cluster(&args, &config)? {
            Ok(observed) => (observed, "cluster"),
            Err(code) => return Ok(code),
        }
    } else {
        (
            Observed {
                snapshot: read_files(&args.files)?,
                hairpins: None,
            },
            "files",
        )
    };
    let plan = desired(&observed.snapshot, &config);
    let (changes, edit_errors) = preview::changes(&plan, &observed, &config);
    let out = match args.output {
        Output::Text if source == "cluster" => format!(
            "{}\nChanges against the cluster (see -o diff)\n{}",
            render::text(&plan),
            preview::summary(&changes)
        ),
        Output::Text => render::text(&plan),
        Output::Diff => preview::diff(&changes),
        Output::Yaml => render::yaml(&plan).map_err(anyhow::Error::msg)?,
        Output::Json => {
            let mut document = preview::json(&plan, &changes, source);
            if let Some(errors) = document["errors"].as_array_mut() {
                errors.extend(edit_errors.iter().map(|e| e.clone().into()));
            }
            format!("{document:#}\n")
        }
    };
    print!("{out}");
    if plan.has_errors() || !edit_errors.is_empty() {
        if args.output != Output::Text {
            for e in &plan.errors {
                eprintln!("error: {e}");
            }
        }
        for e in &edit_errors {
            eprintln!("error: {e}");
        }
        return Ok(ExitCode::from(PARTIAL_PLAN));
    }
    Ok(ExitCode::SUCCESS)
}

/// What the controller would read from the cluster now (`Err`: the exit code of a client that
/// cannot be built, said on stderr). One shot: Ctrl-C ends it at once.
fn observe_cluster(
    args: &Args,
    config: &PlannerConfig,
) -> anyhow::Result<Result<Observed, ExitCode>> {
    let runtime = Builder::new().with_signals(OnSignal::Abort).build()?;
    runtime.run(|_| async {
        let client = match args.client.client().await {
            Ok(client) => client,
            Err(err) => {
                // Without any kubeconfig, the user may have meant to plan from files.
                let hint = if args.client.kubeconfig.is_none() {
                    "; or plan from YAML files with -f/--filename"
                } else {
                    ""
                };
                eprintln!("error: {err}{hint}");
                return Ok(Err(ExitCode::from(USAGE_ERROR)));
            }
        };
        let mut observed = preview::observe(&client, config, args.timeout).await?;
        if config.verify_hostnames == VerifyMode::Resolve {
            // As the controller does, from this machine: the Corefile's forward targets, and
            // this machine's resolv.conf where the Corefile names one.
            hairpin_controller::ownership::resolve_once(
                &mut observed.snapshot,
                config,
                hairpin_controller::ownership::OwnershipParams::default(),
                hairpin_controller::Metrics::register(&mut Default::default()),
                args.timeout,
            )
            .await;
        }
        Ok(Ok(observed))
    })
}

/// The snapshot of `-f` files (`-` is stdin).
fn read_files(files: &[PathBuf]) -> anyhow::Result<ClusterSnapshot> {
    let mut snapshot = ClusterSnapshot::default();
    let mut notes = Vec::new();
    for path in files {
        let (name, text) = if path.as_os_str() == "-" {
            let mut text = String::new();
            std::io::stdin()
                .read_to_string(&mut text)
                .context("reading stdin")?;
            ("-".to_owned(), text)
        } else {
            let text = std::fs::read_to_string(path)
                .with_context(|| format!("reading {}", path.display()))?;
            (path.display().to_string(), text)
        };
        notes.extend(load::load_yaml(&mut snapshot, &name, &text)?);
    }
    for note in &notes {
        eprintln!("note: {note}");
    }
    Ok(snapshot)
}
