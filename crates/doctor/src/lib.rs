//! Diagnoses hairpin traffic (DNS, PROXY-protocol probes, cluster checks) and serves
//! `hairpin echo`, a server that shows what a load balancer sent.
//!
//! The judgement is pure ([`verdict::diagnose`] over check results); the network and API I/O
//! around it is thin and bounded by short timeouts.
#![forbid(unsafe_code)]

pub mod admission;
pub mod cluster;
pub mod cure;
pub mod dataplane;
pub mod echo;
pub mod facts;
pub mod probe;
pub mod providers;
pub mod report;
pub mod verdict;

use std::path::PathBuf;

use hairpin_planner::markers;

// One path per type: each public type is reached through its module only.
use probe::Timeouts;
use report::{HostReport, Report};
use verdict::{ClusterView, NetworkChecks, Vantage};

/// Errors of the doctor and the echo server.
#[derive(Debug, thiserror::Error)]
pub enum DoctorError {
    /// A host argument is not a hostname or an IP address.
    #[error("invalid host {host:?}: {reason}")]
    InvalidHost {
        /// The argument.
        host: String,
        /// What is wrong with it.
        reason: String,
    },
    /// The echo server could not bind its address.
    #[error("cannot listen on {addr}: {source}")]
    Bind {
        /// The address asked for.
        addr: std::net::SocketAddr,
        /// Why.
        source: std::io::Error,
    },
}

impl DoctorError {
    /// A short label for metrics and logs.
    pub fn metric_label(&self) -> &'static str {
        match self {
            DoctorError::InvalidHost { .. } => "invalid_host",
            DoctorError::Bind { .. } => "bind",
        }
    }
}

/// Checks that `host` is a hostname or an IP address (not a URL, not `host:port`).
///
/// # Errors
/// [`DoctorError::InvalidHost`] saying what to pass instead.
pub fn validate_host(host: &str) -> Result<(), DoctorError> {
    let invalid = |reason: &str| DoctorError::InvalidHost {
        host: host.to_owned(),
        reason: reason.to_owned(),
    };
    if host.is_empty() {
        return Err(invalid("empty"));
    }
    if host.contains("://") || host.contains('/') {
        return Err(invalid(
            "pass a hostname, not a URL (e.g. `shop.example.com --port 443`)",
        ));
    }
    let bare = host.trim_start_matches('[').trim_end_matches(']');
    if bare.parse::<std::net::IpAddr>().is_ok() {
        return Ok(());
    }
    if host.contains(':') {
        return Err(invalid("pass the port with --port, not as host:port"));
    }
    // The planner's validator, so the doctor accepts exactly the names hairpin can plan.
    match hairpin_planner::name::DnsName::parse(host) {
        Ok(_) => Ok(()),
        Err(why) => Err(invalid(&format!(
            "not a valid DNS name ({why}; dot-separated labels of 1 to 63 letters, digits and `-`)"
        ))),
    }
}

/// Options of a doctor run.
#[derive(Clone, Debug)]
pub struct Options {
    /// The port to probe.
    pub port: u16,
    /// Per-step timeouts.
    pub timeouts: Timeouts,
    /// The hosts file to report on.
    pub hosts_file: PathBuf,
    /// Where the doctor runs.
    pub vantage: Vantage,
}

/// Resolves and probes one host.
pub async fn check_network(host: &str, options: &Options) -> NetworkChecks {
    let resolution = probe::resolve(host, options.port, options.timeouts.answer).await;
    let hosts_file = match resolution {
        probe::Resolution::Literal { .. } => None,
        _ => Some(probe::hosts_file_note(
            &options.hosts_file,
            host.strip_suffix('.').unwrap_or(host),
            (markers::BEGIN_PREFIX, markers::END_MARKER),
        )),
    };
    let probes = match resolution.first() {
        Some(ip) => Some(
            probe::probe(
                std::net::SocketAddr::new(ip, options.port),
                host,
                options.timeouts,
            )
            .await,
        ),
        None => None,
    };
    NetworkChecks {
        resolution,
        hosts_file,
        probes,
    }
}

/// Runs the network checks for every host, asks `cluster` for each host's cluster view, and
/// judges.
pub async fn examine<F>(hosts: &[String], options: &Options, mut cluster: F) -> Report
where
    F: FnMut(&str, &NetworkChecks) -> ClusterView,
{
    let mut reports = Vec::with_capacity(hosts.len());
    for host in hosts {
        let network = check_network(host, options).await;
        let view = cluster(host, &network);
        let verdict = verdict::diagnose(&network, &view, options.vantage);
        reports.push(HostReport {
            host: host.clone(),
            port: options.port,
            network,
            cluster: view,
            verdict,
        });
    }
    Report {
        vantage: options.vantage,
        hosts: reports,
    }
}

/// A whole doctor run: reads the cluster once (unless `cluster` is `None`, i.e.
/// `--no-cluster`), checks `hosts` (none: every planned hostname, which needs the cluster),
/// and judges each.
///
/// # Errors
/// A usage or access error, for exit code 2: an unusable kubeconfig, or no host and no cluster.
pub async fn run(
    hosts: &[String],
    options: &Options,
    cluster: Option<&cluster::ClusterOptions>,
) -> Result<Report, String> {
    let read = match cluster {
        None => Err("--no-cluster".to_owned()),
        Some(cluster_options) => match read_cluster(cluster_options).await {
            Ok(read) => {
                let plan = cluster::plan(&read, &cluster_options.planner);
                Ok((read, plan, cluster_options))
            }
            Err(cluster::ClusterError::Unavailable(reason)) => Err(reason),
            Err(err @ cluster::ClusterError::Kubeconfig(_)) => return Err(err.to_string()),
        },
    };
    let hosts = if hosts.is_empty() {
        match &read {
            Ok((_, plan, _)) => cluster::planned_hostnames(plan),
            Err(reason) => {
                return Err(format!(
                    "pass a HOST, or give the doctor API access to check every planned hostname \
                     (the cluster cannot be read: {reason})"
                ));
            }
        }
    } else {
        hosts.to_vec()
    };
    if hosts.is_empty() {
        eprintln!(
            "hairpin plans no hostname in this cluster (no load balancer needs a hairpin); pass \
             a HOST to check one"
        );
    }
    Ok(examine(&hosts, options, |host, network| match &read {
        Ok((read, plan, cluster_options)) => {
            let addresses: Vec<_> = network.resolution.first().into_iter().collect();
            ClusterView::Checked(Box::new(cluster::facts_for_port(
                read,
                plan,
                &cluster_options.planner,
                host,
                &addresses,
                Some(options.port),
            )))
        }
        Err(reason) => ClusterView::NotChecked {
            reason: reason.clone(),
        },
    })
    .await)
}

async fn read_cluster(
    options: &cluster::ClusterOptions,
) -> Result<cluster::ClusterRead, cluster::ClusterError> {
    let client = cluster::client(options).await?;
    cluster::read(&client, options).await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hosts_are_validated_with_a_hint() {
        for good in [
            "shop.example.com",
            "localhost",
            "10.0.0.1",
            "::1",
            "[::1]",
            "a-b.c.",
            "Shop.Example.COM",
        ] {
            assert!(validate_host(good).is_ok(), "{good}");
        }
        for (bad, hint) in [
            ("https://shop.example.com/", "not a URL"),
            ("shop.example.com:443", "--port"),
            ("", "empty"),
            ("bad host", "not a valid DNS name"),
            ("-a.com", "not a valid DNS name"),
            ("a..com", "not a valid DNS name (empty label"),
            ("a.com..", "not a valid DNS name (empty label"),
            ("_acme.x", "not a valid DNS name"),
            ("*.example.com", "wildcard"),
        ] {
            let err = validate_host(bad).unwrap_err().to_string();
            assert!(err.contains(hint), "{bad}: {err}");
        }
    }
}
