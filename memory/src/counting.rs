//! A counting global allocator for heap tests: a test binary that declares
//! `#[global_allocator] static A: Counting = Counting;` counts every allocation of its process,
//! and [`live`] reads the bytes held. One test per binary, so nothing else allocates meanwhile.
use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicUsize, Ordering};

pub struct Counting;
static ALLOCATED: AtomicUsize = AtomicUsize::new(0);
static FREED: AtomicUsize = AtomicUsize::new(0);

// SAFETY: every call is forwarded unchanged to the system allocator; the counters are atomics.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, l: Layout) -> *mut u8 {
        ALLOCATED.fetch_add(l.size(), Ordering::Relaxed);
        System.alloc(l)
    }
    unsafe fn dealloc(&self, p: *mut u8, l: Layout) {
        FREED.fetch_add(l.size(), Ordering::Relaxed);
        System.dealloc(p, l)
    }
}

/// Bytes allocated and not freed so far (may fall below an earlier reading); 0 throughout when
/// the binary's allocator is not [`Counting`].
pub fn live() -> isize {
    ALLOCATED.load(Ordering::Relaxed) as isize - FREED.load(Ordering::Relaxed) as isize
}
