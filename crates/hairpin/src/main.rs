//! `hairpin`: one binary, one subcommand per job. This file only parses the command line and
//! dispatches; every subcommand's work lives in a library crate that tests drive directly.
#![forbid(unsafe_code)]

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
    match cli::run(cli) {
        Ok(code) => code,
        Err(err) => {
            eprintln!("error: {}", error_message(&err));
            ExitCode::FAILURE
        }
    }
}

/// An error as the user reads it: its message, then each cause after `: `, each cause once.
///
/// The rule, for the whole workspace: a library error's `Display` is complete on its own (it
/// names the file, flag or object, says what failed and what to do, and includes its cause),
/// because the libraries log errors with `%err`, which prints no chain; it still returns that
/// cause from `source()`. Context added here (`.context("reading stdin")`) names only what was
/// being done. So this prints the chain as anyhow's `{:#}` does, but leaves out a cause whose
/// text is already in the message printed so far. That way each cause shows exactly once,
/// whichever way a layer was written (ours, kube's, std's), and no message loses its cause.
fn error_message(err: &anyhow::Error) -> String {
    let mut message = err.to_string();
    for cause in err.chain().skip(1) {
        let text = cause.to_string();
        let text = text.trim();
        if !text.is_empty() && !message.contains(text) {
            message.push_str(": ");
            message.push_str(text);
        }
    }
    message
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

#[cfg(test)]
mod tests {
    use super::error_message;

    /// Like the library errors (thiserror's `#[error("...: {source}")]`): the cause is in the
    /// message and returned by `source()`.
    #[derive(Debug)]
    struct ReadError {
        path: &'static str,
        source: std::io::Error,
    }

    impl std::fmt::Display for ReadError {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            write!(f, "cannot read hosts file {}: {}", self.path, self.source)
        }
    }

    impl std::error::Error for ReadError {
        fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
            Some(&self.source)
        }
    }

    fn not_found() -> std::io::Error {
        std::io::Error::from(std::io::ErrorKind::NotFound)
    }

    #[test]
    fn a_cause_already_in_the_message_is_not_repeated() {
        let err = anyhow::Error::new(ReadError {
            path: "/etc/hosts",
            source: not_found(),
        });
        assert_eq!(
            format!("{err:#}"),
            "cannot read hosts file /etc/hosts: entity not found: entity not found"
        );
        assert_eq!(
            error_message(&err),
            "cannot read hosts file /etc/hosts: entity not found"
        );
    }

    #[test]
    fn context_keeps_its_cause_and_every_level_shows_once() {
        let err = anyhow::Error::new(not_found()).context("reading /x.yaml");
        assert_eq!(error_message(&err), "reading /x.yaml: entity not found");
        // Context over an error that already carries its cause: three levels, two printed.
        let err = anyhow::Error::new(ReadError {
            path: "/etc/hosts",
            source: not_found(),
        })
        .context("syncing the node");
        assert_eq!(
            error_message(&err),
            "syncing the node: cannot read hosts file /etc/hosts: entity not found"
        );
    }
}
