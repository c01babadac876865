//! `hairpin`: one binary, one subcommand per job. This file only parses the command line and
//! dispatches; every subcommand's work lives in a library crate that tests drive directly.

use std::process::ExitCode;

use clap::{CommandFactory, FromArgMatches};

mod cli;
mod cmd;

fn main() -> ExitCode {
    let mut command = cli::Cli::command();
    // Installed or linked as `kubectl-hairpin`, kubectl runs it for `kubectl hairpin ...`: the
    // arguments are the same, only the help should name the command the user typed.
    if invoked_as_kubectl_plugin() {
        command = command.name("kubectl-hairpin").bin_name("kubectl hairpin");
    }
    let cli = cli::Cli::from_arg_matches(&command.get_matches()).unwrap_or_else(|err| err.exit());
    cmd::run(cli)
}

fn invoked_as_kubectl_plugin() -> bool {
    std::env::args_os()
        .next()
        .map(std::path::PathBuf::from)
        .and_then(|path| {
            path.file_name()
                .map(|name| name.to_string_lossy().into_owned())
        })
        .is_some_and(|name| name.starts_with("kubectl-hairpin"))
}
