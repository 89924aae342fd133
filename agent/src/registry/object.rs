//! A `processes` object's labels and annotations changed after its start (a PATCH through the
//! operator). The supervisor's records carry the object as started and only the supervisor writes
//! them, so the change is kept apart, in the process's directory, and laid over every record the
//! agent serves: it outlives agent restarts and is gone with the process.
use sandbox_wire::wire::{ProcessObject, ProcessRecord};
use tracing::warn;

use super::Registry;
use crate::error::AgentError;
use sandbox_node_protocol::exec_id::ExecId;
use sandbox_node_protocol::record;

impl Registry {
    /// Replaces the labels and annotations of process `id`'s object; anything else of it must be
    /// as it is (refused otherwise: the spec of a process never changes). Answers the record as
    /// now served.
    pub async fn set_object(
        &self,
        id: &str,
        object: ProcessObject,
    ) -> Result<ProcessRecord, AgentError> {
        sandbox_wire::wire_rules::object(&object)?;
        let _one_at_a_time = self.ops.lock(id).await;
        // One at a time with a start and a forget of the same process (they take this lock too).
        let rec = self.get(id)?;
        let eid = ExecId::parse(id)?;
        let Some(current) = rec.object.as_deref() else {
            return Err(AgentError::InvalidRequest(
                "the process was not started as a `processes` object".into(),
            ));
        };
        if let Some(field) = changed_beyond_metadata(current, &object) {
            return Err(AgentError::InvalidRequest(format!(
                "object.{field}: cannot change; only labels and annotations can"
            )));
        }
        record::write_json(&self.cfg.layout.object(&eid), &object, true).map_err(|e| {
            match e.kind() {
                // Its directory went with a forget that ran first.
                std::io::ErrorKind::NotFound => AgentError::ProcessNotFound(id.to_string()),
                _ => AgentError::io("writing the object")(e),
            }
        })?;
        self.objects
            .lock()
            .unwrap()
            .insert(id.to_string(), Box::new(object));
        // The record current now (a supervisor write since `rec` included) gets the new object.
        match self.get(id) {
            Ok(now) => self.upsert(now),
            Err(e) => {
                self.objects.lock().unwrap().remove(id);
                return Err(e);
            }
        }
        self.get(id)
    }

    /// Reads the object kept for `id` at load, if its labels or annotations were changed.
    pub(super) fn load_object(&self, id: &ExecId) {
        let path = self.cfg.layout.object(id);
        match record::read_json::<ProcessObject>(&path) {
            Ok(o) => {
                self.objects
                    .lock()
                    .unwrap()
                    .insert(id.to_string(), Box::new(o));
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => {
                warn!(exec_id = %id, error = %e, "unreadable object; the one started is served")
            }
        }
    }

    /// Puts the changed object, if any, in place of the one the record carries.
    pub(super) fn lay_object_over(&self, rec: &mut ProcessRecord) {
        if rec.object.is_none() {
            return;
        }
        if let Some(o) = self.objects.lock().unwrap().get(&rec.exec_id) {
            rec.object = Some(o.clone());
        }
    }
}

/// The first field of `next` that differs from `current` other than labels and annotations.
pub(crate) fn changed_beyond_metadata(
    current: &ProcessObject,
    next: &ProcessObject,
) -> Option<&'static str> {
    let same = [
        ("namespace", current.namespace == next.namespace),
        ("name", current.name == next.name),
        (
            "creationTimestamp",
            current.creation_timestamp == next.creation_timestamp,
        ),
        ("podName", current.pod_name == next.pod_name),
        ("nodeName", current.node_name == next.node_name),
        ("spec", current.spec == next.spec),
    ];
    same.into_iter().find(|(_, same)| !same).map(|(f, _)| f)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn object() -> ProcessObject {
        ProcessObject {
            namespace: "ns".into(),
            name: "p".into(),
            creation_timestamp: "2026-12-06T00:00:00Z".into(),
            labels: [("a".to_string(), "1".to_string())].into(),
            annotations: Default::default(),
            pod_name: "pod".into(),
            node_name: "node".into(),
            spec: serde_json::json!({"podName": "pod", "command": ["true"]}),
        }
    }

    #[test]
    fn only_labels_and_annotations_may_change() {
        let cur = object();
        let mut next = object();
        next.labels.insert("b".into(), "2".into());
        next.annotations.insert("c".into(), "3".into());
        assert_eq!(changed_beyond_metadata(&cur, &next), None);
        type Change = fn(&mut ProcessObject);
        let cases: [(&str, Change); 6] = [
            ("namespace", |o| o.namespace = "other".into()),
            ("name", |o| o.name = "other".into()),
            ("creationTimestamp", |o| o.creation_timestamp = "x".into()),
            ("podName", |o| o.pod_name = "other".into()),
            ("nodeName", |o| o.node_name = "other".into()),
            ("spec", |o| o.spec["command"][0] = "false".into()),
        ];
        for (field, change) in cases {
            let mut next = object();
            change(&mut next);
            assert_eq!(changed_beyond_metadata(&cur, &next), Some(field));
        }
    }
}
