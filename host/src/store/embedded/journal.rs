//! The embedded store's journal: the log each batch of saves is appended to, and synced, before
//! any save in it is acknowledged.
//!
//! Why a log in front of redb: a durable redb commit writes every b-tree page the batch touched
//! (about three 4 KiB pages a save, at scattered offsets) and syncs them. Appending the batch's
//! changes to one file writes them once, in order, in a page or two, and syncs that. The changes
//! are folded into redb later, many batches at a time, by a checkpoint (`checkpoint.rs`), after
//! which the segment holding them is deleted.
//!
//! # The file format (version 1)
//!
//! A journal is a series of **segments**, files named `<store file>.journal.<n>` beside the store
//! file, `n` counting up. Each begins with [`MAGIC`] and the format version (`u32`, little
//! endian), then frames, one per change:
//!
//! ```text
//! frame   := len:u32 crc:u32 body[len]         crc is CRC-32 (IEEE) of body
//! body    := 1 save | 2 delete
//! save    := key:str version:u64 updated_at_ms:u64 workflow:str snapshot:str format:u64
//!            extras:str due:opt<u64> audit:opt<str>
//! delete  := key:str
//! str     := len:u32 bytes                      UTF-8
//! opt<T>  := 0 | 1 T
//! ```
//!
//! Integers are little endian. A save's tally (what its record is counted under, see
//! `state_counts.rs`) is not in the frame: it follows from the frame's text, and is read from it
//! when the frame is read back, so the format did not change for the counts. Replaying a segment applies its changes in order,
//! unconditionally: each was checked (compare-and-set) before it was written, so the final state
//! of every key it touches is the one its last frame gives, whatever redb held before. That makes
//! replay idempotent, so a crash between a checkpoint's commit and the segment's deletion is
//! harmless.
//!
//! The end of a segment is the end of the file, a frame of length 0, or a frame cut short or
//! failing its CRC: that is a batch whose write a crash interrupted, and which was therefore never
//! acknowledged. A frame whose CRC is right but whose body cannot be read is not a torn write but
//! a bug or a foreign file, and refuses the open.

use std::{
    fs::{File, OpenOptions},
    io,
    os::unix::fs::{FileExt, OpenOptionsExt},
    path::{Path, PathBuf},
};

use super::{
    files::FILE_MODE,
    overlay::{Change, Row},
};

/// The first bytes of every segment.
pub const MAGIC: &[u8; 8] = b"TSJOURNL";
/// The segment format this build writes and reads.
pub const FORMAT: u32 = 1;
/// The segment header: [`MAGIC`] then [`FORMAT`].
const HEADER_LEN: u64 = 12;

const TAG_SAVE: u8 = 1;
const TAG_DELETE: u8 = 2;

/// Appends `change` to `buf` as one frame.
pub fn encode(change: &Change, buf: &mut Vec<u8>) {
    let start = buf.len();
    // Length and CRC are filled in once the body is written.
    buf.extend_from_slice(&[0; 8]);
    match change {
        Change::Save { key, row, audit } => {
            buf.push(TAG_SAVE);
            put_str(buf, key);
            put_u64(buf, row.version);
            put_u64(buf, row.updated_at_ms);
            put_str(buf, &row.workflow);
            put_str(buf, &row.snapshot_json);
            put_u64(buf, row.format);
            put_str(buf, &row.extras_json);
            match row.due_at_ms {
                Some(due) => {
                    buf.push(1);
                    put_u64(buf, due);
                }
                None => buf.push(0),
            }
            match audit {
                Some(entry) => {
                    buf.push(1);
                    put_str(buf, entry);
                }
                None => buf.push(0),
            }
        }
        Change::Delete { key } => {
            buf.push(TAG_DELETE);
            put_str(buf, key);
        }
    }
    let body = &buf[start + 8..];
    let len = u32::try_from(body.len()).expect("a change is far smaller than 4 GiB");
    let crc = crc32fast::hash(body);
    buf[start..start + 4].copy_from_slice(&len.to_le_bytes());
    buf[start + 4..start + 8].copy_from_slice(&crc.to_le_bytes());
}

fn put_u64(buf: &mut Vec<u8>, value: u64) {
    buf.extend_from_slice(&value.to_le_bytes());
}

fn put_str(buf: &mut Vec<u8>, value: &str) {
    let len = u32::try_from(value.len()).expect("a field is far smaller than 4 GiB");
    buf.extend_from_slice(&len.to_le_bytes());
    buf.extend_from_slice(value.as_bytes());
}

/// How far ahead of the last frame a segment's file is extended with zeros.
const ZERO_AHEAD: u64 = 1 << 20;

/// The segment being appended to: only the writer thread holds it.
pub struct Segment {
    file: File,
    path: PathBuf,
    number: u64,
    /// Where the next batch goes: the end of what has been written and synced.
    end: u64,
    /// The file's length: zeros from `end` up to here (see [`Segment::zero_ahead`]).
    zeroed: u64,
    /// Set when a failed write could not be cut back off the file: appending after it could
    /// put acknowledged frames behind unacknowledged ones, so the segment takes no more.
    broken: Option<String>,
}

impl Segment {
    /// Creates segment `number` for `store` (empty but for its header), synced, with its
    /// directory entry synced too, so a batch acknowledged in it is found after a power loss.
    pub fn create(store: &Path, number: u64) -> io::Result<Self> {
        let path = segment_path(store, number);
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create_new(true)
            .mode(FILE_MODE)
            .open(&path)?;
        let mut header = Vec::with_capacity(HEADER_LEN as usize);
        header.extend_from_slice(MAGIC);
        header.extend_from_slice(&FORMAT.to_le_bytes());
        file.write_all_at(&header, 0)?;
        file.sync_all()?;
        sync_dir(&path)?;
        Ok(Self {
            file,
            path,
            number,
            end: HEADER_LEN,
            zeroed: HEADER_LEN,
            broken: None,
        })
    }

    /// The segment's number (its place in replay order).
    pub fn number(&self) -> u64 {
        self.number
    }

    #[cfg(test)]
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Whether a failed write could not be cut off: the segment takes no more frames.
    pub fn is_broken(&self) -> bool {
        self.broken.is_some()
    }

    /// Bytes written so far, header included.
    pub fn len(&self) -> u64 {
        self.end
    }

    /// Makes sure the file extends, in zeros, past the `len` bytes about to be appended.
    ///
    /// Why: a sync after a write that grows the file must also write the file's size (one more
    /// device write per batch, and on this kind of machine one more round trip to the disk); a
    /// sync after a write inside the file's length need not. So the file grows by
    /// [`ZERO_AHEAD`] at a time, and most batches land on zeros already there. The zeros also end
    /// the segment on replay (a frame of length 0).
    fn zero_ahead(&mut self, len: u64) -> io::Result<()> {
        if self.end + len <= self.zeroed {
            return Ok(());
        }
        let grow = (self.end + len - self.zeroed).next_multiple_of(ZERO_AHEAD);
        let zeros = vec![0; usize::try_from(grow).expect("a batch is far smaller than memory")];
        // Synced with the batch that follows: until then the zeros are only in the page cache,
        // which is all a replay after a crash could read of them anyway.
        self.file.write_all_at(&zeros, self.zeroed)?;
        self.zeroed += grow;
        Ok(())
    }

    /// Writes `frames` after what is there and syncs them. On failure nothing of `frames`
    /// counts: the file is cut back to where it ended, so a later replay never meets them.
    pub fn append(&mut self, frames: &[u8]) -> io::Result<()> {
        if let Some(reason) = &self.broken {
            return Err(io::Error::other(reason.clone()));
        }
        let written = self
            .zero_ahead(frames.len() as u64)
            .and_then(|()| self.file.write_all_at(frames, self.end))
            .and_then(|()| self.file.sync_data());
        match written {
            Ok(()) => {
                self.end += frames.len() as u64;
                Ok(())
            }
            Err(e) => {
                // Cut back to the last synced frame, and sync the cut: else a crash could leave
                // the failed frames inside the synced length for a replay to apply. The zeros
                // ahead are written again as needed.
                self.zeroed = self.end;
                let cut = self
                    .file
                    .set_len(self.end)
                    .and_then(|()| self.file.sync_all());
                if let Err(cut) = cut {
                    self.broken = Some(format!(
                        "{}: a failed write ({e}) could not be cut off ({cut}); restart to replay \
                         what was acknowledged",
                        self.path.display()
                    ));
                }
                Err(e)
            }
        }
    }
}

/// The path of segment `number` of the journal of `store`.
pub fn segment_path(store: &Path, number: u64) -> PathBuf {
    let mut name = store.file_name().unwrap_or_default().to_os_string();
    name.push(format!(".journal.{number}"));
    store.with_file_name(name)
}

/// The segments of `store`'s journal on disk, in replay order.
pub fn segments(store: &Path) -> io::Result<Vec<(u64, PathBuf)>> {
    let dir = match store.parent() {
        Some(dir) if !dir.as_os_str().is_empty() => dir,
        _ => Path::new("."),
    };
    let mut prefix = store.file_name().unwrap_or_default().to_os_string();
    prefix.push(".journal.");
    let prefix = prefix.to_string_lossy().into_owned();
    let mut found = Vec::new();
    for entry in std::fs::read_dir(dir)? {
        let entry = entry?;
        let name = entry.file_name();
        let Some(number) = name
            .to_str()
            .and_then(|name| name.strip_prefix(prefix.as_str()))
            .and_then(|n| n.parse::<u64>().ok())
        else {
            continue;
        };
        found.push((number, entry.path()));
    }
    found.sort();
    Ok(found)
}

/// What reading a segment gave.
#[derive(Debug)]
pub struct Replayed {
    pub changes: Vec<Change>,
    /// Bytes past the last whole frame (a write cut short by a crash), if any.
    pub torn_tail: Option<u64>,
}

/// Reads every whole change in the segment at `path`, in order.
pub fn read(path: &Path) -> Result<Replayed, String> {
    let bytes = std::fs::read(path).map_err(|e| format!("{}: {e}", path.display()))?;
    let header = bytes.get(..HEADER_LEN as usize);
    if header.is_none_or(|header| header.iter().all(|&b| b == 0)) {
        // Created, but the crash came before its header was synced (the file is shorter, or its
        // length reached the disk and its bytes did not): it holds nothing.
        return Ok(Replayed {
            changes: Vec::new(),
            torn_tail: None,
        });
    }
    if &bytes[..8] != MAGIC {
        return Err(format!(
            "{}: not a Turnstile journal segment",
            path.display()
        ));
    }
    let format = u32::from_le_bytes(bytes[8..12].try_into().expect("4 bytes"));
    if format != FORMAT {
        return Err(format!(
            "{}: journal format {format}, this build reads format {FORMAT}",
            path.display()
        ));
    }
    let mut changes = Vec::new();
    let mut at = HEADER_LEN as usize;
    while bytes.len() - at >= 8 {
        let len = u32::from_le_bytes(bytes[at..at + 4].try_into().expect("4 bytes")) as usize;
        let crc = u32::from_le_bytes(bytes[at + 4..at + 8].try_into().expect("4 bytes"));
        if len == 0 {
            break;
        }
        let Some(body) = bytes.get(at + 8..at + 8 + len) else {
            break;
        };
        if crc32fast::hash(body) != crc {
            break;
        }
        let change = decode(body)
            .ok_or_else(|| format!("{}: unreadable change at byte {at}", path.display()))?;
        changes.push(change);
        at += 8 + len;
    }
    let rest = (bytes.len() - at) as u64;
    Ok(Replayed {
        changes,
        torn_tail: (rest > 0 && bytes[at..].iter().any(|&b| b != 0)).then_some(rest),
    })
}

fn decode(body: &[u8]) -> Option<Change> {
    let mut r = Reader(body);
    let change = match r.u8()? {
        TAG_SAVE => {
            let key = r.str()?;
            let version = r.u64()?;
            let updated_at_ms = r.u64()?;
            let workflow = r.str()?;
            let snapshot_json = r.str()?;
            let format = r.u64()?;
            let extras_json = r.str()?;
            let due_at_ms = match r.u8()? {
                0 => None,
                1 => Some(r.u64()?),
                _ => return None,
            };
            let audit = match r.u8()? {
                0 => None,
                1 => Some(r.str()?),
                _ => return None,
            };
            let row = Row {
                version,
                updated_at_ms,
                workflow,
                snapshot_json,
                format,
                extras_json,
                due_at_ms,
                tally: None,
            };
            Change::Save {
                row: row.counted(&key),
                key,
                audit,
            }
        }
        TAG_DELETE => Change::Delete { key: r.str()? },
        _ => return None,
    };
    r.0.is_empty().then_some(change)
}

/// A cursor over a frame's body.
struct Reader<'a>(&'a [u8]);

impl Reader<'_> {
    fn take(&mut self, n: usize) -> Option<&[u8]> {
        if self.0.len() < n {
            return None;
        }
        let (head, rest) = self.0.split_at(n);
        self.0 = rest;
        Some(head)
    }

    fn u8(&mut self) -> Option<u8> {
        self.take(1).map(|b| b[0])
    }

    fn u64(&mut self) -> Option<u64> {
        self.take(8)
            .map(|b| u64::from_le_bytes(b.try_into().expect("8 bytes")))
    }

    fn str(&mut self) -> Option<String> {
        let len = u32::from_le_bytes(self.take(4)?.try_into().expect("4 bytes")) as usize;
        String::from_utf8(self.take(len)?.to_vec()).ok()
    }
}

/// Syncs the directory holding `path`, so that a file created (or renamed) there survives a
/// power loss.
fn sync_dir(path: &Path) -> io::Result<()> {
    let dir = match path.parent() {
        Some(dir) if !dir.as_os_str().is_empty() => dir,
        _ => Path::new("."),
    };
    File::open(dir)?.sync_all()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn save(key: &str, version: u64, audit: Option<&str>) -> Change {
        Change::Save {
            key: key.to_owned(),
            row: Row {
                version,
                updated_at_ms: 1_700_000_000_000 + version,
                workflow: "invoice".to_owned(),
                snapshot_json: format!(r#"{{"value":"s{version}"}}"#),
                format: 2,
                extras_json: "{}".to_owned(),
                due_at_ms: version.is_multiple_of(2).then_some(42 * version),
                tally: None,
            }
            .counted(key),
            audit: audit.map(str::to_owned),
        }
    }

    #[test]
    fn changes_come_back_in_order() {
        let dir = tempfile::tempdir().unwrap();
        let store = dir.path().join("state.redb");
        let mut segment = Segment::create(&store, 7).unwrap();
        let changes = vec![
            save("a", 1, None),
            save("a", 2, Some(r#"{"event":"SUBMIT"}"#)),
            Change::Delete { key: "b".into() },
            save("ü/ß", 1, Some("")),
        ];
        let mut frames = Vec::new();
        for change in &changes[..2] {
            encode(change, &mut frames);
        }
        segment.append(&frames).unwrap();
        frames.clear();
        for change in &changes[2..] {
            encode(change, &mut frames);
        }
        segment.append(&frames).unwrap();
        assert_eq!(
            segments(&store).unwrap(),
            vec![(7, segment.path().to_owned())]
        );
        let replayed = read(segment.path()).unwrap();
        assert_eq!(replayed.changes, changes);
        assert_eq!(replayed.torn_tail, None);
    }

    /// A batch cut short by a crash is not replayed, and neither is anything after it; what
    /// came before is.
    #[test]
    fn a_torn_batch_ends_the_segment() {
        let dir = tempfile::tempdir().unwrap();
        let store = dir.path().join("state.redb");
        let mut segment = Segment::create(&store, 0).unwrap();
        let mut frames = Vec::new();
        encode(&save("a", 1, None), &mut frames);
        segment.append(&frames).unwrap();
        let mut torn = Vec::new();
        encode(&save("a", 2, None), &mut torn);
        let first = torn.len();
        encode(&save("a", 3, None), &mut torn);
        for cut in [1, 8, 9, first - 1, first, first + 9, torn.len() - 1] {
            std::fs::write(
                segment.path(),
                [
                    &std::fs::read(segment.path()).unwrap()[..segment.len() as usize],
                    &torn[..cut],
                ]
                .concat(),
            )
            .unwrap();
            let replayed = read(segment.path()).unwrap();
            assert_eq!(replayed.changes.len(), if cut >= first { 2 } else { 1 });
        }
        // A flipped bit in the last frame: the CRC stops replay there.
        let mut bytes = std::fs::read(segment.path()).unwrap()[..segment.len() as usize].to_vec();
        bytes.extend_from_slice(&torn);
        let last = bytes.len() - 3;
        bytes[last] ^= 0x40;
        std::fs::write(segment.path(), &bytes).unwrap();
        let replayed = read(segment.path()).unwrap();
        assert_eq!(replayed.changes.len(), 2);
        assert!(replayed.torn_tail.is_some());
    }

    #[test]
    fn foreign_files_are_refused() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("state.redb.journal.0");
        std::fs::write(&path, b"not a journal at all").unwrap();
        let err = read(&path).unwrap_err();
        assert!(err.contains("not a Turnstile journal segment"), "{err}");
        let mut future = MAGIC.to_vec();
        future.extend_from_slice(&9u32.to_le_bytes());
        std::fs::write(&path, &future).unwrap();
        let err = read(&path).unwrap_err();
        assert!(err.contains("journal format 9"), "{err}");
        // A frame whose CRC is right but whose body is nonsense is a bug, not a torn write.
        let mut bad = MAGIC.to_vec();
        bad.extend_from_slice(&FORMAT.to_le_bytes());
        let body = [9u8, 1, 2, 3];
        bad.extend_from_slice(&(body.len() as u32).to_le_bytes());
        bad.extend_from_slice(&crc32fast::hash(&body).to_le_bytes());
        bad.extend_from_slice(&body);
        std::fs::write(&path, &bad).unwrap();
        let err = read(&path).unwrap_err();
        assert!(err.contains("unreadable change at byte 12"), "{err}");
    }

    #[test]
    fn segments_are_listed_by_number_and_nothing_else() {
        let dir = tempfile::tempdir().unwrap();
        let store = dir.path().join("s.redb");
        for n in [10, 2, 1] {
            Segment::create(&store, n).unwrap();
        }
        std::fs::write(dir.path().join("s.redb.journal.x"), b"").unwrap();
        std::fs::write(dir.path().join("other.redb.journal.3"), b"").unwrap();
        let numbers: Vec<u64> = segments(&store)
            .unwrap()
            .into_iter()
            .map(|(n, _)| n)
            .collect();
        assert_eq!(numbers, vec![1, 2, 10]);
        // A segment number is never reused while its file is there.
        assert!(Segment::create(&store, 2).is_err());
    }
}
