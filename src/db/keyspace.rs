//! Keyspaces: named collections in one store (`Db::keyspace`), each with its own keys and
//! tables, all sharing the store's log, memtable generations and background threads, so that a
//! `WriteBatch` across keyspaces is one log record applied to all of them at once, and
//! `Db::snapshot` sees every keyspace at one moment.
//!
//! The default keyspace (id 0, `DEFAULT_KEYSPACE`) is what `Db`'s own methods read and write;
//! it always exists. Others are created by name on first use and keep their id for life; a
//! dropped keyspace's id is never given again, so a handle of a dropped keyspace can never
//! reach a newer one of the same name (`Error::KeyspaceDropped`). How keyspaces are laid out
//! in memory: `state::Published`; on disk: FORMAT.md §2 (the log's keyspace switch) and §4
//! (the manifest's keyspace list).
//!
//! `View` holds the read API once for both `Db` (the default keyspace) and `Keyspace`.

use std::ops::{Bound, RangeBounds};
use std::sync::Arc;

use super::cursor::DbCursor;
use super::inner::Inner;
use super::iter::{self, DbIter};
use super::keyspace_options::KeyspaceOptions;
use super::state::{Published, State};
use super::{counters, exists, WriteBatch};
use crate::error::{Error, Result};

/// The name of the default keyspace (id 0), the one `Db`'s own methods act on.
pub const DEFAULT_KEYSPACE: &str = "default";

/// A handle of one keyspace of a store (`Db::keyspace`): cheap to clone, `Send + Sync`, with
/// the read and write API of `Db` acting on this keyspace only. It keeps the store open (as
/// a `Snapshot` does not): drop it before expecting the directory lock to be released.
#[derive(Clone)]
pub struct Keyspace {
    inner: Arc<Inner>,
    id: u32,
    name: Arc<str>,
}

impl std::fmt::Debug for Keyspace {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Keyspace")
            .field("name", &self.name)
            .field("id", &self.id)
            .finish()
    }
}

impl Keyspace {
    pub(super) fn new(inner: Arc<Inner>, id: u32, name: &str) -> Keyspace {
        Keyspace {
            inner,
            id,
            name: name.into(),
        }
    }

    /// The keyspace's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The keyspace's id in the store (0 for the default keyspace): stable for its life,
    /// never reused after a drop.
    pub fn id(&self) -> u32 {
        self.id
    }

    /// Whether this is a keyspace of the store `inner`.
    pub(super) fn of(&self, inner: &Inner) -> bool {
        std::ptr::eq(Arc::as_ptr(&self.inner), inner)
    }

    /// Whether `snapshots` is the snapshot list of this keyspace's store (a `Snapshot` holds
    /// that, not the store).
    pub(super) fn same_registry(&self, snapshots: &Arc<super::snapshot_list::Snapshots>) -> bool {
        Arc::ptr_eq(&self.inner.snapshots, snapshots)
    }

    /// Whether `other` is a handle of a keyspace of the same store.
    pub(super) fn same_store(&self, other: &Keyspace) -> bool {
        Arc::ptr_eq(&self.inner, &other.inner)
    }

    /// The store it is a keyspace of.
    pub(super) fn inner(&self) -> &Arc<Inner> {
        &self.inner
    }

    pub(super) fn view(&self) -> View<'_> {
        View {
            inner: &self.inner,
            id: self.id,
            name: &self.name,
        }
    }

    /// This keyspace's live tables per level (as `Db::levels`); `Error::KeyspaceDropped` once
    /// it is dropped.
    pub fn levels(&self) -> Result<Vec<Vec<Arc<crate::table::Table>>>> {
        let published = self.inner.read_state();
        Ok(self.view().state(&published)?.version.levels().to_vec())
    }

    /// Every setting this keyspace's new tables and memtable go by: its own
    /// (`Db::create_keyspace`), and the store's where it has none; `Error::KeyspaceDropped`
    /// once it is dropped.
    pub fn options(&self) -> Result<KeyspaceOptions> {
        let published = self.inner.read_state();
        let state = self.view().state(&published)?;
        Ok(KeyspaceOptions::resolved(&state.opts))
    }

    /// An upper bound on the keys this keyspace holds, found without reading a table: its
    /// tables' entries (tombstones and overwritten versions counted, until compaction drops
    /// them) plus the distinct keys of its memtables. 0 for a keyspace nothing was written to.
    /// RocksDB's `rocksdb.estimate-num-keys` answers the same question the same way.
    /// `Error::KeyspaceDropped` once it is dropped.
    pub fn approximate_len(&self) -> Result<u64> {
        self.count_unread(|m| m.key_count(), super::version::Version::entries)
    }

    /// An upper bound of the keys that carry an expiry, taken without reading a table: the
    /// puts with an expiry its tables' properties count and its memtables hold, whether
    /// overwritten or expired since (kv_server's INFO `expires=`).
    pub fn approximate_expiring_len(&self) -> Result<u64> {
        self.count_unread(
            |m| m.expiring_count(),
            super::version::Version::expiring_entries,
        )
    }

    /// `in_tables` of its version plus `in_memtable` of each of its memtables.
    fn count_unread(
        &self,
        in_memtable: impl Fn(&super::memtable::Memtable) -> usize,
        in_tables: impl Fn(&super::version::Version) -> u64,
    ) -> Result<u64> {
        let published = self.inner.read_state();
        let state = self.view().state(&published)?;
        let memtables = std::iter::once(&state.mem)
            .chain(state.imm.iter())
            .map(|m| in_memtable(m) as u64)
            .sum::<u64>();
        Ok(in_tables(&state.version) + memtables)
    }

    /// Sets `key` to `value` in this keyspace.
    pub fn put(&self, key: impl AsRef<[u8]>, value: impl AsRef<[u8]>) -> Result<()> {
        let mut b = WriteBatch::new();
        b.put_in(self, key.as_ref(), value.as_ref());
        self.inner.write_batch(b, false)
    }

    /// Deletes `key` from this keyspace (a no-op if absent).
    pub fn delete(&self, key: impl AsRef<[u8]>) -> Result<()> {
        let mut b = WriteBatch::new();
        b.delete_in(self, key.as_ref());
        self.inner.write_batch(b, false)
    }

    /// `Db::get` in this keyspace.
    pub fn get(&self, key: impl AsRef<[u8]>) -> Result<Option<Vec<u8>>> {
        self.view().get(key.as_ref())
    }

    /// `Db::get_with` in this keyspace.
    pub fn get_with<R>(
        &self,
        key: impl AsRef<[u8]>,
        f: impl FnOnce(&[u8]) -> R,
    ) -> Result<Option<R>> {
        self.view().get_with(key.as_ref(), f)
    }

    /// `Db::multi_get` in this keyspace.
    pub fn multi_get<K: AsRef<[u8]>>(&self, keys: &[K]) -> Vec<Result<Option<Vec<u8>>>> {
        self.view().multi_get(keys)
    }

    /// `Db::scan` in this keyspace.
    pub fn scan<K: AsRef<[u8]>, R: RangeBounds<K>>(&self, range: R) -> Result<DbIter> {
        let (start, end) = iter::own_bounds(&range);
        self.view().iter_over(start, end)
    }

    /// `Db::iter` in this keyspace; `Error::KeyspaceDropped` once it is dropped (where
    /// `Db::iter`, on the default keyspace, cannot fail).
    pub fn iter(&self) -> Result<DbIter> {
        self.view().iter_over(Bound::Unbounded, Bound::Unbounded)
    }

    /// `Db::scan_prefix` in this keyspace.
    pub fn scan_prefix(&self, prefix: impl AsRef<[u8]>) -> Result<DbIter> {
        let (start, end) = iter::prefix_range(prefix.as_ref());
        self.view().iter_over(start, end)
    }

    /// `Db::cursor_in` in this keyspace.
    pub fn cursor_in<K: AsRef<[u8]>, R: RangeBounds<K>>(&self, range: R) -> Result<DbCursor> {
        self.view().cursor_in(range)
    }

    /// `Db::contains_range` in this keyspace.
    pub fn contains_range<K: AsRef<[u8]>, R: RangeBounds<K>>(&self, range: R) -> Result<bool> {
        self.view().contains_range(range)
    }
}

/// The read API over one keyspace of a store, for `Db` (the default keyspace) and `Keyspace`.
pub(super) struct View<'a> {
    pub(super) inner: &'a Inner,
    pub(super) id: u32,
    pub(super) name: &'a str,
}

impl View<'_> {
    /// The keyspace's state in `published`, or `Error::KeyspaceDropped`.
    pub(super) fn state<'p>(&self, published: &'p Published) -> Result<&'p State> {
        published
            .get(self.id)
            .ok_or_else(|| Error::KeyspaceDropped {
                name: self.name.to_string(),
            })
    }

    pub(super) fn get(&self, key: &[u8]) -> Result<Option<Vec<u8>>> {
        let published = self.inner.read_state();
        let state = self.state(&published)?;
        self.inner.read_path().get(state, state.mem.visible(), key)
    }

    pub(super) fn get_with<R>(&self, key: &[u8], f: impl FnOnce(&[u8]) -> R) -> Result<Option<R>> {
        let published = self.inner.read_state();
        let state = self.state(&published)?;
        let found = self
            .inner
            .read_path()
            .get_lent(state, state.mem.visible(), key)?;
        Ok(found.map(|v| f(v.bytes())))
    }

    pub(super) fn multi_get<K: AsRef<[u8]>>(&self, keys: &[K]) -> Vec<Result<Option<Vec<u8>>>> {
        let published = self.inner.read_state();
        match self.state(&published) {
            Ok(state) => self
                .inner
                .read_path()
                .multi_get(state, state.mem.visible(), keys),
            Err(e) => keys.iter().map(|_| Err(e.replicate())).collect(),
        }
    }

    pub(super) fn iter_over(&self, start: Bound<Vec<u8>>, end: Bound<Vec<u8>>) -> Result<DbIter> {
        let published = self.inner.read_state();
        Ok(iter_in(self.inner, self.state(&published)?, start, end))
    }

    pub(super) fn cursor_in<K: AsRef<[u8]>, R: RangeBounds<K>>(
        &self,
        range: R,
    ) -> Result<DbCursor> {
        let published = self.inner.read_state();
        Ok(cursor_in(self.inner, self.state(&published)?, range))
    }

    pub(super) fn contains_range<K: AsRef<[u8]>, R: RangeBounds<K>>(
        &self,
        range: R,
    ) -> Result<bool> {
        let published = self.inner.read_state();
        let state = self.state(&published)?;
        let (start, end) = (
            iter::bound_ref(range.start_bound()),
            iter::bound_ref(range.end_bound()),
        );
        let asks_prefix = iter::asks_prefix(state.rule, start, end);
        let (counters, seen) = (&self.inner.counters, state.mem.visible());
        if exists::known_empty(counters, asks_prefix, state, seen, start, end) {
            counters::bump(&counters.reader().scans, 1);
            return Ok(false);
        }
        let (start, end) = iter::own_bounds(&range);
        iter_in(self.inner, state, start, end)
            .next()
            .transpose()
            .map(|e| e.is_some())
    }
}

/// A scan of `state` (one keyspace of `inner`) as of now.
pub(super) fn iter_in(
    inner: &Inner,
    state: &State,
    start: Bound<Vec<u8>>,
    end: Bound<Vec<u8>>,
) -> DbIter {
    // The clock read after the count (`Inner::reading`).
    iter_at(inner, state, (start, end), || inner.reading())
}

/// `iter_in`, judging expiry at the reading `now` gives, taken once the memtable's count
/// has been read.
pub(super) fn iter_at(
    inner: &Inner,
    state: &State,
    (start, end): (Bound<Vec<u8>>, Bound<Vec<u8>>),
    now: impl FnOnce() -> crate::expiry::Reading,
) -> DbIter {
    let seen = state.mem.visible();
    let now = now();
    DbIter::new(
        &inner.counters,
        state.rule,
        inner.cache.clone(),
        state,
        seen,
        now,
        (start, end),
    )
}

/// A cursor over `state` (one keyspace of `inner`) as of now.
pub(super) fn cursor_in<K: AsRef<[u8]>, R: RangeBounds<K>>(
    inner: &Inner,
    state: &State,
    range: R,
) -> DbCursor {
    let seen = state.mem.visible();
    // Taken after the count (`Inner::reading`).
    let now = inner.reading();
    DbCursor::new(
        &inner.counters,
        state.rule,
        inner.cache.clone(),
        state,
        seen,
        now,
        range,
    )
}
