//! Where each node's agent is: the one place that decides which agent pod serves a node (the
//! controller's cache here, the subresource API's list in `subresources`), by one rule.
use std::collections::HashSet;

use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

use super::{now, Agents};

/// Labels of the agent pods (in the operator's namespace) when `--agent-selector` is not given;
/// the chart gives one with the release's instance label.
pub const AGENT_SELECTOR: &str =
    "app.kubernetes.io/name=sandbox-process-operator,app.kubernetes.io/component=agent";

/// The agent API's URL on a pod IP (v4 or v6).
pub fn url_for_ip(ip: &str, port: u16) -> String {
    if ip.contains(':') {
        format!("http://[{ip}]:{port}")
    } else {
        format!("http://{ip}:{port}")
    }
}

/// The IP of an agent pod that serves: not being deleted, Running, with an IP.
pub fn serving_ip(p: &Pod) -> Option<&str> {
    if p.metadata.deletion_timestamp.is_some() {
        return None;
    }
    let s = p.status.as_ref()?;
    (s.phase.as_deref() == Some("Running"))
        .then_some(s.pod_ip.as_deref())
        .flatten()
}

/// The agent pod serving `node` among `pods`: a serving one on that node (a DaemonSet has one
/// per node; during a rollout the old one serves until it is deleted).
pub fn agent_ip_for_node<'a>(
    pods: impl IntoIterator<Item = &'a Pod>,
    node: &str,
) -> Option<String> {
    pods.into_iter()
        .filter(|p| p.spec.as_ref().and_then(|s| s.node_name.as_deref()) == Some(node))
        .find_map(serving_ip)
        .map(str::to_string)
}

impl Agents {
    /// The agent serving `node`, if one is known.
    pub fn url_for_node(&self, node: &str) -> Option<String> {
        if let Some(u) = &self.fixed_url {
            return Some(u.clone());
        }
        let pods = self.pods.as_ref()?.state();
        let found = agent_ip_for_node(pods.iter().map(|p| p.as_ref()), node)
            .map(|ip| url_for_ip(&ip, self.port));
        let mut missing = self.missing.lock().unwrap();
        if found.is_some() {
            missing.remove(node);
        } else {
            missing.entry(node.to_string()).or_insert_with(now);
        }
        found
    }

    /// Since when `node` has had no agent (for the grace period).
    pub fn missing_since(&self, node: &str) -> Time {
        self.missing
            .lock()
            .unwrap()
            .entry(node.to_string())
            .or_insert_with(now)
            .clone()
    }

    /// The URL of every agent that serves: the fixed URL, or one per serving agent pod.
    pub fn urls(&self) -> HashSet<String> {
        if let Some(u) = &self.fixed_url {
            return HashSet::from([u.clone()]);
        }
        let Some(pods) = &self.pods else {
            return HashSet::new();
        };
        pods.state()
            .iter()
            .filter_map(|p| serving_ip(p))
            .map(|ip| url_for_ip(ip, self.port))
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pod(node: &str, phase: &str, ip: Option<&str>, deleting: bool) -> Pod {
        let mut p: Pod = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "a", "namespace": "sandbox-system"},
            "spec": {"nodeName": node, "containers": [{"name": "agent"}]},
            "status": {"phase": phase, "podIP": ip}
        }))
        .unwrap();
        if deleting {
            p.metadata.deletion_timestamp = Some(now());
        }
        p
    }

    /// The rule the controller and the subresource API share: a Running, not deleting agent pod
    /// with an IP on that node.
    #[test]
    fn the_serving_agent_of_a_node() {
        let pods = [
            pod("n2", "Running", Some("10.0.0.2"), false),
            pod("n1", "Running", Some("10.0.0.9"), true),
            pod("n1", "Pending", None, false),
            pod("n1", "Running", Some("10.0.0.1"), false),
        ];
        assert_eq!(agent_ip_for_node(&pods, "n1").as_deref(), Some("10.0.0.1"));
        assert_eq!(agent_ip_for_node(&pods, "n2").as_deref(), Some("10.0.0.2"));
        assert_eq!(agent_ip_for_node(&pods[1..3], "n1"), None);
        assert_eq!(url_for_ip("fd00::1", 9443), "http://[fd00::1]:9443");
    }
}
