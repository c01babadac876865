//! `hairpin echo`: answer each connection with what it carried, PROXY header included.

use std::net::SocketAddr;
use std::process::ExitCode;
use std::time::Duration;

use hairpin_doctor::echo::{EchoLimits, EchoServer, ProxyMode};
use hairpin_runtime::logging::LogArgs;
use hairpin_runtime::parse_positive_duration;
use hairpin_runtime::{Builder, FdBudget, Threads};

/// `--proxy-protocol` values.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub(crate) enum Mode {
    /// Every connection must start with a valid PROXY header; others are closed and logged.
    Required,
    /// Report whether a header came (for diagnosis only).
    Optional,
    /// Do not look for a header.
    Off,
}

/// Answers HTTP requests (and raw TCP lines) with what was received: the PROXY header's
/// version, command, addresses and TLVs, the socket peer, and the request line and headers
/// (text; JSON with `Accept: application/json` or `?format=json`). Put it behind a load
/// balancer to see what the load balancer sends.
#[derive(Debug, clap::Args)]
pub(crate) struct Args {
    /// Address to listen on.
    #[arg(long, env = "HAIRPIN_ECHO_LISTEN", default_value = "0.0.0.0:8080")]
    pub(crate) listen: SocketAddr,

    /// Whether connections must start with a PROXY header.
    #[arg(long, env = "HAIRPIN_ECHO_PROXY_PROTOCOL", value_enum, default_value_t = Mode::Required)]
    pub(crate) proxy_protocol: Mode,

    /// Time from accepting a connection for its PROXY header and request to arrive, all of
    /// them (not per read); a connection still sending at the deadline is closed.
    #[arg(long, env = "HAIRPIN_ECHO_HEADER_TIMEOUT", default_value = "10s", value_parser = parse_positive_duration)]
    pub(crate) header_timeout: Duration,

    /// Most connections served at once; beyond it, new ones wait in the listen backlog.
    #[arg(long, env = "HAIRPIN_ECHO_MAX_CONNECTIONS", default_value_t = 1024, value_parser = clap::value_parser!(u32).range(1..))]
    pub(crate) max_connections: u32,

    #[command(flatten)]
    pub(crate) log: LogArgs,
}

pub(crate) fn run(args: Args) -> anyhow::Result<ExitCode> {
    let runtime = Builder::new()
        .with_log(&args.log)
        .with_fd_budget(FdBudget {
            per_connection: 1,
            also_reserved: 0,
            max_connections: args.max_connections.into(),
            flag: "--max-connections",
        })
        .with_threads(Threads::Multi { workers: 2 })
        .build()?;
    let limits = EchoLimits {
        header_timeout: args.header_timeout,
        max_connections: args.max_connections as usize,
    };
    let mode = match args.proxy_protocol {
        Mode::Required => ProxyMode::Required,
        Mode::Optional => ProxyMode::Optional,
        Mode::Off => ProxyMode::Off,
    };
    runtime.run(|started| async move {
        let server = EchoServer::bind(args.listen, mode)
            .await?
            .with_limits(limits);
        tracing::info!(
            listen = %server.local_addr()?,
            proxy_protocol = mode.as_str(),
            "echo server listening"
        );
        server.serve_until(started.shutdown.draining()).await;
        Ok(ExitCode::SUCCESS)
    })
}
