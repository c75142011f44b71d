//! The write-ahead log: one file per memtable (`NNNNNN.wal`), one record per write batch
//! (FORMAT.md §2). Writers append a record before touching the memtable; `open` replays the
//! logs the manifest does not cover (`recovery.rs` applies the rules across logs).
//!
//! Use: `WalWriter::create` → `(append)*` → `sync` when retired. An append that fails part way
//! cuts the file back to its last whole record, so the failed write can never be replayed and
//! nothing is ever appended behind a partial record; the caller then stops accepting writes.
//! `scan` decodes a log's bytes up to the first record that is incomplete or damaged and says
//! whether that damage is a torn tail (what a crash mid-append leaves) or lies in the middle.

use std::path::{Path, PathBuf};

use super::wal_range;
use crate::coding::{put_u32_len, Cursor};
use crate::error::{Error, Result};
use crate::expiry::NEVER;
use crate::fs::{CreateMode, FileSystem, WritableFile};
use crate::table::{DeletedRange, TAG_DELETE, TAG_PUT};

/// One operation of a batch: a put (with an expiry, or `NEVER`) or a deletion.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Op {
    pub(crate) key: Vec<u8>,
    /// `None`: a deletion.
    pub(crate) value: Option<Vec<u8>>,
    /// A put's stored expiry (`expiry::stored`), or `NEVER`; always `NEVER` for a deletion.
    pub(crate) expiry: u64,
}

impl From<(Vec<u8>, Option<Vec<u8>>)> for Op {
    /// A put that never expires, or a deletion.
    fn from((key, value): (Vec<u8>, Option<Vec<u8>>)) -> Op {
        Op {
            key,
            value,
            expiry: NEVER,
        }
    }
}

/// One keyspace's part of a batch, in order.
pub(crate) type Ops = Vec<Op>;

/// Operation tag that switches the keyspace of the operations after it (FORMAT.md §2).
const TAG_KEYSPACE: u8 = 3;
/// Operation tag of a put with an expiry (FORMAT.md §2): only in logs of a store whose
/// manifest is of version 3.
const TAG_PUT_EXPIRING: u8 = 4;

/// A batch: the default keyspace's operations and each other keyspace's, each part in the
/// order written (operations on different keyspaces never meet, so only the order within
/// a part matters), and the ranges it deletes.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct Batch {
    /// The default keyspace's (id 0) operations.
    pub(crate) default: Ops,
    /// Other keyspaces' operations by keyspace id, one part per id, ids in first-use order.
    pub(crate) spaces: Vec<(u32, Ops)>,
    /// Ranges deleted, by keyspace id (each id also has a part, maybe empty), grouped by
    /// keyspace in the parts' order. A range deletes the keys of older batches only: the
    /// batch's own operations on keys inside it come after it (`WriteBatch::delete_range`
    /// drops those before it), and the log holds a part's ranges ahead of its operations.
    pub(crate) ranges: Vec<(u32, DeletedRange)>,
}

impl Batch {
    /// Keyspace `id`'s part, added empty if missing.
    pub(crate) fn part(&mut self, id: u32) -> &mut Ops {
        if id == 0 {
            return &mut self.default;
        }
        let i = match self.spaces.iter().position(|(k, _)| *k == id) {
            Some(i) => i,
            None => {
                self.spaces.push((id, Vec::new()));
                self.spaces.len() - 1
            }
        };
        &mut self.spaces[i].1
    }

    /// Every part with its keyspace id, the default first.
    pub(crate) fn parts(&self) -> impl Iterator<Item = (u32, &Ops)> {
        std::iter::once((0, &self.default)).chain(self.spaces.iter().map(|(id, o)| (*id, o)))
    }

    /// Operations in all parts, range deletes included.
    pub(crate) fn len(&self) -> usize {
        self.parts().map(|(_, o)| o.len()).sum::<usize>() + self.ranges.len()
    }

    /// Adds a range deleted from keyspace `id`, kept with the keyspace's other ranges.
    pub(crate) fn push_range(&mut self, id: u32, range: DeletedRange) {
        self.part(id);
        let at = match self.ranges.iter().rposition(|(k, _)| *k == id) {
            Some(i) => i + 1,
            None => {
                // After the ranges of the parts before this one.
                let order: Vec<u32> = self.parts().map(|(k, _)| k).collect();
                let rank = |k: u32| order.iter().position(|&o| o == k).unwrap_or(usize::MAX);
                self.ranges.partition_point(|(k, _)| rank(*k) < rank(id))
            }
        };
        self.ranges.insert(at, (id, range));
    }

    /// Each part with its keyspace id and its deleted ranges, the default first.
    pub(crate) fn into_parts(self) -> impl Iterator<Item = (u32, Ops, Vec<DeletedRange>)> {
        let mut ranges = self.ranges;
        std::iter::once((0, self.default))
            .chain(self.spaces)
            .map(move |(id, ops)| {
                let (mine, rest) = std::mem::take(&mut ranges)
                    .into_iter()
                    .partition::<Vec<_>, _>(|(k, _)| *k == id);
                ranges = rest;
                (id, ops, mine.into_iter().map(|(_, r)| r).collect())
            })
    }

    /// Keyspace `id`'s deleted ranges.
    pub(crate) fn ranges_of(&self, id: u32) -> impl Iterator<Item = &DeletedRange> {
        self.ranges
            .iter()
            .filter(move |(k, _)| *k == id)
            .map(|(_, r)| r)
    }
}

/// Payload bytes of a keyspace switch (tag and id) ahead of a part of another keyspace.
pub(crate) const KEYSPACE_SWITCH_LEN: usize = 5;

/// Largest record payload accepted on replay (a larger length field is damage).
pub(crate) const MAX_RECORD: usize = 1 << 30;
/// Record header: payload length (u32) and CRC-32 (u32).
pub(crate) const HEADER_LEN: usize = 8;

/// Encoded payload bytes of one operation (FORMAT.md §2): tag, key length, key, and for a put
/// the value length and value, and the expiry of an expiring one.
pub(crate) fn op_encoded_len(key: usize, value: Option<usize>, expiry: u64) -> usize {
    let expiring = value.is_some() && expiry != NEVER;
    1 + 4 + key + value.map_or(0, |v| 4 + v) + if expiring { 8 } else { 0 }
}

/// Payload bytes of a batch before its operations (the operation count).
pub(crate) const BATCH_HEADER_LEN: usize = 4;

/// An open log being appended to.
pub(crate) struct WalWriter {
    file: Box<dyn WritableFile>,
    path: PathBuf,
    /// Bytes of whole records written (where a failed append is cut back to).
    len: u64,
    /// Where the last writeback hint ended (`WRITEBACK_STEP`).
    hinted: u64,
    /// The log's file number.
    id: u64,
}

/// Every this many bytes appended, the log asks the device to start writing them
/// (`WritableFile::start_writeback`; RocksDB's `wal_bytes_per_sync`), so that the sync a
/// memtable rotation makes of the retired log waits for at most this much more. Measured
/// under a sustained write load (`db_bench --workload latency`, `perf record -e
/// sched:sched_switch`): the writer spent up to 15 ms in that sync when the whole 8 MiB log
/// was still dirty.
const WRITEBACK_STEP: u64 = 1 << 20;

pub(crate) fn wal_path(dir: &Path, id: u64) -> PathBuf {
    dir.join(format!("{id:06}.wal"))
}

/// Encodes a batch as one record (header included): the default keyspace's operations, then
/// each other part behind a keyspace switch. Every length is checked, never truncated.
pub(crate) fn encode_batch(batch: &Batch) -> Result<Vec<u8>> {
    let size: usize = batch
        .parts()
        .flat_map(|(_, ops)| ops)
        .map(|op| op_encoded_len(op.key.len(), op.value.as_ref().map(Vec::len), op.expiry))
        .sum::<usize>()
        + batch.spaces.len() * KEYSPACE_SWITCH_LEN
        + batch
            .ranges
            .iter()
            .map(|(_, r)| wal_range::encoded_len(r))
            .sum::<usize>();
    if BATCH_HEADER_LEN + size > MAX_RECORD {
        return Err(Error::InvalidArgument(format!(
            "write batch encodes to {} bytes, more than a log record may hold ({MAX_RECORD})",
            BATCH_HEADER_LEN + size
        )));
    }
    let mut out = Vec::with_capacity(HEADER_LEN + BATCH_HEADER_LEN + size);
    out.extend_from_slice(&[0u8; HEADER_LEN]); // length and CRC, filled below
    put_u32_len(&mut out, batch.len(), "operation count of a write batch")?;
    for (id, ops) in batch.parts() {
        if id != 0 {
            out.push(TAG_KEYSPACE);
            out.extend_from_slice(&id.to_le_bytes());
        }
        for r in batch.ranges_of(id) {
            wal_range::encode(&mut out, r)?;
        }
        for op in ops {
            let expiring = op.value.is_some() && op.expiry != NEVER;
            out.push(match (&op.value, expiring) {
                (None, _) => TAG_DELETE,
                (Some(_), false) => TAG_PUT,
                (Some(_), true) => TAG_PUT_EXPIRING,
            });
            put_u32_len(&mut out, op.key.len(), "key")?;
            out.extend_from_slice(&op.key);
            if let Some(v) = &op.value {
                put_u32_len(&mut out, v.len(), "value")?;
                out.extend_from_slice(v);
            }
            if expiring {
                out.extend_from_slice(&op.expiry.to_le_bytes());
            }
        }
    }
    let len = crate::coding::u32_len(out.len() - HEADER_LEN, "log record")?;
    let crc = crc32fast::hash(&out[HEADER_LEN..]);
    out[..4].copy_from_slice(&len.to_le_bytes());
    out[4..8].copy_from_slice(&crc.to_le_bytes());
    Ok(out)
}

/// Decodes one record payload; `None` if it is not a well-formed batch. A keyspace switch
/// consumes 5 bytes and is not counted, so the work stays bounded by the payload's size.
pub(crate) fn decode_batch(payload: &[u8]) -> Option<Batch> {
    let mut c = Cursor::new(payload);
    let count = c.u32().ok()?;
    let mut batch = Batch::default();
    let mut keyspace = 0u32;
    let mut decoded = 0;
    while decoded < count {
        let tag = c.u8().ok()?;
        if tag == TAG_KEYSPACE {
            keyspace = c.u32().ok()?;
            continue;
        }
        if tag == wal_range::TAG_DELETE_RANGE {
            batch.push_range(keyspace, wal_range::decode(&mut c)?);
            decoded += 1;
            continue;
        }
        let key = c.len_prefixed().ok()?.to_vec();
        let (value, expiry) = match tag {
            TAG_PUT => (Some(c.len_prefixed().ok()?.to_vec()), NEVER),
            TAG_PUT_EXPIRING => {
                let value = c.len_prefixed().ok()?.to_vec();
                // Stored expiries lie in 1..NEVER (`expiry::stored`).
                let at = c.u64().ok().filter(|&at| at != 0 && at != NEVER)?;
                (Some(value), at)
            }
            TAG_DELETE => (None, NEVER),
            _ => return None,
        };
        batch.part(keyspace).push(Op { key, value, expiry });
        decoded += 1;
    }
    c.is_empty().then_some(batch)
}

/// The first record of a log that could not be used.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Damage {
    /// Byte offset of the record in the log.
    pub(crate) offset: usize,
    /// What is wrong with it.
    pub(crate) reason: String,
    /// The damage runs to the end of the file (the record is cut off, ends exactly at the end
    /// of the file, or only zero bytes follow) and no intact record follows it: what a crash
    /// during an append leaves.
    pub(crate) torn_tail: bool,
    /// Intact records found after the damage (`intact_after`); `None` when the search stopped
    /// at its work bound, and the damage then counts as lying in the middle.
    pub(crate) later_records: Option<u64>,
}

/// What `scan` found in a log.
pub(crate) struct Scan {
    /// Every batch before the first unusable record, in order.
    pub(crate) batches: Vec<Batch>,
    /// The first unusable record, if any.
    pub(crate) damage: Option<Damage>,
}

/// Decodes `data` (a whole log) up to its first incomplete or damaged record.
pub(crate) fn scan(data: &[u8]) -> Scan {
    let mut pos = 0usize;
    let mut batches = Vec::new();
    let damage = loop {
        let rest = &data[pos..];
        if rest.is_empty() {
            break None;
        }
        let zeros_to_end = rest.iter().all(|&b| b == 0);
        let bad = |reason: String, record_end: Option<usize>| {
            let later_records = if zeros_to_end {
                Some(0)
            } else {
                intact_after(data, pos)
            };
            let runs_to_end = zeros_to_end || record_end.is_none_or(|e| e >= rest.len());
            Damage {
                offset: pos,
                reason,
                torn_tail: runs_to_end && later_records == Some(0),
                later_records,
            }
        };
        if rest.len() < HEADER_LEN {
            break Some(bad(
                format!("{} bytes, too few for a record header", rest.len()),
                None,
            ));
        }
        let len = u32::from_le_bytes([rest[0], rest[1], rest[2], rest[3]]) as usize;
        let crc = u32::from_le_bytes([rest[4], rest[5], rest[6], rest[7]]);
        if len > MAX_RECORD {
            break Some(bad(
                format!("record length {len} over the {MAX_RECORD}-byte limit"),
                Some(usize::MAX),
            ));
        }
        let end = HEADER_LEN + len;
        if rest.len() < end {
            break Some(bad(
                format!(
                    "record of {len} bytes cut off after {}",
                    rest.len() - HEADER_LEN
                ),
                None,
            ));
        }
        let payload = &rest[HEADER_LEN..end];
        let actual = crc32fast::hash(payload);
        if actual != crc {
            break Some(bad(
                format!("record checksum mismatch: stored {crc:#010x}, computed {actual:#010x}"),
                Some(end),
            ));
        }
        let Some(ops) = decode_batch(payload) else {
            break Some(bad("record payload is not a valid batch".into(), Some(end)));
        };
        batches.push(ops);
        pos += end;
    };
    Scan { batches, damage }
}

/// How a byte offset of a log looked to `intact_after`.
enum Probe {
    /// An intact record (length in bounds, checksum right, a well-formed batch) ends here.
    Intact(usize),
    /// No intact record starts at the offset.
    Not,
    /// The search's work bound is spent.
    Spent,
}

/// Whether an intact record starts at `at` of `data`; checking one charges its payload
/// length to `budget`.
fn probe(data: &[u8], at: usize, budget: &mut usize) -> Probe {
    let Some(head) = data.get(at..).and_then(|r| r.first_chunk::<HEADER_LEN>()) else {
        return Probe::Not;
    };
    let len = u32::from_le_bytes([head[0], head[1], head[2], head[3]]) as usize;
    let crc = u32::from_le_bytes([head[4], head[5], head[6], head[7]]);
    let start = at + HEADER_LEN;
    let Some(payload) = data.get(start..start.saturating_add(len)) else {
        return Probe::Not;
    };
    if !(BATCH_HEADER_LEN..=MAX_RECORD).contains(&len) {
        return Probe::Not;
    }
    let Some(left) = budget.checked_sub(len) else {
        return Probe::Spent;
    };
    *budget = left;
    if crc32fast::hash(payload) != crc || decode_batch(payload).is_none() {
        return Probe::Not;
    }
    Probe::Intact(start + len)
}

/// The intact records after the damaged record at `damaged` (each chain of intact records
/// followed, and a byte-by-byte search for the next one after any damage): what replay
/// stopping at the damage drops beyond the damaged record. A record's length field is not
/// protected by its checksum, so a flipped bit there hides where the next record starts; the
/// search finds it again. Its checksum work is bounded by 4 × the log's size (plus 1 MiB):
/// past that it answers `None`, and the damage is not taken for a torn tail.
fn intact_after(data: &[u8], damaged: usize) -> Option<u64> {
    let mut budget = data.len().saturating_mul(4).saturating_add(1 << 20);
    let (mut at, mut found) = (damaged + 1, 0u64);
    while at + HEADER_LEN <= data.len() {
        match probe(data, at, &mut budget) {
            Probe::Intact(end) => {
                found += 1;
                at = end;
            }
            Probe::Not => at += 1,
            Probe::Spent => return None,
        }
    }
    Some(found)
}

impl WalWriter {
    /// Creates a new, empty log and makes its directory entry durable.
    pub(crate) fn create(fs: &dyn FileSystem, dir: &Path, id: u64) -> Result<Self> {
        let path = wal_path(dir, id);
        let file = fs
            .create(&path, CreateMode::New)
            .map_err(|e| Error::io(format!("creating {}", path.display()), e))?;
        crate::fs::sync_dir(fs, dir)?;
        Ok(WalWriter {
            file,
            path,
            len: 0,
            hinted: 0,
            id,
        })
    }

    /// Appends one encoded record (from `encode_batch`); with `sync`, waits for the disk. On
    /// failure the file is cut back to its last whole record (best effort) before returning
    /// the error, so the failed record is never replayed.
    pub(crate) fn append(&mut self, record: &[u8], sync: bool) -> Result<()> {
        let result = self
            .file
            .write_all(record)
            .map_err(|e| Error::io(format!("appending to {}", self.path.display()), e))
            .and_then(|()| if sync { self.sync() } else { Ok(()) });
        match result {
            Ok(()) => {
                self.len += record.len() as u64;
                if self.len - self.hinted >= WRITEBACK_STEP {
                    self.file
                        .start_writeback(self.hinted, self.len - self.hinted);
                    self.hinted = self.len;
                }
                Ok(())
            }
            Err(e) => {
                let _ = self.file.truncate(self.len);
                Err(e)
            }
        }
    }

    /// The log's file number.
    pub(crate) fn id(&self) -> u64 {
        self.id
    }

    /// Makes every appended record durable.
    pub(crate) fn sync(&mut self) -> Result<()> {
        self.file
            .sync()
            .map_err(|e| Error::io(format!("syncing {}", self.path.display()), e))
    }
}

#[cfg(test)]
#[path = "wal_tests.rs"]
mod tests;
