//! `hairpin version`: the build, for people or for scripts.

use std::process::ExitCode;

use hairpin_runtime::process::{GIT_COMMIT, VERSION};

/// Output format.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub(crate) enum Output {
    /// `hairpin 0.1.0 (commit ..., x86_64)`.
    Text,
    /// `{"version": ..., "commit": ..., "arch": ...}`.
    Json,
}

/// Prints the version, the commit it was built from (`unknown` outside the release workflow)
/// and the CPU architecture; the same facts as the `hairpin_build_info` metric.
#[derive(Debug, clap::Args)]
pub(crate) struct Args {
    /// Output format.
    #[arg(long, short = 'o', value_enum, env = "HAIRPIN_VERSION_OUTPUT", default_value_t = Output::Text)]
    pub(crate) output: Output,
}

pub(crate) fn run(args: &Args) -> anyhow::Result<ExitCode> {
    let arch = std::env::consts::ARCH;
    match args.output {
        Output::Text => println!("hairpin {VERSION} (commit {GIT_COMMIT}, {arch})"),
        Output::Json => println!(
            "{}",
            serde_json::json!({"version": VERSION, "commit": GIT_COMMIT, "arch": arch})
        ),
    }
    Ok(ExitCode::SUCCESS)
}
