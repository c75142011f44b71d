//! The Raft log's entry keys, and deleting the entries present in a run in bounded batches:
//! `LogStore::open`'s clean-up after a purge of a build before range deletes, which a crash
//! cut short (its purges and truncations are now one range delete each, `log_store.rs`).
//!
//! Deleting every index of a run in one batch (14 bytes of batch per index) passed the
//! store's `MAX_BATCH_SIZE` at ~19.2 million indexes (a node that installs a snapshot at
//! index 2×10^7 on an empty log purges "everything up to 2×10^7"). So only the entries
//! present are deleted, found by a scan, at most `DELETE_BATCH` per write batch: work is
//! bounded by what is stored, and each batch by a constant.

use std::ops::Bound;

use crate::db::{Db, WriteBatch, WriteOptions};

/// The key prefix of entries (FORMAT.md §7.1).
pub(super) const ENTRY: u8 = b'e';

/// Entries deleted per write batch: 65,536 deletions of 9-byte keys make a batch of about
/// 0.9 MiB, far under the store's `MAX_BATCH_SIZE`.
pub(super) const DELETE_BATCH: usize = 1 << 16;

/// The key of entry `index`: `e` and the index big-endian, so entries sort by index.
pub(super) fn entry_key(index: u64) -> [u8; 9] {
    let mut k = [ENTRY; 9];
    k[1..].copy_from_slice(&index.to_be_bytes());
    k
}

/// The index an entry key names, or `None` for any other key.
pub(super) fn index_of(key: &[u8]) -> Option<u64> {
    match key {
        [ENTRY, rest @ ..] => Some(u64::from_be_bytes(rest.try_into().ok()?)),
        _ => None,
    }
}

/// Up to `max` indexes of the entries present in `lo..=hi`, lowest first.
fn present(db: &Db, lo: u64, hi: u64, max: usize) -> crate::Result<Vec<u64>> {
    let range = (
        Bound::Included(entry_key(lo)),
        Bound::Included(entry_key(hi)),
    );
    let iter = db.scan::<[u8; 9], _>(range)?;
    let mut out = Vec::new();
    for kv in iter {
        if out.len() >= max {
            break;
        }
        let (k, _) = kv?;
        if let Some(i) = index_of(&k) {
            out.push(i);
        }
    }
    Ok(out)
}

/// Deletes every entry present in `lo..=hi`, `DELETE_BATCH` at a time, lowest first; `first`
/// goes into the first batch. The last batch is written with `sync`; the earlier ones are not
/// (the log's file is written in order, so the last sync makes them durable too). Returns how
/// many entries it deleted.
pub(super) fn delete_entries(
    db: &Db,
    lo: u64,
    hi: u64,
    first: WriteBatch,
    sync: bool,
) -> crate::Result<u64> {
    let mut batch = first;
    let mut lo = lo;
    let mut deleted = 0u64;
    loop {
        let found = if lo <= hi {
            present(db, lo, hi, DELETE_BATCH)?
        } else {
            Vec::new()
        };
        let mut done = found.len() < DELETE_BATCH;
        for &i in &found {
            batch.delete(entry_key(i));
        }
        deleted += found.len() as u64;
        if let Some(&i) = found.last() {
            match i.checked_add(1) {
                Some(next) => lo = next,
                None => done = true,
            }
        }
        let sync_now = sync && done;
        if batch.is_empty() && sync_now {
            // An empty batch is not written at all, so it would not sync the earlier ones.
            db.sync_wal()?;
        }
        db.write_opt(std::mem::take(&mut batch), WriteOptions { sync: sync_now })?;
        if done {
            return Ok(deleted);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn store(indexes: impl IntoIterator<Item = u64>) -> (tempfile::TempDir, Db) {
        let dir = tempfile::tempdir().unwrap();
        let db = Db::open(dir.path(), crate::db::Options::default()).unwrap();
        let mut b = WriteBatch::new();
        for i in indexes {
            b.put(entry_key(i), b"x");
        }
        db.write(b).unwrap();
        (dir, db)
    }

    fn left(db: &Db) -> Vec<u64> {
        present(db, 0, u64::MAX, usize::MAX).unwrap()
    }

    /// A range of 2×10^7 indexes over a few stored entries deletes just those, in one batch.
    #[test]
    fn a_wide_range_over_few_entries_deletes_only_what_is_there() {
        let (_d, db) = store([5, 6, 7, 30_000_000]);
        let n = delete_entries(&db, 0, 20_000_000, WriteBatch::new(), false).unwrap();
        assert_eq!(n, 3);
        assert_eq!(left(&db), vec![30_000_000]);
    }

    /// More entries than one batch holds are deleted over several batches.
    #[test]
    fn runs_longer_than_a_batch_are_deleted_whole() {
        let count = DELETE_BATCH as u64 * 2 + 17;
        let (_d, db) = store(0..count);
        let n = delete_entries(&db, 0, count - 2, WriteBatch::new(), true).unwrap();
        assert_eq!(n, count - 1);
        assert_eq!(left(&db), vec![count - 1]);
    }

    /// The batch passed as `first` is written even when nothing is deleted.
    #[test]
    fn the_first_batch_is_written_with_nothing_to_delete() {
        let (_d, db) = store([]);
        let mut first = WriteBatch::new();
        first.put(b"m/purged", b"p");
        delete_entries(&db, 0, u64::MAX, first, false).unwrap();
        assert_eq!(db.get(b"m/purged").unwrap().as_deref(), Some(&b"p"[..]));
    }
}
