//! `hairpin completion <shell>`: a completion script, from the command-line definition itself.

use std::process::ExitCode;

use clap::CommandFactory as _;
use clap_complete::Shell;

/// Prints a completion script for SHELL. Install it, for example:
/// `hairpin completion bash > /etc/bash_completion.d/hairpin`,
/// `hairpin completion zsh > "${fpath[1]}/_hairpin"`,
/// `hairpin completion fish > ~/.config/fish/completions/hairpin.fish`.
#[derive(Debug, clap::Args)]
pub(crate) struct Args {
    /// The shell to complete for.
    #[arg(value_enum)]
    pub(crate) shell: Shell,
}

pub(crate) fn run(args: &Args) -> anyhow::Result<ExitCode> {
    let mut command = crate::cli::Cli::command();
    clap_complete::generate(args.shell, &mut command, "hairpin", &mut std::io::stdout());
    Ok(ExitCode::SUCCESS)
}
