//! The writers of a shared terminal (`tty`), each with its own count of bytes taken: a writer
//! places its bytes by offsets of its own, so several attachers type into one terminal without
//! refusing each other, and each one's retries are still taken once (`stdin::place` on its
//! count). Only the most recent [`MAX_WRITERS`] are remembered: an older one that comes back is
//! taken from the offset it names, as a new writer is.
use std::collections::VecDeque;

/// Writers remembered per terminal.
pub(super) const MAX_WRITERS: usize = 16;

#[derive(Default)]
pub(super) struct Writers(VecDeque<(String, u64)>);

impl Writers {
    /// How many bytes of `writer` were taken; a writer not remembered starts where it says.
    pub(super) fn count(&self, writer: &str, offset: u64) -> u64 {
        self.0
            .iter()
            .find(|(w, _)| w == writer)
            .map_or(offset, |(_, n)| *n)
    }

    /// `writer` has had `count` bytes taken; it becomes the most recent.
    pub(super) fn set(&mut self, writer: &str, count: u64) {
        self.0.retain(|(w, _)| w != writer);
        if self.0.len() == MAX_WRITERS {
            self.0.pop_front();
        }
        self.0.push_back((writer.to_string(), count));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_writer_counts_its_own_bytes_and_the_oldest_is_forgotten() {
        let mut w = Writers::default();
        assert_eq!(w.count("a", 0), 0);
        w.set("a", 5);
        w.set("b", 2);
        assert_eq!((w.count("a", 0), w.count("b", 0)), (5, 2));
        for i in 0..MAX_WRITERS - 1 {
            w.set(&format!("w{i}"), 1);
        }
        // "a" was the least recent of 17: forgotten, taken from where it says.
        assert_eq!(w.count("a", 7), 7);
        assert_eq!(w.count("b", 0), 2);
        assert_eq!(w.0.len(), MAX_WRITERS);
        w.set("b", 3);
        assert_eq!(w.0.back().unwrap(), &("b".to_string(), 3));
    }
}
