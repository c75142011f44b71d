//! Writes that expire, and what a key's expiry is (docs/expiry.md, `crate::expiry`).
//!
//! A put with an expiry is logged with it (FORMAT.md §2, operation tag 4), which builds from
//! before expiry would take for damage. So before the first such put is logged the store
//! writes a manifest of version 3 (FORMAT.md §4), which those builds refuse to open; the
//! manifest stays at version 3 from then on (`Registry::expiring`). Tables hold expiries from
//! table format 5 on, so a store told to write an older format refuses expiring puts.

use std::ops::Bound;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use super::counters::Counters;
use super::inner::Inner;
use super::iter::merge_of;
use super::keyspace::{Keyspace, View};
use super::level_cursor::ScanSetup;
#[cfg(feature = "replication")]
use super::read::ReadPath;
use super::snapshot::{Snapshot, SnapshotKeyspace};
use super::state::State;
use super::transaction::Transaction;
use super::{Db, WriteBatch};
use crate::error::{Error, Result};
#[cfg(feature = "replication")]
use crate::expiry::Now;
use crate::expiry::{KeyExpiry, Reading, NEVER};
use crate::table::{BlockCache, Direction, KeyRange};

impl Db {
    /// Sets `key` to `value` until `at` (`WriteBatch::put_with_expiry`).
    pub fn put_with_expiry(
        &self,
        key: impl AsRef<[u8]>,
        value: impl AsRef<[u8]>,
        at: SystemTime,
    ) -> Result<()> {
        let mut b = WriteBatch::new();
        b.put_with_expiry(key.as_ref(), value.as_ref(), at);
        self.write(b)
    }

    /// Sets `key` to `value` for `ttl` from now, as the store's clock reads now
    /// (`Options::clock`).
    pub fn put_with_ttl(
        &self,
        key: impl AsRef<[u8]>,
        value: impl AsRef<[u8]>,
        ttl: Duration,
    ) -> Result<()> {
        self.put_with_expiry(key, value, self.expiry_in(ttl))
    }

    /// The time `ttl` from now on the store's clock (`Options::clock`): the expiry to give
    /// `WriteBatch::put_with_expiry` for a put that should live `ttl`.
    pub fn expiry_in(&self, ttl: Duration) -> SystemTime {
        expiry_in(&self.inner, ttl)
    }

    /// Whether `key` is live, and until when: `KeyExpiry::Absent` (never written, deleted or
    /// expired), `Never`, or `At` its expiry. Reads like a one-key scan, and is counted as one.
    pub fn expiry_of(&self, key: impl AsRef<[u8]>) -> Result<KeyExpiry> {
        self.view().expiry_of(key.as_ref())
    }

    /// Makes `key` expire at `at` (`None`: never) and keeps its value, which the caller need
    /// not read or write: `Ok(false)` and nothing written if `key` is absent (or expired). An
    /// `at` already past deletes it. Atomic: a transaction (`Transaction::set_expiry`) run
    /// again while another write of `key` comes between its read and its commit, so no
    /// concurrent write is lost or undone. Redis's `EXPIRE`, `EXPIREAT` and `PERSIST`.
    pub fn set_expiry(&self, key: impl AsRef<[u8]>, at: Option<SystemTime>) -> Result<bool> {
        set_expiry(&self.inner, None, key.as_ref(), at)
    }
}

/// `Db::set_expiry` of `key` in `keyspace` (the default one for `None`).
fn set_expiry(
    inner: &Arc<Inner>,
    keyspace: Option<&Keyspace>,
    key: &[u8],
    at: Option<SystemTime>,
) -> Result<bool> {
    loop {
        let mut tx = Transaction::begin(Arc::clone(inner));
        let live = match keyspace {
            None => tx.set_expiry(key, at)?,
            Some(k) => tx.set_expiry_in(k, key, at)?,
        };
        match tx.commit() {
            // Another write of the key came first: read it again.
            Err(Error::Conflict { .. }) => continue,
            done => return done.map(|()| live),
        }
    }
}

impl Keyspace {
    /// `Db::put_with_expiry` in this keyspace.
    pub fn put_with_expiry(
        &self,
        key: impl AsRef<[u8]>,
        value: impl AsRef<[u8]>,
        at: SystemTime,
    ) -> Result<()> {
        let mut b = WriteBatch::new();
        b.put_in_with_expiry(self, key.as_ref(), value.as_ref(), at);
        self.inner().write_batch(b, false)
    }

    /// `Db::put_with_ttl` in this keyspace.
    pub fn put_with_ttl(
        &self,
        key: impl AsRef<[u8]>,
        value: impl AsRef<[u8]>,
        ttl: Duration,
    ) -> Result<()> {
        self.put_with_expiry(key, value, expiry_in(self.inner(), ttl))
    }

    /// `Db::expiry_of` in this keyspace.
    pub fn expiry_of(&self, key: impl AsRef<[u8]>) -> Result<KeyExpiry> {
        self.view().expiry_of(key.as_ref())
    }

    /// `Db::set_expiry` in this keyspace.
    pub fn set_expiry(&self, key: impl AsRef<[u8]>, at: Option<SystemTime>) -> Result<bool> {
        set_expiry(self.inner(), Some(self), key.as_ref(), at)
    }
}

/// `Db::expiry_in` on `inner`'s clock.
fn expiry_in(inner: &Inner, ttl: Duration) -> SystemTime {
    UNIX_EPOCH + Duration::from_millis(inner.opts.clock.now_millis()) + ttl
}

impl View<'_> {
    /// `Db::expiry_of` in this view's keyspace.
    pub(super) fn expiry_of(&self, key: &[u8]) -> Result<KeyExpiry> {
        let published = self.inner.read_state();
        let state = self.state(&published)?;
        let inner = self.inner;
        let seen = state.mem.visible();
        // After the count (`Inner::reading`).
        let now = inner.reading();
        expiry_in_state(&inner.counters, inner.cache.clone(), state, seen, now, key)
    }
}

#[cfg(feature = "replication")]
impl View<'_> {
    /// `key`'s value and expiry (`None`: never expires) as they stand now, judged live or
    /// expired at `at_millis` rather than by the store's clock: a replicated call decides
    /// from its entry's time, the same on every node. (An entry a compaction already dropped
    /// as expired by the clock reads absent.)
    pub(crate) fn entry_at(
        &self,
        key: &[u8],
        at_millis: u64,
    ) -> Result<Option<(Vec<u8>, Option<u64>)>> {
        let published = self.inner.read_state();
        let state = self.state(&published)?;
        let inner = self.inner;
        let seen = state.mem.visible();
        let at_millis = at_millis.clamp(1, NEVER - 1);
        // A store that never held an expiring entry: a point lookup (filters, no merge) says
        // all. The one-key scan below made `redis-benchmark -t incr -P 16` on a 3-node
        // kv_server cluster run at 0.54-0.69x its SETs.
        if !inner.expiring.load(Ordering::Acquire) {
            let path = ReadPath {
                counters: &inner.counters,
                cache: inner.cache.as_deref(),
                now: Now::fixed(at_millis),
                seen: at_millis,
                seen_at: None,
                store: None,
            };
            return Ok(path.get(state, seen, key)?.map(|v| (v, None)));
        }
        let (counters, cache) = (&inner.counters, inner.cache.clone());
        newest_in_state(
            counters,
            cache,
            state,
            seen,
            Reading(at_millis),
            key,
            |v, at| (v.to_vec(), (at != NEVER).then_some(at)),
        )
    }
}

#[cfg(feature = "replication")]
impl View<'_> {
    /// The live keys and values of `range` as they stand now, judged live or expired at
    /// `at_millis` rather than by the store's clock (as `entry_at`).
    pub(crate) fn scan_at(
        &self,
        range: (Bound<Vec<u8>>, Bound<Vec<u8>>),
        at_millis: u64,
    ) -> Result<super::DbIter> {
        let published = self.inner.read_state();
        let state = self.state(&published)?;
        let now = Reading(at_millis.clamp(1, NEVER - 1));
        Ok(super::keyspace::iter_at(self.inner, state, range, || now))
    }
}

#[cfg(feature = "replication")]
impl Db {
    /// `View::entry_at` in the default keyspace.
    pub(crate) fn entry_at(
        &self,
        key: &[u8],
        at_millis: u64,
    ) -> Result<Option<(Vec<u8>, Option<u64>)>> {
        self.view().entry_at(key, at_millis)
    }
}

/// `View::scan_at` in `keyspace` of `db`, or in its default keyspace (`None`).
#[cfg(feature = "replication")]
pub(crate) fn scan_at(
    db: &Db,
    keyspace: Option<&Keyspace>,
    range: (Bound<Vec<u8>>, Bound<Vec<u8>>),
    at_millis: u64,
) -> Result<super::DbIter> {
    match keyspace {
        Some(k) => k.view().scan_at(range, at_millis),
        None => db.view().scan_at(range, at_millis),
    }
}

#[cfg(feature = "replication")]
impl Keyspace {
    /// `View::entry_at` in this keyspace.
    pub(crate) fn entry_at(
        &self,
        key: &[u8],
        at_millis: u64,
    ) -> Result<Option<(Vec<u8>, Option<u64>)>> {
        self.view().entry_at(key, at_millis)
    }
}

impl Snapshot {
    /// `Db::expiry_of` as of the snapshot (and its clock reading).
    pub fn expiry_of(&self, key: impl AsRef<[u8]>) -> Result<KeyExpiry> {
        self.default_view().expiry_of(key)
    }
}

impl SnapshotKeyspace<'_> {
    /// `Snapshot::expiry_of` in this keyspace.
    pub fn expiry_of(&self, key: impl AsRef<[u8]>) -> Result<KeyExpiry> {
        let (snap, state) = self.parts();
        let (counters, cache) = snap.shared();
        expiry_in_state(
            counters,
            cache,
            state,
            snap.mem_seen(),
            snap.reading(),
            key.as_ref(),
        )
    }
}

/// The expiry of `key` in `state` (seeing `mem_seen` batches of its memtable) at `now`.
fn expiry_in_state(
    counters: &Arc<Counters>,
    cache: Option<Arc<BlockCache>>,
    state: &State,
    mem_seen: u64,
    now: Reading,
    key: &[u8],
) -> Result<KeyExpiry> {
    let found = newest_in_state(
        counters,
        cache,
        state,
        mem_seen,
        now,
        key,
        |_, at| match at {
            NEVER => KeyExpiry::Never,
            at => KeyExpiry::At(at),
        },
    )?;
    Ok(found.unwrap_or(KeyExpiry::Absent))
}

/// `f` of the value and stored expiry (`NEVER`: none) of `key`'s newest entry in `state`
/// (seeing `mem_seen` batches of its memtable), through a scan's merge of `[key, key]`;
/// `None` when that entry is a tombstone, or has expired at `now`, or there is none.
fn newest_in_state<R>(
    counters: &Arc<Counters>,
    cache: Option<Arc<BlockCache>>,
    state: &State,
    mem_seen: u64,
    now: Reading,
    key: &[u8],
    f: impl FnOnce(&[u8], u64) -> R,
) -> Result<Option<R>> {
    let range = KeyRange::new(Bound::Included(key.to_vec()), Bound::Included(key.to_vec()));
    let scan = ScanSetup::new(counters, state.rule, cache, range, now);
    let merge = merge_of(state, mem_seen, &scan, Direction::Forward)?;
    Ok(match merge.entry() {
        Some((_, Some(v))) => match merge.expiry() {
            at if now.expired(at) => None,
            at => Some(f(v, at)),
        },
        Some((_, None)) | None => None,
    })
}

impl Inner {
    /// A walk's reading of the clock (`expiry::Reading`): the clock's, or 0 (nothing expires)
    /// while the store has never held an expiring entry. Taken after the walk read its
    /// memtable's batch count: the flag is set before the first expiring put is logged, so a
    /// walk that could see one sees the flag set (the write's publish of its batch
    /// happens after the flag's store, and the walk's load of the count before this one).
    pub(super) fn reading(&self) -> Reading {
        match self.expiring.load(Ordering::Acquire) {
            true => {
                let r = self.opts.clock.now_millis().min(NEVER - 1);
                self.seen_now.fetch_max(r, Ordering::Relaxed);
                Reading(r)
            }
            false => Reading(0),
        }
    }

    /// Before a batch with expiring puts is logged: refuses it if tables could not hold it,
    /// and records that logs may hold such puts (a manifest of version 3) if not yet done.
    pub(super) fn admit_expiring(&self) -> Result<()> {
        let what = ("a put with an expiry", "expiring puts", 3);
        self.admit_logged(what, 5, &[&self.expiring], |r| r.expiring = true)
    }

    /// Before the first log operation of a kind builds before it would take for damage:
    /// refuses it unless the store writes a table format of `format` or later (the first that
    /// holds it), and otherwise, once, records in the registry (`mark`) and then in a manifest
    /// of the version `what` names that the logs may hold it (FORMAT.md §2, §4); `done`
    /// mirror the marks for writers that read them without the work lock. `what`: the
    /// operation, its plural and the manifest version, for the error and the log.
    pub(super) fn admit_logged(
        &self,
        what: (&str, &str, u32),
        format: u32,
        done: &[&std::sync::atomic::AtomicBool],
        mark: impl Fn(&mut super::registry::Registry),
    ) -> Result<()> {
        let (one, many, version) = what;
        if self.opts.table_format_version < format {
            return Err(Error::InvalidArgument(format!(
                "{one} needs table format {format}; the store writes format {} \
                 (Options::table_format_version)",
                self.opts.table_format_version
            )));
        }
        if done.iter().all(|d| d.load(Ordering::Acquire)) {
            return Ok(());
        }
        // Under the writer lock, as a keyspace's creation: no group is being logged while
        // the manifest changes.
        let _writer = self.lock_checked(&self.writer);
        self.errors.check()?;
        let mut work = self.lock_checked(&self.work);
        let marks = |k: &super::registry::Registry| (k.expiring, k.range_deletes);
        let before = marks(&work.keyspaces);
        mark(&mut work.keyspaces);
        if marks(&work.keyspaces) != before {
            let log_number = self.log_number_after(None);
            if let Err(e) = self.write_manifest(&mut work, &[], log_number) {
                (work.keyspaces.expiring, work.keyspaces.range_deletes) = before;
                return Err(self.errors.set(e));
            }
            tracing::info!("the logs may now hold {many}: manifest version {version}");
        }
        for d in done {
            d.store(true, Ordering::Release);
        }
        Ok(())
    }
}
