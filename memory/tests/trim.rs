//! The trim gives a fragmented heap's free pages back to the system, from every thread's arena,
//! and does it fast enough to run every few seconds. Its own test binary: RSS is per process.
#![cfg(all(target_os = "linux", target_env = "gnu"))]
use std::time::Instant;

fn rss_kib() -> u64 {
    let s = std::fs::read_to_string("/proc/self/status").unwrap();
    let line = s.lines().find(|l| l.starts_with("VmRSS:")).unwrap();
    line.split_whitespace().nth(1).unwrap().parse().unwrap()
}

/// 16 MiB in 256-byte chunks, of which every 64th is kept: nearly all of it freed, but no free
/// run at the top of the heap, so glibc keeps it all on its own.
fn fragment() -> Vec<Box<[u8]>> {
    let chunks: Vec<Box<[u8]>> = (0..65_536).map(|i| vec![i as u8; 256].into()).collect();
    chunks.into_iter().step_by(64).collect()
}

#[test]
fn trimming_returns_freed_memory_of_every_arena() {
    let before = rss_kib();
    // Four threads at once, so that arenas other than the main heap's are used too.
    let kept: Vec<Vec<Box<[u8]>>> = std::thread::scope(|s| {
        let hs: Vec<_> = (0..4).map(|_| s.spawn(fragment)).collect();
        hs.into_iter().map(|h| h.join().unwrap()).collect()
    });
    let held = rss_kib();
    assert!(
        held > before + 40 * 1024,
        "the freed chunks should still be resident before trimming: {before} → {held} KiB"
    );
    let t = Instant::now();
    assert!(sandbox_memory::trim(), "nothing was given back");
    let took = t.elapsed();
    let after = rss_kib();
    assert!(
        after < held - 40 * 1024,
        "trimming gave back too little: {held} → {after} KiB"
    );
    // ~70 MiB of heap in 5 arenas: a call every few seconds must stay cheap.
    assert!(took.as_millis() < 50, "trimming took {took:?}");
    let t2 = Instant::now();
    sandbox_memory::trim();
    println!("second trim {:?}", t2.elapsed());
    println!(
        "RSS {before} → {held} → {after} KiB; trim took {took:?}; {} chunks kept",
        kept.iter().map(Vec::len).sum::<usize>()
    );
}
