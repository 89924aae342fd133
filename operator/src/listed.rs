//! Whether a watch has delivered its first full list, for any number of waiters at once.
//! kube-runtime's `Store::wait_until_ready` keeps one waker (a oneshot receiver behind a mutex):
//! of several tasks waiting at once only the last one polled is woken, and polling it with a
//! no-op waker (`now_or_never`) takes the waker of whoever else waits. A reconcile, the orphan
//! sweep and the agent lookups all wait for their caches; they wait on this instead.
use kube::runtime::watcher;
use tokio::sync::watch;

/// Set by the watch stream ([`Listed::mark`]), read by any number of waiters.
#[derive(Clone, Debug)]
pub struct Listed(watch::Receiver<bool>);

/// The writing side: marks the first full list.
#[derive(Debug)]
pub struct Marker(watch::Sender<bool>);

impl Listed {
    pub fn new() -> (Marker, Listed) {
        let (tx, rx) = watch::channel(false);
        (Marker(tx), Listed(rx))
    }

    /// A flag that is listed already (a cache that needs no list: a fixed agent URL).
    pub fn already() -> Listed {
        let (tx, rx) = watch::channel(true);
        drop(tx);
        Listed(rx)
    }

    /// Whether the first full list has come.
    pub fn now(&self) -> bool {
        *self.0.borrow()
    }

    /// Until the first full list has come; `false` if its watch ended before.
    pub async fn wait(&self) -> bool {
        self.0.clone().wait_for(|l| *l).await.is_ok()
    }
}

impl Marker {
    /// For `inspect_ok` after `reflect` on the watch stream: the store holds the list by then.
    pub fn mark<K>(&self, ev: &watcher::Event<K>) {
        if matches!(ev, watcher::Event::InitDone) {
            self.0.send_replace(true);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every waiter is woken by the one list, however many waited, and later ones pass at once.
    #[tokio::test]
    async fn every_waiter_wakes() {
        let (marker, listed) = Listed::new();
        let waiters: Vec<_> = (0..8)
            .map(|_| {
                let l = listed.clone();
                tokio::spawn(async move { l.wait().await })
            })
            .collect();
        tokio::task::yield_now().await;
        assert!(!listed.now());
        marker.mark::<()>(&watcher::Event::Init);
        assert!(!listed.now());
        marker.mark::<()>(&watcher::Event::InitDone);
        for w in waiters {
            let woke = tokio::time::timeout(std::time::Duration::from_secs(5), w).await;
            assert!(woke.expect("woken").unwrap());
        }
        assert!(listed.now() && listed.wait().await);
        assert!(Listed::already().now());
    }
}
