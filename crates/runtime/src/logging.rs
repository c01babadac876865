//! Structured logging: human-readable text by default, JSON lines on request.

use clap::{Args, ValueEnum};
use tracing_subscriber::EnvFilter;

/// Log output options, shared by every command.
#[derive(Clone, Debug, Args)]
pub struct LogArgs {
    /// Log format: `text` for people, `json` for log pipelines.
    #[arg(long, env = "HAIRPIN_LOG_FORMAT", value_enum, default_value_t = LogFormat::Text, global = true)]
    pub log_format: LogFormat,

    /// Log filter, in `tracing` EnvFilter syntax (e.g. `info`, `hairpin=debug,kube=warn`).
    #[arg(long, env = "HAIRPIN_LOG", default_value = "info", global = true)]
    pub log_level: String,
}

/// How log lines are written.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum LogFormat {
    /// Human-readable lines.
    Text,
    /// One JSON object per line.
    Json,
}

/// Installs the global subscriber, writing to stderr. A second call is a no-op (tests).
///
/// # Errors
/// When the filter does not parse; the message names it.
pub fn init(args: &LogArgs) -> Result<(), String> {
    let filter = EnvFilter::try_new(filter_directives(&args.log_level))
        .map_err(|err| format!("invalid --log-level {:?}: {err}", args.log_level))?;
    // Colours only on a terminal: escape codes in a log file or a pod's log are noise.
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .with_writer(std::io::stderr);
    let _ = match args.log_format {
        LogFormat::Text => builder.try_init(),
        LogFormat::Json => builder
            .json()
            .flatten_event(true)
            .with_current_span(false)
            .try_init(),
    };
    Ok(())
}

/// kube-client logs every failed request itself (`failed with error ...` at ERROR for each
/// retry against an unreachable server, `Unsuccessful data error parse: 404 page not found`
/// at WARN for each probe of an absent API group), and then returns the same failure to its
/// caller, where hairpin logs it once per condition with what it does about it. So those two
/// targets are quieted unless the filter names `kube_client` itself (`kube_client=debug`
/// brings them all back).
const KUBE_CLIENT_QUIET: &str = "kube_client::client::builder=off,kube_client::client=error";

fn filter_directives(user: &str) -> String {
    if user.contains("kube_client") {
        user.to_owned()
    } else if user.trim().is_empty() {
        KUBE_CLIENT_QUIET.to_owned()
    } else {
        format!("{user},{KUBE_CLIENT_QUIET}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kube_clients_own_failure_lines_are_quiet_unless_asked_for() {
        use tracing::Level;
        use tracing_subscriber::layer::SubscriberExt as _;

        let seen = std::sync::Arc::new(std::sync::Mutex::new(Vec::<String>::new()));
        let record = |filter: &str| {
            seen.lock().unwrap().clear();
            let sink = seen.clone();
            let layer = tracing_subscriber::fmt::layer()
                .with_writer(move || Sink(sink.clone()))
                .with_ansi(false);
            let subscriber = tracing_subscriber::registry()
                .with(EnvFilter::try_new(filter_directives(filter)).unwrap())
                .with(layer);
            tracing::subscriber::with_default(subscriber, || {
                tracing::event!(target: "kube_client::client::builder", Level::ERROR, "failed with error tcp connect");
                tracing::event!(target: "kube_client::client", Level::WARN, "Unsuccessful data error parse: 404");
                tracing::event!(target: "kube_client::config", Level::WARN, "impersonating user");
                tracing::event!(target: "hairpin_controller::watch", Level::WARN, "watch failed");
            });
            seen.lock().unwrap().concat()
        };
        let quiet = record("info");
        assert!(!quiet.contains("failed with error"), "{quiet}");
        assert!(!quiet.contains("Unsuccessful"), "{quiet}");
        assert!(
            quiet.contains("impersonating user"),
            "other kube warnings stay: {quiet}"
        );
        assert!(quiet.contains("watch failed"), "{quiet}");
        let asked = record("info,kube_client=debug");
        assert!(asked.contains("failed with error"), "{asked}");
        assert!(asked.contains("Unsuccessful"), "{asked}");
    }

    struct Sink(std::sync::Arc<std::sync::Mutex<Vec<String>>>);

    impl std::io::Write for Sink {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.0
                .lock()
                .unwrap()
                .push(String::from_utf8_lossy(buf).into_owned());
            Ok(buf.len())
        }

        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    #[test]
    fn bad_filter_is_a_clear_error() {
        let args = LogArgs {
            log_format: LogFormat::Json,
            log_level: "hairpin=notalevel".into(),
        };
        let err = init(&args).expect_err("an invalid filter must be rejected");
        assert!(err.contains("--log-level"), "{err}");
    }
}
