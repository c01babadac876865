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
    let filter = EnvFilter::try_new(&args.log_level)
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

#[cfg(test)]
mod tests {
    use super::*;

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
