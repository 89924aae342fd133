//! Who calls, and whether they may: the user the API server's front proxy vouches for, and
//! SubjectAccessReviews for the same user on the SandboxProcess (or Process) and on its pod.
use axum::http::HeaderMap;
use k8s_openapi::api::authorization::v1::{
    ResourceAttributes, SubjectAccessReview, SubjectAccessReviewSpec,
};
use kube::api::PostParams;
use kube::Api;

use super::error::{Result, SubresourceError};
use super::frontproxy::UserInfo;
use super::locate::{locate, Door, Located};
use super::server::Server;
use super::tls::Peer;

/// The user the API server's front proxy vouches for.
pub fn caller(server: &Server, peer: &Peer, headers: &HeaderMap) -> Result<UserInfo> {
    let request_headers = server.request_headers.borrow().clone();
    if !request_headers.allows(peer.common_name.as_deref()) {
        return Err(SubresourceError::Unauthorized(format!(
            "client certificate {:?} is not an allowed request-header proxy",
            peer.common_name.as_deref().unwrap_or("")
        )));
    }
    request_headers
        .user(headers)
        .ok_or_else(|| SubresourceError::Unauthorized("no user in the request headers".into()))
}

/// The rights a subresource needs.
pub struct Needs {
    /// On the SandboxProcess.
    pub verb: &'static str,
    /// `create pods/exec` on its pod too, for this act ("signalling": named in the refusal).
    pub exec: Option<&'static str>,
}

/// The process of `namespace/name`, for a caller with the rights `needs` says; checked in this
/// order (object, process, pod), each refused with its own answer.
pub async fn authorized_process(
    server: &Server,
    user: &UserInfo,
    door: Door,
    namespace: &str,
    name: &str,
    needs: Needs,
) -> Result<Located> {
    authorize(server, user, door, needs.verb, namespace, name).await?;
    let at = locate(server, door, namespace, name).await?;
    if let Some(what) = needs.exec {
        let act = format!("{what} a {}", door.kind());
        authorize_exec_for(server, user, namespace, &at.pod, &act).await?;
    }
    Ok(at)
}

/// Refuses with `denied` unless the caller may do what `attrs` says (a SubjectAccessReview for
/// the same user).
async fn require(
    server: &Server,
    user: &UserInfo,
    attrs: ResourceAttributes,
    denied: impl FnOnce() -> String,
) -> Result<()> {
    let sar = SubjectAccessReview {
        spec: SubjectAccessReviewSpec {
            user: Some(user.username.clone()),
            uid: user.uid.clone(),
            groups: Some(user.groups.clone()),
            extra: Some(user.extra.clone()),
            resource_attributes: Some(attrs),
            ..Default::default()
        },
        ..Default::default()
    };
    let review = Api::<SubjectAccessReview>::all(server.client.clone())
        .create(&PostParams::default(), &sar)
        .await
        .map_err(|e| SubresourceError::Internal(format!("SubjectAccessReview: {e}")))?;
    if review.status.is_some_and(|s| s.allowed) {
        Ok(())
    } else {
        Err(SubresourceError::Forbidden(denied()))
    }
}

/// `get` on the Secret or ConfigMap (`resource`: `secrets`, `configmaps`) that `field` (an env
/// variable's `valueFrom`) reads, for the caller: a process reads nothing its creator could not.
pub(crate) async fn authorize_get(
    server: &Server,
    user: &UserInfo,
    namespace: &str,
    resource: &str,
    name: &str,
    field: &str,
) -> Result<()> {
    let attrs = attributes("", resource, None, "get", namespace, name);
    require(server, user, attrs, || {
        format!(
            "{resource} \"{name}\" is forbidden: User \"{}\" cannot get resource \"{resource}\" in the namespace \"{namespace}\": {field} reads it, which needs that permission",
            user.username
        )
    })
    .await
}

/// The right `kubectl exec` needs on the process's pod: a signal can do what `stop` can (end
/// the process), and changing `stop` needs it (the admission policy), so a signal does too.
/// The refusal says `act` ("starting a process") needs the right.
pub(crate) async fn authorize_exec_for(
    server: &Server,
    user: &UserInfo,
    namespace: &str,
    pod: &str,
    act: &str,
) -> Result<()> {
    let attrs = attributes("", "pods", Some("exec"), "create", namespace, pod);
    require(server, user, attrs, || {
        format!(
            "pods \"{pod}\" is forbidden: User \"{}\" cannot create resource \"pods/exec\" in the namespace \"{namespace}\": {act} needs the same permission as kubectl exec on its pod",
            user.username
        )
    })
    .await
}

/// RBAC on the SandboxProcess (or Process) itself, for the caller.
async fn authorize(
    server: &Server,
    user: &UserInfo,
    door: Door,
    verb: &str,
    namespace: &str,
    name: &str,
) -> Result<()> {
    let (group, resource) = (door.group(), door.resource());
    let attrs = attributes(group, resource, None, verb, namespace, name);
    require(server, user, attrs, || {
        format!(
            "{resource}.{group} \"{name}\" is forbidden: User \"{}\" cannot {verb} resource \"{resource}\" in API group \"{group}\" in the namespace \"{namespace}\"",
            user.username
        )
    })
    .await
}

/// What a SubjectAccessReview asks: `verb` on `resource[/subresource]` `name` in `group` and
/// `namespace`.
fn attributes(
    group: &str,
    resource: &str,
    subresource: Option<&str>,
    verb: &str,
    namespace: &str,
    name: &str,
) -> ResourceAttributes {
    ResourceAttributes {
        group: Some(group.into()),
        resource: Some(resource.into()),
        subresource: subresource.map(Into::into),
        verb: Some(verb.into()),
        namespace: Some(namespace.into()),
        name: Some(name.into()),
        ..Default::default()
    }
}
