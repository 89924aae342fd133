//! Log follows woken by the output itself, not by polling: one inotify watch on a followed
//! process's ledger directory, shared by all its followers (a write of the supervisor wakes
//! them; an idle process costs nothing), plus a wake when its record becomes final. Caps per
//! process and per agent bound what followers can hold; beyond them a follow is refused (429).
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use inotify::{Inotify, WatchDescriptor, WatchMask, Watches};
use tokio::sync::watch;
use tracing::warn;

use crate::error::AgentError;

pub struct Follows {
    state: Mutex<State>,
    per_process: usize,
    per_agent: usize,
}

struct State {
    watches: Watches,
    by_dir: HashMap<PathBuf, Entry>,
    by_wd: HashMap<WatchDescriptor, PathBuf>,
    total: usize,
}

struct Entry {
    wd: WatchDescriptor,
    tx: watch::Sender<u64>,
    followers: usize,
}

/// One follower's subscription; dropping it releases its share of the watch.
pub struct Follow {
    rx: watch::Receiver<u64>,
    dir: PathBuf,
    owner: Arc<Follows>,
}

impl Follow {
    /// Resolves on the next change of the ledger (or final record) after the last call.
    pub async fn changed(&mut self) {
        if self.rx.changed().await.is_err() {
            // The watch is gone (the process was forgotten): nothing will change any more.
            std::future::pending::<()>().await;
        }
    }
}

impl Drop for Follow {
    fn drop(&mut self) {
        let mut st = self.owner.state.lock().unwrap();
        st.total = st.total.saturating_sub(1);
        let last = match st.by_dir.get_mut(&self.dir) {
            Some(e) => {
                e.followers = e.followers.saturating_sub(1);
                e.followers == 0
            }
            None => false,
        };
        if last {
            if let Some(e) = st.by_dir.remove(&self.dir) {
                st.by_wd.remove(&e.wd);
                let _ = st.watches.remove(e.wd);
            }
        }
    }
}

fn bump(tx: &watch::Sender<u64>) {
    tx.send_modify(|v| *v = v.wrapping_add(1));
}

impl Follows {
    pub fn new(per_process: usize, per_agent: usize) -> std::io::Result<Arc<Follows>> {
        let ino = Inotify::init()?;
        let watches = ino.watches();
        let mut events = ino.into_event_stream(vec![0u8; 16 * 1024])?;
        let follows = Arc::new(Follows {
            state: Mutex::new(State {
                watches,
                by_dir: HashMap::new(),
                by_wd: HashMap::new(),
                total: 0,
            }),
            per_process,
            per_agent,
        });
        let weak = Arc::downgrade(&follows);
        tokio::spawn(async move {
            use futures::StreamExt;
            while let Some(ev) = events.next().await {
                let Some(f) = weak.upgrade() else { return };
                match ev {
                    Ok(ev) => {
                        let st = f.state.lock().unwrap();
                        if let Some(e) = st.by_wd.get(&ev.wd).and_then(|d| st.by_dir.get(d)) {
                            bump(&e.tx);
                        }
                    }
                    Err(e) => warn!(error = %e, "inotify (log follows)"),
                }
            }
        });
        Ok(follows)
    }

    /// Subscribes to changes of the ledger in `dir`; refused beyond the caps.
    pub fn follow(self: &Arc<Self>, dir: &Path) -> Result<Follow, AgentError> {
        let mut st = self.state.lock().unwrap();
        if st.total >= self.per_agent {
            return Err(AgentError::TooManyRequests(format!(
                "{} log follows are open on this node's agent (the most it serves); retry later",
                st.total
            )));
        }
        let rx = match st.by_dir.get_mut(dir) {
            Some(e) if e.followers >= self.per_process => {
                return Err(AgentError::TooManyRequests(format!(
                    "{} log follows are open on this process (the most it serves); retry later",
                    e.followers
                )))
            }
            Some(e) => {
                e.followers += 1;
                e.tx.subscribe()
            }
            None => {
                let mask = WatchMask::MODIFY
                    | WatchMask::CREATE
                    | WatchMask::MOVED_TO
                    | WatchMask::DELETE_SELF;
                let wd = st
                    .watches
                    .add(dir, mask)
                    .map_err(AgentError::io(format!("watching {}", dir.display())))?;
                let (tx, rx) = watch::channel(0);
                st.by_wd.insert(wd.clone(), dir.to_path_buf());
                st.by_dir.insert(
                    dir.to_path_buf(),
                    Entry {
                        wd,
                        tx,
                        followers: 1,
                    },
                );
                rx
            }
        };
        st.total += 1;
        Ok(Follow {
            rx,
            dir: dir.to_path_buf(),
            owner: self.clone(),
        })
    }

    /// Wakes the followers of `dir` (the process's record became final: the last read is due).
    pub fn wake(&self, dir: &Path) {
        if let Some(e) = self.state.lock().unwrap().by_dir.get(dir) {
            bump(&e.tx);
        }
    }

    /// Open follows (all processes).
    pub fn open(&self) -> usize {
        self.state.lock().unwrap().total
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[tokio::test]
    async fn writes_wake_followers_caps_refuse_and_drop_releases() {
        let dir = tempfile::tempdir().unwrap();
        let f = Follows::new(2, 3).unwrap();
        let mut a = f.follow(dir.path()).unwrap();
        let mut b = f.follow(dir.path()).unwrap();
        assert!(matches!(
            f.follow(dir.path()),
            Err(AgentError::TooManyRequests(m)) if m.contains("this process")
        ));
        // Nothing happens: nobody wakes.
        assert!(
            tokio::time::timeout(Duration::from_millis(200), a.changed())
                .await
                .is_err(),
            "woken without a change"
        );
        std::fs::write(dir.path().join("0-0.seg"), b"x").unwrap();
        tokio::time::timeout(Duration::from_secs(2), a.changed())
            .await
            .expect("a write wakes the first follower");
        tokio::time::timeout(Duration::from_secs(2), b.changed())
            .await
            .expect("and the second");
        f.wake(dir.path());
        tokio::time::timeout(Duration::from_secs(2), a.changed())
            .await
            .expect("an explicit wake");
        let other = tempfile::tempdir().unwrap();
        let _c = f.follow(other.path()).unwrap();
        assert!(matches!(
            f.follow(other.path()),
            Err(AgentError::TooManyRequests(m)) if m.contains("node")
        ));
        drop((a, b));
        assert_eq!(f.open(), 1);
        assert!(
            !f.state.lock().unwrap().by_dir.contains_key(dir.path()),
            "watch removed"
        );
        let _d = f.follow(dir.path()).unwrap();
    }
}
