use super::*;
use crate::convert::start_request;
use crate::validate;
use kube::core::cel::{validate_cel, validate_cel_update};
use kube::CustomResourceExt;

fn spec(yaml: &str) -> SandboxProcessSpec {
    serde_yaml_ng::from_str(yaml).unwrap()
}

fn minimal() -> SandboxProcessSpec {
    spec("podName: web\ncommand: [sleep, '1']\n")
}

fn object(s: SandboxProcessSpec) -> SandboxProcess {
    SandboxProcess::new("p", s)
}

#[test]
fn resource_names_are_the_contract() {
    let crd = SandboxProcess::crd();
    assert_eq!(
        crd.metadata.name.as_deref(),
        Some("sandboxprocesses.sandbox.dev")
    );
    assert_eq!(crd.spec.group, "sandbox.dev");
    assert_eq!(crd.spec.scope, "Namespaced");
    assert_eq!(crd.spec.names.kind, "SandboxProcess");
    assert_eq!(crd.spec.names.plural, "sandboxprocesses");
    assert_eq!(crd.spec.names.short_names, Some(vec!["sbp".to_string()]));
    assert_eq!(crd.spec.names.categories, Some(vec!["sandbox".to_string()]));
    let v = &crd.spec.versions[0];
    assert_eq!(v.name, "v1alpha1");
    assert!(v.served && v.storage);
    assert!(v.subresources.as_ref().unwrap().status.is_some());
    let columns: Vec<_> = v
        .additional_printer_columns
        .as_ref()
        .unwrap()
        .iter()
        .map(|c| c.name.to_uppercase())
        .collect();
    assert_eq!(
        columns,
        ["POD", "PHASE", "READY", "RESTARTS", "EXIT", "REASON", "AGE"]
    );
    assert_eq!(API_VERSION, format!("{GROUP}/{VERSION}"));
}

#[test]
fn spec_field_names_and_defaults() {
    let s = minimal();
    assert!(!s.stop);
    assert_eq!(s.stop_signal, 15);
    assert_eq!(s.termination_grace_period_seconds, 5);
    let full = spec(
        r#"
podName: web
container: app
command: [sh, -c, "echo hi"]
workingDir: /tmp
env: [{name: A, value: b}]
timeoutSeconds: 30
readiness: {httpGet: {port: 8080}, timeoutSeconds: 10}
stop: true
stopSignal: 2
terminationGracePeriodSeconds: 0
ttlSecondsAfterFinished: 60
"#,
    );
    let r = full.readiness.as_ref().unwrap();
    assert_eq!(r.period_millis, 500);
    let h = r.http_get.as_ref().unwrap();
    assert_eq!(h.path, "/");
    assert_eq!(h.status, StatusRange { min: 200, max: 399 });
    let json = serde_json::to_value(&full).unwrap();
    for key in [
        "podName",
        "container",
        "command",
        "workingDir",
        "env",
        "timeoutSeconds",
        "readiness",
        "stop",
        "stopSignal",
        "terminationGracePeriodSeconds",
        "ttlSecondsAfterFinished",
    ] {
        assert!(json.get(key).is_some(), "{key} missing from {json}");
    }
    assert!(validate::spec(&full).is_ok());
}

#[test]
fn status_field_names() {
    let s = SandboxProcessStatus {
        observed_generation: Some(1),
        phase: Some(Phase::Exited),
        node_name: Some("n".into()),
        pod_uid: Some("u".into()),
        container_id: Some("c".into()),
        pid: Some(7),
        exit: Some(ExitStatus {
            code: 137,
            signal: Some(9),
            timed_out: true,
        }),
        end_reason: Some(EndReason::OOMKilled),
        error: Some(ProcessError {
            code: ErrorCode::StaleProcessHandle,
            message: "m".into(),
        }),
        output: Some(OutputStatus::default()),
        ..Default::default()
    };
    let json = serde_json::to_value(&s).unwrap();
    for key in [
        "observedGeneration",
        "phase",
        "nodeName",
        "podUID",
        "containerID",
        "pid",
        "exit",
        "endReason",
        "error",
        "output",
    ] {
        assert!(json.get(key).is_some(), "{key} missing from {json}");
    }
    assert_eq!(json["exit"]["timedOut"], true);
    assert_eq!(json["output"]["stdoutBytes"], 0);
    assert_eq!(json["endReason"], "OOMKilled");
}

/// One table for both enforcers: every case is refused by the validator naming `field`; where
/// the API server's CEL rules cover it too (`cel`: the message), they refuse it as well. Every
/// create-time CEL rule of the generated schema must appear here, so a rule added to one side
/// only fails this test.
const CASES: &[(&str, &str, Option<&str>)] = &[
    ("podName: web\ncommand: []\n", "command", None),
    (
        "podName: web\ncommand: ['']\n",
        "command[0]",
        Some("command[0] (the executable) must not be empty"),
    ),
    (
        "podName: web\ncommand: [x]\nworkingDir: tmp\n",
        "workingDir",
        Some("workingDir must be an absolute path"),
    ),
    ("podName: web\ncommand: [x]\ntimeoutSeconds: 0\n", "timeoutSeconds", None),
    ("podName: web\ncommand: [x]\nstopSignal: 65\n", "stopSignal", None),
    ("podName: web\ncommand: [x]\nstopSignal: 0\n", "stopSignal", None),
    (
        "podName: web\ncommand: [x]\nterminationGracePeriodSeconds: -1\n",
        "terminationGracePeriodSeconds",
        None,
    ),
    (
        "podName: web\ncommand: [x]\nenv: [{name: 'A=B', value: c}]\n",
        "env[0].name",
        Some("env name must not contain '='"),
    ),
    (
        "podName: web\ncommand: [x]\nenv: [{name: \"A\\0\", value: y}]\n",
        "env[0].name",
        Some("env name must not contain a NUL character"),
    ),
    (
        "podName: web\ncommand: [x]\nenv: [{name: \"A\\nB\", value: y}]\n",
        "env[0].name",
        Some("env name must not contain a control character"),
    ),
    (
        "podName: web\ncommand: [x]\nenv: [{name: \"A\\u0085\\tB\", value: y}]\n",
        "env[0].name",
        Some("env name must not contain a control character"),
    ),
    (
        "podName: web\ncommand: [x]\nenv: [{name: A, value: \"x\\0y\"}]\n",
        "env[0].value",
        Some("env value must not contain a NUL character"),
    ),
    ("podName: web\ncommand: [x]\nenv: [{name: '', value: c}]\n", "env[0].name", None),
    ("podName: web\ncommand: [x]\nenv: [{name: A}, {name: A}]\n", "env[1].name", None),
    (
        "podName: web\ncommand: [x]\nenv: [{name: A, value: c, valueFrom: {secretKeyRef: {name: s, key: k}}}]\n",
        "env[0].valueFrom",
        Some("env value and valueFrom are exclusive"),
    ),
    (
        "podName: web\ncommand: [x]\nenv: [{name: A, valueFrom: {secretKeyRef: {name: s, key: k}, configMapKeyRef: {name: c, key: k}}}]\n",
        "env[0].valueFrom",
        Some("valueFrom must set exactly one of secretKeyRef, configMapKeyRef"),
    ),
    (
        "podName: web\ncommand: [x]\nreadiness: {tcpSocket: {port: 1}, httpGet: {port: 2}}\n",
        "readiness",
        Some("readiness must set exactly one of tcpSocket, httpGet, logMatch"),
    ),
    (
        "podName: web\ncommand: [x]\nreadiness: {}\n",
        "readiness",
        Some("readiness must set exactly one of tcpSocket, httpGet, logMatch"),
    ),
    (
        "podName: web\ncommand: [x]\nreadiness: {tcpSocket: {port: 0}}\n",
        "readiness.tcpSocket.port",
        None,
    ),
    (
        "podName: web\ncommand: [x]\nreadiness: {httpGet: {port: 65536}}\n",
        "readiness.httpGet.port",
        None,
    ),
    (
        "podName: web\ncommand: [x]\nreadiness: {httpGet: {port: 80, path: x}}\n",
        "readiness.httpGet.path",
        Some("httpGet.path must start with '/'"),
    ),
    (
        "podName: web\ncommand: [x]\nreadiness: {httpGet: {port: 80, path: \"/x\\r\\nHost: evil\"}}\n",
        "readiness.httpGet.path",
        Some("httpGet.path must be printable ASCII"),
    ),
    (
        "podName: web\ncommand: [x]\nreadiness: {httpGet: {port: 80, path: \"/a b\"}}\n",
        "readiness.httpGet.path",
        Some("httpGet.path must be printable ASCII"),
    ),
    (
        "podName: web\ncommand: [x]\nreadiness: {httpGet: {port: 80, status: {min: 400, max: 300}}}\n",
        "readiness.httpGet.status",
        Some("status.min must not exceed status.max"),
    ),
    (
        "podName: web\ncommand: [x]\nreadiness: {logMatch: {pattern: '('}}\n",
        "readiness.logMatch.pattern",
        None,
    ),
    (
        "podName: web\ncommand: [x]\nreadiness: {tcpSocket: {port: 1}, periodMillis: 9}\n",
        "readiness.periodMillis",
        None,
    ),
    ("podName: ''\ncommand: [x]\n", "podName", None),
    (
        "command: [x]\n",
        "podName",
        Some("exactly one of podName, podSelector must be set"),
    ),
    (
        "podName: web\npodSelector: {}\ncommand: [x]\n",
        "podName",
        Some("exactly one of podName, podSelector must be set"),
    ),
    (
        "podSelector: {matchExpressions: [{key: app, operator: In}]}\ncommand: [x]\n",
        "podSelector.matchExpressions[0].values",
        Some("values must be non-empty for In and NotIn"),
    ),
    (
        "podSelector: {matchExpressions: [{key: app, operator: Exists, values: [a]}]}\ncommand: [x]\n",
        "podSelector.matchExpressions[0].values",
        Some("values must be non-empty for In and NotIn"),
    ),
    // Every duration is bounded: i64::MAX once overflowed the supervisor's deadlines.
    (
        "podName: web\ncommand: [x]\ntimeoutSeconds: 9223372036854775807\n",
        "timeoutSeconds",
        None,
    ),
    (
        "podName: web\ncommand: [x]\nterminationGracePeriodSeconds: 2147483648\n",
        "terminationGracePeriodSeconds",
        None,
    ),
    (
        "podName: web\ncommand: [x]\nttlSecondsAfterFinished: 9223372036854775807\n",
        "ttlSecondsAfterFinished",
        None,
    ),
    (
        "podName: web\ncommand: [x]\nreadiness: {tcpSocket: {port: 1}, timeoutSeconds: 9223372036854775807}\n",
        "readiness.timeoutSeconds",
        None,
    ),
    ("podName: web\ncommand: [x]\nstartDeadlineSeconds: 0\n", "startDeadlineSeconds", None),
    (
        "podName: web\ncommand: [x]\nstartDeadlineSeconds: 2147483648\n",
        "startDeadlineSeconds",
        None,
    ),
    (
        "podName: web\ncommand: [x]\nresources: {limits: {cpu: 5m}}\n",
        "resources.limits.cpu",
        Some("resources.limits.cpu must be a quantity of"),
    ),
    (
        "podName: web\ncommand: [x]\nresources: {limits: {cpu: 0}}\n",
        "resources.limits.cpu",
        Some("resources.limits.cpu must be a quantity of"),
    ),
    (
        "podName: web\ncommand: [x]\nresources: {limits: {cpu: '-0'}}\n",
        "resources.limits.cpu",
        Some("resources.limits.cpu must be a quantity of"),
    ),
    (
        "podName: web\ncommand: [x]\nresources: {limits: {cpu: 1e20}}\n",
        "resources.limits.cpu",
        Some("resources.limits.cpu must be a quantity of"),
    ),
    (
        "podName: web\ncommand: [x]\nresources: {limits: {cpu: 9m}}\n",
        "resources.limits.cpu",
        Some("resources.limits.cpu must be a quantity of"),
    ),
    (
        "podName: web\ncommand: [x]\nresources: {limits: {cpu: 1000000.001}}\n",
        "resources.limits.cpu",
        Some("resources.limits.cpu must be a quantity of"),
    ),
    (
        "podName: web\ncommand: [x]\nresources: {limits: {cpu: 1Xi}}\n",
        "resources.limits.cpu",
        Some("resources.limits.cpu must be a quantity of"),
    ),
    (
        "podName: web\ncommand: [x]\nresources: {limits: {cpu: -1}}\n",
        "resources.limits.cpu",
        Some("resources.limits.cpu must be a quantity of"),
    ),
    (
        "podName: web\ncommand: [x]\nresources: {limits: {memory: -1}}\n",
        "resources.limits.memory",
        Some("resources.limits.memory must be a quantity of"),
    ),
    (
        "podName: web\ncommand: [x]\nresources: {limits: {memory: 0}}\n",
        "resources.limits.memory",
        Some("resources.limits.memory must be a quantity of"),
    ),
    (
        "podName: web\ncommand: [x]\nresources: {limits: {memory: 1Ki}}\n",
        "resources.limits.memory",
        Some("resources.limits.memory must be a quantity of"),
    ),
    (
        "podName: web\ncommand: [x]\nresources: {limits: {memory: 3Mi}}\n",
        "resources.limits.memory",
        Some("resources.limits.memory must be a quantity of"),
    ),
    (
        "podName: web\ncommand: [x]\nresources: {limits: {memory: 1e20}}\n",
        "resources.limits.memory",
        Some("resources.limits.memory must be a quantity of"),
    ),
    (
        "podName: web\ncommand: [x]\nresources: {limits: {memory: 1Mi}}\n",
        "resources.limits.memory",
        Some("resources.limits.memory must be a quantity of"),
    ),
    (
        "podName: web\ncommand: [x]\nresources: {limits: {memory: 16Ei}}\n",
        "resources.limits.memory",
        Some("resources.limits.memory must be a quantity of"),
    ),
    (
        "podName: web\ncommand: [x]\nresources: {limits: {memory: 4194303}}\n",
        "resources.limits.memory",
        Some("resources.limits.memory must be a quantity of"),
    ),
    (
        "podName: web\ncommand: [x]\nresources: {limits: {memory: 9223372036854775808}}\n",
        "resources.limits.memory",
        Some("resources.limits.memory must be a quantity of"),
    ),
    (
        "podName: other-ns/pod\ncommand: [x]\n",
        "podName",
        Some("podName must be a DNS-1123 subdomain"),
    ),
    (
        "podName: Web\ncommand: [x]\n",
        "podName",
        Some("podName must be a DNS-1123 subdomain"),
    ),
    (
        "podName: web.\ncommand: [x]\n",
        "podName",
        Some("podName must be a DNS-1123 subdomain"),
    ),
    (
        "podName: a_b\ncommand: [x]\n",
        "podName",
        Some("podName must be a DNS-1123 subdomain"),
    ),
    (
        "podName: -web\ncommand: [x]\n",
        "podName",
        Some("podName must be a DNS-1123 subdomain"),
    ),
    (
        "podName: 'web..x'\ncommand: [x]\n",
        "podName",
        Some("podName must be a DNS-1123 subdomain"),
    ),
    (
        "podName: web\ncontainer: App\ncommand: [x]\n",
        "container",
        Some("container must be a DNS-1123 label"),
    ),
    (
        "podName: web\ncontainer: a.b\ncommand: [x]\n",
        "container",
        Some("container must be a DNS-1123 label"),
    ),
    (
        "podName: web\ncontainer: a_b\ncommand: [x]\n",
        "container",
        Some("container must be a DNS-1123 label"),
    ),
    (
        "podName: web\ncontainer: 'x y'\ncommand: [x]\n",
        "container",
        Some("container must be a DNS-1123 label"),
    ),
    (
        "podSelector: {matchLabels: {app: 'a b'}}\ncommand: [x]\n",
        "podSelector.matchLabels[\"app\"]",
        None,
    ),
    (
        "podSelector: {matchLabels: {'a/b/c': x}}\ncommand: [x]\n",
        "podSelector.matchLabels[\"a/b/c\"]",
        None,
    ),
    (
        "podSelector: {matchExpressions: [{key: 'bad key', operator: Exists}]}\ncommand: [x]\n",
        "podSelector.matchExpressions[0].key",
        Some("podSelector.matchExpressions[].key must be a label key"),
    ),
    (
        "podSelector: {matchExpressions: [{key: app, operator: In, values: [ok, -x]}]}\ncommand: [x]\n",
        "podSelector.matchExpressions[0].values[1]",
        Some("podSelector.matchExpressions[].values must each be"),
    ),
    (
        "podName: web\ncommand: [x]\nenv: [{name: A, valueFrom: {secretKeyRef: {name: Bad, key: k}}}]\n",
        "env[0].valueFrom.secretKeyRef.name",
        Some("valueFrom name must be a DNS-1123 subdomain"),
    ),
    (
        "podName: web\ncommand: [x]\nenv: [{name: A, valueFrom: {configMapKeyRef: {name: 'ns/cm', key: k}}}]\n",
        "env[0].valueFrom.configMapKeyRef.name",
        Some("valueFrom name must be a DNS-1123 subdomain"),
    ),
    ("podName: web\ncommand: [x]\nresources: {limits: {pids: 0}}\n", "resources.limits.pids", None),
    (
        "podName: web\ncommand: [x]\nsecurityContext: {runAsUser: -1}\n",
        "securityContext.runAsUser",
        None,
    ),
    (
        "podName: web\ncommand: [x]\nsecurityContext: {runAsUser: 2147483648}\n",
        "securityContext.runAsUser",
        None,
    ),
    (
        "podName: web\ncommand: [x]\nsecurityContext: {runAsGroup: 4294967295}\n",
        "securityContext.runAsGroup",
        None,
    ),
    (
        "podName: web\ncommand: [x]\nsecurityContext: {supplementalGroups: [1, -1]}\n",
        "securityContext.supplementalGroups[1]",
        None,
    ),
    (
        "podName: web\ncommand: [x]\nsecurityContext: {runAsUser: 0, runAsNonRoot: true}\n",
        "securityContext.runAsUser",
        Some("runAsUser 0 (root) contradicts runAsNonRoot: true"),
    ),
    (
        "podName: web\ncommand: [x]\nterminal: {rows: 30, cols: 100}\n",
        "terminal",
        Some("terminal requires tty"),
    ),
    (
        "podName: web\ncommand: [x]\ntty: false\nterminal: {rows: 30}\n",
        "terminal",
        Some("terminal requires tty"),
    ),
    ("podName: web\ncommand: [x]\ntty: true\nterminal: {rows: 0}\n", "terminal.rows", None),
    ("podName: web\ncommand: [x]\ntty: true\nterminal: {rows: 1001}\n", "terminal.rows", None),
    ("podName: web\ncommand: [x]\ntty: true\nterminal: {cols: -1}\n", "terminal.cols", None),
    ("podName: web\ncommand: [x]\ntty: true\nterminal: {cols: 10001}\n", "terminal.cols", None),
    (
        "podName: web\ncommand: [x]\nstdin: true\nrestartPolicy: OnFailure\n",
        "restartPolicy",
        Some("restartPolicy must be Never with stdin or tty"),
    ),
    (
        "podName: web\ncommand: [x]\ntty: true\nrestartPolicy: Always\n",
        "restartPolicy",
        Some("restartPolicy must be Never with stdin or tty"),
    ),
];

#[test]
fn one_table_for_the_validator_and_cel() {
    for (yaml, field, cel) in CASES {
        let err = validate::spec(&spec(yaml)).expect_err(yaml);
        assert_eq!(err.field, *field, "{yaml}: {err}");
        assert!(err.to_string().starts_with(&format!("spec.{field}: ")));
        if let Some(message) = cel {
            let cel_err = cel_create(spec(yaml)).expect_err(yaml);
            assert!(cel_err.contains(message), "{yaml}: {cel_err}");
        }
    }
    // Every create-time rule of the schema is in the table.
    let schema = serde_json::to_string(&SandboxProcess::crd()).unwrap();
    let rules: serde_json::Value = serde_json::from_str(&schema).unwrap();
    let mut messages = vec![];
    collect_rules(&rules, &mut messages);
    for m in messages.iter().filter(|m| !m.ends_with("is immutable")) {
        assert!(
            CASES
                .iter()
                .any(|(_, _, c)| c.is_some_and(|c| m.starts_with(c))),
            "the CEL rule {m:?} has no case in CASES (and may have no twin in validate.rs)"
        );
    }
    assert!(validate::spec(&minimal()).is_ok());
    assert!(cel_create(minimal()).is_ok());
    let at_bound = "podName: web\ncommand: [x]\ntimeoutSeconds: 2147483647\nterminationGracePeriodSeconds: 2147483647\nttlSecondsAfterFinished: 2147483647\n";
    assert!(validate::spec(&spec(at_bound)).is_ok());
    for yaml in ACCEPTED {
        assert_eq!(validate::spec(&spec(yaml)), Ok(()), "{yaml}");
        assert_eq!(cel_create(spec(yaml)), Ok(()), "{yaml}");
    }
}

/// At the bounds, both enforcers accept (the agent rounds up to whole millicores and bytes).
const ACCEPTED: &[&str] = &[
    "podName: web\ncommand: [x]\nresources: {limits: {cpu: 10m, memory: 4Mi, pids: 1}}\n",
    "podName: web\ncommand: [x]\nresources: {limits: {cpu: 9.001m, memory: 4194303.5}}\n",
    "podName: web\ncommand: [x]\nresources: {limits: {cpu: 1000000, memory: 9223372036854775807}}\n",
    "podName: web\ncommand: [x]\nresources: {limits: {cpu: 1e6, memory: 7Ei, pids: 2147483647}}\n",
    "podName: web\ncommand: [x]\nresources: {limits: {cpu: 2, memory: 67108864}}\n",
    "podName: a.b-c.0\ncontainer: app-1\ncommand: [x]\n",
    "podSelector: {matchLabels: {app.kubernetes.io/name: web, tier: '', a: A_b.c-9}, matchExpressions: [{key: example.com/x, operator: In, values: ['', v1]}]}\ncommand: [x]\n",
    "podName: web\ncommand: [x]\nenv: [{name: A, valueFrom: {secretKeyRef: {name: s.x-1, key: k}}}]\n",
    "podName: web\ncommand: [x]\nsecurityContext: {runAsUser: 2147483647, runAsGroup: 0, supplementalGroups: [0, 2147483647], runAsNonRoot: true}\n",
    "podName: web\ncommand: [x]\nsecurityContext: {runAsUser: 0, runAsNonRoot: false}\n",
    // No user: whether the container's is root is the agent's to judge.
    "podName: web\ncommand: [x]\nsecurityContext: {runAsNonRoot: true}\n",
    "podName: web\ncommand: [x]\ntty: true\n",
    "podName: web\ncommand: [x]\ntty: true\nterminal: {rows: 1000, cols: 10000}\n",
    "podName: web\ncommand: [x]\ntty: true\nstdin: false\nterminal: {rows: 1, cols: 1}\n",
    "podName: web\ncommand: [x]\nrestartPolicy: Always\n",
    "podName: web\ncommand: [x]\nrestartPolicy: OnFailure\nstdin: false\n",
    "podName: web\ncommand: [x]\nrestartPolicy: Never\nstdin: true\n",
];

fn collect_rules(v: &serde_json::Value, out: &mut Vec<String>) {
    match v {
        serde_json::Value::Object(m) => {
            if let Some(serde_json::Value::Array(rules)) = m.get("x-kubernetes-validations") {
                for r in rules {
                    if let Some(msg) = r.get("message").and_then(|m| m.as_str()) {
                        out.push(msg.to_string());
                    }
                }
            }
            m.values().for_each(|v| collect_rules(v, out));
        }
        serde_json::Value::Array(a) => a.iter().for_each(|v| collect_rules(v, out)),
        _ => {}
    }
}

fn target() -> crate::convert::Target<'static> {
    crate::convert::Target {
        exec_id: "u",
        pod_uid: "p",
        container: "c",
    }
}

#[test]
fn limits_reach_the_request_in_kernel_units() {
    let limits = spec(
        "podName: web\ncommand: [x]\nresources: {limits: {cpu: 200m, memory: 32Mi, pids: 10}}\n",
    );
    assert!(validate::spec(&limits).is_ok());
    let req = start_request(&limits, target(), &Default::default())
        .unwrap()
        .resources
        .unwrap();
    assert_eq!(
        (req.cpu_millis, req.memory_bytes, req.pids),
        (Some(200), Some(32 << 20), Some(10))
    );
    // An integer in YAML is a quantity too.
    let whole =
        spec("podName: web\ncommand: [x]\nresources: {limits: {cpu: 2, memory: 67108864}}\n");
    let req = start_request(&whole, target(), &Default::default())
        .unwrap()
        .resources
        .unwrap();
    assert_eq!(
        (req.cpu_millis, req.memory_bytes),
        (Some(2000), Some(64 << 20))
    );
}

#[test]
fn only_stop_and_ttl_are_mutable() {
    let old = minimal();
    let mut new = old.clone();
    new.stop = true;
    new.ttl_seconds_after_finished = Some(5);
    assert!(validate::spec_update(&new, &old).is_ok());

    type Change = Box<dyn Fn(&mut SandboxProcessSpec)>;
    let changes: Vec<(&str, Change)> = vec![
        ("podName", Box::new(|s| s.pod_name = "other".into())),
        ("container", Box::new(|s| s.container = Some("c".into()))),
        ("command", Box::new(|s| s.command.push("2".into()))),
        ("workingDir", Box::new(|s| s.working_dir = Some("/".into()))),
        (
            "env",
            Box::new(|s| {
                s.env.push(EnvVar {
                    name: "A".into(),
                    value: "".into(),
                    value_from: None,
                })
            }),
        ),
        ("timeoutSeconds", Box::new(|s| s.timeout_seconds = Some(3))),
        ("stopSignal", Box::new(|s| s.stop_signal = 9)),
        (
            "terminationGracePeriodSeconds",
            Box::new(|s| s.termination_grace_period_seconds = 1),
        ),
        (
            "resources",
            Box::new(|s| s.resources = Some(Default::default())),
        ),
        (
            "startDeadlineSeconds",
            Box::new(|s| s.start_deadline_seconds = Some(5)),
        ),
        ("stdin", Box::new(|s| s.stdin = true)),
        (
            "securityContext",
            Box::new(|s| s.security_context = Some(Default::default())),
        ),
        ("tty", Box::new(|s| s.tty = true)),
        (
            "restartPolicy",
            Box::new(|s| s.restart_policy = RestartPolicy::Always),
        ),
        (
            "terminal",
            Box::new(|s| {
                s.terminal = Some(TerminalSpec {
                    rows: 30,
                    cols: 100,
                })
            }),
        ),
    ];
    for (field, change) in changes {
        let mut new = old.clone();
        change(&mut new);
        let err = validate::spec_update(&new, &old).expect_err(field);
        assert_eq!(err.field, field);
        assert_eq!(err.message, format!("{field} is immutable"));
    }
}

// The CEL rules of the generated schema, evaluated client-side (kube's CEL evaluator).

fn cel_create(s: SandboxProcessSpec) -> Result<(), String> {
    validate_cel(&object(s)).map_err(|e| format!("{e:?}"))
}

fn cel_update(new: SandboxProcessSpec, old: SandboxProcessSpec) -> Result<(), String> {
    validate_cel_update(&object(new), &object(old)).map_err(|e| format!("{e:?}"))
}

#[test]
fn cel_immutability() {
    let old =
        spec("podName: web\ncommand: [x]\nstopSignal: 15\nterminationGracePeriodSeconds: 5\n");
    let mut new = old.clone();
    new.stop = true;
    new.ttl_seconds_after_finished = Some(0);
    assert_eq!(cel_update(new, old.clone()), Ok(()));

    let mut new = old.clone();
    new.command = vec!["y".into()];
    let err = cel_update(new, old.clone()).unwrap_err();
    assert!(err.contains("command is immutable"), "{err}");

    let mut new = old.clone();
    new.container = Some("c".into());
    let err = cel_update(new, old.clone()).unwrap_err();
    assert!(err.contains("container is immutable"), "{err}");

    let mut new = old.clone();
    new.readiness = Some(Box::new(ReadinessSpec {
        tcp_socket: Some(TcpSocketProbe { port: 80 }),
        http_get: None,
        log_match: None,
        period_millis: 500,
        timeout_seconds: None,
    }));
    let err = cel_update(new, old.clone()).unwrap_err();
    assert!(err.contains("readiness is immutable"), "{err}");

    let mut new = old.clone();
    new.stdin = true;
    let err = cel_update(new, old.clone()).unwrap_err();
    assert!(err.contains("stdin is immutable"), "{err}");

    let mut new = old.clone();
    new.security_context = Some(Box::new(SecurityContextSpec {
        run_as_user: Some(1000),
        ..Default::default()
    }));
    let err = cel_update(new.clone(), old.clone()).unwrap_err();
    assert!(err.contains("securityContext is immutable"), "{err}");
    let mut newer = new.clone();
    newer.security_context.as_mut().unwrap().run_as_user = Some(0);
    let err = cel_update(newer, new).unwrap_err();
    assert!(err.contains("securityContext is immutable"), "{err}");

    let mut new = old.clone();
    new.tty = true;
    let err = cel_update(new, old.clone()).unwrap_err();
    assert!(err.contains("tty is immutable"), "{err}");

    let (mut tty, mut resized) = (old.clone(), old.clone());
    tty.tty = true;
    resized.tty = true;
    resized.terminal = Some(TerminalSpec {
        rows: 30,
        cols: 100,
    });
    let err = cel_update(resized, tty).unwrap_err();
    assert!(err.contains("terminal is immutable"), "{err}");
}

#[test]
fn tty_reaches_the_request_with_stdin_and_a_size() {
    let req = |yaml: &str| start_request(&spec(yaml), target(), &Default::default()).unwrap();
    let plain = req("podName: web\ncommand: [x]\n");
    assert_eq!((plain.stdin, plain.tty), (false, None));
    let tty = req("podName: web\ncommand: [sh]\ntty: true\n");
    assert_eq!(
        (tty.stdin, tty.tty),
        (true, Some(crate::wire::TerminalSize { rows: 24, cols: 80 }))
    );
    let sized = req("podName: web\ncommand: [sh]\ntty: true\nterminal: {rows: 30, cols: 100}\n");
    assert_eq!(
        sized.tty,
        Some(crate::wire::TerminalSize {
            rows: 30,
            cols: 100
        })
    );
    // One of the two given: the other is the default's.
    let rows = req("podName: web\ncommand: [sh]\ntty: true\nterminal: {rows: 50}\n");
    assert_eq!(
        rows.tty,
        Some(crate::wire::TerminalSize { rows: 50, cols: 80 })
    );
}

#[test]
fn start_request_carries_the_spec() {
    let s = spec(
        r#"
podName: web
command: [srv, --port, "80"]
workingDir: /srv
env: [{name: A, value: b}]
timeoutSeconds: 9
readiness: {logMatch: {pattern: "listening", stream: Stderr}, periodMillis: 100}
stopSignal: 2
terminationGracePeriodSeconds: 3
securityContext: {runAsUser: 1000, runAsGroup: 1001, supplementalGroups: [2000, 0], runAsNonRoot: true}
"#,
    );
    let r = start_request(
        &s,
        crate::convert::Target {
            exec_id: "uid-1",
            pod_uid: "pod-1",
            container: "app",
        },
        &Default::default(),
    )
    .unwrap();
    assert_eq!(r.exec_id, "uid-1");
    assert_eq!(r.pod_uid, "pod-1");
    assert_eq!(r.container, "app");
    assert_eq!(r.command, ["srv", "--port", "80"]);
    assert_eq!(r.working_dir.as_deref(), Some("/srv"));
    assert_eq!(r.env[0].name, "A");
    assert_eq!(r.timeout_seconds, Some(9));
    assert_eq!(r.stop_signal, 2);
    assert_eq!(r.grace_seconds, 3);
    assert_eq!(
        r.security_context,
        Some(crate::wire::SecurityContext {
            run_as_user: Some(1000),
            run_as_group: Some(1001),
            supplemental_groups: vec![2000, 0],
            run_as_non_root: true,
        })
    );
    let rd = r.readiness.unwrap();
    assert_eq!(rd.period_millis, 100);
    assert_eq!(
        rd.probe,
        crate::wire::ProbeKind::LogMatch {
            pattern: "listening".into(),
            stream: crate::wire::LogStream::Stderr
        }
    );
}

/// Every numeric field at its extremes goes through the path a spec takes: the validator either
/// refuses it naming that very field, or what it lets through reaches the start request within
/// the bounds the agent enforces (durations ≤ MAX_SECONDS, signal 1–64, ports 1–65535, period
/// 10–3600000) — nothing in between can overflow or be silently clamped into another value.
#[test]
fn extreme_numbers_are_refused_by_name_or_reach_the_agent_intact() {
    let extremes = [
        i64::MIN,
        -1,
        0,
        1,
        9,
        10,
        64,
        65,
        599,
        600,
        65535,
        65536,
        3_600_000,
        3_600_001,
        MAX_SECONDS,
        MAX_SECONDS + 1,
        i64::MAX,
    ];
    let fields = [
        ("timeoutSeconds", "timeoutSeconds: {}"),
        (
            "terminationGracePeriodSeconds",
            "terminationGracePeriodSeconds: {}",
        ),
        ("ttlSecondsAfterFinished", "ttlSecondsAfterFinished: {}"),
        ("stopSignal", "stopSignal: {}"),
        (
            "readiness.timeoutSeconds",
            "readiness: {tcpSocket: {port: 1}, timeoutSeconds: {}}",
        ),
        (
            "readiness.periodMillis",
            "readiness: {tcpSocket: {port: 1}, periodMillis: {}}",
        ),
        (
            "readiness.tcpSocket.port",
            "readiness: {tcpSocket: {port: {}}}",
        ),
        ("readiness.httpGet.port", "readiness: {httpGet: {port: {}}}"),
        (
            "securityContext.runAsUser",
            "securityContext: {runAsUser: {}}",
        ),
        (
            "securityContext.runAsGroup",
            "securityContext: {runAsGroup: {}}",
        ),
        (
            "securityContext.supplementalGroups",
            "securityContext: {supplementalGroups: [{}]}",
        ),
    ];
    for (field, line) in fields {
        for v in extremes {
            let yaml = format!(
                "podName: web\ncommand: [x]\n{}\n",
                line.replace("{}", &v.to_string())
            );
            // Values outside i32 do not even parse into an i32 field: refused before validation.
            let Ok(s) = serde_yaml_ng::from_str::<SandboxProcessSpec>(&yaml) else {
                assert!(v < i32::MIN as i64 || v > i32::MAX as i64, "{yaml}");
                continue;
            };
            match validate::spec(&s) {
                Err(e) => assert!(
                    e.field.starts_with(field.split('.').next().unwrap()),
                    "{yaml}: {e}"
                ),
                Ok(()) => reaches_the_agent_intact(&yaml, &s),
            }
        }
    }
}

/// What the validator let through is within the agent's bounds on the start request.
fn reaches_the_agent_intact(yaml: &str, s: &SandboxProcessSpec) {
    let q = start_request(s, target(), &Default::default()).unwrap();
    let max = MAX_SECONDS as u64;
    assert!(
        q.timeout_seconds.is_none_or(|t| (1..=max).contains(&t)),
        "{yaml}"
    );
    assert!(q.grace_seconds <= max, "{yaml}");
    assert!((1..=64).contains(&q.stop_signal), "{yaml}");
    if let Some(r) = &q.readiness {
        assert!(
            r.timeout_seconds.is_none_or(|t| (1..=max).contains(&t)),
            "{yaml}"
        );
        assert!((10..=3_600_000).contains(&r.period_millis), "{yaml}");
        match &r.probe {
            crate::wire::ProbeKind::TcpSocket { port }
            | crate::wire::ProbeKind::HttpGet { port, .. } => {
                assert!(*port >= 1, "{yaml}")
            }
            _ => {}
        }
    }
    assert!(s
        .ttl_seconds_after_finished
        .is_none_or(|t| (0..=MAX_SECONDS).contains(&t)));
    if let Some(sc) = &q.security_context {
        let ids = [sc.run_as_user, sc.run_as_group].into_iter().flatten();
        let max = crate::wire::MAX_ID;
        assert!(ids.chain(sc.supplemental_groups.clone()).all(|i| i <= max));
    }
}
