//! The SandboxProcess controller: gathers the facts (object, pod, agent record), acts (start once,
//! stop once, forget on delete, delete after the TTL), and writes the status that
//! [`status::compute`] derives from the facts — with server-side apply, only when it changed.
use std::collections::HashSet;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::core::v1::Pod;
use kube::runtime::controller::{self, Action, Controller};
use kube::runtime::events::Reporter;
use kube::runtime::reflector::{self, ObjectRef, Store};
use kube::runtime::{watcher, WatchStreamExt};
use kube::{Api, Client, Resource, ResourceExt};
use sandbox_api::crd::SandboxProcess;
use tokio::sync::mpsc;
use tracing::{debug, info, warn, Instrument};

use crate::agent::Agents;
use crate::listed::Listed;
use crate::metrics::Metrics;
use crate::pod::target_pod_name;
use crate::reconcile::cache::Entry;
use crate::reconcile::context::{Context, Settings, FIELD_MANAGER};
use crate::reconcile::deleted;
use crate::reconcile::error::Error;
use crate::reconcile::finalizer;
use crate::reconcile::memo::Memo;
use crate::reconcile::watched::{self, WatchedPod};

/// Retry delay after `failures` consecutive failed reconciles: 1 s doubling to 5 min.
pub fn retry_delay(failures: u32) -> Duration {
    Duration::from_secs(1u64 << failures.saturating_sub(1).min(9)).min(Duration::from_secs(300))
}

async fn reconcile(entry: Arc<Entry>, ctx: Arc<Context>) -> Result<Action, Error> {
    let obj = entry.object();
    let metrics = ctx.metrics.clone();
    let _timer = metrics.reconcile();
    let ns = obj.namespace().ok_or(Error::Incomplete("namespace"))?;
    let span = tracing::info_span!("reconcile", object = %format!("{ns}/{}", obj.name_any()));
    let api: Api<SandboxProcess> = Api::namespaced(ctx.client.clone(), &ns);
    let uid = obj.uid().unwrap_or_default();
    let result = unpanicked(
        async {
            // Deleted: the process is stopped and forgotten first, over as many reconciles as that
            // takes (also when only others' finalizers hold the object: it still runs); only then
            // does our finalizer go, if it was added (only a process shown running has it).
            if obj.meta().deletion_timestamp.is_some() {
                if let Some(again) = crate::reconcile::cleanup::cleanup(obj.clone(), &ctx).await? {
                    return Ok(again);
                }
                finalizer::remove(&api, &obj).await?;
                return Ok(Action::await_change());
            }
            crate::reconcile::apply::apply(obj, &ctx, &api).await
        }
        .instrument(span),
    )
    .await;
    if result.is_ok() {
        ctx.memo.succeeded(&uid);
    }
    result
}

/// Runs one reconcile with its panics turned into [`Error::Panicked`]. kube-runtime polls every
/// reconcile inside the controller's own stream, so an unwinding panic would otherwise end the
/// controller for all objects (the release profile unwinds for this reason).
async fn unpanicked<T>(fut: impl Future<Output = Result<T, Error>>) -> Result<T, Error> {
    use futures::FutureExt;
    match std::panic::AssertUnwindSafe(fut).catch_unwind().await {
        Ok(r) => r,
        Err(p) => {
            let msg = p
                .downcast_ref::<&str>()
                .map(|s| s.to_string())
                .or_else(|| p.downcast_ref::<String>().cloned())
                .unwrap_or_else(|| "non-string panic payload".into());
            Err(Error::Panicked(msg))
        }
    }
}

fn error_policy(obj: Arc<Entry>, error: &Error, ctx: Arc<Context>) -> Action {
    warn!(
        object = %format!("{}/{}", obj.namespace().unwrap_or_default(), obj.name_any()),
        error = %error,
        "reconcile failed"
    );
    ctx.metrics.error(error.metric_label());
    let uid = obj.uid().unwrap_or_default();
    Action::requeue(retry_delay(ctx.memo.failed(&uid)))
}

/// Runs the controller until `shutdown` resolves. `agents` is the registry shared with the
/// subresource API; `changed` receives the exec ids whose record changed (from the agents'
/// watches, which every replica runs: the process API serves from them).
pub async fn run(
    client: Client,
    settings: Settings,
    agents: Arc<Agents>,
    changed: mpsc::UnboundedReceiver<String>,
    metrics: Arc<Metrics>,
    shutdown: impl Future<Output = ()> + Send + Sync + 'static,
) -> anyhow::Result<()> {
    // Every pod (target pods live anywhere), read without managedFields (crate::reconcile::watched).
    let (pods, pod_writer) = reflector::store::<Pod>();
    let (pods_marker, pods_listed) = Listed::new();
    let pod_events = watcher(
        Api::<WatchedPod>::all(client.clone()),
        watcher::Config::default(),
    )
    .default_backoff()
    .map_ok(watched::pods)
    .reflect(pod_writer)
    .inspect_ok(move |ev| pods_marker.mark(ev))
    .touched_objects();
    agents.begin_leading();
    let (sweeper_agents, sweep_every) = (agents.clone(), settings.orphan_sweep);
    let reporter = Reporter {
        controller: FIELD_MANAGER.into(),
        instance: Some(settings.instance.clone()),
    };
    let concurrency = settings.concurrency;
    let (gone_tx, gone_rx) = mpsc::unbounded_channel();
    let ctx = Arc::new(Context {
        client: client.clone(),
        pods,
        pods_listed,
        agents,
        reporter,
        metrics,
        settings,
        memo: Memo::default(),
        deleted: gone_tx.clone(),
    });

    // The object cache (and the trigger stream) holds only what the controller reads of each
    // object (cache::Entry).
    let (store, writer) = reflector::store::<Entry>();
    ctx.metrics.count_phases_of(Arc::new(store.clone()));
    // A DELETED event is the one news of an object gone without our finalizer (deleted). The
    // cache's first full list tells the sweep it may compare (crate::listed).
    let (marker, listed) = Listed::new();
    let objects = watcher(Api::<Entry>::all(client), watcher::Config::default())
        .reflect(writer)
        .inspect_ok(move |ev| {
            marker.mark(ev);
            if let watcher::Event::Delete(e) = ev {
                if deleted::needs_cleanup(e.meta()) {
                    let _ = gone_tx.send(deleted::stamped(e.object()));
                }
            }
        })
        .applied_objects();
    let deletions = tokio::spawn(deleted::run(gone_rx, ctx.clone(), concurrency.into()));
    let sweeper = tokio::spawn(sweep_orphans(
        sweeper_agents,
        store.clone(),
        listed,
        sweep_every,
    ));
    let by_pod = store.clone();
    let controller = Controller::for_stream(objects, store.clone())
        .with_config(controller::Config::default().concurrency(concurrency))
        // Pod changed → reconcile the objects naming it.
        .watches_stream(pod_events, move |p: Pod| {
            let (ns, name) = (p.namespace(), p.name_any());
            by_pod
                .state()
                .into_iter()
                .filter(|o| o.namespace() == ns && watches_pod(o, &p, &name))
                .map(|o| ObjectRef::from_obj(o.as_ref()))
                .collect::<Vec<_>>()
        })
        .reconcile_on(agent_changes(changed, store, ctx.clone()))
        .graceful_shutdown_on(shutdown);
    info!(concurrency, "controller running");
    controller
        .run(reconcile, error_policy, ctx)
        .for_each(|res| {
            match res {
                Ok((o, _)) => debug!(object = %o, "reconciled"),
                Err(controller::Error::ReconcilerFailed(..)) => {} // logged by error_policy
                // A requeue of an object deleted meanwhile.
                Err(controller::Error::ObjectNotFound(o)) => debug!(object = %o, "gone"),
                Err(e) => warn!(error = %e, "controller"),
            }
            futures::future::ready(())
        })
        .await;
    sweeper.abort();
    deletions.abort();
    Ok(())
}

/// Agent record changed → the object whose UID is the exec id.
fn agent_changes(
    mut rx: mpsc::UnboundedReceiver<String>,
    store: Store<Entry>,
    ctx: Arc<Context>,
) -> impl futures::Stream<Item = ObjectRef<Entry>> {
    futures::stream::poll_fn(move |cx| rx.poll_recv(cx)).filter_map(move |uid: String| {
        futures::future::ready(object_with_uid(&uid, &ctx.memo, &store))
    })
}

/// The object with this uid: the memo knows the objects it sent a start for; others (taken
/// over after a restart) are looked for in the cache, a scan of every object (O(N) a change).
fn object_with_uid(uid: &str, memo: &Memo, store: &Store<Entry>) -> Option<ObjectRef<Entry>> {
    match memo.object_of(uid) {
        Some((ns, name)) => Some(ObjectRef::new(&name).within(&ns)),
        None => store
            .find(|o| o.meta().uid.as_deref() == Some(uid))
            .map(|o| ObjectRef::from_obj(o.as_ref())),
    }
}

/// Whether a change of pod `p` (named `name`) concerns the object: its target, or, while its
/// selector has chosen none, any pod the selector matches. Not a settled one: nothing a pod
/// does changes it.
fn watches_pod(e: &Entry, p: &Pod, name: &str) -> bool {
    let Entry::Live(o) = e else {
        return false;
    };
    let target = target_pod_name(o);
    if !target.is_empty() {
        return target == name;
    }
    let empty = std::collections::BTreeMap::new();
    o.spec
        .pod_selector
        .as_ref()
        .is_some_and(|s| s.matches(p.metadata.labels.as_ref().unwrap_or(&empty)))
}

/// Processes an agent holds for objects that no longer exist (deleted while no operator was up,
/// a finalizer removed by hand, the delete give-up, a race) are stopped and forgotten: nothing
/// runs or keeps output for an object nobody can see. Only ids shaped like object UIDs are ours
/// to judge. The first sweep runs as soon as this operator leads (a deletion no operator saw is
/// not left running for minutes) and acts at once: the objects are read after the records, so
/// any process this operator or an earlier leader started has its object in that read unless it
/// was deleted. Later sweeps, every `every`, act on what two in a row found missing (a margin
/// over any cache lag).
async fn sweep_orphans(agents: Arc<Agents>, store: Store<Entry>, listed: Listed, every: Duration) {
    if !listed.wait().await {
        return;
    }
    let mut suspects: Option<HashSet<String>> = None;
    loop {
        if suspects.is_some() {
            tokio::time::sleep(every).await;
        }
        while !agents.agents_listed() {
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        let mut held = Vec::new();
        for url in agents.urls() {
            let records = match agents.client.list(&url).await {
                Ok(records) => records,
                Err(e) => {
                    warn!(agent = %url, error = %e, "orphan sweep: listing the agent's processes");
                    continue;
                }
            };
            // A `processes` object lives on its node only: never an orphan of ours.
            let ours = records.into_iter().filter(|r| r.object.is_none());
            held.extend(ours.map(|r| (url.clone(), r.exec_id)));
        }
        let known: HashSet<String> = store.state().iter().filter_map(|o| o.uid()).collect();
        debug!(
            first = suspects.is_none(),
            held = held.len(),
            objects = known.len(),
            "orphan sweep"
        );
        let mut missing = HashSet::new();
        for (url, id) in held {
            if !is_uid(&id) || known.contains(&id) {
                continue;
            }
            if !suspects.as_ref().is_none_or(|s| s.contains(&id)) {
                missing.insert(id);
                continue;
            }
            warn!(exec_id = %id, agent = %url, "no object for this process; stopping and forgetting it");
            if let Err(e) = agents
                .client
                .forget(&url, &id, Duration::from_secs(30))
                .await
            {
                warn!(exec_id = %id, error = %e, "forgetting an orphaned process");
                missing.insert(id);
            }
        }
        suspects = Some(missing);
    }
}

/// An object UID (RFC 4122 text form), as every exec id the operator makes is.
fn is_uid(s: &str) -> bool {
    s.len() == 36
        && s.char_indices().all(|(i, c)| match i {
            8 | 13 | 18 | 23 => c == '-',
            _ => c.is_ascii_hexdigit(),
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_uid_shaped_ids_are_swept() {
        assert!(is_uid("0f8fad5b-d9cb-469f-a165-70867728950e"));
        for s in [
            "x-123-4",
            "",
            "0f8fad5b-d9cb-469f-a165-70867728950",
            "0f8fad5bxd9cb-469f-a165-70867728950e",
        ] {
            assert!(!is_uid(s), "{s}");
        }
    }

    /// A panic in one object's reconcile becomes that object's error (with its metric label),
    /// and the next reconcile runs normally.
    #[tokio::test]
    async fn a_panicking_reconcile_is_an_error_not_a_crash() {
        let e = unpanicked::<()>(async {
            let v: Vec<u8> = Vec::new();
            let _ = v[usize::MAX / 2]; // index out of bounds
            Ok(())
        })
        .await
        .unwrap_err();
        assert!(
            matches!(&e, Error::Panicked(m) if m.contains("index out of bounds")),
            "{e}"
        );
        assert_eq!(e.metric_label(), "panic");
        let e = unpanicked::<()>(async { panic!("{}", "formatted") })
            .await
            .unwrap_err();
        assert!(matches!(&e, Error::Panicked(m) if m == "formatted"), "{e}");
        assert_eq!(unpanicked(async { Ok::<_, Error>(7) }).await.unwrap(), 7);
    }

    /// An agent's record names its process by uid: the objects we sent a start for are found
    /// through the memo (the cache need not hold them: no scan), others in the cache, a
    /// stranger nowhere.
    #[test]
    fn a_changed_record_finds_its_object_by_uid() {
        let (store, mut writer) = reflector::store::<Entry>();
        let taken_over: Entry = serde_json::from_value(serde_json::json!({
            "apiVersion": "sandbox.dev/v1alpha1", "kind": "SandboxProcess",
            "metadata": {"name": "old", "namespace": "b", "uid": "u-old"},
            "spec": {"command": ["true"], "podName": "p"}}))
        .unwrap();
        writer.apply_watcher_event(&watcher::Event::Apply(taken_over));
        let memo = Memo::default();
        memo.start_sent("u-new", "pod-uid", ("a", "new"));
        let found = |uid| object_with_uid(uid, &memo, &store);
        assert_eq!(found("u-new"), Some(ObjectRef::new("new").within("a")));
        assert_eq!(found("u-old"), Some(ObjectRef::new("old").within("b")));
        assert_eq!(found("u-none"), None);
        // Final in the cache: the memo forgets it, the cache still finds it.
        memo.ended("u-old");
        memo.judge_copy("u-old", true, true);
        assert_eq!(found("u-old"), Some(ObjectRef::new("old").within("b")));
    }

    #[test]
    fn retries_back_off_exponentially_to_five_minutes() {
        let d: Vec<u64> = [1, 2, 3, 4, 9, 10, 50]
            .iter()
            .map(|n| retry_delay(*n).as_secs())
            .collect();
        assert_eq!(d, [1, 2, 4, 8, 256, 300, 300]);
    }
}
