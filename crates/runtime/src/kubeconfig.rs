//! The Kubernetes client configuration, read as kubectl reads it (`--kubeconfig`, else
//! `$KUBECONFIG` (a list of files), `~/.kube/config`, then the pod's service account), with
//! one wording for every kubeconfig error, for every command that talks to the API.

use std::path::Path;

use kube::config::{KubeConfigOptions, Kubeconfig, KubeconfigError};

/// Why no client configuration could be built.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// A kubeconfig was named (`--kubeconfig`, or a `--context` to look up) but cannot be used.
    #[error("{0}")]
    Kubeconfig(String),
    /// No kubeconfig and no in-cluster service account.
    #[error(
        "no Kubernetes configuration found (set KUBECONFIG or --kubeconfig, or run in a pod): {0}"
    )]
    NotFound(String),
}

/// Builds the client configuration: from `kubeconfig` when given (it must be readable), else
/// as kube's `infer` does (`$KUBECONFIG`, `~/.kube/config`, in-cluster); `context` picks a
/// kubeconfig context instead of its current one.
///
/// # Errors
/// [`ConfigError::Kubeconfig`] naming the file and the cause once; [`ConfigError::NotFound`]
/// when nothing is configured.
pub async fn load(
    kubeconfig: Option<&Path>,
    context: Option<&str>,
) -> Result<kube::Config, ConfigError> {
    let options = KubeConfigOptions {
        context: context.map(str::to_owned),
        ..KubeConfigOptions::default()
    };
    match kubeconfig {
        Some(path) => {
            let file = Kubeconfig::read_from(path).map_err(|err| kubeconfig_error(path, &err))?;
            kube::Config::from_custom_kubeconfig(file, &options)
                .await
                .map_err(|err| kubeconfig_error(path, &err))
        }
        None if context.is_some() => kube::Config::from_kubeconfig(&options)
            .await
            .map_err(|err| match &err {
                KubeconfigError::ReadConfig(_, path) => kubeconfig_error(path, &err),
                _ => kubeconfig_error(Path::new("from $KUBECONFIG or ~/.kube/config"), &err),
            }),
        None => kube::Config::infer()
            .await
            .map_err(|err| ConfigError::NotFound(err.to_string())),
    }
}

/// One message per kubeconfig problem: the path once, in our words, and the cause once (kube's
/// own text for a read error names the path again, and its YAML error appends a source
/// snippet that repeats the message).
fn kubeconfig_error(path: &Path, err: &KubeconfigError) -> ConfigError {
    let path = path.display();
    ConfigError::Kubeconfig(match err {
        KubeconfigError::ReadConfig(io, _) => format!("cannot read kubeconfig {path}: {io}"),
        KubeconfigError::Parse(yaml) => {
            let text = yaml.to_string();
            let first = text.lines().next().unwrap_or_default().trim();
            let first = first.strip_prefix("error:").unwrap_or(first).trim_start();
            format!("cannot parse kubeconfig {path} as YAML: {first}")
        }
        other => format!("cannot use kubeconfig {path}: {other}"),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A path of its own under the temp dir.
    fn scratch(name: &str) -> std::path::PathBuf {
        std::env::temp_dir().join(format!("hairpin-kubeconfig-{}-{name}", std::process::id()))
    }

    fn message(path: &Path, context: Option<&str>) -> String {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap();
        runtime
            .block_on(load(Some(path), context))
            .unwrap_err()
            .to_string()
    }

    #[test]
    fn a_missing_kubeconfig_is_named_once_with_its_cause_once() {
        let path = scratch("missing");
        let message = message(&path, None);
        let shown = path.display().to_string();
        assert_eq!(message.matches(&shown).count(), 1, "{message}");
        assert!(message.starts_with("cannot read kubeconfig"), "{message}");
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
        let message = message(&path, None);
        std::fs::remove_file(&path).unwrap();
        let shown = path.display().to_string();
        assert_eq!(message.matches(&shown).count(), 1, "{message}");
        assert!(message.contains("line 2"), "{message}");
        assert_eq!(message.matches("unclosed bracket").count(), 1, "{message}");
        assert_eq!(message.lines().count(), 1, "{message}");
    }

    #[test]
    fn an_unknown_context_is_named_with_the_file() {
        let path = scratch("context");
        std::fs::write(
            &path,
            "apiVersion: v1\nkind: Config\nclusters: []\ncontexts: []\nusers: []\n",
        )
        .unwrap();
        let message = message(&path, Some("nope"));
        std::fs::remove_file(&path).unwrap();
        assert!(message.starts_with("cannot use kubeconfig"), "{message}");
        assert!(message.contains(&path.display().to_string()), "{message}");
        assert!(message.contains("nope"), "{message}");
    }
}
