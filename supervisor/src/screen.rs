//! The terminal's screen (`tty`), kept as a terminal emulator fed with everything the process
//! prints, so that an attach starts from what the screen shows now instead of replaying the
//! whole history: a re-attach after 30 MB of output costs one screenful, and queries printed
//! long ago (`ESC[6n`, `ESC[c`) are never replayed for the attacher's terminal to answer into
//! the process's input. The emulator is the `vt100` crate: it keeps cells, attributes, the
//! cursor, the alternate screen and the input modes, and renders them as escape sequences that
//! redraw the same screen; it answers nothing and keeps no scrollback.
use std::num::NonZeroU16;

use sandbox_wire::wire::{TerminalSize, MAX_SCREEN_CELLS};

/// The emulator of one terminal, or nothing for a terminal too large to keep
/// ([`MAX_SCREEN_CELLS`]).
pub(super) struct Screen {
    parser: Option<vt100::Parser>,
    /// Whether anything was printed yet (an untouched screen draws nothing on attach).
    touched: bool,
}

fn dims(size: TerminalSize) -> Option<(NonZeroU16, NonZeroU16)> {
    if u32::from(size.rows) * u32::from(size.cols) > MAX_SCREEN_CELLS {
        return None;
    }
    Some((NonZeroU16::new(size.rows)?, NonZeroU16::new(size.cols)?))
}

impl Screen {
    pub(super) fn new(size: TerminalSize) -> Screen {
        Screen {
            parser: dims(size).map(|(r, c)| vt100::Parser::new(r, c, 0)),
            touched: false,
        }
    }

    /// No terminal: nothing kept, nothing fed.
    pub(super) fn none() -> Screen {
        Screen {
            parser: None,
            touched: false,
        }
    }

    pub(super) fn feed(&mut self, data: &[u8]) {
        if let Some(p) = self.parser.as_mut() {
            p.process(data);
            self.touched |= !data.is_empty();
        }
    }

    /// The terminal was resized. One that grows past the bound stops being kept (its screen
    /// would be wrong from then on); one that shrinks within it starts anew, blank (the process
    /// redraws on SIGWINCH, as it does for a real terminal).
    pub(super) fn resize(&mut self, size: TerminalSize) {
        match (dims(size), self.parser.as_mut()) {
            (Some((r, c)), Some(p)) => p.set_size(r, c),
            (Some((r, c)), None) => self.parser = Some(vt100::Parser::new(r, c, 0)),
            (None, _) => self.parser = None,
        }
    }

    pub(super) fn kept(&self) -> bool {
        self.parser.is_some()
    }

    /// Escape sequences that redraw the screen as it is (empty: not kept, or nothing printed).
    /// On the alternate screen (a full-screen program), the redraw enters it too, so the
    /// attacher's own screen comes back when the program leaves it.
    pub(super) fn redraw(&self) -> Vec<u8> {
        let Some(p) = self.parser.as_ref().filter(|_| self.touched) else {
            return Vec::new();
        };
        let s = p.screen();
        let mut out = Vec::new();
        if s.alternate_screen() {
            out.extend_from_slice(b"\x1b[?1049h");
        }
        out.extend_from_slice(s.state_formatted().as_bytes());
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn size(rows: u16, cols: u16) -> TerminalSize {
        TerminalSize { rows, cols }
    }

    /// What a terminal shows after `bytes`, as text rows.
    fn shown(bytes: &[u8], rows: u16, cols: u16) -> String {
        let mut p = vt100::Parser::new(
            NonZeroU16::new(rows).unwrap(),
            NonZeroU16::new(cols).unwrap(),
            0,
        );
        p.process(bytes);
        p.screen().contents()
    }

    #[test]
    fn the_redraw_shows_the_same_screen_without_the_history() {
        let mut s = Screen::new(size(5, 20));
        assert!(
            s.kept() && s.redraw().is_empty(),
            "untouched: nothing to draw"
        );
        let mut history = Vec::new();
        for i in 0..10_000 {
            history.extend_from_slice(format!("line {i}\r\n").as_bytes());
        }
        // Queries an attacher's terminal would answer if they were replayed.
        history.extend_from_slice(b"\x1b[c\x1b[6n\x1b[5n$ ");
        s.feed(&history);
        let redraw = s.redraw();
        assert!(
            redraw.len() < 1024,
            "one screenful, not the history: {}",
            redraw.len()
        );
        for q in [&b"\x1b[c"[..], b"\x1b[6n", b"\x1b[5n"] {
            assert!(!redraw.windows(q.len()).any(|w| w == q), "a query replayed");
        }
        assert_eq!(shown(&redraw, 5, 20), shown(&history, 5, 20));
        assert!(shown(&redraw, 5, 20).contains("line 9999\n$"));
    }

    #[test]
    fn a_full_screen_program_is_redrawn_on_the_alternate_screen() {
        let mut s = Screen::new(size(4, 10));
        s.feed(b"shell$ \x1b[?1049h\x1b[2J\x1b[Hvi here");
        let r = s.redraw();
        assert!(r.starts_with(b"\x1b[?1049h"));
        assert_eq!(shown(&r, 4, 10), shown(b"\x1b[2J\x1b[Hvi here", 4, 10));
        s.feed(b"\x1b[?1049l");
        assert!(!s.redraw().starts_with(b"\x1b[?1049h"));
    }

    #[test]
    fn only_terminals_within_the_bound_are_kept() {
        assert!(Screen::new(size(128, 256)).kept());
        assert!(!Screen::new(size(129, 256)).kept());
        assert!(!Screen::new(size(1000, 10000)).kept());
        let mut s = Screen::new(size(24, 80));
        s.feed(b"x");
        s.resize(size(1000, 1000));
        assert!(!s.kept() && s.redraw().is_empty());
        s.resize(size(30, 100));
        assert!(s.kept());
        s.feed(b"again");
        assert!(shown(&s.redraw(), 30, 100).starts_with("again"));
        assert!(!Screen::none().kept());
    }
}
