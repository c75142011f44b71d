//! The in-memory write buffer: an append-only log of entries with a hash index over it,
//! filled by writes (after their WAL record is written) and flushed to an L0 table when it
//! reaches `Options::memtable_size`.
//!
//! Use: the one writer (holding the store's writer lock) calls `apply(batch)`; readers call
//! `get`, `get_at` and `cursor` at any time, without a lock. Each applied batch gets the next
//! sequence number and each of its operations becomes one entry (key, value or tombstone,
//! seq) at the end of the log (`log.rs`: appended in place, never moved, so a reader
//! holds `&Entry` while the writer appends). The hash index (`index.rs`) maps a key to its
//! newest entry, and each entry links to the key's previous one. The published batch
//! count (`Counts`) is raised to a batch's number only once the whole batch is in, and readers
//! skip entries above the count they read, so a reader sees all of a batch or none of it; a
//! snapshot reads an older count and walks a key's links back to the version it saw. The
//! memtables of one generation (one per keyspace) share the count of its leader
//! (`Memtable::following`): a batch appended to each of them (`append`) and then published
//! once (`publish`) appears in all of them at once, for a reader that reads the count once and
//! then any of them.
//!
//! Order is only built when asked for (`ordered.rs`): a scan sorts the entries written since
//! the last scan into a run and merges runs (a binary counter, `sorted.rs`), then walks the
//! runs without copying (`cursor.rs`); a flush sorts each key's newest entry, taken from the
//! index, once (`for_each_newest`).
//!
//! Why not the lock-free skip list (`crossbeam-skiplist`) this replaced: an insert into a
//! 64 MiB memtable walked ~2 nodes on each of ~19 levels, most of them cache misses, and
//! allocated a node: the skip-list search alone was 27.6% of a 2M-key bulk load's profile (the
//! writer's whole time is the load's critical path), malloc and free another ~13%. Here an
//! insert is a hash and one probe (one or two cache lines), and the entry goes into the log
//! in place; the sorting a skip list did on every write is done once per flush, off the
//! writer's thread, in a sort over entry numbers (figures: docs/design.md). Why not
//! `RwLock<BTreeMap>` (the first version): every reader's `read()` writes the lock's reader
//! count, one cache line all reader threads write. A reader here writes nothing
//! shared (`arc_swap`'s load uses a thread-local slot).

mod changes;
mod cursor;
mod index;
mod log;
mod ordered;
mod ranges;
mod sorted;

use std::ops::Bound;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use arc_swap::ArcSwap;

use super::wal::{Op, Ops};
use crate::coding::key_prefix;
use crate::expiry::{Now, NEVER};
use crate::filter::hash_key;
use crate::table::DeletedRange;
pub(crate) use changes::{meets, within};
use index::Index;
use log::Log;
pub(crate) use ordered::MemtableCursor;
use sorted::View;

/// Bytes charged per entry on top of key and value, for the size estimate. Below the real
/// cost (`Options::memtable_size`): measured, 248 bytes of resident memory per entry of a
/// 16-byte key and a 100-byte value (229 with the skip list), charged 180. Kept, so that a
/// memtable holds as many entries as before and stores keep their flush sizes.
pub(crate) const ENTRY_OVERHEAD: usize = 64;

/// `Entry::prev` of a key's first entry.
const NO_PREV: usize = usize::MAX;

/// One operation of a batch.
struct Entry {
    /// The batch's sequence number.
    seq: u64,
    /// `key_prefix(key)`, so sorting compares most keys without loading their bytes.
    prefix: u64,
    /// The same key's previous entry (an older version, or an earlier op of the same batch),
    /// or `NO_PREV`.
    prev: usize,
    key: Vec<u8>,
    /// `None`: a tombstone.
    value: Option<Vec<u8>>,
    /// A put's stored expiry, or `expiry::NEVER`.
    expiry: u64,
}

/// The counts of a memtable generation (one memtable per keyspace, `state::Published`),
/// kept by its first memtable, the default keyspace's (the *leader*): the batches published,
/// which readers take once (`Memtable::visible`) to see, in every memtable of the generation,
/// exactly the entries of batches up to it; and their bytes together, which decide the
/// rotation. Only the one writer raises them. Kept inline in the leader, so that the default
/// keyspace's reads load the count from the memtable they read, as before keyspaces: absent
/// gets on a compacted 2×10^6-key store ran at 0.98× (2 threads) and 1.00× (1 thread) the
/// build before keyspaces (medians of 15 rounds, builds alternated).
#[derive(Debug, Default)]
struct Counts {
    published: AtomicU64,
    bytes: AtomicUsize,
}

/// A memtable and the WAL file that backs it.
pub(crate) struct Memtable {
    /// The log, in the order applied (so sequence numbers never decrease along it).
    entries: Log<Entry>,
    /// Key → newest entry; replaced whole when it grows.
    index: ArcSwap<Index>,
    /// Keys in `index` (the writer's count, deciding when it grows).
    keys: AtomicUsize,
    /// Entries appended and indexed, raised after each batch (scans sort up to it).
    len: AtomicUsize,
    /// The last sorted view built for scans (`sorted.rs`).
    sorted: ArcSwap<View>,
    /// `for_each_newest`'s order and the `len` it was sorted at.
    flush_order: Mutex<Option<(usize, Arc<Vec<usize>>)>>,
    size: AtomicUsize,
    /// The generation's counts, when this is its leader (`leader` is `None`).
    counts: Counts,
    /// The generation's leader, for the memtables of the other keyspaces.
    leader: Option<Arc<Memtable>>,
    /// File number of the WAL holding this memtable's writes.
    pub(crate) wal_id: u64,
    /// Puts with an expiry appended (last: read by INFO, not by gets).
    expiring: AtomicUsize,
    /// Ranges deleted, each with its batch's number, in the order applied: a range hides the
    /// entries of earlier batches here and everything older than this memtable. A lookup
    /// asks `range_covers`, through `range_index`.
    ranges: boxcar::Vec<(u64, DeletedRange)>,
    /// `ranges` indexed for lookups (`ranges.rs`).
    range_index: ArcSwap<ranges::RangeIndex>,
}

impl std::fmt::Debug for Memtable {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Memtable")
            .field("wal_id", &self.wal_id)
            .field("entries", &self.len.load(Ordering::Relaxed))
            .finish()
    }
}

impl Memtable {
    /// An empty memtable leading a new generation (the default keyspace's), backed by log
    /// `wal_id`.
    pub(crate) fn new(wal_id: u64) -> Self {
        Self::with(wal_id, Index::default(), None)
    }

    /// `new`, its index sized for `keys` distinct keys (the last generation's count), made
    /// by the flush thread ahead of a rotation: the index then does not grow on the writer's
    /// path below that (doubling to 2^20 slots took a write 8 ms).
    pub(crate) fn sized(wal_id: u64, keys: usize) -> Self {
        // An eighth more than the last generation's, whose keys were of the same sizes.
        let keys = keys.saturating_add(keys / 8).min(index::MAX_ENTRIES);
        Self::with(wal_id, Index::for_keys(keys), None)
    }

    /// An empty memtable of `leader`'s generation (another keyspace's): it reads and
    /// publishes the leader's counts. Its index starts small (`Index::small`): it may take
    /// few writes.
    pub(crate) fn following(leader: &Arc<Memtable>) -> Self {
        let leader = match &leader.leader {
            Some(l) => Arc::clone(l),
            None => Arc::clone(leader),
        };
        Self::with(leader.wal_id, Index::small(), Some(leader))
    }

    fn with(wal_id: u64, index: Index, leader: Option<Arc<Memtable>>) -> Self {
        Memtable {
            entries: Log::default(),
            index: ArcSwap::from_pointee(index),
            keys: AtomicUsize::new(0),
            expiring: AtomicUsize::new(0),
            ranges: boxcar::Vec::new(),
            range_index: ArcSwap::from_pointee(ranges::RangeIndex::default()),
            len: AtomicUsize::new(0),
            sorted: ArcSwap::from_pointee(View::default()),
            flush_order: Mutex::new(None),
            size: AtomicUsize::new(0),
            counts: Counts::default(),
            leader,
            wal_id,
        }
    }

    /// The generation's counts (the leader's).
    #[inline(always)]
    fn counts(&self) -> &Counts {
        match &self.leader {
            None => &self.counts,
            Some(l) => &l.counts,
        }
    }

    /// Whether `other` is of the same generation.
    pub(crate) fn same_generation(&self, other: &Memtable) -> bool {
        let lead = |m: &Memtable| m.leader.as_deref().map_or(m as *const _, |l| l as *const _);
        std::ptr::eq(lead(self), lead(other))
    }

    /// The number the generation's next batch gets (the writer's, under the store's writer
    /// lock).
    pub(crate) fn next(&self) -> u64 {
        self.counts().published.load(Ordering::Relaxed) + 1
    }

    /// Makes batches up to `seq` visible in every memtable of the generation. Release: a
    /// reader that sees `seq` sees every entry appended and indexed for it, in all of them.
    pub(crate) fn publish(&self, seq: u64) {
        self.counts().published.store(seq, Ordering::Release);
    }

    /// Entry `i`, which the caller got from the index, a link or below `len`: all point at
    /// entries already appended.
    fn entry(&self, i: usize) -> &Entry {
        #[expect(
            clippy::expect_used,
            reason = "an index, link or count only ever names an entry appended before it"
        )]
        self.entries
            .get(i)
            .expect("memtable entry named before it was appended")
    }

    #[cfg(test)]
    /// Applies `ops` as one batch, the generation's next, and publishes it: readers see all of
    /// it or none. One writer at a time.
    pub(crate) fn apply(&self, ops: Vec<(Vec<u8>, Option<Vec<u8>>)>) {
        let seq = self.next();
        self.append(ops.into_iter().map(Op::from).collect(), seq);
        self.publish(seq);
    }

    /// Appends `ops` as entries of batch `seq` (the generation's `next`), which readers do not
    /// see until it is published: a batch that spans several memtables of one generation is
    /// appended to each, then published once. One writer at a time (the store's writer lock;
    /// recovery is single-threaded).
    pub(crate) fn append(&self, ops: Ops, seq: u64) {
        let mut index = self.index.load_full();
        let mut keys = self.keys.load(Ordering::Relaxed);
        let mut added = 0;
        let mut expiring = 0;
        for Op { key, value, expiry } in ops {
            expiring += usize::from(value.is_some() && expiry != NEVER);
            added += key.len() + value.as_ref().map_or(0, Vec::len) + ENTRY_OVERHEAD;
            let hash = hash_key(&key);
            if index.needs_growth(keys) {
                // Published before this batch is visible: a reader that sees the batch
                // loads this table or a later one.
                index = Arc::new(index.grown());
                self.index.store(Arc::clone(&index));
            }
            let at = index.slot_for(hash, |e| self.entry(e).key == key);
            let prev = at.entry.unwrap_or(NO_PREV);
            keys += usize::from(at.entry.is_none());
            let entry = self.entries.push(Entry {
                seq,
                prefix: key_prefix(&key),
                prev,
                key,
                // A deletion has no expiry, whatever its operation says.
                expiry: if value.is_some() { expiry } else { NEVER },
                value,
            });
            assert!(
                entry < index::MAX_ENTRIES,
                "memtable over {} entries",
                index::MAX_ENTRIES
            );
            // Only this writer changes the index: the slot found above is still the key's.
            index.set(at, hash, entry);
        }
        self.keys.store(keys, Ordering::Relaxed);
        if expiring > 0 {
            self.expiring.fetch_add(expiring, Ordering::Relaxed);
        }
        self.size.fetch_add(added, Ordering::Relaxed);
        self.counts().bytes.fetch_add(added, Ordering::Relaxed);
        self.len.store(self.entries.count(), Ordering::Release);
    }

    /// `Some(Some(v))` value, `Some(None)` tombstone, `None` not here. An empty memtable (the
    /// common case right after a flush) answers without hashing. Expiring entries are values.
    #[cfg(test)]
    pub(crate) fn get(&self, key: &[u8]) -> Option<Option<Vec<u8>>> {
        let seen = self.visible();
        let now = Now::never();
        let found = (seen != 0).then(|| self.get_at(key, hash_key(key), seen, &now))?;
        found.map(|v| v.map(<[u8]>::to_vec))
    }

    /// The batches published so far (`seen` for `get_at` and `cursor`: a snapshot's view),
    /// the same for every memtable sharing the count.
    #[inline(always)]
    pub(crate) fn visible(&self) -> u64 {
        self.counts().published.load(Ordering::Acquire)
    }

    /// `get` as of the first `seen` batches (at most the visible ones), the value lent where
    /// it lies; `hash` is `hash_key(key)`. A put expired at `now`, or one a later range of
    /// this memtable covers, is `Some(None)`: it hides older versions as a tombstone does.
    /// `None` when no entry of the key is here, whether or not one of its ranges covers the
    /// key: the reader asks that (`range_covers(key, 0, seen)`) only once an older memtable
    /// or a table may hold the key (`read::deleted_above`), so an absent key, which every
    /// filter turns away, asks no range. Asking here cost an absent get ~0.65 µs with 10^4
    /// ranges in the memtable of a 10^6-key store.
    pub(crate) fn get_at(
        &self,
        key: &[u8],
        hash: u64,
        seen: u64,
        now: &Now,
    ) -> Option<Option<&[u8]>> {
        if seen == 0 {
            return None;
        }
        let e = self.newest(key, hash, seen)?;
        if self.has_ranges() && self.range_covers(key, e.seq, seen) {
            return Some(None);
        }
        Some(e.value.as_deref().filter(|_| !now.expired(e.expiry)))
    }

    /// The key's newest entry among the first `seen` batches. The entry the index names is
    /// looked up in the log once, for the key's comparison, and kept.
    fn newest(&self, key: &[u8], hash: u64, seen: u64) -> Option<&Entry> {
        let mut found = None;
        self.index.load().find(hash, |e| {
            let entry = self.entry(e);
            let is_key = entry.key == key;
            if is_key {
                found = Some(entry);
            }
            is_key
        })?;
        self.version_at(found?, seen)
    }

    /// `e` or the newest earlier version of its key among the first `seen` batches.
    fn version_at<'a>(&'a self, mut e: &'a Entry, seen: u64) -> Option<&'a Entry> {
        while e.seq > seen {
            if e.prev == NO_PREV {
                return None;
            }
            e = self.entry(e.prev);
        }
        Some(e)
    }

    /// Distinct keys held.
    pub(crate) fn key_count(&self) -> usize {
        self.keys.load(Ordering::Relaxed)
    }

    /// Puts with an expiry appended (each, not each key: an upper bound of the keys that
    /// carry one).
    pub(crate) fn expiring_count(&self) -> usize {
        self.expiring.load(Ordering::Relaxed)
    }

    /// Approximate bytes held (this memtable's alone).
    pub(crate) fn approximate_size(&self) -> usize {
        self.size.load(Ordering::Relaxed)
    }

    /// Approximate bytes held by every memtable of its generation.
    pub(crate) fn generation_size(&self) -> usize {
        self.counts().bytes.load(Ordering::Relaxed)
    }

    /// True when no entry has been appended and no range deleted (a batch of the shared count
    /// may have gone to other memtables only).
    pub(crate) fn is_empty(&self) -> bool {
        self.len.load(Ordering::Acquire) == 0 && !self.has_ranges()
    }

    /// The position of entry `i` or of the newest earlier version of its key among the first
    /// `seen` batches.
    fn version_index_at(&self, mut i: usize, seen: u64) -> Option<usize> {
        while self.entry(i).seq > seen {
            i = self.entry(i).prev;
            if i == NO_PREV {
                return None;
            }
        }
        Some(i)
    }
}

/// True when no key lies between `start` and `end`: reversed bounds, or equal bounds that are
/// not both inclusive.
pub(crate) fn range_is_empty(start: Bound<&[u8]>, end: Bound<&[u8]>) -> bool {
    match (start, end) {
        (Bound::Included(a), Bound::Included(b)) => a > b,
        (Bound::Included(a) | Bound::Excluded(a), Bound::Included(b) | Bound::Excluded(b)) => {
            a >= b
        }
        _ => false,
    }
}

#[cfg(test)]
mod tests;
