//! `securityContext` against real runc containers: the process runs as the user asked when the
//! container's own user allows it, with the kernel's capabilities for that user, and is refused
//! before the start (`UserNotPermitted`, nothing created) when it would gain privilege.
mod common;

use std::os::unix::fs::PermissionsExt;
use std::time::Duration;

use common::*;
use sandbox_wire::wire::{SecurityContext, StartRequest};

const T: Duration = Duration::from_secs(20);

/// A container whose process runs as `uid`, with `caps` (its OCI capabilities) when given, else
/// runc's default ones (no CAP_SETUID, CAP_SETGID).
fn fx(uid: u32, caps: Option<serde_json::Value>) -> Fx {
    Fx::edited("user", uid, None, &[], |spec| {
        if let Some(caps) = caps {
            spec["process"]["capabilities"] = caps;
        }
    })
}

/// The capabilities a CRI runtime gives a container by default (containerd's list), as the
/// bounding, effective and permitted sets: root there may change its uid and groups.
fn cri_default_caps() -> serde_json::Value {
    let caps = [
        "CAP_CHOWN",
        "CAP_DAC_OVERRIDE",
        "CAP_FSETID",
        "CAP_FOWNER",
        "CAP_MKNOD",
        "CAP_NET_RAW",
        "CAP_SETGID",
        "CAP_SETUID",
        "CAP_SETFCAP",
        "CAP_SETPCAP",
        "CAP_NET_BIND_SERVICE",
        "CAP_SYS_CHROOT",
        "CAP_KILL",
        "CAP_AUDIT_WRITE",
    ];
    serde_json::json!({"bounding": caps, "effective": caps, "permitted": caps})
}

fn as_user(c: &Container, cmd: &[&str], sc: SecurityContext) -> StartRequest {
    StartRequest {
        security_context: Some(sc),
        ..req(c, cmd)
    }
}

/// Runs `cmd` to its end; its exit code and output.
async fn run(f: &Fx, q: &StartRequest) -> (i32, String) {
    let r = f.agent.start(q).await.expect("started");
    let done = f.agent.wait_final(&r.exec_id, T).await;
    let out = text(&f.agent.logs(&r.exec_id, "").await, None);
    (done.exit.expect("an exit").code, out)
}

/// A start refused with `UserNotPermitted` naming `field`; nothing of it exists afterwards.
async fn refused(f: &Fx, q: &StartRequest, field: &str, container_user: &str) {
    let (status, v) = f.agent.start(q).await.unwrap_err();
    assert_eq!(
        (status, v["code"].as_str()),
        (403, Some("UserNotPermitted")),
        "{v}"
    );
    let m = v["message"].as_str().unwrap();
    assert!(m.starts_with(&format!("spec.{field}: ")), "{m}");
    assert!(
        m.contains(&format!("the container runs as {container_user}")),
        "{m}"
    );
    let (s, _) = f.agent.get(&format!("/v1/processes/{}", q.exec_id)).await;
    assert_eq!(s, 404, "no record of a refused start");
    let (_, list) = f.agent.get("/v1/processes").await;
    assert_eq!(list["items"], serde_json::json!([]), "no process");
    let procs = std::fs::read_dir(f.agent.state.join("procs")).map(|d| d.count());
    assert!(procs.is_err() || procs.unwrap() == 0, "no process dir");
}

#[tokio::test]
async fn a_root_container_runs_the_process_as_another_user() {
    // Inheritable too, as Docker once set it (CVE-2022-24769): a non-root user must not keep it.
    let mut caps = cri_default_caps();
    caps["inheritable"] = caps["bounding"].clone();
    let f = fx(0, Some(caps));
    // A root-only file (mode 600) in the container's filesystem.
    let secret = uniq("secret");
    let host = rootfs(&f.base).join("tmp").join(&secret);
    std::fs::write(&host, "root only\n").unwrap();
    std::fs::set_permissions(&host, std::fs::Permissions::from_mode(0o600)).unwrap();
    let script = format!(
        "id; grep ^Cap /proc/self/status; grep ^CapBnd /proc/1/status; \
         cat /tmp/{secret} 2>/dev/null || echo denied; exit 3"
    );
    let sc = SecurityContext {
        run_as_user: Some(1000),
        run_as_group: Some(1000),
        supplemental_groups: vec![2000],
        run_as_non_root: true,
    };
    let (code, out) = run(&f, &as_user(&f.ctr, &["sh", "-c", &script], sc)).await;
    let _ = std::fs::remove_file(&host);
    assert_eq!(code, 3, "the exit as usual: {out}");
    let lines: Vec<&str> = out.lines().collect();
    assert!(lines[0].starts_with("uid=1000(app) gid=1000(app)"), "{out}");
    let groups = lines[0].split("groups=").nth(1).unwrap_or_default();
    assert!(groups.split(',').any(|g| g == "2000"), "{out}");
    assert!(
        !groups.split(',').any(|g| g.starts_with("0(")),
        "no root group: {out}"
    );
    for (i, set) in ["CapInh", "CapPrm", "CapEff"].iter().enumerate() {
        assert_eq!(lines[i + 1], format!("{set}:\t0000000000000000"), "{out}");
    }
    assert!(lines[4].starts_with("CapBnd:"), "{out}");
    assert_eq!(lines[4], lines[6], "bounding is the container's: {out}");
    assert_eq!(lines[5], "CapAmb:\t0000000000000000", "{out}");
    assert_eq!(
        lines[7], "denied",
        "a root-only file is not readable: {out}"
    );
}

#[tokio::test]
async fn a_non_root_container_refuses_root() {
    let f = fx(1000, Some(cri_default_caps()));
    let sc = SecurityContext {
        run_as_user: Some(0),
        ..Default::default()
    };
    let q = as_user(&f.ctr, &["id"], sc);
    refused(&f, &q, "securityContext.runAsUser", "uid 1000 gid 1000").await;
    // A group the container's user does not hold is refused too.
    let sc = SecurityContext {
        run_as_group: Some(0),
        ..Default::default()
    };
    let q = as_user(&f.ctr, &["id"], sc);
    refused(&f, &q, "securityContext.runAsGroup", "uid 1000 gid 1000").await;
}

#[tokio::test]
async fn run_as_non_root_is_judged_on_the_resulting_user() {
    let root = fx(0, Some(cri_default_caps()));
    let sc = SecurityContext {
        run_as_non_root: true,
        ..Default::default()
    };
    let q = as_user(&root.ctr, &["id"], sc.clone());
    refused(&root, &q, "securityContext.runAsNonRoot", "uid 0 gid 0").await;

    let app = fx(1000, None);
    let (code, out) = run(&app, &as_user(&app.ctr, &["id", "-u"], sc)).await;
    assert_eq!((code, out.as_str()), (0, "1000\n"));
}

#[tokio::test]
async fn root_without_cap_setuid_cannot_change_its_uid() {
    // runc's default capabilities: no CAP_SETUID, so this root could not `su` either.
    let f = fx(0, None);
    let sc = SecurityContext {
        run_as_user: Some(1000),
        ..Default::default()
    };
    let q = as_user(&f.ctr, &["id"], sc);
    refused(&f, &q, "securityContext.runAsUser", "uid 0 gid 0").await;
}
