//! The output ledger: stdout and stderr of one process, in arrival order, in one append-only
//! sequence of frames split over segment files.
//!
//! Frame: `[0xA5][stream: 1=stdout 2=stderr][len: u32 LE][unix nanos: u64 LE][len bytes]`.
//! A position in the ledger is its byte offset counted from the first byte ever written; segment
//! files are named by the offset of their first frame, so dropping the oldest segment (retention
//! cap) keeps every other offset valid. A cursor is the offset just past an event, rendered
//! opaquely. A reader whose cursor points into dropped data gets an explicit `truncated` gap.
use std::fs::{self, File, OpenOptions};
use std::io::{self, BufReader, IoSlice, Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};

const MAGIC: u8 = 0xA5;
pub const HEADER: usize = 14;
/// Larger frames are split; bounds reader buffers and a bogus cursor's damage.
pub const MAX_FRAME: usize = 1 << 20;
const SEG_SUFFIX: &str = ".seg";

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Stream {
    Stdout = 1,
    Stderr = 2,
}

impl Stream {
    fn from_byte(b: u8) -> Option<Stream> {
        match b {
            1 => Some(Stream::Stdout),
            2 => Some(Stream::Stderr),
            _ => None,
        }
    }
}

pub fn encode_cursor(offset: u64) -> String {
    format!("c{offset:x}")
}

pub fn decode_cursor(c: &str) -> Option<u64> {
    u64::from_str_radix(c.strip_prefix('c')?, 16).ok()
}

fn seg_name(start: u64) -> String {
    format!("{start:020}{SEG_SUFFIX}")
}

/// Segments in `dir`, oldest first, as (start offset, path).
pub fn segments(dir: &Path) -> io::Result<Vec<(u64, PathBuf)>> {
    let mut out = Vec::new();
    let entries = match fs::read_dir(dir) {
        Ok(e) => e,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(out),
        Err(e) => return Err(e),
    };
    for entry in entries {
        let entry = entry?;
        let name = entry.file_name();
        let Some(name) = name.to_str() else { continue };
        if let Some(start) = name.strip_suffix(SEG_SUFFIX).and_then(|s| s.parse().ok()) {
            out.push((start, entry.path()));
        }
    }
    out.sort();
    Ok(out)
}

/// Appends frames; owned by the supervisor (single writer).
pub struct LedgerWriter {
    dir: PathBuf,
    cap: u64,
    seg_limit: u64,
    file: File,
    seg_start: u64,
    /// Offset of the next frame.
    end: u64,
    /// Oldest retained offset.
    first: u64,
    retained: Vec<(u64, u64)>,
}

impl LedgerWriter {
    /// Opens (or continues) the ledger in `dir` with a retention cap of `cap` bytes.
    pub fn open(dir: &Path, cap: u64) -> io::Result<Self> {
        fs::create_dir_all(dir)?;
        // Four segments per cap: dropping one loses at most a quarter of the retained output.
        let seg_limit = (cap / 4).max(4096);
        let segs = segments(dir)?;
        let mut retained = Vec::new();
        for (start, path) in &segs {
            retained.push((*start, fs::metadata(path)?.len()));
        }
        let (seg_start, end) = match retained.last() {
            Some(&(s, len)) => (s, s + len),
            None => (0, 0),
        };
        if retained.is_empty() {
            retained.push((0, 0));
        }
        let file = OpenOptions::new()
            .create(true)
            .append(true)
            .open(dir.join(seg_name(seg_start)))?;
        let first = retained[0].0;
        Ok(LedgerWriter {
            dir: dir.to_path_buf(),
            cap,
            seg_limit,
            file,
            seg_start,
            end,
            first,
            retained,
        })
    }

    pub fn end(&self) -> u64 {
        self.end
    }

    pub fn first(&self) -> u64 {
        self.first
    }

    pub fn append(&mut self, stream: Stream, ts_nanos: u64, data: &[u8]) -> io::Result<()> {
        // Frames no larger than a segment keep at least cap - segment of the newest output.
        for chunk in data.chunks(MAX_FRAME.min(self.seg_limit as usize)) {
            if self.end - self.seg_start >= self.seg_limit {
                self.rotate()?;
            }
            let mut hdr = [0u8; HEADER];
            hdr[0] = MAGIC;
            hdr[1] = stream as u8;
            hdr[2..6].copy_from_slice(&(chunk.len() as u32).to_le_bytes());
            hdr[6..14].copy_from_slice(&ts_nanos.to_le_bytes());
            // One write per frame: a concurrent reader sees a whole frame or a short tail it waits on.
            let total = HEADER + chunk.len();
            let mut written = self
                .file
                .write_vectored(&[IoSlice::new(&hdr), IoSlice::new(chunk)])?;
            if written < total {
                let mut frame = Vec::with_capacity(total);
                frame.extend_from_slice(&hdr);
                frame.extend_from_slice(chunk);
                while written < total {
                    written += self.file.write(&frame[written..])?;
                }
            }
            self.end += total as u64;
            if let Some(last) = self.retained.last_mut() {
                last.1 += total as u64;
            }
        }
        Ok(())
    }

    fn rotate(&mut self) -> io::Result<()> {
        self.seg_start = self.end;
        self.file = OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.dir.join(seg_name(self.seg_start)))?;
        self.retained.push((self.seg_start, 0));
        let mut total: u64 = self.retained.iter().map(|s| s.1).sum();
        while total > self.cap && self.retained.len() > 1 {
            let (start, len) = self.retained.remove(0);
            fs::remove_file(self.dir.join(seg_name(start)))?;
            total -= len;
            self.first = self.retained[0].0;
        }
        Ok(())
    }

    pub fn sync(&self) -> io::Result<()> {
        self.file.sync_data()
    }
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Entry {
    Data {
        stream: Stream,
        ts_nanos: u64,
        data: Vec<u8>,
        cursor: u64,
    },
    /// Bytes `[from, to)` were dropped by the retention cap.
    Gap { from: u64, to: u64 },
}

#[derive(Debug, thiserror::Error)]
pub enum ReadError {
    #[error("cursor {0:?} is not a cursor of this process's output")]
    BadCursor(String),
    #[error("reading output ledger: {0}")]
    Io(#[from] io::Error),
}

/// Reads entries after `pos`, up to `max_bytes` of data (at least one frame when any is
/// available). Returns the entries and the position to continue from.
pub fn read_after(dir: &Path, pos: u64, max_bytes: u64) -> Result<(Vec<Entry>, u64), ReadError> {
    let segs = segments(dir)?;
    let mut out = Vec::new();
    let mut pos = pos;
    let Some(&(first, _)) = segs.first() else {
        return Ok((out, pos));
    };
    if pos < first {
        out.push(Entry::Gap {
            from: pos,
            to: first,
        });
        pos = first;
    }
    let mut budget = max_bytes;
    let mut have_data = false;
    let mut idx = match segs.iter().rposition(|(s, _)| *s <= pos) {
        Some(i) => i,
        None => return Ok((out, pos)),
    };
    while idx < segs.len() {
        let (start, ref path) = segs[idx];
        let file = match File::open(path) {
            Ok(f) => f,
            // Dropped between listing and opening: report the gap on the next read.
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok((out, pos)),
            Err(e) => return Err(e.into()),
        };
        let len = file.metadata()?.len();
        if pos > start + len {
            return Err(ReadError::BadCursor(encode_cursor(pos)));
        }
        let mut r = BufReader::with_capacity(256 * 1024, file);
        r.seek(SeekFrom::Start(pos - start))?;
        let mut at = pos - start;
        loop {
            if at + HEADER as u64 > len {
                break;
            }
            let mut hdr = [0u8; HEADER];
            r.read_exact(&mut hdr)?;
            let stream = Stream::from_byte(hdr[1]);
            let n = u32::from_le_bytes(hdr[2..6].try_into().unwrap()) as u64;
            if hdr[0] != MAGIC || stream.is_none() || n as usize > MAX_FRAME {
                return Err(ReadError::BadCursor(encode_cursor(start + at)));
            }
            if at + HEADER as u64 + n > len {
                break; // frame still being written
            }
            if have_data && n > budget {
                return Ok((out, start + at));
            }
            let mut data = vec![0u8; n as usize];
            r.read_exact(&mut data)?;
            at += HEADER as u64 + n;
            budget = budget.saturating_sub(n);
            have_data = true;
            out.push(Entry::Data {
                stream: stream.unwrap(),
                ts_nanos: u64::from_le_bytes(hdr[6..14].try_into().unwrap()),
                data,
                cursor: start + at,
            });
            if budget == 0 {
                return Ok((out, start + at));
            }
        }
        pos = start + at;
        // Move on only if a later segment exists and this one is complete up to its start.
        match segs.get(idx + 1) {
            Some(&(next, _)) if next == pos => idx += 1,
            _ => break,
        }
    }
    Ok((out, pos))
}

/// Total bytes ever appended (end offset), from the segment list.
pub fn end_offset(dir: &Path) -> io::Result<u64> {
    Ok(match segments(dir)?.last() {
        Some((start, path)) => start + fs::metadata(path)?.len(),
        None => 0,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn data(entries: &[Entry]) -> Vec<(Stream, Vec<u8>)> {
        entries
            .iter()
            .filter_map(|e| match e {
                Entry::Data { stream, data, .. } => Some((*stream, data.clone())),
                _ => None,
            })
            .collect()
    }

    #[test]
    fn interleaving_and_cursors() {
        let d = tempfile::tempdir().unwrap();
        let mut w = LedgerWriter::open(d.path(), 1 << 20).unwrap();
        w.append(Stream::Stdout, 1, b"a").unwrap();
        w.append(Stream::Stderr, 2, b"bb").unwrap();
        w.append(Stream::Stdout, 3, b"ccc").unwrap();
        let (all, end) = read_after(d.path(), 0, u64::MAX).unwrap();
        assert_eq!(
            data(&all),
            vec![
                (Stream::Stdout, b"a".to_vec()),
                (Stream::Stderr, b"bb".to_vec()),
                (Stream::Stdout, b"ccc".to_vec())
            ]
        );
        assert_eq!(end, w.end());
        let Entry::Data { cursor, .. } = all[0] else {
            panic!()
        };
        let (rest, _) = read_after(d.path(), cursor, u64::MAX).unwrap();
        assert_eq!(data(&rest).len(), 2, "resume after first event");
        let (none, p) = read_after(d.path(), end, u64::MAX).unwrap();
        assert!(none.is_empty());
        assert_eq!(p, end);
    }

    #[test]
    fn max_bytes_limits_whole_frames() {
        let d = tempfile::tempdir().unwrap();
        let mut w = LedgerWriter::open(d.path(), 1 << 20).unwrap();
        for _ in 0..10 {
            w.append(Stream::Stdout, 0, b"0123456789").unwrap();
        }
        let (e, p) = read_after(d.path(), 0, 25).unwrap();
        assert_eq!(data(&e).len(), 2);
        let (e2, _) = read_after(d.path(), p, 1).unwrap();
        assert_eq!(
            data(&e2).len(),
            1,
            "at least one frame even when larger than maxBytes"
        );
    }

    #[test]
    fn retention_drops_oldest_with_explicit_gap() {
        let d = tempfile::tempdir().unwrap();
        let mut w = LedgerWriter::open(d.path(), 16 * 1024).unwrap();
        let chunk = vec![b'x'; 1000];
        for _ in 0..100 {
            w.append(Stream::Stdout, 0, &chunk).unwrap();
        }
        assert!(w.first() > 0, "nothing dropped");
        let kept: u64 = segments(d.path())
            .unwrap()
            .iter()
            .map(|(_, p)| fs::metadata(p).unwrap().len())
            .sum();
        assert!(
            kept <= 16 * 1024 + 4096 + HEADER as u64 + 1000,
            "kept {kept}"
        );
        let (e, end) = read_after(d.path(), 0, u64::MAX).unwrap();
        assert_eq!(
            e[0],
            Entry::Gap {
                from: 0,
                to: w.first()
            }
        );
        assert_eq!(end, w.end());
        let got: u64 = data(&e).iter().map(|(_, d)| d.len() as u64).sum();
        assert_eq!(
            got + (w.first() / (HEADER as u64 + 1000)) * 1000,
            100_000,
            "gap + data = everything"
        );
    }

    #[test]
    fn bogus_cursor_is_rejected() {
        let d = tempfile::tempdir().unwrap();
        let mut w = LedgerWriter::open(d.path(), 1 << 20).unwrap();
        w.append(Stream::Stdout, 0, b"hello world").unwrap();
        assert!(matches!(
            read_after(d.path(), 3, 100),
            Err(ReadError::BadCursor(_))
        ));
        assert!(matches!(
            read_after(d.path(), 10_000, 100),
            Err(ReadError::BadCursor(_))
        ));
        assert_eq!(decode_cursor(&encode_cursor(12345)), Some(12345));
        assert_eq!(decode_cursor("nope"), None);
    }

    #[test]
    fn reopen_continues_offsets() {
        let d = tempfile::tempdir().unwrap();
        let end = {
            let mut w = LedgerWriter::open(d.path(), 1 << 20).unwrap();
            w.append(Stream::Stdout, 0, b"one").unwrap();
            w.end()
        };
        let mut w = LedgerWriter::open(d.path(), 1 << 20).unwrap();
        assert_eq!(w.end(), end);
        w.append(Stream::Stderr, 0, b"two").unwrap();
        let (e, _) = read_after(d.path(), 0, u64::MAX).unwrap();
        assert_eq!(data(&e).len(), 2);
    }
}
