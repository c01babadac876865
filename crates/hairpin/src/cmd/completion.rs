//! `hairpin completion <shell>`: a completion script, from the command-line definition itself.

use std::process::ExitCode;

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

/// `command`: the whole command line's definition (from [`crate::cli`]).
pub(crate) fn run(args: &Args, mut command: clap::Command) -> anyhow::Result<ExitCode> {
    clap_complete::generate(args.shell, &mut command, "hairpin", &mut std::io::stdout());
    Ok(ExitCode::SUCCESS)
}
