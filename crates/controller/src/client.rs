//! Building the Kubernetes client: kubeconfig (`--kubeconfig`, `$KUBECONFIG`, `~/.kube/config`)
//! with an optional context, else the in-cluster service account, like kubectl.

use std::path::{Path, PathBuf};

use clap::Args;
use kube::config::{KubeConfigOptions, Kubeconfig, KubeconfigError};

use crate::Error;

/// Options for reaching the Kubernetes API, shared by every command that talks to it.
#[derive(Clone, Debug, Default, Args)]
pub struct ClientArgs {
    /// Path to a kubeconfig file. Default: `$KUBECONFIG`, `~/.kube/config`, then the
    /// in-cluster service account.
    #[arg(long, env = "KUBECONFIG", value_name = "PATH")]
    pub kubeconfig: Option<PathBuf>,

    /// The kubeconfig context to use (default: its current context).
    #[arg(long, env = "HAIRPIN_CONTEXT", value_name = "NAME")]
    pub context: Option<String>,
}

impl ClientArgs {
    /// Builds the client.
    ///
    /// # Errors
    /// [`Error::Config`] naming what could not be read.
    pub async fn client(&self) -> Result<kube::Client, Error> {
        let options = KubeConfigOptions {
            context: self.context.clone(),
            ..KubeConfigOptions::default()
        };
        let config = match &self.kubeconfig {
            Some(path) => {
                let kubeconfig =
                    Kubeconfig::read_from(path).map_err(|err| kubeconfig_error(path, &err))?;
                kube::Config::from_custom_kubeconfig(kubeconfig, &options)
                    .await
                    .map_err(|err| kubeconfig_error(path, &err))?
            }
            None if self.context.is_some() => kube::Config::from_kubeconfig(&options)
                .await
                .map_err(|err| match &err {
                    KubeconfigError::ReadConfig(_, path) => kubeconfig_error(path, &err),
                    _ => Error::Config(err.to_string()),
                })?,
            None => kube::Config::infer()
                .await
                .map_err(|err| Error::Config(err.to_string()))?,
        };
        let _ = API_SERVER.set(config.cluster_url.to_string());
        kube::Client::try_from(config).map_err(|err| Error::Config(err.to_string()))
    }
}

/// The API server of the client this process built, for log lines about failing requests.
static API_SERVER: std::sync::OnceLock<String> = std::sync::OnceLock::new();

/// The API server URL, or `the API server` when the client came from elsewhere (tests).
pub(crate) fn api_server() -> &'static str {
    API_SERVER.get().map_or("the API server", String::as_str)
}

/// One message per kubeconfig problem: the path once, in our words, and the cause once (kube's
/// own text for a read error names the path again, and its YAML error appends a source
/// snippet that repeats the message).
fn kubeconfig_error(path: &Path, err: &KubeconfigError) -> Error {
    let path = path.display();
    Error::Config(match err {
        KubeconfigError::ReadConfig(io, _) => format!("cannot read kubeconfig {path}: {io}"),
        KubeconfigError::Parse(yaml) => {
            let text = yaml.to_string();
            let first = text.lines().next().unwrap_or_default().trim();
            let first = first.strip_prefix("error:").unwrap_or(first).trim_start();
            format!("cannot parse kubeconfig {path} as YAML: {first}")
        }
        other => format!("kubeconfig {path}: {other}"),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A path of its own under the temp dir (this crate has no tempfile dependency).
    fn scratch(name: &str) -> PathBuf {
        std::env::temp_dir().join(format!("hairpin-client-{}-{name}", std::process::id()))
    }

    fn message(path: &Path) -> String {
        let err = Kubeconfig::read_from(path).unwrap_err();
        kubeconfig_error(path, &err).to_string()
    }

    #[test]
    fn a_missing_kubeconfig_is_named_once_with_its_cause_once() {
        let path = scratch("missing");
        let message = message(&path);
        let shown = path.display().to_string();
        assert_eq!(message.matches(&shown).count(), 1, "{message}");
        assert!(message.contains("cannot read kubeconfig"), "{message}");
        assert_eq!(
            message.matches("No such file or directory").count(),
            1,
            "{message}"
        );
    }

    #[test]
    fn a_kubeconfig_with_bad_yaml_is_named_once_with_the_parser_message_once() {
        let path = scratch("bad-yaml");
        std::fs::write(&path, "apiVersion: v1\nclusters: [\n").unwrap();
        let message = message(&path);
        std::fs::remove_file(&path).unwrap();
        let shown = path.display().to_string();
        assert_eq!(message.matches(&shown).count(), 1, "{message}");
        assert!(message.contains("line 2"), "{message}");
        assert_eq!(message.matches("unclosed bracket").count(), 1, "{message}");
        assert_eq!(message.lines().count(), 1, "{message}");
    }
}
