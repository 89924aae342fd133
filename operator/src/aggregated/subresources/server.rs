//! What every handler of the subresource API shares.
use std::sync::Arc;

use kube::Client;
use tokio::sync::watch;

use super::frontproxy::RequestHeaderConfig;
use crate::agent::Agents;

pub struct Server {
    pub client: Client,
    /// The operator's agent registry, shared with the controller: where each node's agent is
    /// (one watch of the agent pods), and the client that reaches it.
    pub agents: Arc<Agents>,
    /// Kept current by `certs::reload`.
    pub request_headers: watch::Receiver<RequestHeaderConfig>,
}
