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

use super::counters::Counters;
use super::cursor::DbCursor;
use super::inner::{lock, Inner};
use super::iter::DbIter;
use super::keyspace::Keyspace;
use super::read::ReadPath;
use super::snapshot_list::Snapshots;
use super::state::{Published, State};
use crate::error::{Error, Result};
use crate::expiry::{Now, Reading};
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
    /// Every keyspace's state as published when it was taken.
    published: Arc<Published>,
    /// Batches of the current generation (every keyspace's `mem`) this snapshot sees.
    mem_seen: u64,
    /// The store's clock when it was taken: its reads expire what had expired then.
    reading: Reading,
    counters: Arc<Counters>,
    cache: Option<Arc<BlockCache>>,
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
        let (published, mem_seen) = loop {
            let published = inner.state.load_full();
            // One count for every keyspace's memtable of the generation: the snapshot sees
            // each batch in all of them or in none.
            let seen = published.default.mem.visible();
            // Rotated meanwhile: a write acknowledged before `seen` was read may be in the
            // new generation, which `published` lacks.
            if Arc::ptr_eq(&inner.read_state().default.mem, &published.default.mem) {
                break (published, seen);
            }
        };
        let registry = Arc::clone(&inner.snapshots);
        let id = registry.next_id.fetch_add(1, Ordering::Relaxed);
        lock(&registry.live).insert(id, Instant::now());
        Snapshot {
            published,
            mem_seen,
            // After the count (`Inner::reading`).
            reading: inner.reading(),
            counters: Arc::clone(&inner.counters),
            cache: inner.cache.clone(),
            registry,
            id,
        }
    }

    /// The default keyspace's state it holds.
    pub(super) fn state(&self) -> &State {
        &self.published.default
    }

    /// Every keyspace's state it holds.
    pub(super) fn published(&self) -> &Published {
        &self.published
    }

    /// Every keyspace's state it holds, shared (a transaction's commit keeps it).
    pub(super) fn published_arc(&self) -> Arc<Published> {
        Arc::clone(&self.published)
    }

    /// Batches of `state().mem` it sees.
    pub(super) fn mem_seen(&self) -> u64 {
        self.mem_seen
    }

    /// The clock reading it reads with.
    pub(super) fn reading(&self) -> Reading {
        self.reading
    }

    /// The counters and block cache it reads with.
    pub(super) fn shared(&self) -> (&Arc<Counters>, Option<Arc<BlockCache>>) {
        (&self.counters, self.cache.clone())
    }

    fn read_path(&self) -> ReadPath<'_> {
        ReadPath {
            counters: &self.counters,
            cache: self.cache.as_deref(),
            now: Now::fixed(self.reading.0),
            seen: self.reading.0,
            seen_at: None,
            store: None,
        }
    }

    /// The default keyspace as of the snapshot.
    pub(super) fn default_view(&self) -> SnapshotKeyspace<'_> {
        SnapshotKeyspace {
            snap: self,
            state: self.state(),
        }
    }

    /// `keyspace` as of the snapshot: its reads see the same moment as the snapshot's own
    /// (one batch across keyspaces is seen in all of them or in none).
    /// `Error::KeyspaceDropped` if the keyspace did not exist when the snapshot was taken
    /// (dropped before, or created after); `Error::InvalidArgument` for a keyspace of another
    /// store.
    ///
    /// ```
    /// # let dir = tempfile::tempdir()?;
    /// use lsm_bloom::{Db, Options, WriteBatch};
    /// let db = Db::open(dir.path(), Options::default())?;
    /// let (a, b) = (db.keyspace("a")?, db.keyspace("b")?);
    /// let snap = db.snapshot();
    /// let mut batch = WriteBatch::new();
    /// batch.put_in(&a, "k", "1").put_in(&b, "k", "1");
    /// db.write(batch)?;
    /// assert_eq!(snap.keyspace(&a)?.get("k")?, None);
    /// assert_eq!(db.snapshot().keyspace(&b)?.get("k")?, Some(b"1".to_vec()));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn keyspace(&self, keyspace: &Keyspace) -> Result<SnapshotKeyspace<'_>> {
        if !keyspace.same_registry(&self.registry) {
            return Err(Error::InvalidArgument(format!(
                "keyspace {:?} is of another store than the snapshot",
                keyspace.name()
            )));
        }
        let state = self
            .published
            .get(keyspace.id())
            .ok_or_else(|| Error::KeyspaceDropped {
                name: keyspace.name().to_string(),
            })?;
        Ok(SnapshotKeyspace { snap: self, state })
    }

    /// The value of `key` as of the snapshot, or `None`.
    pub fn get(&self, key: impl AsRef<[u8]>) -> Result<Option<Vec<u8>>> {
        self.default_view().get(key)
    }

    /// `f` of the value of `key` as of the snapshot, lent where it lies, or `None` (as
    /// `Db::get_with`).
    pub fn get_with<R>(
        &self,
        key: impl AsRef<[u8]>,
        f: impl FnOnce(&[u8]) -> R,
    ) -> Result<Option<R>> {
        self.default_view().get_with(key, f)
    }

    /// The values of `keys` as of the snapshot, in the same order (as `Db::multi_get`).
    pub fn multi_get<K: AsRef<[u8]>>(&self, keys: &[K]) -> Vec<Result<Option<Vec<u8>>>> {
        self.default_view().multi_get(keys)
    }

    /// Live keys and values in `range` as of the snapshot, in key order (as `Db::scan`).
    pub fn scan<K: AsRef<[u8]>, R: RangeBounds<K>>(&self, range: R) -> Result<DbIter> {
        self.default_view().scan(range)
    }

    /// Every live key and value as of the snapshot, in key order (as `Db::iter`).
    pub fn iter(&self) -> DbIter {
        self.default_view().iter()
    }

    /// A cursor over every live entry as of the snapshot (as `Db::cursor`).
    pub fn cursor(&self) -> DbCursor {
        self.default_view().cursor()
    }

    /// A cursor within `range` as of the snapshot (as `Db::cursor_in`).
    pub fn cursor_in<K: AsRef<[u8]>, R: RangeBounds<K>>(&self, range: R) -> DbCursor {
        self.default_view().cursor_in(range)
    }

    /// Whether any live key lay in `range` as of the snapshot (as `Db::contains_range`).
    pub fn contains_range<K: AsRef<[u8]>, R: RangeBounds<K>>(&self, range: R) -> Result<bool> {
        self.default_view().contains_range(range)
    }

    /// Live keys starting with `prefix` as of the snapshot (as `Db::scan_prefix`).
    pub fn scan_prefix(&self, prefix: impl AsRef<[u8]>) -> Result<DbIter> {
        self.default_view().scan_prefix(prefix)
    }
}

/// One keyspace of a `Snapshot` (`Snapshot::keyspace`), with the snapshot's read API.
pub struct SnapshotKeyspace<'a> {
    snap: &'a Snapshot,
    state: &'a State,
}

impl<'a> SnapshotKeyspace<'a> {
    /// Its snapshot and the keyspace's state in it.
    pub(super) fn parts(&self) -> (&'a Snapshot, &'a State) {
        (self.snap, self.state)
    }
}

impl SnapshotKeyspace<'_> {
    fn read_path(&self) -> ReadPath<'_> {
        self.snap.read_path()
    }

    /// `Snapshot::get` in this keyspace.
    pub fn get(&self, key: impl AsRef<[u8]>) -> Result<Option<Vec<u8>>> {
        self.read_path()
            .get(self.state, self.snap.mem_seen, key.as_ref())
    }

    /// `Snapshot::get_with` in this keyspace.
    pub fn get_with<R>(
        &self,
        key: impl AsRef<[u8]>,
        f: impl FnOnce(&[u8]) -> R,
    ) -> Result<Option<R>> {
        let found = self
            .read_path()
            .get_lent(self.state, self.snap.mem_seen, key.as_ref())?;
        Ok(found.map(|v| f(v.bytes())))
    }

    /// `Snapshot::multi_get` in this keyspace.
    pub fn multi_get<K: AsRef<[u8]>>(&self, keys: &[K]) -> Vec<Result<Option<Vec<u8>>>> {
        self.read_path()
            .multi_get(self.state, self.snap.mem_seen, keys)
    }

    /// `Snapshot::scan` in this keyspace.
    pub fn scan<K: AsRef<[u8]>, R: RangeBounds<K>>(&self, range: R) -> Result<DbIter> {
        let (start, end) = super::iter::own_bounds(&range);
        Ok(self.iter_over(start, end))
    }

    /// `Snapshot::iter` in this keyspace.
    pub fn iter(&self) -> DbIter {
        self.iter_over(Bound::Unbounded, Bound::Unbounded)
    }

    fn iter_over(&self, start: Bound<Vec<u8>>, end: Bound<Vec<u8>>) -> DbIter {
        let snap = self.snap;
        DbIter::new(
            &snap.counters,
            self.state.rule,
            snap.cache.clone(),
            self.state,
            snap.mem_seen,
            snap.reading,
            (start, end),
        )
    }

    /// `Snapshot::cursor` in this keyspace.
    pub fn cursor(&self) -> DbCursor {
        self.cursor_in::<&[u8], _>(..)
    }

    /// `Snapshot::cursor_in` in this keyspace.
    pub fn cursor_in<K: AsRef<[u8]>, R: RangeBounds<K>>(&self, range: R) -> DbCursor {
        let snap = self.snap;
        DbCursor::new(
            &snap.counters,
            self.state.rule,
            snap.cache.clone(),
            self.state,
            snap.mem_seen,
            snap.reading,
            range,
        )
    }

    /// `Snapshot::contains_range` in this keyspace.
    pub fn contains_range<K: AsRef<[u8]>, R: RangeBounds<K>>(&self, range: R) -> Result<bool> {
        let (start, end) = (
            super::iter::bound_ref(range.start_bound()),
            super::iter::bound_ref(range.end_bound()),
        );
        let asks_prefix = super::iter::asks_prefix(self.state.rule, start, end);
        let (counters, seen) = (&self.snap.counters, self.snap.mem_seen);
        if super::exists::known_empty(counters, asks_prefix, self.state, seen, start, end) {
            super::counters::bump(&counters.reader().scans, 1);
            return Ok(false);
        }
        self.scan(range)?.next().transpose().map(|e| e.is_some())
    }

    /// `Snapshot::scan_prefix` in this keyspace.
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
