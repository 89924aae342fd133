//! The plugin's terminal as a person uses it (`rust_tests terminal 1` from e2e/cli, with
//! `SPO_PLUGIN` naming the kubectl-sandbox that suite built): `kubectl sandbox run -it` in a
//! tmux pane, typed at with `send-keys`, read with `capture-pane`.
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::{bail, ensure, Context, Result};
use sandbox_e2e::manifests::pod;
use sandbox_e2e::{cmd, env, field, with_ns};

/// The outer bash's prompt on the last line: the plugin has ended (tmux drops trailing blanks).
const PROMPT: &str = r"^outer>\s*\z";

/// A tmux server of its own (its socket in a temporary directory) with one pane running bash.
struct Tmux {
    sock: PathBuf,
}

impl Tmux {
    /// A `cols`×`rows` window whose bash finds the plugin first on PATH (as kubectl does).
    async fn start(name: &str, plugin: &Path, rows: u16, cols: u16) -> Result<Tmux> {
        let sock = std::env::temp_dir().join(format!("spo-terminal-{name}.sock"));
        let t = Tmux { sock };
        let dir = plugin.parent().context("SPO_PLUGIN has no directory")?;
        let path = format!("{}:{}", dir.display(), std::env::var("PATH")?);
        // Through env(1) in the command (tmux's shell runs it): a new server's `-e` did not
        // reach bash's PS1.
        let shell = format!(
            "env PATH='{path}' KUBECONFIG='{}' PS1='outer> ' bash --norc --noprofile -i",
            env("KUBECONFIG")
        );
        let (x, y) = (cols.to_string(), rows.to_string());
        t.tmux(&["new-session", "-d", "-s", "t", "-x", &x, "-y", &y, &shell])
            .await?;
        t.tmux(&["set", "-g", "status", "off"]).await?;
        t.until(r"outer> ", 10).await?;
        Ok(t)
    }

    async fn tmux(&self, args: &[&str]) -> Result<String> {
        let mut all = vec!["-S", self.sock.to_str().context("socket path")?];
        all.extend_from_slice(args);
        cmd::ok("tmux", &all).await
    }

    /// Types `text` then Enter.
    async fn line(&self, text: &str) -> Result<()> {
        self.tmux(&["send-keys", "-t", "t", "-l", text]).await?;
        self.tmux(&["send-keys", "-t", "t", "Enter"]).await?;
        Ok(())
    }

    /// The pane's text, scrollback included.
    async fn screen(&self) -> Result<String> {
        self.tmux(&["capture-pane", "-p", "-J", "-S", "-2000", "-t", "t"])
            .await
    }

    /// Waits until the screen matches `re` (multi-line); the screen.
    async fn until(&self, re: &str, secs: u64) -> Result<String> {
        let re = regex_lite::Regex::new(&format!("(?m){re}"))?;
        let deadline = Instant::now() + Duration::from_secs(secs);
        loop {
            let s = self.screen().await?;
            if re.is_match(&s) {
                return Ok(s);
            }
            if Instant::now() > deadline {
                bail!("the screen never showed /{re}/ in {secs} s:\n{s}");
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }

    /// Saves the outer terminal's settings (`stty -g`) under `tag`.
    async fn save_stty(&self, tag: &str) -> Result<()> {
        self.line(&format!("stty -g >{}", self.stty_file(tag)))
            .await
    }

    /// Waits for the outer terminal to have the settings saved under `tag` again (the plugin
    /// restored what its raw mode changed); `check` names this comparison on the screen.
    async fn same_stty(&self, tag: &str, check: &str) -> Result<()> {
        let f = self.stty_file(tag);
        self.line(&format!(
            "stty -g | cmp -s - {f} && echo {check}=same || echo {check}=changed"
        ))
        .await?;
        self.until(&format!("^{check}=same$"), 10).await.map(|_| ())
    }

    fn stty_file(&self, tag: &str) -> String {
        format!("{}.{tag}.stty", self.sock.display())
    }

    /// The pid of what the outer bash runs in the foreground (the plugin).
    async fn foreground_pid(&self) -> Result<u32> {
        let bash = self
            .tmux(&["display", "-p", "-t", "t", "#{pane_pid}"])
            .await?;
        let bash = bash.trim();
        let kids = std::fs::read_to_string(format!("/proc/{bash}/task/{bash}/children"))?;
        let pid = kids
            .split_whitespace()
            .next()
            .context("bash runs nothing")?;
        Ok(pid.parse()?)
    }

    /// The pane's size as `stty size` prints it: "ROWS COLS".
    async fn size(&self) -> Result<String> {
        let s = self
            .tmux(&["display", "-p", "-t", "t", "#{pane_height} #{pane_width}"])
            .await?;
        Ok(s.trim().to_string())
    }
}

impl Drop for Tmux {
    fn drop(&mut self) {
        let _ = std::process::Command::new("tmux")
            .arg("-S")
            .arg(&self.sock)
            .arg("kill-server")
            .status();
        let _ = std::fs::remove_file(&self.sock);
        let _ = std::fs::remove_file(self.stty_file("before"));
    }
}

/// `run -it` sees the pane's size and then the resized one, names a pty, runs vi, takes Ctrl-C
/// as a terminal does; detach leaves the shell running, `attach -it` replays it and types on, and
/// `exit 7` is the plugin's exit status.
#[tokio::test]
#[ignore = "needs the test cluster and the built plugin: run by e2e/cli"]
async fn run_it_in_tmux_size_resize_vi_ctrl_c_detach_attach_exit_7() {
    with_ns("terminal", |t| async move {
        t.pods([pod("work", None)]).await?;
        let plugin = PathBuf::from(env("SPO_PLUGIN"));
        let began = Instant::now();
        let tm = Tmux::start(&t.name, &plugin, 30, 100).await?;
        let ns = &t.name;
        tm.save_stty("before").await?;
        tm.line(&format!(
            "kubectl sandbox -n {ns} run -it work --name term -e 'PS1=inner# ' -- sh"
        ))
        .await?;
        tm.until(r"^inner# ", 60).await?;
        // The size it started with is the pane's.
        let size = tm.size().await?;
        tm.line("stty size").await?;
        tm.until(&format!("^{size}$"), 20).await?;
        // ... and was in the spec from the start (not only set by a resize after it).
        let o = t.sbps().get("term").await?;
        let spec = format!(
            "{} {}",
            field(&o, "/spec/terminal/rows"),
            field(&o, "/spec/terminal/cols")
        );
        ensure!(spec == size, "spec.terminal {spec}, the pane {size}");
        // A window change reaches it as a resize.
        tm.tmux(&["resize-window", "-t", "t", "-x", "120", "-y", "40"])
            .await?;
        let resized = tm.size().await?;
        ensure!(resized != size, "tmux did not resize: {resized}");
        tokio::time::sleep(Duration::from_secs(1)).await; // SIGWINCH, then the resize call
        tm.line("stty size").await?;
        tm.until(&format!("^{resized}$"), 20).await?;
        tm.line("tty").await?;
        tm.until(r"^/dev/pts/[0-9]+$", 20).await?;
        // A full-screen program draws on it and takes its keys: busybox vi writes a file.
        tm.line("vi /tmp/vi.txt").await?;
        tm.until(r"^~\s*$", 20).await?;
        tm.tmux(&["send-keys", "-t", "t", "-l", "ihello from vi"])
            .await?;
        tm.tmux(&["send-keys", "-t", "t", "Escape"]).await?;
        // As a person pauses: an Escape with keys right behind it reads as an escape sequence.
        tokio::time::sleep(Duration::from_millis(700)).await;
        tm.line(":wq").await?;
        // The prompt first, as after Ctrl-C below: keys typed while vi still holds the terminal
        // are echoed before the prompt (seen once in CI).
        tm.until(r"^inner#\s*$", 20).await?;
        tm.line("cat /tmp/vi.txt").await?;
        tm.until(r"^inner# cat /tmp/vi.txt\n+hello from vi$", 20)
            .await?;
        // Ctrl-C ends the foreground sleep, not the shell (nor the plugin).
        tm.line("sleep 100").await?;
        tokio::time::sleep(Duration::from_secs(2)).await;
        tm.tmux(&["send-keys", "-t", "t", "C-c"]).await?;
        // As a person does: the prompt first (keys typed before it are echoed by the line
        // discipline, then again by the shell's line editor: seen once in CI).
        tm.until(r"^\^C\n+inner#\s*$", 20).await?;
        tm.line("echo A$((3+4))B").await?;
        // Answered by the inner shell (an outer one would answer too, had Ctrl-C ended us).
        tm.until(r"^inner# echo A\$\(\(3\+4\)\)B\n+A7B$", 20)
            .await?;
        // Detach: the plugin exits 0 and says how to come back; the shell runs on.
        tm.tmux(&["send-keys", "-t", "t", "C-p", "C-q"]).await?;
        tm.until(
            &format!("attach again with: kubectl sandbox -n {ns} attach -it term"),
            20,
        )
        .await?;
        tm.until(PROMPT, 10).await?;
        tm.line("echo rc=$?").await?;
        tm.until(r"^rc=0$", 10).await?;
        tm.same_stty("before", "detached").await?;
        let o = t.sbps().get("term").await?;
        let phase = field(&o, "/status/phase");
        ensure!(phase == "Running", "after the detach: {phase}");
        // A clean screen, then attach: the earlier output is replayed, typing goes on.
        tm.line("clear").await?;
        tm.tmux(&["clear-history", "-t", "t"]).await?;
        let s = tm.screen().await?;
        ensure!(!s.contains("A7B"), "the screen was not cleared:\n{s}");
        tm.line(&format!("kubectl sandbox -n {ns} attach -it term"))
            .await?;
        tm.until(r"^A7B$", 30).await?;
        tm.line("echo A$((5+5))B").await?;
        tm.until(r"^inner# echo A\$\(\(5\+5\)\)B\n+A10B$", 20)
            .await?;
        tm.line("exit 7").await?;
        tm.until(PROMPT, 30).await?;
        tm.line("echo rc=$?").await?;
        let screen = tm.until(r"^rc=7$", 10).await?;
        tm.same_stty("before", "exited").await?;
        println!("the screen at the end:\n{screen}");
        let o = t.until_field("term", "/status/phase", "Exited", 60).await?;
        ensure!(field(&o, "/status/exit/code") == "7", "{o:?}");
        println!("note: the session took {:?}", began.elapsed());
        Ok(())
    })
    .await;
}

/// A SIGTERM to the plugin in a session ends it with this terminal as it was (raw mode undone),
/// the process left running.
#[tokio::test]
#[ignore = "needs the test cluster and the built plugin: run by e2e/cli"]
async fn sigterm_in_a_session_restores_the_terminal() {
    with_ns("terminal-term", |t| async move {
        t.pods([pod("work", None)]).await?;
        let plugin = PathBuf::from(env("SPO_PLUGIN"));
        let tm = Tmux::start(&t.name, &plugin, 24, 80).await?;
        tm.save_stty("before").await?;
        tm.line(&format!(
            "kubectl sandbox -n {} run -it work --name term -e 'PS1=inner# ' -- sh",
            t.name
        ))
        .await?;
        tm.until(r"^inner# ", 60).await?;
        let pid = tm.foreground_pid().await?;
        cmd::ok("kill", &["-TERM", &pid.to_string()]).await?;
        tm.until(r"error: terminated", 20).await?;
        tm.until(PROMPT, 10).await?;
        tm.same_stty("before", "terminated").await?;
        let o = t.sbps().get("term").await?;
        let phase = field(&o, "/status/phase");
        ensure!(phase == "Running", "after the plugin's SIGTERM: {phase}");
        Ok(())
    })
    .await;
}
