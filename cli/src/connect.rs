//! kubectl's connection flags, resolved the way kubectl resolves them.
use clap::Args;
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::{Client, Config};

use crate::error::CliError;

#[derive(Args, Debug, Default)]
pub struct KubeFlags {
    /// Path to the kubeconfig file (default: $KUBECONFIG, then ~/.kube/config, then in-cluster).
    #[arg(long, global = true)]
    pub kubeconfig: Option<std::path::PathBuf>,
    /// The kubeconfig context to use.
    #[arg(long, global = true)]
    pub context: Option<String>,
    /// The kubeconfig cluster to use.
    #[arg(long, global = true)]
    pub cluster: Option<String>,
    /// The kubeconfig user to use.
    #[arg(long, global = true)]
    pub user: Option<String>,
    /// Namespace (default: the context's).
    #[arg(short = 'n', long, global = true)]
    pub namespace: Option<String>,
    /// Username to impersonate.
    #[arg(long = "as", global = true)]
    pub as_user: Option<String>,
    /// Group to impersonate (repeatable).
    #[arg(long = "as-group", global = true)]
    pub as_group: Vec<String>,
}

impl KubeFlags {
    pub async fn connect(&self) -> Result<(Client, String), CliError> {
        let opts = KubeConfigOptions {
            context: self.context.clone(),
            cluster: self.cluster.clone(),
            user: self.user.clone(),
        };
        let config = if let Some(path) = &self.kubeconfig {
            let kc = Kubeconfig::read_from(path)
                .map_err(|e| CliError::Config(format!("--kubeconfig {}: {e}", path.display())))?;
            Config::from_custom_kubeconfig(kc, &opts).await
        } else if opts.context.is_some() || opts.cluster.is_some() || opts.user.is_some() {
            Config::from_kubeconfig(&opts).await
        } else {
            return self.finish(
                Config::infer()
                    .await
                    .map_err(|e| CliError::Config(e.to_string()))?,
            );
        }
        .map_err(|e| CliError::Config(e.to_string()))?;
        self.finish(config)
    }

    fn finish(&self, mut config: Config) -> Result<(Client, String), CliError> {
        if let Some(u) = &self.as_user {
            config.auth_info.impersonate = Some(u.clone());
        }
        if !self.as_group.is_empty() {
            if self.as_user.is_none() {
                return Err(CliError::Usage(
                    "--as-group needs --as (impersonating groups without a user)".into(),
                ));
            }
            config.auth_info.impersonate_groups = Some(self.as_group.clone());
        }
        let namespace = self
            .namespace
            .clone()
            .unwrap_or_else(|| config.default_namespace.clone());
        // kube's default for controllers retries 429/503/504 up to 15 times with backoff to
        // 1000 s: a command would seem to hang on "agent unreachable". A command answers at once;
        // where a retry is right (a follow, a stdin write), it retries itself, by cursor or offset.
        config.default_retry = false;
        let client = Client::try_from(config).map_err(|e| CliError::Config(e.to_string()))?;
        Ok((client, namespace))
    }
}
