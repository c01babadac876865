//! Building the Kubernetes client: kubeconfig (`--kubeconfig`, `$KUBECONFIG`, `~/.kube/config`)
//! with an optional context, else the in-cluster service account, like kubectl.

use std::path::PathBuf;

use clap::Args;

use crate::Error;

/// Options for reaching the Kubernetes API, shared by every command that talks to it.
#[derive(Clone, Debug, Default, Args)]
pub struct ClientArgs {
    /// Path to a kubeconfig file. Default: `$KUBECONFIG` (a list of files, as for kubectl),
    /// `~/.kube/config`, then the in-cluster service account.
    // No clap `env`: `$KUBECONFIG` is read by kube's loader, which merges a list of files as
    // kubectl does; clap would take the whole list as one path.
    #[arg(long, value_name = "PATH")]
    pub kubeconfig: Option<PathBuf>,

    /// The kubeconfig context to use (default: its current context).
    #[arg(long, env = "HAIRPIN_CONTEXT", value_name = "NAME")]
    pub context: Option<String>,
}

impl ClientArgs {
    /// Builds the client.
    ///
    /// # Errors
    /// [`Error::Config`] naming what could not be read, in the words every command uses
    /// ([`hairpin_runtime::kubeconfig`]).
    pub async fn client(&self) -> Result<kube::Client, Error> {
        let config =
            hairpin_runtime::kubeconfig::load(self.kubeconfig.as_deref(), self.context.as_deref())
                .await
                .map_err(|err| Error::Config(err.to_string()))?;
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
