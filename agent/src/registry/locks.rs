//! One operation at a time per process (start, forget, an object's change), with a lock table
//! that holds an entry only while someone holds or awaits its lock. A table kept until the
//! process was forgotten grew with history: every start refused before its process existed
//! (the node's cap, a full state dir, a pod not found), and every forget or change of an id the
//! agent never had, left an entry for the agent's life.
use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use sandbox_memory::ShrinkSparse;
use tokio::sync::OwnedMutexGuard;

type Lock = Arc<tokio::sync::Mutex<()>>;

#[derive(Default)]
pub(super) struct KeyedLocks(Mutex<HashMap<String, Lock>>);

/// Held while the operation runs; its drop releases the lock and, when no one else holds or
/// awaits it, the table's entry.
pub(super) struct KeyGuard<'a> {
    // Dropped first (fields drop in order): the lock is released before the entry is judged.
    _guard: OwnedMutexGuard<()>,
    _ticket: Ticket<'a>,
}

/// A claim on the entry, from before the wait: a waiter dropped while it waits (its request
/// cancelled) releases its claim too.
struct Ticket<'a> {
    table: &'a KeyedLocks,
    key: String,
    lock: Option<Lock>,
}

impl KeyedLocks {
    /// Waits for `key`'s lock.
    pub(super) async fn lock(&self, key: &str) -> KeyGuard<'_> {
        let lock = self
            .0
            .lock()
            .unwrap()
            .entry(key.to_string())
            .or_default()
            .clone();
        let ticket = Ticket {
            table: self,
            key: key.to_string(),
            lock: Some(lock.clone()),
        };
        KeyGuard {
            _guard: lock.lock_owned().await,
            _ticket: ticket,
        }
    }

    /// Entries held now (a test's view).
    #[cfg(test)]
    fn len(&self) -> usize {
        self.0.lock().unwrap().len()
    }
}

impl Drop for Ticket<'_> {
    fn drop(&mut self) {
        // Under the table's lock: a new claim clones from the table first, so a count of one
        // (the table's own) cannot rise meanwhile.
        let mut table = self.table.0.lock().unwrap();
        drop(self.lock.take());
        if table
            .get(&self.key)
            .is_some_and(|l| Arc::strong_count(l) == 1)
        {
            table.remove(&self.key);
            table.shrink_if_sparse();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[tokio::test]
    async fn one_at_a_time_per_key_and_nothing_kept_after() {
        let locks = Arc::new(KeyedLocks::default());
        let a = locks.lock("a").await;
        let _b = locks.lock("b").await; // another key is not held up
        let waiter = {
            let locks = locks.clone();
            tokio::spawn(async move {
                let _a = locks.lock("a").await;
            })
        };
        tokio::time::sleep(Duration::from_millis(50)).await;
        assert!(!waiter.is_finished(), "a second holder of the same key");
        drop(a);
        waiter.await.unwrap();
        assert_eq!(locks.len(), 1, "only b's entry is left");
        drop(_b);
        assert_eq!(locks.len(), 0);
    }

    #[tokio::test]
    async fn a_waiter_cancelled_leaves_no_entry() {
        let locks = KeyedLocks::default();
        let held = locks.lock("a").await;
        let waited = tokio::time::timeout(Duration::from_millis(20), locks.lock("a")).await;
        assert!(waited.is_err(), "it waited");
        drop(held);
        assert_eq!(locks.len(), 0);
        for i in 0..10_000 {
            drop(locks.lock(&format!("id-{i}")).await);
        }
        assert_eq!(locks.len(), 0);
        assert!(
            locks.0.lock().unwrap().capacity() < 64,
            "the table's room is given back"
        );
    }
}
