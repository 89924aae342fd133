//! The node's output budget: what all processes' ledgers together may hold in the state dir,
//! and how long a finished process's output is kept. Each process is capped by its own
//! retention (`--log-retention-bytes`); this bounds the node. Enforced by the agent every
//! sweep: output of processes finished longer than the retention period is freed; then, while
//! over the budget, the oldest finished processes' output goes first, then the oldest segments
//! of the largest running ledgers (never a ledger's current segment). Readers see an explicit
//! gap (`truncated`), and a freed ledger is marked so `logs` says so.
use std::fs;
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use sandbox_wire::wire::ProcessRecord;

use sandbox_node_protocol::exec_id::ExecId;
use sandbox_node_protocol::layout::Layout;
use sandbox_node_protocol::ledger;

/// Marker in a ledger directory whose output was freed; its text says why.
pub const FREED: &str = ".freed";

#[derive(Clone, Debug)]
pub struct Budget {
    /// Most bytes all ledgers together may hold.
    pub max_bytes: u64,
    /// A finished process's output is freed this long after its end.
    pub finished_ttl: Duration,
}

/// What one sweep did.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Sweep {
    /// Ledgers freed entirely (exec id, why).
    pub freed: Vec<(String, String)>,
    /// Segments removed from running ledgers.
    pub trimmed: usize,
    /// Bytes held after the sweep.
    pub held: u64,
}

struct Ledger {
    id: String,
    dir: PathBuf,
    /// Segments, oldest first, with their sizes.
    segs: Vec<(PathBuf, u64)>,
    finished: Option<SystemTime>,
    /// Its writer is a supervisor from before segments were named with their data count
    /// (`<offset>.seg`): that one fails, and ends, when a segment it rotates out is gone.
    old_writer: bool,
}

impl Ledger {
    fn bytes(&self) -> u64 {
        self.segs.iter().map(|(_, n)| n).sum()
    }
}

fn finished_at(r: &ProcessRecord) -> Option<SystemTime> {
    if !r.is_final() {
        return None;
    }
    let t = r.finished_at.as_deref()?;
    let secs = k8s_time(t)?;
    Some(SystemTime::UNIX_EPOCH + Duration::from_secs(secs))
}

/// Seconds since the epoch of an RFC 3339 UTC time as the supervisor writes it
/// (`2026-12-01T11:23:57.721535Z`).
fn k8s_time(t: &str) -> Option<u64> {
    let (date, time) = t.split_once('T')?;
    let mut d = date.split('-').map(|x| x.parse::<i64>().ok());
    let (y, m, day) = (d.next()??, d.next()??, d.next()??);
    let time = time.trim_end_matches('Z');
    let mut c = time.split(':');
    let (hh, mm) = (
        c.next()?.parse::<i64>().ok()?,
        c.next()?.parse::<i64>().ok()?,
    );
    let ss = c.next()?.split('.').next()?.parse::<i64>().ok()?;
    // Days from civil (Howard Hinnant's algorithm).
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (m + 9) % 12;
    let doy = (153 * mp + 2) / 5 + day - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    let days = era * 146097 + doe - 719468;
    u64::try_from(days * 86400 + hh * 3600 + mm * 60 + ss).ok()
}

fn free(l: &Ledger, why: &str) {
    for (p, _) in &l.segs {
        let _ = fs::remove_file(p);
    }
    let _ = sandbox_node_protocol::record::write_private(&l.dir.join(FREED), why.as_bytes());
}

/// Why a ledger's output was freed, if it was.
pub fn freed(dir: &Path) -> Option<String> {
    fs::read_to_string(dir.join(FREED)).ok()
}

impl Budget {
    /// One sweep over every process's ledger.
    pub fn sweep(&self, layout: &Layout, records: &[ProcessRecord], now: SystemTime) -> Sweep {
        let mut ledgers: Vec<Ledger> = records
            .iter()
            .filter_map(|r| {
                let id = ExecId::parse(&r.exec_id).ok()?;
                let dir = layout.ledger(&id);
                let found = ledger::segments(&dir).ok()?;
                let old_writer = found.last().is_some_and(|s| s.data_before.is_none());
                let segs = found
                    .into_iter()
                    .filter_map(|s| Some((s.path.clone(), fs::metadata(&s.path).ok()?.len())))
                    .collect::<Vec<_>>();
                Some(Ledger {
                    id: r.exec_id.clone(),
                    dir,
                    segs,
                    finished: finished_at(r),
                    old_writer,
                })
            })
            .filter(|l| !l.segs.is_empty())
            .collect();
        let mut out = Sweep::default();
        // Expired: finished longer ago than the retention period.
        ledgers.retain(|l| match l.finished {
            Some(t) if now.duration_since(t).unwrap_or_default() >= self.finished_ttl => {
                let why = format!(
                    "output freed {} s after the process ended (the node's retention period)",
                    self.finished_ttl.as_secs()
                );
                free(l, &why);
                out.freed.push((l.id.clone(), why));
                false
            }
            _ => true,
        });
        let mut held: u64 = ledgers.iter().map(Ledger::bytes).sum();
        // Over the budget: the oldest finished first.
        let mut finished: Vec<usize> = (0..ledgers.len())
            .filter(|&i| ledgers[i].finished.is_some())
            .collect();
        finished.sort_by_key(|&i| ledgers[i].finished);
        for i in finished {
            if held <= self.max_bytes {
                break;
            }
            let why =
                "output freed to keep the node's output budget (oldest finished first)".to_string();
            free(&ledgers[i], &why);
            held -= ledgers[i].bytes();
            out.freed.push((ledgers[i].id.clone(), why));
            ledgers[i].segs.clear();
        }
        // Still over: the largest running ledgers give up their oldest segments (not one an
        // older supervisor writes, which its own retention cap bounds: after an upgrade of the
        // agent it would die at its next rotation, its exit lost).
        while held > self.max_bytes {
            let Some(l) = ledgers
                .iter_mut()
                .filter(|l| l.finished.is_none() && !l.old_writer && l.segs.len() > 1)
                .max_by_key(|l| l.bytes())
            else {
                break;
            };
            let (p, n) = l.segs.remove(0);
            let _ = fs::remove_file(&p);
            held -= n;
            out.trimmed += 1;
        }
        out.held = held;
        out
    }
}

/// The budget when none is given: a quarter of the state dir's filesystem.
pub fn default_budget(dir: &Path) -> u64 {
    nix::sys::statvfs::statvfs(dir)
        .map(|s| s.blocks() * s.fragment_size() / 4)
        .unwrap_or(1 << 30)
        .max(64 << 20)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Over the budget, a running ledger gives up its oldest segments, unless an older
    /// supervisor writes it (segments named `<offset>.seg`), which would die at its next
    /// rotation if one were gone.
    #[test]
    fn running_ledgers_of_older_supervisors_are_not_trimmed() {
        let root = tempfile::tempdir().unwrap();
        let layout = Layout::new(root.path());
        let ids = [
            "3f0c8a9e-1b2c-4d5e-8f90-0123456789a1",
            "3f0c8a9e-1b2c-4d5e-8f90-0123456789a2",
        ];
        let names = [
            ["00000000000000000000.seg", "00000000000000001000.seg"],
            [
                "00000000000000000000-00000000000000000000.seg",
                "00000000000000001000-00000000000000000990.seg",
            ],
        ];
        let mut records = Vec::new();
        for (id, names) in ids.iter().zip(names) {
            let dir = layout.ledger(&ExecId::parse(id).unwrap());
            fs::create_dir_all(&dir).unwrap();
            for n in names {
                fs::write(dir.join(n), vec![0u8; 1000]).unwrap();
            }
            let mut r = ProcessRecord::starting(id, "p", "c", "ctr");
            r.phase = sandbox_wire::wire::Phase::Running;
            records.push(r);
        }
        let budget = Budget {
            max_bytes: 1000,
            finished_ttl: Duration::from_secs(3600),
        };
        let sweep = budget.sweep(&layout, &records, SystemTime::now());
        assert_eq!(sweep.trimmed, 1, "{sweep:?}");
        let left = |i: usize| {
            let dir = layout.ledger(&ExecId::parse(ids[i]).unwrap());
            ledger::segments(&dir).unwrap().len()
        };
        assert_eq!((left(0), left(1)), (2, 1), "old writer's ledger untouched");
    }

    #[test]
    fn rfc3339_seconds() {
        assert_eq!(k8s_time("1970-01-01T00:00:00Z"), Some(0));
        assert_eq!(k8s_time("2026-12-01T11:23:57.721535Z"), Some(1796124237));
        assert_eq!(k8s_time("2000-03-01T00:00:01Z"), Some(951868801));
        assert_eq!(k8s_time("garbage"), None);
    }
}
