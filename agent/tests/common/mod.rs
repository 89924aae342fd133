//! Test fixture: real runc containers from a busybox rootfs, and a real `sandbox-agent` process
//! talking to them through the runc-state lookup. Needs root, runc and busybox-static.
#![allow(dead_code)]
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use base64::Engine;
use sandbox_wire::wire::{LogEvent, ProcessRecord, StartRequest};
use serde_json::{json, Value};

pub const TOKEN: &str = "test-token-0123456789abcdef";
static SEQ: AtomicU32 = AtomicU32::new(0);

pub fn uniq(prefix: &str) -> String {
    format!(
        "{prefix}-{}-{}",
        std::process::id(),
        SEQ.fetch_add(1, Ordering::Relaxed)
    )
}

fn run(cmd: &mut Command) -> String {
    let out = cmd.output().unwrap_or_else(|e| panic!("{cmd:?}: {e}"));
    assert!(
        out.status.success(),
        "{cmd:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

pub fn runc() -> String {
    std::env::var("RUNC").unwrap_or_else(|_| "/usr/sbin/runc".into())
}

/// A busybox root filesystem, built once per test binary.
pub fn rootfs(base: &Path) -> PathBuf {
    static BUILD: std::sync::Mutex<()> = std::sync::Mutex::new(());
    let _g = BUILD.lock().unwrap_or_else(|e| e.into_inner());
    let root = base.join("rootfs");
    if root.join("bin/sh").exists() {
        return root;
    }
    for d in [
        "bin", "tmp", "etc", "proc", "dev", "sys", "www", "work", "home/app",
    ] {
        std::fs::create_dir_all(root.join(d)).unwrap();
    }
    std::fs::copy("/bin/busybox", root.join("bin/busybox"))
        .expect("busybox-static is needed (/bin/busybox)");
    let list = run(Command::new("/bin/busybox").arg("--list"));
    for applet in list.lines().filter(|a| !a.is_empty() && *a != "busybox") {
        let _ = std::os::unix::fs::symlink("busybox", root.join("bin").join(applet));
    }
    std::fs::write(
        root.join("etc/passwd"),
        "root:x:0:0:root:/root:/bin/sh\napp:x:1000:1000:app:/home/app:/bin/sh\n",
    )
    .unwrap();
    std::fs::write(root.join("etc/group"), "root:x:0:\napp:x:1000:\n").unwrap();
    std::fs::write(root.join("www/index.html"), "hello\n").unwrap();
    std::fs::write(root.join("etc/not-executable"), "data\n").unwrap();
    std::fs::set_permissions(
        root.join("tmp"),
        std::os::unix::fs::PermissionsExt::from_mode(0o1777),
    )
    .unwrap();
    // Marker last: a rootfs with bin/sh is complete.
    std::os::unix::fs::symlink("busybox", root.join("bin/sh")).ok();
    root
}

pub struct Container {
    pub id: String,
    pub pod_uid: String,
    pub name: String,
    pub runc_root: PathBuf,
    pub bundle: PathBuf,
}

impl Container {
    /// Starts `sleep` as the container's init with the given user (uid, gid).
    pub fn start(base: &Path, runc_root: &Path, uid: u32) -> Container {
        Self::start_with(base, runc_root, uid, None)
    }

    /// Like `start`, with a memory limit (bytes) on the container's cgroup.
    pub fn start_with(
        base: &Path,
        runc_root: &Path,
        uid: u32,
        memory_limit: Option<u64>,
    ) -> Container {
        Self::start_edited(base, runc_root, uid, memory_limit, |_| {})
    }

    /// Like `start_with`, with `edit` applied to the OCI spec last.
    pub fn start_edited(
        base: &Path,
        runc_root: &Path,
        uid: u32,
        memory_limit: Option<u64>,
        edit: impl FnOnce(&mut Value),
    ) -> Container {
        let rootfs = rootfs(base);
        let id = uniq("ctr");
        let bundle = base.join("bundles").join(&id);
        std::fs::create_dir_all(&bundle).unwrap();
        run(Command::new(runc()).arg("spec").current_dir(&bundle));
        let mut spec: Value =
            serde_json::from_slice(&std::fs::read(bundle.join("config.json")).unwrap()).unwrap();
        let pod_uid = uniq("pod");
        spec["root"] = json!({"path": rootfs, "readonly": false});
        spec["process"]["terminal"] = json!(false);
        spec["process"]["args"] = json!(["sleep", "1000000"]);
        spec["process"]["cwd"] = json!("/");
        spec["process"]["env"] = json!(["PATH=/bin", "CONTAINER_VAR=from-image"]);
        spec["process"]["user"] = json!({"uid": uid, "gid": uid});
        spec["hostname"] = json!("sandbox");
        spec["annotations"] = json!({
            "io.kubernetes.pod.uid": pod_uid,
            "io.kubernetes.container.name": "main",
        });
        spec["linux"]["cgroupsPath"] = json!(format!("/spo-agent-test/{id}"));
        if let Some(limit) = memory_limit {
            spec["linux"]["resources"]["memory"] = json!({"limit": limit, "swap": limit});
        }
        edit(&mut spec);
        std::fs::write(
            bundle.join("config.json"),
            serde_json::to_vec_pretty(&spec).unwrap(),
        )
        .unwrap();
        let st = Command::new(runc())
            .arg("--root")
            .arg(runc_root)
            .args(["run", "-d", "--bundle"])
            .arg(&bundle)
            .arg(&id)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::inherit())
            .status()
            .unwrap();
        assert!(st.success(), "runc run failed");
        Container {
            id,
            pod_uid,
            name: "main".into(),
            runc_root: runc_root.to_path_buf(),
            bundle,
        }
    }

    pub fn init_pid(&self) -> i32 {
        let state: Value = serde_json::from_str(&run(Command::new(runc())
            .arg("--root")
            .arg(&self.runc_root)
            .args(["state", &self.id])))
        .unwrap();
        state["pid"].as_i64().unwrap() as i32
    }

    /// Stops the container under any running exec (as a pod container stop would).
    pub fn kill(&self) {
        let _ = Command::new(runc())
            .arg("--root")
            .arg(&self.runc_root)
            .args(["kill", "--all", &self.id, "KILL"])
            .status();
    }
}

impl Drop for Container {
    fn drop(&mut self) {
        let _ = Command::new(runc())
            .arg("--root")
            .arg(&self.runc_root)
            .args(["delete", "-f", &self.id])
            .stderr(Stdio::null())
            .status();
    }
}

pub struct Agent {
    pub base: PathBuf,
    pub state: PathBuf,
    pub runc_root: PathBuf,
    pub addr: String,
    child: Option<Child>,
    extra: Vec<String>,
    pub client: reqwest::Client,
}

impl Agent {
    pub fn launch(base: &Path, runc_root: &Path, extra: &[&str]) -> Agent {
        Self::launch_in(base, runc_root, &base.join(uniq("state")), extra)
    }

    /// Like `launch`, with the state dir at `state` (e.g. a small filesystem of its own).
    pub fn launch_in(base: &Path, runc_root: &Path, state: &Path, extra: &[&str]) -> Agent {
        let state = state.to_path_buf();
        let mut a = Agent {
            base: base.to_path_buf(),
            state,
            runc_root: runc_root.to_path_buf(),
            addr: String::new(),
            child: None,
            extra: extra.iter().map(|s| s.to_string()).collect(),
            client: reqwest::Client::new(),
        };
        a.spawn();
        a
    }

    /// A second agent process on this one's state dir (another port), not waited for.
    pub fn second_on_same_state(&self) -> Agent {
        let mut b = Agent {
            base: self.base.clone(),
            state: self.state.clone(),
            runc_root: self.runc_root.clone(),
            addr: format!("127.0.0.1:{}", free_port()),
            child: None,
            extra: self.extra.clone(),
            client: reqwest::Client::new(),
        };
        b.start_process();
        b
    }

    pub fn listening(&self) -> bool {
        std::net::TcpStream::connect(&self.addr).is_ok()
    }

    pub fn log(&self) -> String {
        let port = self.addr.rsplit(':').next().unwrap();
        std::fs::read_to_string(self.base.join(format!("agent-{port}.log"))).unwrap_or_default()
    }

    /// (Re)starts the agent process on the same state dir and port.
    pub fn spawn(&mut self) {
        // A pooled connection to the agent that was killed would fail the next request.
        self.client = reqwest::Client::new();
        self.start_process();
        let deadline = Instant::now() + Duration::from_secs(20);
        while !self.listening() {
            assert!(Instant::now() < deadline, "agent did not start listening");
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    fn start_process(&mut self) {
        // Per agent: tests run in parallel and must not see each other's half-written file.
        let token = self.state.with_extension("token");
        std::fs::write(&token, TOKEN).unwrap();
        let port = if self.addr.is_empty() {
            free_port()
        } else {
            self.addr.rsplit(':').next().unwrap().parse().unwrap()
        };
        self.addr = format!("127.0.0.1:{port}");
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.base.join(format!("agent-{port}.log")))
            .unwrap();
        let runc_bin = runc();
        let child = Command::new(env!("CARGO_BIN_EXE_sandbox-agent"))
            .args([
                "serve", "--lookup", "runc", "--auth", "static", "--tls", "off", "--listen",
                &self.addr,
            ])
            .arg("--token-file")
            .arg(&token)
            .arg("--state-dir")
            .arg(&self.state)
            .arg("--runtime-root")
            .arg(&self.runc_root)
            .args(self.default_unless_given("--runtime-binary", &runc_bin))
            .args(&self.extra)
            .args(self.default_unless_given("--supervisor-cgroup", "spo-agent-test-supervisors"))
            .args(self.default_unless_given("--supervisor-binary", supervisor_bin()))
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .spawn()
            .unwrap();
        self.child = Some(child);
    }

    /// `[flag, value]` unless the test's extra args give the flag (clap refuses it twice).
    fn default_unless_given<'a>(&self, flag: &'a str, value: &'a str) -> Vec<&'a str> {
        if self.extra.iter().any(|a| a == flag) {
            Vec::new()
        } else {
            vec![flag, value]
        }
    }

    pub fn pid(&self) -> u32 {
        self.child.as_ref().map(|c| c.id()).unwrap_or(0)
    }

    /// Waits for the agent process to exit by itself.
    pub fn wait_exit(&mut self, within: Duration) -> Option<std::process::ExitStatus> {
        let deadline = Instant::now() + within;
        let child = self.child.as_mut()?;
        loop {
            if let Ok(Some(st)) = child.try_wait() {
                self.child = None;
                return Some(st);
            }
            if Instant::now() >= deadline {
                return None;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    pub fn kill9(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    pub fn url(&self, path: &str) -> String {
        format!("http://{}{path}", self.addr)
    }

    pub async fn post(&self, path: &str, body: &Value) -> (u16, Value) {
        self.send_json(reqwest::Method::POST, path, body).await
    }

    pub async fn put(&self, path: &str, body: &Value) -> (u16, Value) {
        self.send_json(reqwest::Method::PUT, path, body).await
    }

    async fn send_json(&self, method: reqwest::Method, path: &str, body: &Value) -> (u16, Value) {
        let r = self
            .client
            .request(method, self.url(path))
            .bearer_auth(TOKEN)
            .json(body)
            .send()
            .await
            .unwrap();
        let status = r.status().as_u16();
        (status, r.json().await.unwrap_or(Value::Null))
    }

    pub async fn get(&self, path: &str) -> (u16, Value) {
        let r = self
            .client
            .get(self.url(path))
            .bearer_auth(TOKEN)
            .send()
            .await
            .unwrap();
        let status = r.status().as_u16();
        (status, r.json().await.unwrap_or(Value::Null))
    }

    pub async fn start(&self, req: &StartRequest) -> Result<ProcessRecord, (u16, Value)> {
        let (s, v) = self
            .post("/v1/processes", &serde_json::to_value(req).unwrap())
            .await;
        if s == 200 {
            Ok(serde_json::from_value(v).unwrap())
        } else {
            Err((s, v))
        }
    }

    /// `POST /v1/processes/{id}/signal` with `body` (`{"signal": N}` or `{"stop": true, ...}`).
    pub async fn signal(&self, id: &str, body: Value) -> (u16, Value) {
        self.post(&format!("/v1/processes/{id}/signal"), &body)
            .await
    }

    pub async fn record(&self, id: &str) -> ProcessRecord {
        let (s, v) = self.get(&format!("/v1/processes/{id}")).await;
        assert_eq!(s, 200, "get {id}: {v}");
        serde_json::from_value(v).unwrap()
    }

    pub async fn wait_final(&self, id: &str, within: Duration) -> ProcessRecord {
        let deadline = Instant::now() + within;
        loop {
            let r = self.record(id).await;
            if r.is_final() {
                return r;
            }
            assert!(
                Instant::now() < deadline,
                "{id} not final in {within:?}: {r:?}"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    pub async fn wait_for(
        &self,
        id: &str,
        within: Duration,
        what: &str,
        f: impl Fn(&ProcessRecord) -> bool,
    ) -> ProcessRecord {
        let deadline = Instant::now() + within;
        loop {
            let r = self.record(id).await;
            if f(&r) {
                return r;
            }
            assert!(
                Instant::now() < deadline,
                "{id}: {what} not reached in {within:?}: {r:?}"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// Opens the `/v1/watch` stream.
    pub async fn watch(&self) -> reqwest::Response {
        let r = self
            .client
            .get(self.url("/v1/watch"))
            .bearer_auth(TOKEN)
            .send()
            .await
            .unwrap();
        assert_eq!(r.status().as_u16(), 200, "watch");
        r
    }

    /// Reads the log endpoint to its end; returns the events.
    /// `POST /v1/processes/{id}/stdin?offset=N[&close=true]` with `data`.
    pub async fn stdin(&self, id: &str, offset: u64, data: &[u8], close: bool) -> (u16, Value) {
        self.stdin_as(id, offset, data, &format!("close={close}"))
            .await
    }

    /// A stdin write with more of the query (`writer=W`, `by=U`, `close=true`).
    pub async fn stdin_as(&self, id: &str, offset: u64, data: &[u8], query: &str) -> (u16, Value) {
        let r = self
            .client
            .post(self.url(&format!("/v1/processes/{id}/stdin?offset={offset}&{query}")))
            .bearer_auth(TOKEN)
            .body(data.to_vec())
            .send()
            .await
            .unwrap();
        let status = r.status().as_u16();
        (status, r.json().await.unwrap_or(Value::Null))
    }

    pub async fn logs(&self, id: &str, query: &str) -> Vec<LogEvent> {
        let r = self
            .client
            .get(self.url(&format!("/v1/processes/{id}/logs?{query}")))
            .bearer_auth(TOKEN)
            .send()
            .await
            .unwrap();
        assert_eq!(r.status().as_u16(), 200, "logs {id}?{query}");
        let body = r.text().await.unwrap();
        body.lines()
            .filter(|l| !sandbox_wire::wire::log_line_is_keepalive(l.as_bytes()))
            .map(|l| serde_json::from_str(l).unwrap())
            .collect()
    }
}

impl Drop for Agent {
    fn drop(&mut self) {
        self.kill9();
    }
}

/// A port nobody listens on, never handed out twice in this process (tests run in parallel and
/// a released ephemeral port can come back from the next bind).
pub fn free_port() -> u16 {
    static USED: std::sync::Mutex<Vec<u16>> = std::sync::Mutex::new(Vec::new());
    let mut used = USED.lock().unwrap();
    loop {
        let p = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        if !used.contains(&p) {
            used.push(p);
            return p;
        }
    }
}

pub fn req(c: &Container, cmd: &[&str]) -> StartRequest {
    serde_json::from_value(json!({
        "execId": uniq("x"),
        "podUid": c.pod_uid,
        "container": c.name,
        "command": cmd,
    }))
    .unwrap()
}

/// Concatenated data of a log event list, per stream filter ("stdout"/"stderr"/None = both).
pub fn text(events: &[LogEvent], stream: Option<&str>) -> String {
    let mut out = Vec::new();
    for e in events {
        if let LogEvent::Data {
            stream: s, data, ..
        } = e
        {
            let name = format!("{s:?}").to_lowercase();
            if stream.is_none_or(|want| want == name) {
                out.extend(
                    base64::engine::general_purpose::STANDARD
                        .decode(data)
                        .unwrap(),
                );
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// Host pids of processes whose process group is `pgid`.
pub fn group_members(pgid: i32) -> Vec<i32> {
    let mut out = Vec::new();
    for e in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(pid) = e.file_name().to_string_lossy().parse::<i32>() else {
            continue;
        };
        let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
            continue;
        };
        let Some(rest) = stat.rfind(')').map(|i| &stat[i + 2..]) else {
            continue;
        };
        let f: Vec<&str> = rest.split_whitespace().collect();
        if f.len() > 2 && f[2] == pgid.to_string() && f[0] != "Z" {
            out.push(pid);
        }
    }
    out
}

/// One test's fixture: a real container and a real agent in a fresh scratch directory.
pub struct Fx {
    pub agent: Agent,
    pub ctr: Container,
    pub base: PathBuf,
}

impl Fx {
    /// A container running as `uid` and an agent started with `extra` arguments.
    pub fn new(name: &str, uid: u32, extra: &[&str]) -> Fx {
        Self::edited(name, uid, None, extra, |_| {})
    }

    /// Like `new`, with a memory limit on the container and its OCI spec edited before start.
    pub fn edited(
        name: &str,
        uid: u32,
        memory_limit: Option<u64>,
        extra: &[&str],
        edit: impl FnOnce(&mut Value),
    ) -> Fx {
        require_root();
        let base = base_dir(name);
        let runc_root = base.join(uniq("runc"));
        let ctr = Container::start_edited(&base, &runc_root, uid, memory_limit, edit);
        let agent = Agent::launch(&base, &runc_root, extra);
        Fx { agent, ctr, base }
    }
}

/// A scratch directory for the test binary under the target dir (runc needs a real fs path).
pub fn base_dir(name: &str) -> PathBuf {
    let d =
        PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(format!("{name}-{}", std::process::id()));
    std::fs::create_dir_all(&d).unwrap();
    d
}

pub fn require_root() {
    assert!(
        nix::unistd::geteuid().is_root(),
        "these tests start real containers and must run as root"
    );
}

/// User + system CPU time of a process, in clock ticks (/proc/PID/stat fields 14 and 15).
pub fn cpu_ticks(pid: u32) -> u64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
    let f: Vec<&str> = stat[stat.rfind(')').unwrap() + 2..]
        .split_whitespace()
        .collect();
    f[11].parse::<u64>().unwrap() + f[12].parse::<u64>().unwrap()
}

/// The `sandbox-supervisor` binary (a crate of its own, so not one of this package's
/// `CARGO_BIN_EXE_*`): built once per test binary with the cargo, profile, target and target
/// directory this test was built with. Cargo runs tests after releasing its build lock.
pub fn supervisor_bin() -> &'static str {
    static BIN: OnceLock<String> = OnceLock::new();
    BIN.get_or_init(|| {
        // <target dir>[/<triple>]/<profile>/deps/<this test>
        let exe = std::env::current_exe().unwrap();
        let profile_dir = exe.parent().unwrap().parent().unwrap().to_path_buf();
        let profile = profile_dir
            .file_name()
            .unwrap()
            .to_str()
            .unwrap()
            .to_string();
        let above = std::fs::canonicalize(profile_dir.parent().unwrap()).unwrap();
        // The target directory's root: cargo's own word for it (`<root>/tmp`).
        let root = Path::new(env!("CARGO_TARGET_TMPDIR")).parent().unwrap();
        let root = std::fs::canonicalize(root).unwrap();
        let triple = (above != root).then(|| above.file_name().unwrap().to_str().unwrap());
        let manifest = concat!(env!("CARGO_MANIFEST_DIR"), "/../Cargo.toml");
        let mut c = Command::new(env!("CARGO"));
        c.args([
            "build",
            "-q",
            "--manifest-path",
            manifest,
            "-p",
            "sandbox-supervisor",
        ])
        .env("CARGO_TARGET_DIR", &root);
        match profile.as_str() {
            "debug" => {}
            "release" => {
                c.arg("--release");
            }
            other => {
                c.args(["--profile", other]);
            }
        }
        if let Some(t) = triple {
            c.args(["--target", t]);
        }
        let st = c
            .status()
            .expect("running cargo build for sandbox-supervisor");
        assert!(st.success(), "cargo build -p sandbox-supervisor: {st}");
        profile_dir
            .join("sandbox-supervisor")
            .to_str()
            .unwrap()
            .to_string()
    })
}
