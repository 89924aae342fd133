//! What every handler of the subresource API shares.
use std::sync::Arc;

use kube::Client;
use tokio::sync::watch;

use super::error::SubresourceError;
use super::frontproxy::RequestHeaderConfig;
use super::table::ProcessTable;
use crate::agent::Agents;

pub struct Server {
    pub client: Client,
    /// The operator's agent registry, shared with the controller: where each node's agent is
    /// (one watch of the agent pods), and the client that reaches it.
    pub agents: Arc<Agents>,
    /// Kept current by `certs::reload`.
    pub request_headers: watch::Receiver<RequestHeaderConfig>,
    /// The `processes` this replica serves (`None` where no table is kept: tests).
    pub processes: Option<Arc<dyn ProcessTable>>,
}

/// How long a request waits for this replica to know what every agent holds.
const KNOWN_WAIT: std::time::Duration = std::time::Duration::from_secs(10);

impl Server {
    /// Waits until this replica knows every agent's records ([`Agents::all_known`]): before, a
    /// list would leave processes out (and the namespace controller, seeing none, would finish a
    /// namespace whose processes still run), and a process would not be found. 503 after
    /// [`KNOWN_WAIT`]: clients retry.
    pub async fn all_known(&self) -> Result<(), SubresourceError> {
        let deadline = tokio::time::Instant::now() + KNOWN_WAIT;
        while !self.agents.all_known() {
            if tokio::time::Instant::now() >= deadline {
                return Err(SubresourceError::Unavailable(
                    "this operator replica does not know yet what every node's agent holds (it has just started); try again".into(),
                ));
            }
            tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        }
        Ok(())
    }
}
