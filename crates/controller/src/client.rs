//! Building the Kubernetes client: kubeconfig (`--kubeconfig`, `$KUBECONFIG`, `~/.kube/config`)
//! with an optional context, else the in-cluster service account, like kubectl.

use std::path::PathBuf;

use clap::Args;
use kube::config::{KubeConfigOptions, Kubeconfig};

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
                let kubeconfig = Kubeconfig::read_from(path).map_err(|err| {
                    Error::Config(format!("cannot read kubeconfig {}: {err}", path.display()))
                })?;
                kube::Config::from_custom_kubeconfig(kubeconfig, &options)
                    .await
                    .map_err(|err| Error::Config(format!("kubeconfig {}: {err}", path.display())))?
            }
            None if self.context.is_some() => kube::Config::from_kubeconfig(&options)
                .await
                .map_err(|err| Error::Config(err.to_string()))?,
            None => kube::Config::infer()
                .await
                .map_err(|err| Error::Config(err.to_string()))?,
        };
        kube::Client::try_from(config).map_err(|err| Error::Config(err.to_string()))
    }
}
