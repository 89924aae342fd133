//! Where each node's agent is: the one place that decides which agent pod serves a node, by one
//! rule, from one watch of this release's agent pods that the controller and the subresource API
//! share.
use crate::listed::Listed;
use std::collections::{BTreeMap, HashSet};
use std::time::Duration;

use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::runtime::reflector::{self, Store};
use kube::runtime::{watcher, WatchStreamExt};
use kube::{Api, Client};

use super::{now, Agents};

/// Labels of the agent pods (in the operator's namespace) when `--agent-selector` is not given;
/// the chart gives one with the release's instance label.
pub const AGENT_SELECTOR: &str =
    "app.kubernetes.io/name=sandbox-process-operator,app.kubernetes.io/component=agent";

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

/// Whether a DaemonSet controls the pod (every real agent pod). A pod that only carries the
/// labels is tried last: it cannot pass the TLS check anyway, but must not hide the real agent.
fn daemonset_pod(p: &Pod) -> bool {
    p.metadata
        .owner_references
        .iter()
        .flatten()
        .any(|o| o.controller == Some(true) && o.kind == "DaemonSet")
}

/// The serving agent pod of each node among `pods` (a DaemonSet has one per node; during a
/// rollout the old one serves until it is deleted), DaemonSet pods first.
pub fn agent_ips<'a>(pods: impl IntoIterator<Item = &'a Pod>) -> BTreeMap<String, String> {
    let mut best: BTreeMap<String, (bool, String)> = BTreeMap::new();
    for p in pods {
        let (Some(node), Some(ip)) = (
            p.spec.as_ref().and_then(|s| s.node_name.as_deref()),
            serving_ip(p),
        ) else {
            continue;
        };
        let owned = daemonset_pod(p);
        match best.get(node) {
            Some((o, _)) if *o || !owned => {}
            _ => {
                best.insert(node.to_string(), (owned, ip.to_string()));
            }
        }
    }
    best.into_iter().map(|(n, (_, ip))| (n, ip)).collect()
}

/// The agent pod serving `node` among `pods`.
pub fn agent_ip_for_node<'a>(
    pods: impl IntoIterator<Item = &'a Pod>,
    node: &str,
) -> Option<String> {
    let on_node = pods
        .into_iter()
        .filter(|p| p.spec.as_ref().and_then(|s| s.node_name.as_deref()) == Some(node));
    agent_ips(on_node).remove(node)
}

/// This release's agent pods (in `namespace`, labelled `selector`), cached by a watch that runs
/// as long as the operator does, and whether it has listed them.
pub fn watch_agent_pods(client: &Client, namespace: &str, selector: &str) -> (Store<Pod>, Listed) {
    let (store, writer) = reflector::store::<Pod>();
    let (marker, listed) = Listed::new();
    let api = Api::<Pod>::namespaced(client.clone(), namespace);
    let stream = watcher(api, watcher::Config::default().labels(selector))
        .default_backoff()
        .reflect(writer)
        .inspect_ok(move |ev| marker.mark(ev))
        .for_each(|_| futures::future::ready(()));
    tokio::spawn(stream);
    (store, listed)
}

impl Agents {
    /// The agent serving `node`, if one is known (no bookkeeping: see [`Self::url_for_node`]).
    pub fn agent_url(&self, node: &str) -> Option<String> {
        if let Some(u) = &self.fixed_url {
            return Some(u.clone());
        }
        let pods = self.pods.as_ref()?.0.state();
        agent_ip_for_node(pods.iter().map(|p| p.as_ref()), node)
            .map(|ip| self.client.url_for(node, &ip, self.port))
    }

    /// The agent serving `node`, if one is known; a node without one is remembered from then on
    /// ([`Self::missing_since`], the controller's grace period).
    pub fn url_for_node(&self, node: &str) -> Option<String> {
        let found = self.agent_url(node);
        if self.fixed_url.is_some() || self.pods.is_none() {
            return found;
        }
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

    /// The URL of every agent that serves: the fixed URL, or one per node with a serving agent.
    pub fn urls(&self) -> HashSet<String> {
        self.serving().into_iter().map(|(_, url)| url).collect()
    }

    /// The agent pods have been listed once (always with a fixed URL): until then [`Self::serving`]
    /// says nothing.
    pub fn agents_listed(&self) -> bool {
        match &self.pods {
            Some((_, listed)) if self.fixed_url.is_none() => listed.now(),
            _ => true,
        }
    }

    /// Waits up to `wait` for the agent pods' first list; whether it came (always, with a fixed
    /// URL).
    pub async fn listed_within(&self, wait: Duration) -> bool {
        match &self.pods {
            Some((_, listed)) if self.fixed_url.is_none() => {
                matches!(tokio::time::timeout(wait, listed.wait()).await, Ok(true))
            }
            _ => true,
        }
    }

    /// Every agent that serves, with its node (`None`: the fixed URL, serving every node).
    pub fn serving(&self) -> Vec<(Option<String>, String)> {
        if let Some(u) = &self.fixed_url {
            return vec![(None, u.clone())];
        }
        let Some((pods, _)) = &self.pods else {
            return Vec::new();
        };
        let pods = pods.state();
        agent_ips(pods.iter().map(|p| p.as_ref()))
            .into_iter()
            .map(|(node, ip)| {
                let url = self.client.url_for(&node, &ip, self.port);
                (Some(node), url)
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn owned(mut p: Pod) -> Pod {
        p.metadata.owner_references = Some(vec![serde_json::from_value(serde_json::json!({
            "apiVersion": "apps/v1", "kind": "DaemonSet", "name": "a", "uid": "u", "controller": true
        }))
        .unwrap()]);
        p
    }

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
        // A pod with the labels but no DaemonSet over it never hides the DaemonSet's pod.
        let impostor = pod("n1", "Running", Some("10.0.0.66"), false);
        let real = owned(pod("n1", "Running", Some("10.0.0.1"), false));
        for pods in [[impostor.clone(), real.clone()], [real, impostor.clone()]] {
            assert_eq!(agent_ip_for_node(&pods, "n1").as_deref(), Some("10.0.0.1"));
        }
        assert_eq!(
            agent_ip_for_node([&impostor], "n1").as_deref(),
            Some("10.0.0.66")
        );
    }
}
