//! One reconcile of a live object: gather the facts (the copy is current, the target pod, the
//! spec's validity, the agent's record), act (start once / stop once, `act`), compute the status
//! (`status::compute`, pure), write it (`writer`), and say when to look again.
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::api::{DeleteParams, Preconditions};
use kube::runtime::controller::Action;
use kube::runtime::reflector::ObjectRef;
use kube::{Api, ResourceExt};
use sandbox_api::convert::{self, Target};
use sandbox_api::crd::{Phase, SandboxProcess, SandboxProcessStatus};
use sandbox_api::spec_fields;
use sandbox_api::validate::{self, Valid, Violation};
use sandbox_api::wire::StartRequest;
use tracing::{debug, info};

use crate::agent::Anywhere;
use crate::envfrom;
use crate::pod;
use crate::reconcile::act::Actor;
use crate::reconcile::context::{now, ttl_requeue, Context, OUTPUT_REFRESH, PENDING_RECHECK};
use crate::reconcile::error::Error;
use crate::reconcile::finalizer;
use crate::reconcile::memo::CachedCopy;
use crate::reconcile::writer;
use crate::status::{self, AgentView, ContainerFacts, Facts, PodFacts};

/// The object's namespace and name.
fn object_key(o: &SandboxProcess) -> (&str, &str) {
    let m = &o.metadata;
    (
        m.namespace.as_deref().unwrap_or_default(),
        m.name.as_deref().unwrap_or_default(),
    )
}

pub async fn apply(
    obj: Arc<SandboxProcess>,
    ctx: &Context,
    api: &Api<SandboxProcess>,
) -> Result<Action, Error> {
    let uid = obj.uid().ok_or(Error::Incomplete("uid"))?;
    // What the copy holds (the writer compares against it) and what this reconcile judges by.
    let (stored, prev) = match judged(&obj, ctx, &uid) {
        Ok(both) => both,
        Err(wait) => return Ok(wait),
    };
    let now = now();
    if status::is_final(&prev) {
        return finished(&obj, ctx, api, &prev, &now).await;
    }
    let (target, chosen_now, pod) = target_pod(&obj, ctx, &prev).await?;
    let spec = &obj.spec;
    let invalid = validate::spec(spec).err();
    let actor = Actor {
        agents: &ctx.agents,
        api: &ctx.agents.client,
        memo: &ctx.memo,
        agent_grace: ctx.settings.agent_grace,
    };
    let mut agent = AgentView::NotAsked;
    if status::is_started(&prev) {
        // The node it was started on (a process taken over from an earlier start with one agent
        // URL for every node has none: the pod's then).
        let node = prev
            .node_name
            .as_deref()
            .or(pod.as_ref().and_then(|p| p.node_name.as_deref()));
        let (view, url) = actor.lookup(node, &uid).await;
        agent = match (spec.stop, url) {
            (true, Some(url)) => {
                let grace = spec.termination_grace_period_seconds.max(0) as u64;
                actor.stop_once(view, &url, &uid, grace).await
            }
            _ => view,
        };
    } else if let Some(p) = pod
        .as_ref()
        .filter(|p| invalid.is_none() && !chosen_now && may_start(&obj, &prev, p, &now))
    {
        agent = match request(ctx, &obj, &uid, p).await {
            Ok(req) if ctx.memo.start_sent(&uid, &p.uid, object_key(&obj)) == p.uid => {
                let node = p.node_name.as_deref().unwrap_or_default();
                actor.start_once(node, &req).await
            }
            // may_start saw the pin; kept as a second lock on the same door.
            Ok(_) => AgentView::NotAsked,
            Err(view) => view,
        };
    }

    let held_output = ctx.memo.output_due(&uid, OUTPUT_REFRESH);
    let facts = Facts {
        generation: obj.metadata.generation,
        spec,
        prev: &prev,
        pod_name: &target,
        pod: pod.as_ref(),
        created: obj.metadata.creation_timestamp.as_ref(),
        agent: &agent,
        invalid: invalid.as_ref(),
        now: now.clone(),
        agent_grace: ctx.settings.agent_grace,
        output_due: held_output.is_none(),
    };
    let (next, held_back) = computed(&facts, &stored, held_output);
    let held = ctx.memo.held_start(&uid).map(|(_, for_)| for_);
    if let status::Write::Hold { after } = status::plan(&stored, &next, held) {
        // Still launching: a process that ends meanwhile gets one status write, its final.
        let node = next.node_name.as_deref().unwrap_or_default();
        ctx.memo.hold_start(&uid, node);
        return Ok(Action::requeue(after));
    }
    if let Err(e) = writer::write(ctx, api, &obj, &stored, &next).await {
        return gone_meanwhile(ctx, &obj, e);
    }
    if status::is_started(&next) && !status::is_started(&stored) {
        ctx.memo.start_written(&uid);
    }
    if status::is_started(&next) && !status::is_final(&next) {
        // Shown running: from now on a deletion waits for the stop. After the status, so that
        // the user sees Running one write sooner.
        finalizer::add(api, &obj).await?;
    }
    if status::is_final(&next) {
        ctx.memo.ended(&uid);
        ctx.agents.release(&uid);
        return Ok(Action::await_change());
    }
    let deadline =
        status::start_deadline_left(spec, obj.metadata.creation_timestamp.as_ref(), &now);
    Ok(next_action(&agent, held_back, next.phase, deadline))
}

/// A status write that found the object gone: deleted while its start was under way, before any
/// finalizer (only a process shown running has one). Its DELETED event may have come before the
/// agent held the process, so the deletion worker is told again, now that the agent does.
fn gone_meanwhile(ctx: &Context, obj: &Arc<SandboxProcess>, e: Error) -> Result<Action, Error> {
    match e {
        Error::Kube(kube::Error::Api(a)) if a.code == 404 => {
            info!("the object was deleted while its process started; stopping it");
            let _ = ctx
                .deleted
                .send(crate::reconcile::deleted::stamped(obj.clone()));
            Ok(Action::await_change())
        }
        e => Err(e),
    }
}

/// The status to write, and how long until held-back output and usage are due (`held_output`:
/// not due yet, due in that long). Held back, they are looked at again when due, or a change no
/// event follows (a sleeping process's first usage sample) would never reach the status; a
/// status written anyway carries them at no extra write.
fn computed(
    facts: &Facts<'_>,
    stored: &SandboxProcessStatus,
    held_output: Option<Duration>,
) -> (SandboxProcessStatus, Option<Duration>) {
    let full = held_output.map(|_| {
        status::compute(&Facts {
            output_due: true,
            ..facts.clone()
        })
    });
    let next = status::with_output(stored, status::compute(facts), full.clone());
    let held_back = held_output.filter(|_| full.is_some_and(|f| f != next));
    (next, held_back)
}

/// The status as stored in the cached copy, and the one this reconcile judges by: the stored one
/// bound to the pod a start was already sent for (by us, or by an earlier leader that an agent's
/// record betrays). `Err`: look again after this, the facts are not in yet.
fn judged(
    obj: &SandboxProcess,
    ctx: &Context,
    uid: &str,
) -> Result<(SandboxProcessStatus, SandboxProcessStatus), Action> {
    let stored = obj.status.clone().unwrap_or_default();
    let mut prev = stored.clone();
    let copy = ctx
        .memo
        .judge_copy(uid, status::is_final(&prev), status::is_started(&prev));
    if copy != CachedCopy::Current {
        // Our final or started status is not in this copy yet: acting on it could start the
        // process again (in a pod re-created meanwhile) or overwrite the end; look again once the
        // cache has caught up.
        debug!(
            ?copy,
            "cached copy predates our status; waiting for the cache"
        );
        return Err(Action::requeue(Duration::from_secs(1)));
    }
    if prev.target_pod_uid.is_none() {
        // A start was sent (its outcome perhaps unknown) before any status of ours is in this
        // copy: bound to that pod, as the status will say.
        prev.target_pod_uid = ctx.memo.start_sent_for(uid);
    }
    let held = ctx.memo.held_start(uid).map(|(node, ..)| node);
    let settled = held.zip(ctx.memo.start_sent_for(uid));
    if let Some((node, pod_uid)) = settled.filter(|_| !status::is_started(&prev)) {
        // Started by us, its first started status held back (status::plan): read the record on
        // that node now, as for any started process, rather than start again.
        prev.pod_uid = Some(pod_uid);
        prev.node_name = Some(node);
    }
    if prev.target_pod_uid.is_none() && !status::is_started(&prev) && !status::is_final(&prev) {
        // Or an earlier leader sent one and went before writing any status: an agent holds the
        // process, perhaps in a pod replaced since (on another node). Started there, as far as
        // this reconcile is concerned (the record tells how it is, or that its pod is gone), or
        // the process would run twice.
        match ctx
            .agents
            .held_anywhere(uid, obj.metadata.creation_timestamp.as_ref())
        {
            Anywhere::Held { node, record } => {
                info!(pod_uid = %record.pod_uid, node = ?node, "an agent already holds this process (an earlier start); taken as started there");
                prev.target_pod_uid = Some(record.pod_uid.clone());
                prev.pod_uid = Some(record.pod_uid);
                prev.node_name = node.or(prev.node_name);
            }
            Anywhere::NotYetKnown => {
                debug!("an agent's watch is not synced yet; the start waits for it");
                return Err(Action::requeue(Duration::from_secs(1)));
            }
            Anywhere::Nowhere => {}
        }
    }
    Ok((stored, prev))
}

/// Not stopped, the container runs, and no reason to refuse the start (deadline, pinned pod).
fn may_start(obj: &SandboxProcess, prev: &SandboxProcessStatus, p: &PodFacts, now: &Time) -> bool {
    let created = obj.metadata.creation_timestamp.as_ref();
    !obj.spec.stop
        && pod::can_start(p)
        && status::start_refusal(&obj.spec, prev, Some(p), created, now).is_none()
}

/// The start request for the pod: values from Secrets and ConfigMaps read now, the whole request
/// checked as the agent's door will check it. `Err`: the view that says why not yet.
async fn request(
    ctx: &Context,
    obj: &SandboxProcess,
    uid: &str,
    p: &PodFacts,
) -> Result<Valid<StartRequest>, AgentView> {
    let ContainerFacts::Found {
        name: container, ..
    } = &p.container
    else {
        unreachable!("can_start checked the container")
    };
    refuse_unknown_fields(obj)?;
    let ns = obj.namespace().unwrap_or_default();
    let from_sources = envfrom::resolve(&ctx.client, &ns, &obj.spec)
        .await
        .map_err(|u| AgentView::Retrying {
            reason: u.reason.into(),
            message: u.message,
        })?;
    let target = Target {
        exec_id: uid,
        pod_uid: &p.uid,
        container: container.as_str(),
    };
    convert::start_request(&obj.spec, target, &from_sources)
        .and_then(validate::start)
        .map_err(|v: Violation| {
            AgentView::Rejected(sandbox_api::wire::ApiError {
                code: v.code,
                message: v.to_string(),
            })
        })
}

/// A spec field a client set that this release does not know (a newer release's, pruned from
/// the object after a rollback: `sandbox_api::spec_fields`) would be dropped by starting:
/// refused, naming it, before anything else is read.
fn refuse_unknown_fields(obj: &SandboxProcess) -> Result<(), AgentView> {
    let unknown = spec_fields::unknown_in(obj.metadata.managed_fields.as_deref());
    if unknown.is_empty() {
        return Ok(());
    }
    Err(AgentView::Rejected(sandbox_api::wire::ApiError {
        code: sandbox_api::wire::ErrorCode::InvalidRequest,
        message: format!(
            "{}: set by a newer release of sandbox-process-operator, unknown to this one: \
             starting would drop what it asks (after a rollback the API server prunes a newer \
             schema's fields); start it with a release that knows it, or recreate the object \
             without it (docs/operations/upgrade.md)",
            unknown.join(", ")
        ),
    }))
}

/// The pod the process runs in: named, or chosen by the selector once (recorded in
/// `status.podName` before the start, which waits for the next reconcile so that the choice is
/// stored first). Returns (name, chosen now, its facts).
async fn target_pod(
    obj: &SandboxProcess,
    ctx: &Context,
    prev: &SandboxProcessStatus,
) -> Result<(String, bool, Option<PodFacts>), Error> {
    let ns = obj.namespace().ok_or(Error::Incomplete("namespace"))?;
    let spec = &obj.spec;
    // The pod cache must have its first list before "no pod" can mean anything.
    let _ = tokio::time::timeout(Duration::from_secs(30), ctx.pods_listed.wait()).await;
    let container = spec.container.as_deref();
    let (target, chosen_now) = match (known_pod(obj, prev), &spec.pod_selector) {
        (Some(n), _) => (n, false),
        (None, Some(sel)) => {
            let pods = ctx.pods.state();
            match pod::choose(pods.iter().map(|p| p.as_ref()), &ns, sel, container) {
                Some(n) => {
                    info!(pod = %n, "podSelector chose a pod");
                    (n, true)
                }
                None => (String::new(), false),
            }
        }
        (None, None) => (String::new(), false),
    };
    let mut pod = (!target.is_empty())
        .then(|| ctx.pods.get(&ObjectRef::<Pod>::new(&target).within(&ns)))
        .flatten()
        .map(|p| pod::facts(&p, container));
    if status::is_started(prev) && pod.as_ref().map(|p| p.uid.as_str()) != prev.pod_uid.as_deref() {
        // Gone or replaced per the cache: confirm with the API server before a final verdict.
        let pods: Api<Pod> = Api::namespaced(ctx.client.clone(), &ns);
        pod = pods
            .get_opt(&target)
            .await?
            .map(|p| pod::facts(&p, container));
    }
    Ok((target, chosen_now, pod))
}

/// The pod named, or the one the selector chose earlier.
fn known_pod(obj: &SandboxProcess, prev: &SandboxProcessStatus) -> Option<String> {
    if obj.spec.pod_name.is_empty() {
        prev.pod_name.clone()
    } else {
        Some(obj.spec.pod_name.clone())
    }
}

/// A final status: kept as it is (only recomputed for a new generation), and the object deleted
/// once `ttlSecondsAfterFinished` has passed.
async fn finished(
    obj: &SandboxProcess,
    ctx: &Context,
    api: &Api<SandboxProcess>,
    prev: &SandboxProcessStatus,
    now: &Time,
) -> Result<Action, Error> {
    let uid = obj.uid().unwrap_or_default();
    ctx.agents.release(&uid);
    // Settled: compute would copy it as it is (and the cache no longer has its conditions).
    let computed;
    let next = if status::settled(prev, obj.metadata.generation) {
        prev
    } else {
        computed = recomputed(obj, ctx, prev, now);
        writer::write_changed(ctx, api, obj, prev, &computed).await?;
        &computed
    };
    match status::ttl_remaining(&obj.spec, next, now) {
        Some(d) if d.is_zero() => {
            info!("ttlSecondsAfterFinished passed; deleting");
            let dp = DeleteParams {
                preconditions: Some(Preconditions {
                    uid: Some(uid),
                    resource_version: None,
                }),
                ..Default::default()
            };
            match api.delete(&obj.name_any(), &dp).await {
                Ok(_) => {}
                Err(kube::Error::Api(e)) if e.code == 404 || e.code == 409 => {}
                Err(e) => return Err(e.into()),
            }
            Ok(Action::await_change())
        }
        Some(d) => Ok(ttl_requeue(d)),
        None => Ok(Action::await_change()),
    }
}

/// A final status for the object's generation (a new one: observedGeneration follows it).
fn recomputed(
    obj: &SandboxProcess,
    ctx: &Context,
    prev: &SandboxProcessStatus,
    now: &Time,
) -> SandboxProcessStatus {
    let known = known_pod(obj, prev);
    status::compute(&Facts {
        generation: obj.metadata.generation,
        spec: &obj.spec,
        prev,
        pod_name: known.as_deref().unwrap_or_default(),
        pod: None,
        created: obj.metadata.creation_timestamp.as_ref(),
        agent: &AgentView::NotAsked,
        invalid: None,
        now: now.clone(),
        agent_grace: ctx.settings.agent_grace,
        output_due: false,
    })
}

/// When to look again without being told: the watches (object, pod, agent) drive everything
/// else; these cover timers. `held_back`: output not written yet, due in that long.
pub fn next_action(
    agent: &AgentView,
    held_back: Option<Duration>,
    phase: Option<Phase>,
    start_deadline_left: Option<Duration>,
) -> Action {
    match (agent, held_back) {
        (_, Some(left)) => Action::requeue(left + Duration::from_millis(50)),
        (AgentView::Retrying { reason, .. }, _) if reason == "NodeAtCapacity" => {
            Action::requeue(Duration::from_secs(10))
        }
        // Waiting for a Secret or ConfigMap (env valueFrom): each look is a GET.
        (AgentView::Retrying { reason, .. }, _) if envfrom::REASONS.contains(&reason.as_str()) => {
            Action::requeue(Duration::from_secs(5))
        }
        (AgentView::Retrying { .. }, _) => Action::requeue(Duration::from_secs(2)),
        (AgentView::Unreachable { .. }, _) => Action::requeue(Duration::from_secs(5)),
        _ if phase == Some(Phase::Pending) => {
            let deadline = start_deadline_left.map_or(PENDING_RECHECK, |left| {
                left.saturating_add(Duration::from_millis(500))
            });
            Action::requeue(deadline.min(PENDING_RECHECK))
        }
        _ => Action::requeue(Duration::from_secs(300)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A process whose spec carried a field this release does not know is refused, naming the
    /// field, and one without is not.
    #[test]
    fn a_field_of_a_newer_release_refuses_the_start() {
        let object = |fields: serde_json::Value| -> SandboxProcess {
            let e: crate::reconcile::cache::Entry = serde_json::from_value(serde_json::json!({
                "apiVersion": "sandbox.dev/v1alpha1", "kind": "SandboxProcess",
                "metadata": {"name": "p", "namespace": "ns", "managedFields": [
                    {"manager": "argocd", "operation": "Apply", "fieldsType": "FieldsV1",
                     "fieldsV1": {"f:spec": fields}}]},
                "spec": {"podName": "w", "command": ["true"]}}))
            .unwrap();
            (*e.object()).clone()
        };
        let newer = object(serde_json::json!({"f:command": {}, "f:sandboxProfile": {}}));
        match refuse_unknown_fields(&newer) {
            Err(AgentView::Rejected(e)) => {
                assert!(
                    e.message
                        .starts_with("spec.sandboxProfile: set by a newer release"),
                    "{}",
                    e.message
                );
            }
            other => panic!("{other:?}"),
        }
        let today = object(serde_json::json!({"f:command": {}, "f:podName": {}}));
        assert!(refuse_unknown_fields(&today).is_ok());
    }

    /// The write budget (docs/concepts/writes.md) assumes one output refresh per 30 s at most
    /// (status/tests.rs's write plan simulates it).
    #[test]
    fn output_is_refreshed_at_most_every_30_s() {
        assert_eq!(OUTPUT_REFRESH, Duration::from_secs(30));
    }

    #[test]
    fn when_to_look_again() {
        let retrying = |reason: &str| AgentView::Retrying {
            reason: reason.into(),
            message: String::new(),
        };
        let unreachable = AgentView::Unreachable {
            since: now(),
            message: String::new(),
        };
        let s = Duration::from_secs;
        type Case = (
            AgentView,
            Option<Duration>,
            Option<Phase>,
            Option<Duration>,
            Duration,
        );
        let cases: Vec<Case> = vec![
            // Held-back output is written when due, whatever else waits.
            (
                retrying("NodeAtCapacity"),
                Some(s(3)),
                Some(Phase::Running),
                None,
                Duration::from_millis(3050),
            ),
            (
                retrying("NodeAtCapacity"),
                None,
                Some(Phase::Pending),
                None,
                s(10),
            ),
            (
                retrying(envfrom::REASONS[0]),
                None,
                Some(Phase::Pending),
                None,
                s(5),
            ),
            (
                retrying("ContainerNotReady"),
                None,
                Some(Phase::Pending),
                None,
                s(2),
            ),
            (unreachable, None, Some(Phase::Running), None, s(5)),
            // Pending: at the start deadline (plus a little), at most every PENDING_RECHECK.
            (
                AgentView::NotAsked,
                None,
                Some(Phase::Pending),
                Some(s(4)),
                Duration::from_millis(4500),
            ),
            (
                AgentView::NotAsked,
                None,
                Some(Phase::Pending),
                Some(s(600)),
                PENDING_RECHECK,
            ),
            (
                AgentView::NotAsked,
                None,
                Some(Phase::Pending),
                None,
                PENDING_RECHECK,
            ),
            (
                AgentView::NotAsked,
                None,
                Some(Phase::Running),
                None,
                s(300),
            ),
        ];
        for (agent, held, phase, deadline, want) in cases {
            assert_eq!(
                next_action(&agent, held, phase, deadline),
                Action::requeue(want),
                "{agent:?} {held:?} {phase:?} {deadline:?}"
            );
        }
    }
}
