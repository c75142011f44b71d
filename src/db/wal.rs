//! The write-ahead log: one file per memtable (`NNNNNN.wal`), one record per write batch
//! (FORMAT.md §2). Writers append a record before touching the memtable; `open` replays every
//! log newer than the manifest's `log_number`. Replay stops at the first record that is
//! incomplete or fails its checksum — the torn tail of a crash — and keeps everything before.

use std::fs::{File, OpenOptions};
use std::io::Write;
use std::path::{Path, PathBuf};

use crate::error::{Error, Result};
use crate::table::{TAG_DELETE, TAG_PUT};

/// A batch as a list of (key, value-or-tombstone).
pub(crate) type Ops = Vec<(Vec<u8>, Option<Vec<u8>>)>;

/// Largest record accepted on replay (a larger length field is treated as a torn tail).
pub(crate) const MAX_RECORD: usize = 1 << 30;

/// An open log being appended to.
pub(crate) struct WalWriter {
    file: File,
    path: PathBuf,
}

pub(crate) fn wal_path(dir: &Path, id: u64) -> PathBuf {
    dir.join(format!("{id:06}.wal"))
}

/// Encodes a batch payload.
pub(crate) fn encode_batch(ops: &[(Vec<u8>, Option<Vec<u8>>)]) -> Vec<u8> {
    let size: usize = ops
        .iter()
        .map(|(k, v)| 13 + k.len() + v.as_ref().map_or(0, Vec::len))
        .sum();
    let mut out = Vec::with_capacity(8 + 4 + size);
    out.extend_from_slice(&[0u8; 8]); // length and CRC, filled below
    out.extend_from_slice(&(ops.len() as u32).to_le_bytes());
    for (k, v) in ops {
        out.push(if v.is_some() { TAG_PUT } else { TAG_DELETE });
        out.extend_from_slice(&(k.len() as u32).to_le_bytes());
        out.extend_from_slice(k);
        if let Some(v) = v {
            out.extend_from_slice(&(v.len() as u32).to_le_bytes());
            out.extend_from_slice(v);
        }
    }
    let len = (out.len() - 8) as u32;
    let crc = crc32fast::hash(&out[8..]);
    out[..4].copy_from_slice(&len.to_le_bytes());
    out[4..8].copy_from_slice(&crc.to_le_bytes());
    out
}

fn decode_batch(payload: &[u8]) -> Option<Ops> {
    let mut c = crate::table::Cursor::new(payload);
    let count = c.u32().ok()?;
    let mut ops = Vec::with_capacity(count.min(1 << 16) as usize);
    for _ in 0..count {
        let tag = c.u8().ok()?;
        let key = c.len_prefixed().ok()?.to_vec();
        let value = match tag {
            TAG_PUT => Some(c.len_prefixed().ok()?.to_vec()),
            TAG_DELETE => None,
            _ => return None,
        };
        ops.push((key, value));
    }
    c.is_empty().then_some(ops)
}

/// What a replay recovered.
pub(crate) struct Replay {
    pub(crate) batches: Vec<Ops>,
    /// Bytes after the last good record (a torn or corrupt tail), dropped.
    pub(crate) dropped_bytes: u64,
}

/// Reads every intact record of the log at `path`, in order.
pub(crate) fn replay(path: &Path) -> Result<Replay> {
    let data =
        std::fs::read(path).map_err(|e| Error::io(format!("reading {}", path.display()), e))?;
    let mut pos = 0usize;
    let mut batches = Vec::new();
    while data.len() - pos >= 8 {
        let len =
            u32::from_le_bytes([data[pos], data[pos + 1], data[pos + 2], data[pos + 3]]) as usize;
        let crc = u32::from_le_bytes([data[pos + 4], data[pos + 5], data[pos + 6], data[pos + 7]]);
        if len > MAX_RECORD || data.len() - pos - 8 < len {
            break;
        }
        let payload = &data[pos + 8..pos + 8 + len];
        if crc32fast::hash(payload) != crc {
            break;
        }
        let Some(ops) = decode_batch(payload) else {
            break;
        };
        batches.push(ops);
        pos += 8 + len;
    }
    Ok(Replay {
        batches,
        dropped_bytes: (data.len() - pos) as u64,
    })
}

impl WalWriter {
    /// Creates a new, empty log.
    pub(crate) fn create(dir: &Path, id: u64) -> Result<Self> {
        let path = wal_path(dir, id);
        let file = OpenOptions::new()
            .create_new(true)
            .append(true)
            .open(&path)
            .map_err(|e| Error::io(format!("creating {}", path.display()), e))?;
        sync_dir(dir)?;
        Ok(WalWriter { file, path })
    }

    /// Appends one encoded record (from `encode_batch`); with `sync`, waits for the disk.
    pub(crate) fn append(&mut self, record: &[u8], sync: bool) -> Result<()> {
        self.file
            .write_all(record)
            .map_err(|e| Error::io(format!("appending to {}", self.path.display()), e))?;
        if sync {
            self.sync()?;
        }
        Ok(())
    }

    pub(crate) fn sync(&self) -> Result<()> {
        self.file
            .sync_data()
            .map_err(|e| Error::io(format!("syncing {}", self.path.display()), e))
    }
}

/// Makes a directory's entries (created, renamed, removed files) durable.
pub(crate) fn sync_dir(dir: &Path) -> Result<()> {
    File::open(dir)
        .and_then(|d| d.sync_all())
        .map_err(|e| Error::io(format!("syncing directory {}", dir.display()), e))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ops(n: u8) -> Ops {
        (0..n)
            .map(|i| {
                (
                    vec![i],
                    if i % 3 == 0 {
                        None
                    } else {
                        Some(vec![i; i as usize])
                    },
                )
            })
            .collect()
    }

    #[test]
    fn replay_recovers_every_record_and_drops_a_torn_tail() {
        let dir = tempfile::tempdir().unwrap();
        let mut w = WalWriter::create(dir.path(), 1).unwrap();
        for n in 1..=5 {
            w.append(&encode_batch(&ops(n)), false).unwrap();
        }
        let path = wal_path(dir.path(), 1);
        let full = std::fs::read(&path).unwrap();
        let r = replay(&path).unwrap();
        assert_eq!(r.batches.len(), 5);
        assert_eq!(r.batches[4], ops(5));
        assert_eq!(r.dropped_bytes, 0);
        // Every truncation keeps exactly the records that are whole.
        let ends: Vec<usize> = (1..=5)
            .map(|n| (1..=n).map(|i| encode_batch(&ops(i)).len()).sum())
            .collect();
        for len in 0..full.len() {
            std::fs::write(&path, &full[..len]).unwrap();
            let r = replay(&path).unwrap();
            assert_eq!(
                r.batches.len(),
                ends.iter().filter(|&&e| e <= len).count(),
                "len {len}"
            );
        }
        // A flipped byte in the last record drops only that record.
        let mut bad = full.clone();
        let last = bad.len() - 1;
        bad[last] ^= 1;
        std::fs::write(&path, &bad).unwrap();
        assert_eq!(replay(&path).unwrap().batches.len(), 4);
    }
}
