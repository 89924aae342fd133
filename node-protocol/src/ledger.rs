//! The output ledger: stdout and stderr of one process, in arrival order, in one append-only
//! sequence of frames split over segment files.
//!
//! Frame: `[0xA5][stream: 1=stdout 2=stderr][len: u32 LE][unix nanos: u64 LE][len bytes]`.
//! A position in the ledger is its byte offset counted from the first byte ever written; segment
//! files are named by the offset of their first frame and the count of output bytes (payloads,
//! not frame headers) before it, so dropping the oldest segment (retention cap) keeps every other
//! offset valid and the size of a gap is known in output bytes. A cursor is a [`Pos`] just past
//! an event, rendered opaquely and bound to its process (a tag of the exec id): a cursor of
//! another process is refused, not read at a coinciding offset. A reader whose cursor points into
//! dropped data gets an explicit `truncated` gap.
use std::fs::{self, File, OpenOptions};
use std::io::{self, BufReader, IoSlice, Read, Seek, SeekFrom, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

const MAGIC: u8 = 0xA5;
pub const HEADER: usize = 14;
/// Larger frames are split; bounds reader buffers and a bogus cursor's damage.
pub const MAX_FRAME: usize = 1 << 20;
const SEG_SUFFIX: &str = ".seg";
/// Stream byte of a "lost" frame: output that could not be stored (a write failed, e.g. the
/// filesystem was full). Its 8-byte payload (LE) is how many output bytes; readers see a gap.
const LOST: u8 = 3;
/// Output stops short of the last this many bytes of the state dir's filesystem (best effort, see
/// `room`): that room is for what no process can do without, whoever filled the rest — the files
/// of a start (which waits for 1 MiB, `registry::start`), records, the runtime's pid file. Without
/// it a tenant's output could take the bytes a start had just been promised, and the supervisor
/// died on them.
pub const OUTPUT_FLOOR: u64 = 2 << 20;

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

/// A position in the ledger: the byte offset (frames included) and the output bytes before it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Pos {
    pub offset: u64,
    pub data: u64,
}

/// Longest part of a refused cursor echoed back in an error.
const SHOWN: usize = 64;

#[derive(Debug, PartialEq, Eq, thiserror::Error)]
pub enum CursorError {
    #[error("since {0}: not a cursor")]
    Malformed(String),
    #[error("since {0}: cursor belongs to another process (a cursor is valid only for the process whose output it came from)")]
    Foreign(String),
}

/// The cursor as echoed in an error: quoted, at most [`SHOWN`] characters.
fn shown(c: &str) -> String {
    match c.char_indices().nth(SHOWN) {
        Some((i, _)) => format!("{:?}…", &c[..i]),
        None => format!("{c:?}"),
    }
}

/// 48 bits of FNV-1a of the exec id: tells one process's cursors from another's (a consistency
/// check, not a secret: reading is authorized elsewhere). Stable across versions, unlike std's.
fn owner_tag(exec_id: &str) -> String {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in exec_id.bytes() {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    format!("{:012x}", h >> 16)
}

/// `c<offset>.<data>.<owner>` (hex); opaque to clients.
pub fn encode_cursor(exec_id: &str, p: Pos) -> String {
    format!("c{:x}.{:x}.{}", p.offset, p.data, owner_tag(exec_id))
}

pub fn decode_cursor(exec_id: &str, c: &str) -> Result<Pos, CursorError> {
    let malformed = || CursorError::Malformed(shown(c));
    let mut parts = c.strip_prefix('c').ok_or_else(malformed)?.split('.');
    let (Some(offset), Some(data), Some(tag), None) =
        (parts.next(), parts.next(), parts.next(), parts.next())
    else {
        return Err(malformed());
    };
    let hex = |s: &str| {
        (!s.is_empty() && s.len() <= 16 && s.bytes().all(|b| b.is_ascii_hexdigit()))
            .then(|| u64::from_str_radix(s, 16).ok())
            .flatten()
    };
    let (Some(offset), Some(data)) = (hex(offset), hex(data)) else {
        return Err(malformed());
    };
    if tag.len() != 12 || hex(tag).is_none() || data > offset {
        return Err(malformed());
    }
    if tag != owner_tag(exec_id) {
        return Err(CursorError::Foreign(shown(c)));
    }
    Ok(Pos { offset, data })
}

/// `<offset>-<data before>.seg`; older agents wrote `<offset>.seg` (data before unknown).
fn seg_name(start: Pos) -> String {
    format!("{:020}-{:020}{SEG_SUFFIX}", start.offset, start.data)
}

/// One segment file: where it starts (`data` is `None` for a segment named by an older agent).
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct Segment {
    pub start: u64,
    pub data_before: Option<u64>,
    pub path: PathBuf,
}

impl Segment {
    /// Output bytes before this segment: from its name, or for an older agent's segment counted
    /// on from the previous segment's end (`prev_end`), or from its offset for the first. The
    /// one rule for the writer reopening a ledger and for an older agent's cursor.
    fn data_start(&self, prev_end: Option<u64>) -> u64 {
        self.data_before.unwrap_or(prev_end.unwrap_or(self.start))
    }
}

fn parse_seg_name(name: &str) -> Option<(u64, Option<u64>)> {
    let stem = name.strip_suffix(SEG_SUFFIX)?;
    match stem.split_once('-') {
        Some((o, d)) => Some((o.parse().ok()?, Some(d.parse().ok()?))),
        None => Some((stem.parse().ok()?, None)),
    }
}

/// Segments in `dir`, oldest first.
pub fn segments(dir: &Path) -> io::Result<Vec<Segment>> {
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
        if let Some((start, data_before)) = parse_seg_name(name) {
            out.push(Segment {
                start,
                data_before,
                path: entry.path(),
            });
        }
    }
    out.sort();
    Ok(out)
}

/// Output bytes in the complete frames of a segment (headers only are read), and how many of
/// them are lost frames' counts.
fn payload_bytes(path: &Path) -> io::Result<(u64, u64)> {
    let (data, lost, _) = payload_upto(path, u64::MAX)?;
    Ok((data, lost))
}

/// Like [`payload_bytes`], over the frames that start before `until` bytes into the segment;
/// also where the last frame counted ends.
fn payload_upto(path: &Path, until: u64) -> io::Result<(u64, u64, u64)> {
    let mut r = BufReader::new(File::open(path)?);
    let len = r.get_ref().metadata()?.len();
    let (mut at, mut data, mut lost) = (0u64, 0u64, 0u64);
    let mut hdr = [0u8; HEADER];
    while at < until && at + HEADER as u64 <= len {
        r.read_exact(&mut hdr)?;
        let n = u64::from(u32::from_le_bytes(hdr[2..6].try_into().unwrap()));
        if hdr[0] != MAGIC || at + HEADER as u64 + n > len {
            break;
        }
        if hdr[1] == LOST && n == 8 {
            let mut b = [0u8; 8];
            r.read_exact(&mut b)?;
            data += u64::from_le_bytes(b);
            lost += u64::from_le_bytes(b);
        } else {
            r.seek_relative(n as i64)?;
            data += n;
        }
        at += HEADER as u64 + n;
    }
    Ok((data, lost, at))
}

/// `c<offset>` (hex), the cursor of an agent from before cursors carried a data count and an
/// owner: its offset, if `c` is one.
pub fn decode_legacy_cursor(c: &str) -> Option<u64> {
    let hex = c.strip_prefix('c')?;
    (!hex.is_empty() && hex.len() <= 16 && hex.bytes().all(|b| b.is_ascii_hexdigit()))
        .then(|| u64::from_str_radix(hex, 16).ok())
        .flatten()
}

/// The older form of a cursor (`c<offset>`), which older agents read too.
pub fn encode_legacy_cursor(p: Pos) -> String {
    format!("c{:x}", p.offset)
}

/// Whether `dir`'s ledger is an older supervisor's (every segment named `<offset>.seg`): its
/// cursors are then given in the older form, so a follow resumes across a rollback to an older
/// agent as it does across an upgrade (such a ledger has no data count for a cursor to carry).
pub fn is_legacy(dir: &Path) -> bool {
    segments(dir).is_ok_and(|s| !s.is_empty() && s.iter().all(|g| g.data_before.is_none()))
}

/// Where an older agent's cursor (`decode_legacy_cursor`) is in `dir`'s ledger: its offset, with
/// the data count this agent gives that frame boundary (as [`LedgerWriter::open`] counts older
/// segments), so a follow that crosses the agent's upgrade goes on with no gap or repeat.
pub fn legacy_pos(dir: &Path, offset: u64) -> Result<Pos, ReadError> {
    let segs = segments(dir)?;
    let mut prev_end: Option<u64> = None;
    for (i, seg) in segs.iter().enumerate() {
        let start_data = seg.data_start(prev_end);
        if offset < seg.start {
            // Dropped since (or before the first segment): the read starts with a gap.
            let data = start_data.saturating_sub(seg.start - offset);
            return Ok(Pos { offset, data });
        }
        if segs.get(i + 1).is_none_or(|next| offset < next.start) {
            let (data, _, at) = payload_upto(&seg.path, offset - seg.start)?;
            if at != offset - seg.start {
                return Err(ReadError::BadCursor(offset));
            }
            return Ok(Pos {
                offset,
                data: start_data + data,
            });
        }
        prev_end = Some(start_data + payload_bytes(&seg.path)?.0);
    }
    match offset {
        0 => Ok(Pos::default()),
        _ => Err(ReadError::BadCursor(offset)),
    }
}

/// A retained segment as the writer tracks it.
#[derive(Clone, Copy, Debug)]
struct Retained {
    start: Pos,
    len: u64,
    data: u64,
    /// Of `data`, the bytes lost frames stand for (no output to read there).
    lost: u64,
}

/// Appends frames; owned by the supervisor (single writer).
pub struct LedgerWriter {
    dir: PathBuf,
    cap: u64,
    seg_limit: u64,
    file: File,
    /// Position of the next frame.
    end: Pos,
    retained: Vec<Retained>,
    /// Output not stored yet because a write failed; recorded as a lost frame when one succeeds.
    lost_pending: u64,
    /// All output bytes that could not be stored.
    lost_total: u64,
    /// Free bytes on the filesystem below which output is not stored (0: none kept).
    floor: u64,
}

impl LedgerWriter {
    /// Opens (or continues) the ledger in `dir` with a retention cap of `cap` bytes.
    pub fn open(dir: &Path, cap: u64) -> io::Result<Self> {
        fs::create_dir_all(dir)?;
        // Four segments per cap: dropping one loses at most a quarter of the retained output.
        let seg_limit = (cap / 4).max(4096);
        let mut retained: Vec<Retained> = Vec::new();
        for seg in segments(dir)? {
            let (data, lost) = payload_bytes(&seg.path)?;
            let data_before = seg.data_start(retained.last().map(|r| r.start.data + r.data));
            retained.push(Retained {
                start: Pos {
                    offset: seg.start,
                    data: data_before,
                },
                len: fs::metadata(&seg.path)?.len(),
                data,
                lost,
            });
        }
        let last = retained.last().copied();
        let file = match last.map(|r| {
            OpenOptions::new()
                .append(true)
                .open(dir.join(seg_name(r.start)))
        }) {
            Some(Ok(f)) => f,
            // No segment yet, or the last one has an older agent's name: go on in a new one.
            _ => {
                let p = last.map_or(Pos::default(), |r| Pos {
                    offset: r.start.offset + r.len,
                    data: r.start.data + r.data,
                });
                retained.push(Retained {
                    start: p,
                    len: 0,
                    data: 0,
                    lost: 0,
                });
                OpenOptions::new()
                    .create(true)
                    .append(true)
                    .mode(0o600)
                    .open(dir.join(seg_name(p)))?
            }
        };
        let last = retained.last().copied().expect("one segment at least");
        Ok(LedgerWriter {
            dir: dir.to_path_buf(),
            cap,
            seg_limit,
            file,
            end: Pos {
                offset: last.start.offset + last.len,
                data: last.start.data + last.data,
            },
            retained,
            lost_pending: 0,
            lost_total: 0,
            floor: 0,
        })
    }

    /// Output is not stored while the filesystem has under `floor` bytes free (see
    /// [`OUTPUT_FLOOR`]).
    pub fn with_floor(mut self, floor: u64) -> Self {
        self.floor = floor;
        self
    }

    pub fn end(&self) -> u64 {
        self.end.offset
    }

    /// The position just after everything appended so far (a cursor there resumes after it).
    pub fn end_pos(&self) -> Pos {
        self.end
    }

    /// Oldest retained offset.
    pub fn first(&self) -> u64 {
        self.retained[0].start.offset
    }

    /// Output bytes dropped by the retention cap (payloads only, no frame headers).
    pub fn dropped(&self) -> u64 {
        self.retained[0].start.data
    }

    /// Output bytes that could not be stored (write errors), counted as gaps.
    pub fn lost(&self) -> u64 {
        self.lost_total
    }

    /// Output bytes no reader can have (`output.droppedBytes`), each counted once: all before the
    /// oldest retained segment (a dropped lost frame's bytes among them), the lost frames still
    /// retained, and the loss not recorded yet. Read from the segments, so exact after a reopen.
    pub fn unreadable(&self) -> u64 {
        let retained_lost: u64 = self.retained.iter().map(|r| r.lost).sum();
        self.dropped() + retained_lost + self.lost_pending
    }

    /// Appends output. A failed write (e.g. ENOSPC) stores nothing of the frame (the segment is
    /// cut back), counts the bytes as lost, and returns the error; the writer stays usable, and
    /// the loss becomes an explicit gap in the ledger at the next successful write.
    pub fn append(&mut self, stream: Stream, ts_nanos: u64, data: &[u8]) -> io::Result<()> {
        // Below the floor: this process's oldest output goes first when that makes the room (as
        // on a full filesystem); else nothing is written, not even the record of the loss.
        let need = data.len() as u64 + HEADER as u64;
        if let Err(e) = self.room(need).or_else(|(e, short)| {
            match self.retained.len() >= 2 && self.retained[0].len >= short && self.free_oldest() {
                true => self.room(need).map_err(|(e, _)| e),
                false => Err(e),
            }
        }) {
            self.lose(data.len() as u64);
            return Err(e);
        }
        if let Err(e) = self.flush_lost(ts_nanos) {
            self.lose(data.len() as u64);
            return Err(e);
        }
        // Frames no larger than a segment keep at least cap - segment of the newest output.
        let step = MAX_FRAME.min(self.seg_limit as usize);
        for (i, chunk) in data.chunks(step).enumerate() {
            let mut wrote = self.frame(stream as u8, ts_nanos, chunk, chunk.len() as u64);
            // Full: this process's oldest output goes first, so the newest is kept.
            if wrote.is_err() && self.free_oldest() {
                wrote = self.frame(stream as u8, ts_nanos, chunk, chunk.len() as u64);
            }
            if let Err(e) = wrote {
                self.lose((data.len() - i * step) as u64);
                return Err(e);
            }
        }
        Ok(())
    }

    /// Writes the record of output not stored so far, if any (readers see it as a gap). Not held
    /// to the floor: the supervisor calls it once more at the end, so a loss is never silent.
    pub fn flush_lost(&mut self, ts_nanos: u64) -> io::Result<()> {
        if self.lost_pending > 0 {
            let n = self.lost_pending;
            self.frame(LOST, ts_nanos, &n.to_le_bytes(), n)?;
            self.lost_pending = 0;
        }
        Ok(())
    }

    /// `Err` (with the bytes missing) unless `need` bytes fit above the floor. Best effort:
    /// writers that check at the same moment may together go below it by what they write then
    /// (a read of at most 256 KiB each), which is why the floor is twice what a start needs.
    fn room(&self, need: u64) -> Result<(), (io::Error, u64)> {
        if self.floor == 0 {
            return Ok(());
        }
        let Ok(st) = nix::sys::statvfs::fstatvfs(&self.file) else {
            return Ok(()); // the write itself will tell
        };
        let free = st.blocks_available().saturating_mul(st.fragment_size());
        let want = self.floor.saturating_add(need);
        if free >= want {
            return Ok(());
        }
        Err((io::Error::new(
            io::ErrorKind::StorageFull,
            format!(
                "{free} bytes free on the state dir's filesystem: the last {} are kept for starts and records",
                self.floor
            ),
        ), want - free))
    }

    fn lose(&mut self, n: u64) {
        self.lost_pending += n;
        self.lost_total += n;
    }

    /// Writes one frame whose payload stands for `counts` output bytes; all or nothing.
    fn frame(&mut self, kind: u8, ts_nanos: u64, payload: &[u8], counts: u64) -> io::Result<()> {
        let seg_start = self.retained.last().map(|r| r.start.offset).unwrap_or(0);
        if self.end.offset - seg_start >= self.seg_limit {
            self.rotate()?;
        }
        let mut hdr = [0u8; HEADER];
        hdr[0] = MAGIC;
        hdr[1] = kind;
        hdr[2..6].copy_from_slice(&(payload.len() as u32).to_le_bytes());
        hdr[6..14].copy_from_slice(&ts_nanos.to_le_bytes());
        // One write per frame: a concurrent reader sees a whole frame or a short tail it waits on.
        let total = HEADER + payload.len();
        let before = self.retained.last().map(|r| r.len).unwrap_or(0);
        let wrote = (|| {
            let mut written = self
                .file
                .write_vectored(&[IoSlice::new(&hdr), IoSlice::new(payload)])?;
            if written < total {
                let mut frame = Vec::with_capacity(total);
                frame.extend_from_slice(&hdr);
                frame.extend_from_slice(payload);
                while written < total {
                    match self.file.write(&frame[written..])? {
                        0 => return Err(io::Error::from(io::ErrorKind::WriteZero)),
                        n => written += n,
                    }
                }
            }
            Ok(())
        })();
        if let Err(e) = wrote {
            // No half frame may stay: readers would take the next frame's bytes for its rest.
            let _ = self.file.set_len(before);
            return Err(e);
        }
        self.end.offset += total as u64;
        self.end.data += counts;
        if let Some(last) = self.retained.last_mut() {
            last.len += total as u64;
            last.data += counts;
            if kind == LOST {
                last.lost += counts;
            }
        }
        Ok(())
    }

    /// Takes note of old segments removed by someone else (the agent's node output budget), so
    /// that [`Self::dropped`] counts them.
    pub fn notice_removed(&mut self) {
        while self.retained.len() > 1 && !self.dir.join(seg_name(self.retained[0].start)).exists() {
            self.retained.remove(0);
        }
    }

    /// Drops the oldest retained segment (never the one being written) to free room on a full
    /// filesystem; readers get an explicit gap. False when there is nothing to drop.
    pub fn free_oldest(&mut self) -> bool {
        if self.retained.len() < 2 {
            return false;
        }
        let old = self.retained.remove(0);
        let _ = fs::remove_file(self.dir.join(seg_name(old.start)));
        true
    }

    fn rotate(&mut self) -> io::Result<()> {
        self.file = OpenOptions::new()
            .create(true)
            .append(true)
            .mode(0o600)
            .open(self.dir.join(seg_name(self.end)))?;
        self.retained.push(Retained {
            start: self.end,
            len: 0,
            data: 0,
            lost: 0,
        });
        let mut total: u64 = self.retained.iter().map(|s| s.len).sum();
        while total > self.cap && self.retained.len() > 1 {
            let old = self.retained.remove(0);
            // Named by this writer or, before an upgrade, by an older one; or already removed by
            // the agent's node output budget.
            if fs::remove_file(self.dir.join(seg_name(old.start))).is_err() {
                match fs::remove_file(
                    self.dir
                        .join(format!("{:020}{SEG_SUFFIX}", old.start.offset)),
                ) {
                    Err(e) if e.kind() != io::ErrorKind::NotFound => return Err(e),
                    _ => {}
                }
            }
            total -= old.len;
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
        cursor: Pos,
    },
    /// Output between `from` and `to` is not there: dropped by the retention cap, or never
    /// stored (a write failed); `to.data - from.data` output bytes.
    Gap { from: Pos, to: Pos },
}

#[derive(Debug, thiserror::Error)]
pub enum ReadError {
    #[error("cursor at offset {0} is not a position in this process's output")]
    BadCursor(u64),
    #[error("reading output ledger: {0}")]
    Io(#[from] io::Error),
}

/// Reads entries after `pos`, up to `max_bytes` of data (at least one frame when any is
/// available). Returns the entries and the position to continue from.
pub fn read_after(dir: &Path, pos: Pos, max_bytes: u64) -> Result<(Vec<Entry>, Pos), ReadError> {
    let segs = segments(dir)?;
    let Some(first) = segs.first() else {
        return Ok((Vec::new(), pos));
    };
    let mut r = Reader {
        out: Vec::new(),
        pos,
        budget: max_bytes,
        have_data: false,
    };
    if pos.offset < first.start {
        let to = Pos {
            offset: first.start,
            // An older agent's segment does not say: count the dropped frames' bytes.
            data: first
                .data_before
                .unwrap_or(pos.data + (first.start - pos.offset))
                .max(pos.data),
        };
        r.out.push(Entry::Gap { from: pos, to });
        r.pos = to;
    }
    let Some(mut idx) = segs.iter().rposition(|s| s.start <= r.pos.offset) else {
        return Ok((r.out, r.pos));
    };
    while r.segment(&segs[idx].path, segs[idx].start)? {
        // Move on only if a later segment exists and this one is complete up to its start.
        match segs.get(idx + 1) {
            Some(next) if next.start == r.pos.offset => idx += 1,
            _ => break,
        }
    }
    Ok((r.out, r.pos))
}

/// One read's progress through the segments.
struct Reader {
    out: Vec<Entry>,
    pos: Pos,
    budget: u64,
    have_data: bool,
}

impl Reader {
    /// Reads the frames of one segment from `pos`; `false`: the read is complete (budget spent,
    /// or the segment was dropped meanwhile: the gap is reported on the next read).
    fn segment(&mut self, path: &Path, start: u64) -> Result<bool, ReadError> {
        let file = match File::open(path) {
            Ok(f) => f,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(false),
            Err(e) => return Err(e.into()),
        };
        let len = file.metadata()?.len();
        if self.pos.offset > start + len {
            return Err(ReadError::BadCursor(self.pos.offset));
        }
        let mut r = BufReader::with_capacity(256 * 1024, file);
        r.seek(SeekFrom::Start(self.pos.offset - start))?;
        let mut at = self.pos.offset - start;
        while at + HEADER as u64 <= len {
            let mut hdr = [0u8; HEADER];
            r.read_exact(&mut hdr)?;
            let stream = Stream::from_byte(hdr[1]);
            let n = u32::from_le_bytes(hdr[2..6].try_into().unwrap()) as u64;
            let lost = hdr[1] == LOST && n == 8;
            if hdr[0] != MAGIC || (stream.is_none() && !lost) || n as usize > MAX_FRAME {
                return Err(ReadError::BadCursor(start + at));
            }
            if at + HEADER as u64 + n > len {
                break; // frame still being written
            }
            if !lost && self.have_data && n > self.budget {
                return Ok(false);
            }
            let mut body = vec![0u8; n as usize];
            r.read_exact(&mut body)?;
            at += HEADER as u64 + n;
            let from = self.pos;
            match stream {
                Some(stream) if !lost => {
                    self.pos = Pos {
                        offset: start + at,
                        data: from.data + n,
                    };
                    self.budget = self.budget.saturating_sub(n);
                    self.have_data = true;
                    self.out.push(Entry::Data {
                        stream,
                        ts_nanos: u64::from_le_bytes(hdr[6..14].try_into().unwrap()),
                        data: body,
                        cursor: self.pos,
                    });
                    if self.budget == 0 {
                        return Ok(false);
                    }
                }
                _ => {
                    // A record of bytes never stored: a gap of that many.
                    self.pos = Pos {
                        offset: start + at,
                        data: from.data + u64::from_le_bytes(body[..8].try_into().unwrap()),
                    };
                    self.out.push(Entry::Gap { from, to: self.pos });
                }
            }
        }
        Ok(true)
    }
}

/// Total bytes ever appended (end offset), from the segment list.
pub fn end_offset(dir: &Path) -> io::Result<u64> {
    Ok(match segments(dir)?.last() {
        Some(s) => s.start + fs::metadata(&s.path)?.len(),
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

    /// An older agent's cursor (`c<offset>`) on an older supervisor's ledger (segments named
    /// `<offset>.seg`, the first of them dropped) reads on from the same frame as the cursor
    /// this agent gives that boundary: no gap, no repeat; inside a frame it is refused.
    #[test]
    fn an_older_agents_cursor_resumes_where_it_was() {
        let d = tempfile::tempdir().unwrap();
        let mut w = LedgerWriter::open(d.path(), 16384).unwrap();
        for i in 0..30u8 {
            w.append(Stream::Stdout, u64::from(i), &[b'a' + i % 26; 700])
                .unwrap();
        }
        drop(w);
        assert!(!is_legacy(d.path()), "this supervisor's ledger");
        for seg in segments(d.path()).unwrap() {
            let old = d.path().join(format!("{:020}{SEG_SUFFIX}", seg.start));
            std::fs::rename(&seg.path, old).unwrap();
        }
        assert!(is_legacy(d.path()), "an older supervisor's ledger");
        assert!(
            segments(d.path()).unwrap()[0].start > 0,
            "the first was dropped"
        );
        let (all, end) = read_after(d.path(), Pos::default(), u64::MAX).unwrap();
        let cursors: Vec<Pos> = all
            .iter()
            .filter_map(|e| match e {
                Entry::Data { cursor, .. } => Some(*cursor),
                Entry::Gap { .. } => None,
            })
            .collect();
        for (i, c) in cursors.iter().enumerate() {
            // What this agent gives for such a ledger is what an older agent gave.
            assert_eq!(encode_legacy_cursor(*c), format!("c{:x}", c.offset));
            let old = decode_legacy_cursor(&encode_legacy_cursor(*c)).unwrap();
            let p = legacy_pos(d.path(), old).unwrap();
            assert_eq!(p, *c, "frame {i}");
            let (rest, rest_end) = read_after(d.path(), p, u64::MAX).unwrap();
            assert_eq!(
                data(&rest),
                data(&all[all.len() - (cursors.len() - 1 - i)..])
            );
            assert_eq!(rest_end, end);
        }
        let first = segments(d.path()).unwrap()[0].start;
        assert!(matches!(
            legacy_pos(d.path(), first + 3),
            Err(ReadError::BadCursor(_))
        ));
        assert_eq!(
            legacy_pos(d.path(), 0).unwrap().offset,
            0,
            "dropped: a gap first"
        );
        assert_eq!(decode_legacy_cursor("c1.2.000000000000"), None);
        assert_eq!(decode_legacy_cursor("c"), None);
        assert_eq!(decode_legacy_cursor("c1f"), Some(31));
    }

    #[test]
    fn below_the_floor_output_is_lost_then_a_gap() {
        let d = tempfile::tempdir().unwrap();
        let mut w = LedgerWriter::open(d.path(), 1 << 20).unwrap();
        w.append(Stream::Stdout, 1, b"kept").unwrap();
        // No filesystem has this much free: everything from here on is below the floor.
        let mut w = w.with_floor(u64::MAX);
        let e = w.append(Stream::Stdout, 2, b"lost!").unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::StorageFull);
        assert_eq!(w.lost(), 5);
        let (before, _) = read_after(d.path(), Pos::default(), u64::MAX).unwrap();
        assert_eq!(
            before.len(),
            1,
            "nothing written below the floor: {before:?}"
        );
        w.flush_lost(3).unwrap();
        let (all, end) = read_after(d.path(), Pos::default(), u64::MAX).unwrap();
        assert_eq!(data(&all), vec![(Stream::Stdout, b"kept".to_vec())]);
        assert!(
            matches!(all[1], Entry::Gap { from, to } if to.data - from.data == 5),
            "{all:?}"
        );
        assert_eq!(end.data, 9);
    }

    /// `output.droppedBytes` is exactly what no reader gets, also once the segment holding a
    /// lost frame is dropped (its bytes were once counted both as dropped and as lost).
    #[test]
    fn unreadable_counts_a_lost_range_once() {
        let d = tempfile::tempdir().unwrap();
        let missing = |w: &LedgerWriter| {
            let (all, end) = read_after(d.path(), Pos::default(), u64::MAX).unwrap();
            let read: usize = data(&all).iter().map(|(_, b)| b.len()).sum();
            assert_eq!(end.data, w.end_pos().data);
            end.data - read as u64
        };
        let w = LedgerWriter::open(d.path(), 16384).unwrap();
        let mut w = w.with_floor(u64::MAX);
        assert!(w.append(Stream::Stdout, 1, &[b'x'; 100]).is_err());
        assert_eq!(w.unreadable(), 100, "pending");
        let mut w = w.with_floor(0);
        w.flush_lost(2).unwrap();
        assert_eq!((w.unreadable(), missing(&w)), (100, 100), "recorded");
        // Enough output to rotate several times: the lost frame's segment is dropped.
        for i in 0..40 {
            w.append(Stream::Stdout, 3 + i, &[b'y'; 1000]).unwrap();
        }
        assert!(w.dropped() > 100, "the first segment was dropped");
        assert_eq!(w.unreadable(), missing(&w));
        assert_eq!(w.unreadable(), w.dropped());
        drop(w);
        let w = LedgerWriter::open(d.path(), 16384).unwrap();
        assert_eq!(w.unreadable(), missing(&w), "after a reopen");
        // A lost frame still retained after a reopen is counted from the segment.
        let d2 = tempfile::tempdir().unwrap();
        let mut w = LedgerWriter::open(d2.path(), 1 << 20)
            .unwrap()
            .with_floor(u64::MAX);
        let _ = w.append(Stream::Stderr, 1, b"gone");
        let mut w = w.with_floor(0);
        w.flush_lost(2).unwrap();
        drop(w);
        assert_eq!(
            LedgerWriter::open(d2.path(), 1 << 20).unwrap().unreadable(),
            4
        );
    }

    #[test]
    fn interleaving_and_cursors() {
        let d = tempfile::tempdir().unwrap();
        let mut w = LedgerWriter::open(d.path(), 1 << 20).unwrap();
        w.append(Stream::Stdout, 1, b"a").unwrap();
        w.append(Stream::Stderr, 2, b"bb").unwrap();
        w.append(Stream::Stdout, 3, b"ccc").unwrap();
        let (all, end) = read_after(d.path(), Pos::default(), u64::MAX).unwrap();
        assert_eq!(
            data(&all),
            vec![
                (Stream::Stdout, b"a".to_vec()),
                (Stream::Stderr, b"bb".to_vec()),
                (Stream::Stdout, b"ccc".to_vec())
            ]
        );
        assert_eq!(end.offset, w.end());
        let Entry::Data { cursor, .. } = all[0] else {
            panic!()
        };
        let (rest, _) = read_after(d.path(), cursor, u64::MAX).unwrap();
        assert_eq!(data(&rest).len(), 2, "resume after first event");
        let (none, p) = read_after(d.path(), end, u64::MAX).unwrap();
        assert!(none.is_empty());
        assert_eq!(p, end);
        assert_eq!(end.data, 6, "output bytes, not frame bytes");
    }

    #[test]
    fn max_bytes_limits_whole_frames() {
        let d = tempfile::tempdir().unwrap();
        let mut w = LedgerWriter::open(d.path(), 1 << 20).unwrap();
        for _ in 0..10 {
            w.append(Stream::Stdout, 0, b"0123456789").unwrap();
        }
        let (e, p) = read_after(d.path(), Pos::default(), 25).unwrap();
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
            .map(|s| fs::metadata(&s.path).unwrap().len())
            .sum();
        assert!(
            kept <= 16 * 1024 + 4096 + HEADER as u64 + 1000,
            "kept {kept}"
        );
        let (e, end) = read_after(d.path(), Pos::default(), u64::MAX).unwrap();
        let Entry::Gap { from, to } = e[0] else {
            panic!("{:?}", e[0])
        };
        assert_eq!((from, to.offset), (Pos::default(), w.first()));
        assert_eq!(end.offset, w.end());
        let got: u64 = data(&e).iter().map(|(_, d)| d.len() as u64).sum();
        // The gap counts output bytes only: gap + data = everything written, exactly.
        assert_eq!(to.data - from.data, w.dropped());
        assert_eq!(w.dropped() % 1000, 0, "whole frames of 1000 output bytes");
        assert_eq!(got + w.dropped(), 100_000, "gap + data = everything");
        // From a cursor taken after two frames, since dropped: the rest of the gap only.
        let after_two = Pos {
            offset: 2 * (HEADER as u64 + 1000),
            data: 2000,
        };
        let (again, _) = read_after(d.path(), after_two, u64::MAX).unwrap();
        let Entry::Gap { from, to } = again[0] else {
            panic!("{:?}", again[0])
        };
        assert_eq!(to.data - from.data, w.dropped() - 2000);
    }

    #[test]
    fn reopen_keeps_the_dropped_count() {
        let d = tempfile::tempdir().unwrap();
        let dropped = {
            let mut w = LedgerWriter::open(d.path(), 8192).unwrap();
            for _ in 0..40 {
                w.append(Stream::Stdout, 0, &[b'y'; 500]).unwrap();
            }
            w.dropped()
        };
        assert!(dropped > 0);
        let w = LedgerWriter::open(d.path(), 8192).unwrap();
        assert_eq!(w.dropped(), dropped);
    }

    #[test]
    fn bogus_cursor_is_rejected() {
        let d = tempfile::tempdir().unwrap();
        let mut w = LedgerWriter::open(d.path(), 1 << 20).unwrap();
        w.append(Stream::Stdout, 0, b"hello world").unwrap();
        let at = |offset| Pos { offset, data: 0 };
        assert!(matches!(
            read_after(d.path(), at(3), 100),
            Err(ReadError::BadCursor(3))
        ));
        assert!(matches!(
            read_after(d.path(), at(10_000), 100),
            Err(ReadError::BadCursor(_))
        ));
    }

    #[test]
    fn cursors_are_bound_to_their_process() {
        let p = Pos {
            offset: 12345,
            data: 999,
        };
        let c = encode_cursor("uid-a", p);
        assert_eq!(decode_cursor("uid-a", &c), Ok(p));
        // Same offsets, another process (or a re-created object of the same name: a new UID).
        let e = decode_cursor("uid-b", &c).unwrap_err();
        assert!(matches!(e, CursorError::Foreign(_)), "{e:?}");
        assert!(
            e.to_string().contains("cursor belongs to another process"),
            "{e}"
        );
        for bad in [
            "nope",
            "c10",
            "c1.2",
            "cz.1.000000000000",
            "c1.2.abc",
            "c1.2.3.4",
            "c1.5.000000000000",
        ] {
            assert!(
                matches!(decode_cursor("uid-a", bad), Err(CursorError::Malformed(_))),
                "{bad} accepted"
            );
        }
        // A long garbage cursor is echoed cut short.
        let long = "x".repeat(5000);
        let e = decode_cursor("uid-a", &long).unwrap_err().to_string();
        assert!(e.len() < 200 && e.contains('…'), "{e}");
        assert!(
            e.contains(&"x".repeat(64)) && !e.contains(&"x".repeat(65)),
            "{e}"
        );
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
        let (e, _) = read_after(d.path(), Pos::default(), u64::MAX).unwrap();
        assert_eq!(data(&e).len(), 2);
    }
}
