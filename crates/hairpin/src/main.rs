//! `hairpin`: one binary, one subcommand per job. This file only parses the command line and
//! dispatches; every subcommand's work lives in a library crate that tests drive directly.

use std::process::ExitCode;

use clap::Parser;

mod cli;
mod cmd;

fn main() -> ExitCode {
    let cli = cli::Cli::parse();
    cmd::run(cli)
}
