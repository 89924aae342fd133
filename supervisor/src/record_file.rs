//! Writing the record file: refreshes that may fail and be retried, and the final record, which
//! must be written even on a full filesystem (room set aside for it at the start).
use std::time::{Duration, Instant};

use super::Supervisor;
use sandbox_node_protocol::exec_id::ExecId;
use sandbox_node_protocol::layout::Layout;
use sandbox_node_protocol::record;

/// Bytes set aside at the start for the final record (it is a few KiB; written aside, then
/// renamed).
pub(super) const RESERVE_BYTES: usize = 32 << 10;

// A `processes` object is copied into every record: the final one must still fit the room set
// aside, with its 2 KiB output tail escaped and the rest of the record.
const _: () = assert!(RESERVE_BYTES >= sandbox_wire::wire_rules::MAX_OBJECT_BYTES + (16 << 10));

/// How long the final record is retried on a full filesystem before the supervisor gives up.
const FINAL_RECORD_PATIENCE: Duration = Duration::from_secs(600);

/// The room kept for the final record; given up only for it.
pub(super) fn reserve_path(layout: &Layout, id: &ExecId) -> std::path::PathBuf {
    layout.proc_dir(id).join("record.reserve")
}

impl Supervisor {
    /// Every state change reaches the agent through this file; `durable` only for the end.
    pub(super) fn save(&mut self, durable: bool) -> std::io::Result<()> {
        self.rec.revision += 1;
        self.rec.output.tail = self.tail_text();
        self.ledger.notice_removed();
        self.rec.output.dropped_bytes = self.ledger.unreadable();
        self.dirty_since = None;
        if durable {
            self.write_final()
        } else {
            self.write_refresh();
            Ok(())
        }
    }

    /// The record shows the last output as text, without a broken first character.
    fn tail_text(&self) -> String {
        let (a, b) = self.tail.as_slices();
        let mut v = a.to_vec();
        v.extend_from_slice(b);
        // Cut at a UTF-8 boundary where possible so the tail does not start mid-character.
        let start = v.iter().position(|&c| (c as i8) >= -64).unwrap_or(0).min(3);
        String::from_utf8_lossy(&v[start..]).into_owned()
    }

    /// A refresh that cannot be written (a full disk) is retried later; supervising goes on, and
    /// nothing the process does depends on it.
    fn write_refresh(&mut self) {
        let path = self.layout.record(&self.id);
        if let Err(e) = record::write_json(&path, &self.rec, false) {
            self.write_failed("record", &e);
            self.dirty_since = Some(Instant::now());
        }
    }

    /// The durable record (the end) must be written: on a full filesystem this process's own
    /// oldest output is given up for it (an explicit gap), and it is retried for a while.
    fn write_final(&mut self) -> std::io::Result<()> {
        let path = self.layout.record(&self.id);
        let until = Instant::now() + FINAL_RECORD_PATIENCE;
        loop {
            // Output lost below the floor becomes a gap readers see, before the end is told (again
            // after each round that made room).
            if let Err(e) = self
                .ledger
                .flush_lost(sandbox_node_protocol::clock::now_nanos())
            {
                self.write_failed("output", &e);
            }
            match record::write_json(&path, &self.rec, true) {
                Ok(()) => return Ok(()),
                Err(e) if Instant::now() < until => {
                    self.write_failed("final record", &e);
                    if !self.ledger.free_oldest()
                        && std::fs::remove_file(reserve_path(&self.layout, &self.id)).is_err()
                    {
                        std::thread::sleep(Duration::from_secs(1));
                    }
                    self.rec.output.dropped_bytes = self.ledger.unreadable();
                }
                Err(e) => return Err(e),
            }
        }
    }

    /// Logs a failed write once per kind (the log may be on the same full filesystem).
    pub(super) fn write_failed(&mut self, what: &'static str, e: &std::io::Error) {
        if !self.write_errors.contains(&what) {
            self.write_errors.push(what);
            say!("supervisor: writing {what}: {e} (supervision continues)");
        }
    }
}
