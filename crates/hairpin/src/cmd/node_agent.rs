//! `hairpin node-agent` (being built; see the issue tracker).

use std::process::ExitCode;

#[derive(Debug, clap::Args)]
pub(crate) struct Args {}

pub(crate) fn run(_args: Args) -> anyhow::Result<ExitCode> {
    anyhow::bail!("`hairpin node-agent` is not available in this build yet")
}
