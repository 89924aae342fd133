//! The client's input in the order it was sent: stdin bytes and terminal resizes share one
//! queue, so a resize reaches the terminal only after the keys typed before it, and keys typed
//! after it only after it. (A resize that overtook keys still queued behind a write let a Ctrl-C
//! typed just before it arrive while the program redrew for the new size; programs that reset
//! their terminal on SIGWINCH with a flush dropped it.)
use std::collections::VecDeque;

use sandbox_api::wire::TerminalSize;

/// Stdin bytes not yet written, and the resizes between them.
#[derive(Default)]
pub(super) struct Ordered {
    bytes: VecDeque<u8>,
    /// Each resize with the count of bytes received before it.
    resizes: VecDeque<(u64, TerminalSize)>,
    received: u64,
    sent: u64,
}

/// What goes to the process next.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum Next {
    Resize(TerminalSize),
    /// Up to `max` bytes, none of them after a resize still due.
    Bytes(Vec<u8>),
    Nothing,
}

impl Ordered {
    pub fn push_bytes(&mut self, b: &[u8]) {
        self.bytes.extend(b);
        self.received += b.len() as u64;
    }

    /// A resize right after another (no byte between) replaces it: only the last size counts.
    pub fn push_resize(&mut self, size: TerminalSize) {
        match self.resizes.back_mut() {
            Some((at, s)) if *at == self.received => *s = size,
            _ => self.resizes.push_back((self.received, size)),
        }
    }

    /// Bytes waiting (what bounds reading more from the client).
    pub fn waiting_bytes(&self) -> usize {
        self.bytes.len()
    }

    /// Nothing at all waits: the bytes and the resizes have gone.
    pub fn is_empty(&self) -> bool {
        self.bytes.is_empty() && self.resizes.is_empty()
    }

    pub fn next(&mut self, max: usize) -> Next {
        let until = match self.resizes.front() {
            Some(&(at, size)) if at <= self.sent => {
                self.resizes.pop_front();
                return Next::Resize(size);
            }
            Some(&(at, _)) => (at - self.sent).min(max as u64) as usize,
            None => max,
        };
        let n = until.min(self.bytes.len());
        if n == 0 {
            return Next::Nothing;
        }
        self.sent += n as u64;
        Next::Bytes(self.bytes.drain(..n).collect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn size(rows: u16) -> TerminalSize {
        TerminalSize { rows, cols: 80 }
    }

    fn drain(o: &mut Ordered, max: usize) -> Vec<Next> {
        let mut out = Vec::new();
        loop {
            match o.next(max) {
                Next::Nothing => return out,
                n => out.push(n),
            }
        }
    }

    #[test]
    fn keys_and_resizes_go_in_the_order_they_came() {
        use Next::{Bytes, Resize};
        let b = |s: &str| Bytes(s.as_bytes().to_vec());
        // (what arrives, in order; the largest write; what goes out, in order)
        type Step = (&'static str, u16);
        let cases: [(&[Step], usize, Vec<Next>); 5] = [
            // Keys, a resize, a Ctrl-C: the Ctrl-C after the resize, the keys before it.
            (
                &[("ls", 0), ("", 30), ("\x03", 0)],
                64,
                vec![b("ls"), Resize(size(30)), b("\x03")],
            ),
            // A Ctrl-C, then a resize: not overtaken.
            (
                &[("\x03", 0), ("", 30)],
                64,
                vec![b("\x03"), Resize(size(30))],
            ),
            // Resizes in a row: the last one only.
            (
                &[("", 20), ("", 30), ("", 40), ("x", 0)],
                64,
                vec![Resize(size(40)), b("x")],
            ),
            // A resize first, before any byte.
            (
                &[("", 25), ("abc", 0)],
                64,
                vec![Resize(size(25)), b("abc")],
            ),
            // Writes are cut at the largest size, and at a resize.
            (
                &[("abcde", 0), ("", 30), ("fg", 0)],
                2,
                vec![b("ab"), b("cd"), b("e"), Resize(size(30)), b("fg")],
            ),
        ];
        for (steps, max, want) in cases {
            let mut o = Ordered::default();
            for &(bytes, rows) in steps {
                match rows {
                    0 => o.push_bytes(bytes.as_bytes()),
                    r => o.push_resize(size(r)),
                }
            }
            assert_eq!(drain(&mut o, max), want, "{steps:?}");
            assert!(o.is_empty());
        }
    }

    /// What arrives while earlier bytes are with the agent keeps its place.
    #[test]
    fn input_arriving_between_writes_keeps_its_place() {
        let mut o = Ordered::default();
        o.push_bytes(b"a");
        assert_eq!(o.next(64), Next::Bytes(b"a".to_vec()));
        o.push_bytes(b"b");
        o.push_resize(size(30));
        o.push_bytes(b"c");
        assert_eq!(o.waiting_bytes(), 2);
        assert_eq!(o.next(64), Next::Bytes(b"b".to_vec()));
        assert_eq!(o.next(64), Next::Resize(size(30)));
        assert_eq!(o.next(64), Next::Bytes(b"c".to_vec()));
        assert_eq!(o.next(64), Next::Nothing);
    }
}
