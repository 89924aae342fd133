//! Acting as another user (`kubectl --as`): a [`TestNs`] whose clients impersonate USER, so
//! what the API server and the operator allow or refuse is what that user would see.
use anyhow::{Context, Result};
use kube::Client;
use sandbox_client::Sandbox;

use crate::ns::TestNs;

impl TestNs {
    /// The same namespace, every request made as `user` (e.g.
    /// `system:serviceaccount:NS:tenant`); the admin's own client is left as it is.
    pub async fn as_user(&self, user: &str) -> Result<TestNs> {
        let mut config = kube::Config::infer().await.context("kubeconfig")?;
        config.default_retry = false;
        config.auth_info.impersonate = Some(user.to_string());
        let client = Client::try_from(config)?;
        Ok(TestNs {
            name: self.name.clone(),
            sandbox: Sandbox::new(client.clone(), self.name.clone()),
            client,
        })
    }
}
