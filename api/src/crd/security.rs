//! `spec.securityContext`: the user the process runs as, with a Pod container's field names and
//! meaning. The agent judges it against the container's own user (never more privilege).
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::wire::{self, MAX_ID, MAX_SUPPLEMENTAL_GROUPS};
use crate::wire_rules::{id, Violation};

/// The process's user and groups. Each field is optional; one left out is the container's.
/// Only what the container's own process could become is allowed: a container running as root
/// may run the process as any user and groups; one running as a non-root uid only as that uid,
/// with groups it already has (its gid and supplementary groups). Anything else is refused
/// before the start: `Error` `UserNotPermitted`, naming the field.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("x-kubernetes-validations" = [
    {"rule": "!(has(self.runAsNonRoot) && self.runAsNonRoot && has(self.runAsUser) && self.runAsUser == 0)",
     "message": "runAsUser 0 (root) contradicts runAsNonRoot: true", "fieldPath": ".runAsUser"}
]))]
pub struct SecurityContextSpec {
    /// The uid the process runs as (0–2147483647). Default: the container's. A uid other than
    /// the container's drops the container's supplementary groups and, from root, its
    /// capabilities (see `docs/guides/users.md`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0, max = MAX_ID))]
    pub run_as_user: Option<i64>,
    /// The primary gid of the process (0–2147483647). Default: the container's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0, max = MAX_ID))]
    pub run_as_group: Option<i64>,
    /// The process's supplementary groups (each 0–2147483647, at most 64), instead of the
    /// container's. Default: the container's when the uid is the container's, none otherwise.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = MAX_SUPPLEMENTAL_GROUPS), inner(range(min = 0, max = MAX_ID)))]
    pub supplemental_groups: Vec<i64>,
    /// `true`: refuse the start (`UserNotPermitted`) when the process would run as uid 0,
    /// `runAsUser` left out included (the container's uid then), as the kubelet does.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub run_as_non_root: Option<bool>,
}

impl SecurityContextSpec {
    /// The agent's form; `Err` names the field.
    pub fn to_wire(&self) -> Result<wire::SecurityContext, Violation> {
        let opt = |field: &str, v: Option<i64>| v.map(|v| id(field, v)).transpose();
        Ok(wire::SecurityContext {
            run_as_user: opt("securityContext.runAsUser", self.run_as_user)?,
            run_as_group: opt("securityContext.runAsGroup", self.run_as_group)?,
            supplemental_groups: self
                .supplemental_groups
                .iter()
                .enumerate()
                .map(|(i, g)| id(&format!("securityContext.supplementalGroups[{i}]"), *g))
                .collect::<Result<_, _>>()?,
            run_as_non_root: self.run_as_non_root.unwrap_or(false),
        })
    }
}
