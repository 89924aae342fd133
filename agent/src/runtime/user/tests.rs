use super::*;

fn user(uid: u32, gid: u32, groups: &[u32]) -> User {
    User {
        uid,
        gid,
        additional_gids: groups.to_vec(),
    }
}

fn sc(uid: Option<u32>, gid: Option<u32>, groups: &[u32], non_root: bool) -> SecurityContext {
    SecurityContext {
        run_as_user: uid,
        run_as_group: gid,
        supplemental_groups: groups.to_vec(),
        run_as_non_root: non_root,
    }
}

const ALL: Powers = Powers {
    setuid: true,
    setgid: true,
};

/// (container's user, asked, outcome: the process's user or the field refused), the container's
/// process holding CAP_SETUID and CAP_SETGID.
fn cases() -> Vec<(User, SecurityContext, Result<User, &'static str>)> {
    let root = user(0, 0, &[10]);
    let app = user(1000, 1000, &[1001]);
    vec![
        // Nothing asked: the container's user, groups kept.
        (root.clone(), sc(None, None, &[], false), Ok(root.clone())),
        // Root may become anyone; another uid does not inherit root's groups.
        (
            root.clone(),
            sc(Some(1000), Some(1000), &[2000], false),
            Ok(user(1000, 1000, &[2000])),
        ),
        (
            root.clone(),
            sc(Some(1000), None, &[], false),
            Ok(user(1000, 0, &[])),
        ),
        (
            root.clone(),
            sc(None, Some(5), &[], false),
            Ok(user(0, 5, &[10])),
        ),
        (
            root.clone(),
            sc(Some(0), None, &[], false),
            Ok(root.clone()),
        ),
        // runAsNonRoot: the resulting uid decides, the container's when none is asked.
        (
            root.clone(),
            sc(None, None, &[], true),
            Err("securityContext.runAsNonRoot"),
        ),
        (
            root.clone(),
            sc(Some(0), None, &[], true),
            Err("securityContext.runAsUser"),
        ),
        (
            root.clone(),
            sc(Some(7), None, &[], true),
            Ok(user(7, 0, &[])),
        ),
        (app.clone(), sc(None, None, &[], true), Ok(app.clone())),
        // A non-root container: only itself, only groups it holds.
        (
            app.clone(),
            sc(Some(1000), Some(1001), &[1000], false),
            Ok(user(1000, 1001, &[1000])),
        ),
        (
            app.clone(),
            sc(Some(0), None, &[], false),
            Err("securityContext.runAsUser"),
        ),
        (
            app.clone(),
            sc(Some(1001), None, &[], false),
            Err("securityContext.runAsUser"),
        ),
        (
            app.clone(),
            sc(None, Some(0), &[], false),
            Err("securityContext.runAsGroup"),
        ),
        (
            app.clone(),
            sc(None, None, &[1001, 2000], false),
            Err("securityContext.supplementalGroups"),
        ),
    ]
}

#[test]
fn the_rules() {
    for (own, asked, want) in cases() {
        let got = decide(&own, ALL, &asked).map_err(|r| r.field);
        assert_eq!(got, want, "{own} asked {asked:?}");
    }
}

#[test]
fn root_without_setuid_or_setgid_is_held_to_its_own() {
    let root = user(0, 0, &[10]);
    let no_setuid = Powers {
        setuid: false,
        setgid: true,
    };
    let e = decide(&root, no_setuid, &sc(Some(1000), None, &[], false)).unwrap_err();
    assert_eq!(e.field, "securityContext.runAsUser");
    assert!(e.reason.contains("CAP_SETUID"), "{e:?}");
    assert!(decide(&root, no_setuid, &sc(Some(0), Some(5), &[], false)).is_ok());
    let no_setgid = Powers {
        setuid: true,
        setgid: false,
    };
    let e = decide(&root, no_setgid, &sc(None, Some(5), &[], false)).unwrap_err();
    assert_eq!(e.field, "securityContext.runAsGroup");
    let e = decide(&root, no_setgid, &sc(Some(7), None, &[2000], false)).unwrap_err();
    assert_eq!(e.field, "securityContext.supplementalGroups");
    assert!(decide(&root, no_setgid, &sc(Some(7), Some(10), &[0], false)).is_ok());
    // Which sets say so: both bounding and permitted, or none listed at all.
    let p = |caps: serde_json::Value| Powers::of(&json!({ "capabilities": caps }));
    let both = json!({"bounding": ["CAP_SETUID", "CAP_SETGID"], "permitted": ["CAP_SETUID"]});
    assert_eq!(
        p(both),
        Powers {
            setuid: true,
            setgid: false
        }
    );
    assert_eq!(Powers::of(&json!({})), ALL);
}

#[test]
fn capabilities_follow_the_kernel() {
    let caps = json!({"bounding": ["CAP_KILL", "CAP_SETUID"], "effective": ["CAP_KILL"],
        "permitted": ["CAP_KILL"], "inheritable": ["CAP_KILL"]});
    // Root to non-root: nothing but bounding, no ambient granted.
    let none = capabilities(Some(&caps), 0, 1000).unwrap();
    for set in ["effective", "permitted", "inheritable", "ambient"] {
        assert_eq!(none[set], json!([]), "{set}");
    }
    assert_eq!(none["bounding"], caps["bounding"]);
    // Ambient capabilities granted by the container are kept (all a non-root execve keeps).
    let mut granted = caps.clone();
    granted["ambient"] = json!(["CAP_KILL"]);
    let kept = capabilities(Some(&granted), 0, 1000).unwrap();
    for set in ["effective", "permitted", "inheritable", "ambient"] {
        assert_eq!(kept[set], json!(["CAP_KILL"]), "{set}");
    }
    // Listed as ambient but not inheritable (runc's default spec): the kernel raises none.
    let mut listed = caps.clone();
    listed["ambient"] = json!(["CAP_KILL", "CAP_SETUID"]);
    listed["inheritable"] = json!([]);
    let none = capabilities(Some(&listed), 0, 1000).unwrap();
    assert_eq!(none["ambient"], json!([]));
    assert_eq!(none["effective"], json!([]));
    // No sets listed (runc would keep its own, all of root's): all empty.
    let bare = capabilities(None, 0, 1000).unwrap();
    assert_eq!(bare["effective"], json!([]));
    assert!(bare.get("bounding").is_none());
    // Same user class: the container's sets as they are.
    assert_eq!(capabilities(Some(&caps), 0, 0), Some(caps.clone()));
    assert_eq!(capabilities(Some(&caps), 1000, 1000), Some(caps.clone()));
}

#[test]
fn apply_writes_the_user_or_refuses_naming_the_container() {
    let setid = ["CAP_SETUID", "CAP_SETGID"];
    let mut p = json!({"user": {"uid": 0, "gid": 0, "umask": 18},
        "capabilities": {"bounding": setid, "effective": setid, "permitted": setid}});
    apply(&mut p, &sc(Some(1000), Some(1000), &[2000], false)).unwrap();
    assert_eq!(
        p["user"],
        json!({"uid": 1000, "gid": 1000, "additionalGids": [2000], "umask": 18})
    );
    assert_eq!(p["capabilities"]["effective"], json!([]));
    assert_eq!(p["capabilities"]["bounding"], json!(setid));
    let mut p = json!({"user": {"uid": 1000, "gid": 1000}});
    let e = apply(&mut p, &sc(Some(0), None, &[], false)).unwrap_err();
    assert_eq!(e.code(), sandbox_wire::wire::ErrorCode::UserNotPermitted);
    let m = e.to_string();
    assert!(m.starts_with("spec.securityContext.runAsUser: 0: "), "{m}");
    assert!(m.contains("the container runs as uid 1000 gid 1000"), "{m}");
    assert_eq!(p["user"], json!({"uid": 1000, "gid": 1000}), "untouched");
    // No user in the spec: root, as runc takes it.
    let mut p = json!({});
    let e = apply(&mut p, &sc(None, None, &[], true)).unwrap_err();
    assert!(e.to_string().contains("runAsNonRoot"), "{e}");
}
