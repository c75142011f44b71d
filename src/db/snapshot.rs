//! Snapshots: a read-only view of the store as of one moment (`Db::snapshot`), for reads that
//! must agree with each other — two gets, a get and a scan, a long export.
//!
//! A snapshot is the published `State` it was taken from (memtables and table set, `version.rs`)
//! plus how many batches of its mutable memtable it sees. Nothing else is needed, because
//! nothing in a `State` changes in place: a memtable only gains batches with higher sequence
//! numbers (which the snapshot ignores, `Memtable::get_at` / `range_at`), and a flush or
//! compaction publishes a new `State` instead of changing this one. Holding the `Arc<State>`
//! keeps its memtables in memory and its tables open; a table a compaction replaced is
//! deleted from the directory but its open handle still reads, and its disk space comes back
//! when the last snapshot holding it is dropped. So no compaction can drop a version a live
//! snapshot sees, and readers without a snapshot pay nothing for them: a live read passes
//! the memtable's current count where a snapshot passes its own.
//!
//! Taking one is lock-free: load the state, read its memtable's visible batch count, and check
//! the memtable was not rotated meanwhile (else retry). Every write acknowledged before the
//! count was read is then in the snapshot: it is in that memtable (at or below the count) or
//! in what came before it (the older memtables and the tables of the loaded state).
//!
//! A snapshot holds the store's counters and block cache, not the store: it does not keep the
//! directory locked, and it reads on after `Db::close`. `snapshots` lists the live ones for
//! `DbStats` (a mutex touched only when a snapshot is taken or dropped).

use std::ops::{Bound, RangeBounds};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Instant;

use super::cursor::DbCursor;
use super::inner::{lock, Inner};
use super::iter::DbIter;
use super::read::ReadPath;
use super::snapshot_list::Snapshots;
use super::stats::Counters;
use super::version::State;
use crate::error::Result;
use crate::prefix::PrefixExtractor;
use crate::table::BlockCache;

/// A consistent, read-only view of the store as of `Db::snapshot`: every write acknowledged
/// before it was taken, whole batches, and nothing written after. `Send + Sync` and not tied
/// to a borrow of the `Db`: share it with `Arc`, keep it as long as needed — it holds the
/// memtables and table files of its moment (their memory and disk space) until dropped.
///
/// ```
/// use lsm_bloom::{Db, Options};
/// let dir = tempfile::tempdir().expect("temporary directory");
/// let db = Db::open(dir.path(), Options::default())?;
/// db.put("k", "old")?;
/// let snap = db.snapshot();
/// db.put("k", "new")?;
/// db.compact()?;
/// assert_eq!(snap.get("k")?, Some(b"old".to_vec()));
/// assert_eq!(db.get("k")?, Some(b"new".to_vec()));
/// # Ok::<(), lsm_bloom::Error>(())
/// ```
pub struct Snapshot {
    state: Arc<State>,
    /// Batches of `state.mem` this snapshot sees.
    mem_seen: u64,
    counters: Arc<Counters>,
    cache: Option<Arc<BlockCache>>,
    rule: Option<PrefixExtractor>,
    registry: Arc<Snapshots>,
    id: u64,
}

impl std::fmt::Debug for Snapshot {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Snapshot")
            .field("id", &self.id)
            .field("mem_seen", &self.mem_seen)
            .finish_non_exhaustive()
    }
}

impl Snapshot {
    /// Whether this snapshot was taken from `inner`'s store.
    pub(super) fn belongs_to(&self, inner: &Inner) -> bool {
        Arc::ptr_eq(&self.registry, &inner.snapshots)
    }

    pub(super) fn take(inner: &Inner) -> Snapshot {
        let (state, mem_seen) = loop {
            let state = inner.state.load_full();
            let seen = state.mem.visible();
            // Rotated meanwhile: a write acknowledged before `seen` was read may be in the
            // new memtable, which `state` lacks.
            if Arc::ptr_eq(&inner.read_state().mem, &state.mem) {
                break (state, seen);
            }
        };
        let registry = Arc::clone(&inner.snapshots);
        let id = registry.next_id.fetch_add(1, Ordering::Relaxed);
        lock(&registry.live).insert(id, Instant::now());
        Snapshot {
            state,
            mem_seen,
            counters: Arc::clone(&inner.counters),
            cache: inner.cache.clone(),
            rule: inner.opts.prefix_rule(),
            registry,
            id,
        }
    }

    /// The state it holds.
    pub(super) fn state(&self) -> &State {
        &self.state
    }

    /// Batches of `state().mem` it sees.
    pub(super) fn mem_seen(&self) -> u64 {
        self.mem_seen
    }

    fn read_path(&self) -> ReadPath<'_> {
        ReadPath {
            counters: &self.counters,
            cache: self.cache.as_deref(),
            rule: self.rule,
        }
    }

    /// The value of `key` as of the snapshot, or `None`.
    pub fn get(&self, key: impl AsRef<[u8]>) -> Result<Option<Vec<u8>>> {
        self.read_path()
            .get(&self.state, self.mem_seen, key.as_ref())
    }

    /// `f` of the value of `key` as of the snapshot, lent where it lies, or `None` (as
    /// `Db::get_with`).
    pub fn get_with<R>(
        &self,
        key: impl AsRef<[u8]>,
        f: impl FnOnce(&[u8]) -> R,
    ) -> Result<Option<R>> {
        let found = self
            .read_path()
            .get_lent(&self.state, self.mem_seen, key.as_ref())?;
        Ok(found.map(|v| f(v.bytes())))
    }

    /// The values of `keys` as of the snapshot, in the same order (as `Db::multi_get`).
    pub fn multi_get<K: AsRef<[u8]>>(&self, keys: &[K]) -> Vec<Result<Option<Vec<u8>>>> {
        self.read_path().multi_get(&self.state, self.mem_seen, keys)
    }

    /// Live keys and values in `range` as of the snapshot, in key order (as `Db::scan`).
    pub fn scan<K: AsRef<[u8]>, R: RangeBounds<K>>(&self, range: R) -> Result<DbIter> {
        let (start, end) = super::iter::own_bounds(&range);
        Ok(self.iter_over(start, end))
    }

    /// Every live key and value as of the snapshot, in key order (as `Db::iter`).
    pub fn iter(&self) -> DbIter {
        self.iter_over(Bound::Unbounded, Bound::Unbounded)
    }

    /// The iterator of `scan` and `iter`, as of the snapshot.
    fn iter_over(&self, start: Bound<Vec<u8>>, end: Bound<Vec<u8>>) -> DbIter {
        DbIter::new(
            &self.counters,
            self.rule,
            self.cache.clone(),
            &self.state,
            self.mem_seen,
            start,
            end,
        )
    }

    /// A cursor over every live entry as of the snapshot (as `Db::cursor`).
    pub fn cursor(&self) -> DbCursor {
        self.cursor_in::<&[u8], _>(..)
    }

    /// A cursor within `range` as of the snapshot (as `Db::cursor_in`).
    pub fn cursor_in<K: AsRef<[u8]>, R: RangeBounds<K>>(&self, range: R) -> DbCursor {
        DbCursor::new(
            &self.counters,
            self.rule,
            self.cache.clone(),
            &self.state,
            self.mem_seen,
            range,
        )
    }

    /// Whether any live key lay in `range` as of the snapshot (as `Db::contains_range`).
    pub fn contains_range<K: AsRef<[u8]>, R: RangeBounds<K>>(&self, range: R) -> Result<bool> {
        let (start, end) = (
            super::iter::bound_ref(range.start_bound()),
            super::iter::bound_ref(range.end_bound()),
        );
        let asks_prefix = super::iter::asks_prefix(self.rule, start, end);
        let (counters, seen) = (&self.counters, self.mem_seen);
        if super::exists::known_empty(counters, asks_prefix, &self.state, seen, start, end) {
            super::stats::bump(&counters.reader().scans, 1);
            return Ok(false);
        }
        self.scan(range)?.next().transpose().map(|e| e.is_some())
    }

    /// Live keys starting with `prefix` as of the snapshot (as `Db::scan_prefix`).
    pub fn scan_prefix(&self, prefix: impl AsRef<[u8]>) -> Result<DbIter> {
        self.scan(super::iter::prefix_range(prefix.as_ref()))
    }
}

impl Drop for Snapshot {
    fn drop(&mut self) {
        lock(&self.registry.live).remove(&self.id);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn snapshots_are_send_sync_and_owned() {
        fn owned<T: Send + Sync + 'static>() {}
        owned::<Snapshot>();
    }
}
