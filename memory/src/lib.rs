//! Gives the allocator's free memory back to the system now and then, and counts the heap: the
//! operator's and the node agent's (one rule for both: each is a long-lived server whose bursts
//! must not set its RSS for good).
//!
//! A burst of work (thousands of objects created at once: their watch events, reconciles, status
//! bodies; on a node, thousands of starts and their records) takes the heap to a peak that glibc keeps after the burst's memory is freed: free
//! chunks stay in each thread's arena, and only the top of the main heap is returned on its own.
//! The operator's RSS then reads as the burst's peak for the rest of its life (docs/benchmarks.md,
//! "Operator memory"), which is what a memory limit and the kubelet's eviction look at.
//! `malloc_trim(0)` returns every whole free page of every arena. On a fragmented 70 MiB heap the
//! first call took 24–31 ms and a repeat 2–6 ms (memory/tests/trim.rs), so one every 5 s
//! costs about 0.1 % of a core. Tables that outlive a burst give their room back too
//! ([`ShrinkSparse`]).
pub mod counting;
mod gauge;
pub use gauge::HeapGauge;

use std::collections::{HashMap, HashSet};
use std::hash::Hash;
use std::time::Duration;

/// How often the free memory is given back.
pub const EVERY: Duration = Duration::from_secs(5);

/// Trims every `every` until the runtime shuts down.
pub fn spawn(every: Duration) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        let mut tick = tokio::time::interval(every);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tick.tick().await;
            // It takes each arena's lock in turn: off the async workers.
            let _ = tokio::task::spawn_blocking(trim).await;
        }
    })
}

/// Sets the allocator up for a server that builds big bodies now and then (a list of 10,000
/// processes is a 16 MB body, grown and copied): buffers from 256 KiB up are mapped on their
/// own and unmapped when freed. Otherwise glibc raises its mmap threshold to the size of each
/// such buffer freed (up to 32 MiB), after which they come from the arenas and leave them
/// fragmented (140 MiB of free chunks, 25 MiB in use, after 10,000 processes were listed and
/// deleted). And at most 4 arenas (glibc allows 8 per core), each keeping its own free chunks.
#[cfg(all(target_os = "linux", target_env = "gnu"))]
pub fn tune() {
    // SAFETY: mallopt only sets the allocator's parameters, under its own lock; called once, at
    // the start of main, before any other thread exists.
    unsafe {
        libc::mallopt(libc::M_MMAP_THRESHOLD, 256 * 1024);
        libc::mallopt(libc::M_ARENA_MAX, 4);
    }
}

#[cfg(not(all(target_os = "linux", target_env = "gnu")))]
pub fn tune() {}

/// Returns the allocator's free pages to the system; whether any were.
#[cfg(all(target_os = "linux", target_env = "gnu"))]
pub fn trim() -> bool {
    // SAFETY: malloc_trim has no preconditions and takes the lock of each arena it trims, so it
    // is sound to call from any thread while others allocate and free.
    unsafe { libc::malloc_trim(0) == 1 }
}

/// The allocator's heap: bytes handed out and still in use, and bytes in the free chunks it
/// keeps (a trim gives the whole free pages among them back, the chunks stay listed). Against
/// the RSS: a leak or a growing cache grows in use; fragmentation grows RSS − code − in use.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Heap {
    pub in_use: u64,
    pub free: u64,
}

/// The heap now (`None`: not known with this allocator).
#[cfg(all(target_os = "linux", target_env = "gnu"))]
pub fn heap() -> Option<Heap> {
    // SAFETY: mallinfo2 has no preconditions; it takes each arena's lock while it counts.
    let m = unsafe { libc::mallinfo2() };
    Some(Heap {
        in_use: (m.uordblks + m.hblkhd) as u64,
        free: m.fordblks as u64,
    })
}

#[cfg(not(all(target_os = "linux", target_env = "gnu")))]
pub fn heap() -> Option<Heap> {
    None
}

/// Other allocators (musl's) give free memory back by themselves.
#[cfg(not(all(target_os = "linux", target_env = "gnu")))]
pub fn trim() -> bool {
    false
}

/// Gives a per-object table's room back once it is mostly empty: a hash table otherwise keeps
/// the size of its fullest moment for good (a burst of thousands of objects started at once,
/// all final since; operator/tests/perobj_heap.rs). Shrinks to twice what is left, only after three
/// quarters went: amortized O(1) per removal.
pub trait ShrinkSparse {
    fn shrink_if_sparse(&mut self);
}

fn sparse(len: usize, capacity: usize) -> Option<usize> {
    (capacity >= 64 && len <= capacity / 4).then_some(len * 2)
}

impl<K: Eq + Hash, V> ShrinkSparse for HashMap<K, V> {
    fn shrink_if_sparse(&mut self) {
        if let Some(to) = sparse(self.len(), self.capacity()) {
            self.shrink_to(to);
        }
    }
}

impl<K: Eq + Hash> ShrinkSparse for HashSet<K> {
    fn shrink_if_sparse(&mut self) {
        if let Some(to) = sparse(self.len(), self.capacity()) {
            self.shrink_to(to);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tables_shrink_once_mostly_empty() {
        let mut m: HashMap<u32, ()> = (0..1000).map(|i| (i, ())).collect();
        m.retain(|i, _| *i < 100);
        m.shrink_if_sparse();
        assert!(
            m.capacity() >= 100 && m.capacity() < 500,
            "{}",
            m.capacity()
        );
        m.clear();
        m.shrink_if_sparse();
        assert_eq!(m.capacity(), 0);
        let mut small: HashSet<u32> = (0..40).collect();
        small.clear();
        small.shrink_if_sparse();
        assert!(small.capacity() >= 40, "small tables are left alone");
    }
}
