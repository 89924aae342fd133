//! The rules of a SandboxProcess spec: the object's own (names, selector, references, the
//! immutable fields), then the process rules of [`crate::wire_rules`] on the start request the
//! spec becomes, so the operator and the agent's door refuse the same things alike.
//!
//! The CRD's schema and CEL rules keep what the API server must enforce (a subset of these);
//! `crd/tests.rs` runs one table of cases against both so they cannot drift.
use crate::convert::{start_request, Target};
use crate::crd::{PodSelector, SandboxProcessSpec, SelectorOperator};
use crate::names;
use crate::wire_rules::{process, seconds, Violation};

/// The operator's check of a SandboxProcess spec: the object's own rules, then the process rules
/// on the start request it becomes (values read from Secrets and ConfigMaps are checked when
/// read, in the operator's `envfrom`).
pub fn spec(spec: &SandboxProcessSpec) -> Result<(), Violation> {
    if spec.pod_name.is_empty() == spec.pod_selector.is_none() {
        return Err(Violation::new(
            "podName",
            "exactly one of podName, podSelector must be set",
        ));
    }
    if !spec.pod_name.is_empty() {
        name(
            "podName",
            &spec.pod_name,
            names::SUBDOMAIN,
            names::SUBDOMAIN_RULE,
        )?;
    }
    if let Some(c) = &spec.container {
        name("container", c, names::LABEL, names::LABEL_RULE)?;
    }
    if let Some(sel) = &spec.pod_selector {
        selector(sel)?;
    }
    for (i, e) in spec.env.iter().enumerate() {
        let Some(from) = &e.value_from else { continue };
        let field = format!("env[{i}].valueFrom");
        if !e.value.is_empty() {
            return Err(Violation::new(field, "value and valueFrom are exclusive"));
        }
        match from.reference() {
            None => {
                return Err(Violation::new(
                    field,
                    "must set exactly one of secretKeyRef, configMapKeyRef",
                ))
            }
            Some((_, r)) if r.name.is_empty() || r.key.is_empty() => {
                return Err(Violation::new(field, "name and key must not be empty"))
            }
            Some((kind, r)) => {
                let field = format!("{field}.{}KeyRef.name", kind_field(kind));
                name(&field, &r.name, names::SUBDOMAIN, names::SUBDOMAIN_RULE)?;
            }
        }
    }
    seconds(
        "ttlSecondsAfterFinished",
        spec.ttl_seconds_after_finished,
        0,
    )?;
    seconds("startDeadlineSeconds", spec.start_deadline_seconds, 1)?;
    // Every variable keeps its place (so `env[i]` names the spec's item): a value not read yet
    // stands in as empty.
    let unread = spec
        .env
        .iter()
        .filter(|e| e.value_from.is_some())
        .map(|e| (e.name.clone(), String::new()))
        .collect();
    let target = Target {
        exec_id: "-",
        pod_uid: "-",
        container: "-",
    };
    process(&start_request(spec, target, &unread)?)
}

fn kind_field(kind: &str) -> &'static str {
    if kind == "Secret" {
        "secret"
    } else {
        "configMap"
    }
}

fn name(field: &str, value: &str, pattern: &str, rule: &str) -> Result<(), Violation> {
    names::check(value, pattern, rule).map_err(|m| Violation::new(field, m))
}

/// A pod selector's keys and values must be ones a pod's labels can have.
fn selector(sel: &PodSelector) -> Result<(), Violation> {
    use SelectorOperator::{In, NotIn};
    for (k, v) in &sel.match_labels {
        let field = format!("podSelector.matchLabels[{k:?}]");
        name(&field, k, names::LABEL_KEY, names::LABEL_KEY_RULE)?;
        name(&field, v, names::LABEL_VALUE, names::LABEL_VALUE_RULE)?;
    }
    for (i, r) in sel.match_expressions.iter().enumerate() {
        let field = format!("podSelector.matchExpressions[{i}]");
        if matches!(r.operator, In | NotIn) == r.values.is_empty() {
            return Err(Violation::new(
                format!("{field}.values"),
                "values must be non-empty for In and NotIn, and empty for Exists and DoesNotExist",
            ));
        }
        name(
            &format!("{field}.key"),
            &r.key,
            names::LABEL_KEY,
            names::LABEL_KEY_RULE,
        )?;
        for (j, v) in r.values.iter().enumerate() {
            let field = format!("{field}.values[{j}]");
            name(&field, v, names::LABEL_VALUE, names::LABEL_VALUE_RULE)?;
        }
    }
    Ok(())
}

/// The rules only the API server can check, between an object and its previous version: every
/// field except `stop` and `ttlSecondsAfterFinished` is immutable.
pub fn spec_update(new: &SandboxProcessSpec, old: &SandboxProcessSpec) -> Result<(), Violation> {
    let immutable: [(&str, bool); 17] = [
        ("podName", new.pod_name == old.pod_name),
        ("podSelector", new.pod_selector == old.pod_selector),
        ("container", new.container == old.container),
        ("command", new.command == old.command),
        (
            "securityContext",
            new.security_context == old.security_context,
        ),
        ("workingDir", new.working_dir == old.working_dir),
        ("env", new.env == old.env),
        ("timeoutSeconds", new.timeout_seconds == old.timeout_seconds),
        ("readiness", new.readiness == old.readiness),
        ("stopSignal", new.stop_signal == old.stop_signal),
        (
            "terminationGracePeriodSeconds",
            new.termination_grace_period_seconds == old.termination_grace_period_seconds,
        ),
        ("resources", new.resources == old.resources),
        (
            "startDeadlineSeconds",
            new.start_deadline_seconds == old.start_deadline_seconds,
        ),
        ("stdin", new.stdin == old.stdin),
        ("tty", new.tty == old.tty),
        ("terminal", new.terminal == old.terminal),
        ("restartPolicy", new.restart_policy == old.restart_policy),
    ];
    match immutable.iter().find(|(_, same)| !same) {
        Some((field, _)) => Err(Violation::new(*field, format!("{field} is immutable"))),
        None => Ok(()),
    }
}
