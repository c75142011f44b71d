//! Optimistic transactions (`Db::transaction`): reads at one snapshot plus the transaction's
//! own writes, writes buffered, and a commit that applies them as one batch only if nothing the
//! transaction read was written since its snapshot (docs/transactions.md).
//!
//! Serializable, not only snapshot isolation: the commit checks every key read (present or
//! absent) and every range scanned, whole, against the writes after the snapshot
//! (`conflicts.rs`), so neither a lost update, a write skew nor a phantom gets through. The
//! check runs where the batch is sequenced (the group commit's leader, under the writer lock),
//! so a transaction that passes it is ordered after every write it did not see and before
//! every write that follows. Blind writes (written, never read) check nothing, as in RocksDB's
//! and fjall's optimistic transactions.
//!
//! Nothing is locked while a transaction runs; its memory is its reads and writes, bounded by
//! `Transaction::with_limit`. The snapshot it holds keeps the memtables and tables of its
//! moment (as `Snapshot` does) until it commits or is dropped.

use std::ops::{Bound, RangeBounds};
use std::sync::Arc;
use std::time::SystemTime;

use super::batch::WriteOptions;
use super::conflicts::{Condition, Read};
use super::inner::Inner;
use super::iter::own_bounds;
use super::keyspace::Keyspace;
use super::memtable::range_is_empty;
use super::snapshot::{Snapshot, SnapshotKeyspace};
use super::transaction_iter::TransactionIter;
use super::transaction_writes::{Hidden, Overlay, Own, OwnWrites, Pending};
use crate::error::{Error, Result};
use crate::expiry::{self, millis_of, KeyExpiry, NEVER};

/// Bytes of reads and writes a transaction may hold unless told otherwise
/// (`Transaction::with_limit`).
pub const DEFAULT_TRANSACTION_LIMIT: usize = 64 << 20;

/// Bytes counted per read or write on top of its keys and value.
const OVERHEAD: usize = 64;

/// An optimistic transaction (`Db::transaction`). Reads see the store as of the moment it
/// began, plus its own writes; writes are held until `commit`, which applies them all in one
/// batch, or fails with `Error::Conflict` and writes nothing if a key it read (or a key in a
/// range it scanned) was written since it began. Dropping it without committing writes
/// nothing.
///
/// ```
/// # let dir = tempfile::tempdir()?;
/// use lsm_bloom::{Db, Error, Options};
/// let db = Db::open(dir.path(), Options::default())?;
/// db.put("balance", "10")?;
/// loop {
///     let mut tx = db.transaction();
///     let balance: u64 = match tx.get("balance")? {
///         Some(v) => String::from_utf8_lossy(&v).parse().unwrap_or(0),
///         None => 0,
///     };
///     tx.put("balance", (balance + 5).to_string())?;
///     match tx.commit() {
///         Err(Error::Conflict { .. }) => continue, // another write came first: again
///         done => break done?,
///     }
/// }
/// assert_eq!(db.get("balance")?, Some(b"15".to_vec()));
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub struct Transaction {
    inner: Arc<Inner>,
    snap: Snapshot,
    /// Its puts, deletes and deleted ranges (`transaction_writes.rs`).
    writes: OwnWrites,
    reads: Vec<Read>,
    /// Bytes of `reads` and `writes`.
    bytes: usize,
    limit: usize,
    /// The clock when it began: an own put whose expiry has passed by then reads as absent.
    began: u64,
}

impl std::fmt::Debug for Transaction {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Transaction")
            .field("reads", &self.reads.len())
            .field("writes", &self.writes.key_count())
            .field("bytes", &self.bytes)
            .finish_non_exhaustive()
    }
}

impl Transaction {
    pub(super) fn begin(inner: Arc<Inner>) -> Transaction {
        let snap = Snapshot::take(&inner);
        let began = inner.opts.clock.now_millis();
        Transaction {
            inner,
            snap,
            writes: OwnWrites::default(),
            reads: Vec::new(),
            bytes: 0,
            limit: DEFAULT_TRANSACTION_LIMIT,
            began,
        }
    }

    /// Sets the bytes of reads and writes it may hold (keys, values and ~64 bytes each; a
    /// scan counts its bounds): past it a read or write fails with `Error::InvalidArgument`
    /// and changes nothing. Default `DEFAULT_TRANSACTION_LIMIT` (64 MiB). A commit is also one
    /// batch, so its writes are held to `MAX_BATCH_SIZE`.
    pub fn with_limit(mut self, bytes: usize) -> Self {
        self.limit = bytes;
        self
    }

    /// The value of `key` in the default keyspace as the transaction sees it.
    pub fn get(&mut self, key: impl AsRef<[u8]>) -> Result<Option<Vec<u8>>> {
        self.read_key(None, key.as_ref())
    }

    /// `get` in `keyspace`.
    pub fn get_in(
        &mut self,
        keyspace: &Keyspace,
        key: impl AsRef<[u8]>,
    ) -> Result<Option<Vec<u8>>> {
        self.read_key(Some(keyspace), key.as_ref())
    }

    /// The values of `keys` in the default keyspace, in the same order (as `Db::multi_get`).
    pub fn multi_get<K: AsRef<[u8]>>(&mut self, keys: &[K]) -> Result<Vec<Option<Vec<u8>>>> {
        self.read_keys(None, keys)
    }

    /// `multi_get` in `keyspace`.
    pub fn multi_get_in<K: AsRef<[u8]>>(
        &mut self,
        keyspace: &Keyspace,
        keys: &[K],
    ) -> Result<Vec<Option<Vec<u8>>>> {
        self.read_keys(Some(keyspace), keys)
    }

    /// Live keys and values of the default keyspace in `range`, in key order (`.rev()`:
    /// backward), as the transaction sees them. The whole range counts as read, however far
    /// the scan is taken: a key written in it since the snapshot fails the commit.
    pub fn scan<K: AsRef<[u8]>, R: RangeBounds<K>>(&mut self, range: R) -> Result<TransactionIter> {
        self.scan_range(None, &range)
    }

    /// `scan` in `keyspace`.
    pub fn scan_in<K: AsRef<[u8]>, R: RangeBounds<K>>(
        &mut self,
        keyspace: &Keyspace,
        range: R,
    ) -> Result<TransactionIter> {
        self.scan_range(Some(keyspace), &range)
    }

    /// Whether any live key of the default keyspace lies in `range`, as the transaction sees
    /// it (read as `scan` reads it).
    pub fn contains_range<K: AsRef<[u8]>, R: RangeBounds<K>>(&mut self, range: R) -> Result<bool> {
        Ok(self.scan(range)?.next().transpose()?.is_some())
    }

    /// `contains_range` in `keyspace`.
    pub fn contains_range_in<K: AsRef<[u8]>, R: RangeBounds<K>>(
        &mut self,
        keyspace: &Keyspace,
        range: R,
    ) -> Result<bool> {
        Ok(self.scan_in(keyspace, range)?.next().transpose()?.is_some())
    }

    /// Sets `key` to `value` in the default keyspace, at commit.
    pub fn put(&mut self, key: impl Into<Vec<u8>>, value: impl Into<Vec<u8>>) -> Result<()> {
        self.write(None, key.into(), Some(value.into()), NEVER)
    }

    /// `put` until `at` (as `WriteBatch::put_with_expiry`).
    pub fn put_with_expiry(
        &mut self,
        key: impl Into<Vec<u8>>,
        value: impl Into<Vec<u8>>,
        at: SystemTime,
    ) -> Result<()> {
        let at = expiry::stored(millis_of(at));
        self.write(None, key.into(), Some(value.into()), at)
    }

    /// Deletes `key` from the default keyspace, at commit.
    pub fn delete(&mut self, key: impl Into<Vec<u8>>) -> Result<()> {
        self.write(None, key.into(), None, NEVER)
    }

    /// `put` in `keyspace`.
    pub fn put_in(
        &mut self,
        keyspace: &Keyspace,
        key: impl Into<Vec<u8>>,
        value: impl Into<Vec<u8>>,
    ) -> Result<()> {
        self.write(Some(keyspace), key.into(), Some(value.into()), NEVER)
    }

    /// `put_with_expiry` in `keyspace`.
    pub fn put_in_with_expiry(
        &mut self,
        keyspace: &Keyspace,
        key: impl Into<Vec<u8>>,
        value: impl Into<Vec<u8>>,
        at: SystemTime,
    ) -> Result<()> {
        let at = expiry::stored(millis_of(at));
        self.write(Some(keyspace), key.into(), Some(value.into()), at)
    }

    /// `delete` in `keyspace`.
    pub fn delete_in(&mut self, keyspace: &Keyspace, key: impl Into<Vec<u8>>) -> Result<()> {
        self.write(Some(keyspace), key.into(), None, NEVER)
    }

    /// Deletes every key of the default keyspace in `range` (any bounds), at commit, as one
    /// operation (`WriteBatch::delete_range`, docs/range-deletes.md). From now on the
    /// transaction reads the keys in it as absent, its own earlier writes there included; a
    /// later own put inside it stays. Deleting reads nothing, so it fails no commit by
    /// itself. An empty range does nothing.
    pub fn delete_range<K: AsRef<[u8]>, R: RangeBounds<K>>(&mut self, range: R) -> Result<()> {
        self.write_range(None, &range)
    }

    /// `delete_range` in `keyspace`.
    pub fn delete_range_in<K: AsRef<[u8]>, R: RangeBounds<K>>(
        &mut self,
        keyspace: &Keyspace,
        range: R,
    ) -> Result<()> {
        self.write_range(Some(keyspace), &range)
    }

    /// Makes `key` of the default keyspace expire at `at` (`None`: never), keeping its value,
    /// at commit: `false` and nothing written if the transaction sees no live value there.
    /// It reads the key (so a write of it since the transaction began fails the commit) and
    /// puts its value back with the new expiry. An `at` already past deletes the key.
    pub fn set_expiry(&mut self, key: impl AsRef<[u8]>, at: Option<SystemTime>) -> Result<bool> {
        self.change_expiry(None, key.as_ref(), at)
    }

    /// `set_expiry` in `keyspace`.
    pub fn set_expiry_in(
        &mut self,
        keyspace: &Keyspace,
        key: impl AsRef<[u8]>,
        at: Option<SystemTime>,
    ) -> Result<bool> {
        self.change_expiry(Some(keyspace), key.as_ref(), at)
    }

    /// Applies its writes as one batch if nothing it read was written since it began, else
    /// `Error::Conflict` and nothing written. A transaction that wrote nothing commits at
    /// once (its reads all saw one moment).
    pub fn commit(self) -> Result<()> {
        self.commit_opt(WriteOptions::default())
    }

    /// `commit` as `opts` says (`WriteOptions::synced()`: durable before `Ok`).
    pub fn commit_opt(self, opts: WriteOptions) -> Result<()> {
        let batch = self.writes.to_batch();
        if batch.is_empty() {
            return Ok(());
        }
        let condition = (!self.reads.is_empty()).then(|| {
            Box::new(Condition {
                published: self.snap.published_arc(),
                mem_seen: self.snap.mem_seen(),
                reads: self.reads,
            })
        });
        self.inner.write_batch_if(batch, opts.sync, condition)
    }

    /// Whether something it read has been written since it began, as `commit` would judge it
    /// (`Error::Conflict` if so), without writing anything. A look at one moment: a write
    /// after it returns is not seen, so a caller that acts on it keeps other writers out
    /// meanwhile by its own means (kv_server's EXEC does, for WATCH).
    pub fn validate(&self) -> Result<()> {
        if self.reads.is_empty() {
            return Ok(());
        }
        super::conflicts::check_reads(
            self.snap.published(),
            self.snap.mem_seen(),
            &self.reads,
            &self.inner.read_state(),
            &*self.inner.opts.clock,
        )
    }

    /// The snapshot's view of `keyspace` (the default one for `None`).
    fn view(&self, keyspace: Option<&Keyspace>) -> Result<SnapshotKeyspace<'_>> {
        match keyspace {
            None => Ok(self.snap.default_view()),
            Some(k) => self.snap.keyspace(k),
        }
    }

    /// An own write of `key` in keyspace `id` (a put, a delete or a deleted range over it):
    /// `Some(value or None)` if there is one.
    fn own(&self, id: u32, key: &[u8]) -> Option<Option<Vec<u8>>> {
        match self.writes.of(id, key) {
            Own::Unwritten => None,
            Own::Deleted => Some(None),
            Own::Put(p) => Some(p.value.clone().filter(|_| !self.expired(p))),
        }
    }

    fn expired(&self, p: &Pending) -> bool {
        p.expiry != NEVER && p.expiry <= self.began
    }

    fn read_key(&mut self, keyspace: Option<&Keyspace>, key: &[u8]) -> Result<Option<Vec<u8>>> {
        let id = keyspace.map_or(0, Keyspace::id);
        if let Some(v) = self.own(id, key) {
            return Ok(v);
        }
        self.charge(key.len())?;
        let (value, expiry) = {
            let view = self.view(keyspace)?;
            let value = view.get(key)?;
            let expiry = self.expiry_read(&view, key, value.is_some())?;
            (value, expiry)
        };
        self.note(Read::Key {
            keyspace: id,
            key: key.to_vec(),
            expiry,
        });
        Ok(value)
    }

    fn read_keys<K: AsRef<[u8]>>(
        &mut self,
        keyspace: Option<&Keyspace>,
        keys: &[K],
    ) -> Result<Vec<Option<Vec<u8>>>> {
        let id = keyspace.map_or(0, Keyspace::id);
        let mut out: Vec<Option<Option<Vec<u8>>>> =
            keys.iter().map(|k| self.own(id, k.as_ref())).collect();
        let asked: Vec<&[u8]> = keys
            .iter()
            .zip(&out)
            .filter(|(_, own)| own.is_none())
            .map(|(k, _)| k.as_ref())
            .collect();
        self.charge(asked.iter().map(|k| k.len()).sum::<usize>() + asked.len() * OVERHEAD)?;
        let mut reads = Vec::with_capacity(asked.len());
        {
            let view = self.view(keyspace)?;
            let mut found = view.multi_get(&asked).into_iter();
            for slot in out.iter_mut().filter(|o| o.is_none()) {
                let key = asked[reads.len()];
                let value = found.next().transpose()?.flatten();
                let expiry = self.expiry_read(&view, key, value.is_some())?;
                reads.push(Read::Key {
                    keyspace: id,
                    key: key.to_vec(),
                    expiry,
                });
                *slot = Some(value);
            }
        }
        for r in reads {
            self.note(r);
        }
        Ok(out.into_iter().map(Option::flatten).collect())
    }

    /// The expiry of the value of `key` just read in `view` (`NEVER` if absent, or if the
    /// snapshot saw no expiring put in the store: one written since is a write the commit
    /// finds).
    fn expiry_read(&self, view: &SnapshotKeyspace<'_>, key: &[u8], present: bool) -> Result<u64> {
        if !present || self.snap.reading().0 == 0 {
            return Ok(NEVER);
        }
        Ok(match view.expiry_of(key)? {
            KeyExpiry::At(at) => at,
            KeyExpiry::Never | KeyExpiry::Absent => NEVER,
        })
    }

    fn scan_range<K: AsRef<[u8]>, R: RangeBounds<K>>(
        &mut self,
        keyspace: Option<&Keyspace>,
        range: &R,
    ) -> Result<TransactionIter> {
        let id = keyspace.map_or(0, Keyspace::id);
        let (start, end) = own_bounds(range);
        self.charge(bound_len(&start) + bound_len(&end))?;
        let base = self.view(keyspace)?.scan((start.clone(), end.clone()))?;
        let empty = range_is_empty(
            start.as_ref().map(Vec::as_slice),
            end.as_ref().map(Vec::as_slice),
        );
        let range = (start.clone(), end.clone());
        let own: Overlay = match empty {
            false => self
                .writes
                .in_range(id, range)
                .map(|(k, p)| (k.clone(), p.value.clone().filter(|_| !self.expired(p))))
                .collect(),
            true => Overlay::new(),
        };
        let hidden = Hidden::new(self.writes.ranges_of(id));
        self.note(Read::Range {
            keyspace: id,
            start,
            end,
        });
        Ok(TransactionIter::new(base, own, hidden))
    }

    fn write(
        &mut self,
        keyspace: Option<&Keyspace>,
        key: Vec<u8>,
        value: Option<Vec<u8>>,
        expiry: u64,
    ) -> Result<()> {
        let id = self.written_id(keyspace)?;
        self.charge(key.len() + value.as_ref().map_or(0, Vec::len))?;
        self.writes.write(id, key, value, expiry);
        Ok(())
    }

    fn write_range<K: AsRef<[u8]>, R: RangeBounds<K>>(
        &mut self,
        keyspace: Option<&Keyspace>,
        range: &R,
    ) -> Result<()> {
        let id = self.written_id(keyspace)?;
        let (start, end) = own_bounds(range);
        let bytes = bound_len(&start) + bound_len(&end);
        if range_is_empty(
            start.as_ref().map(Vec::as_slice),
            end.as_ref().map(Vec::as_slice),
        ) {
            return Ok(());
        }
        self.charge(bytes)?;
        self.writes.delete_range(id, (start, end));
        Ok(())
    }

    /// The id of `keyspace`, which the commit will write (the default one for `None`); a
    /// keyspace of another store is refused.
    fn written_id(&mut self, keyspace: Option<&Keyspace>) -> Result<u32> {
        let Some(k) = keyspace else { return Ok(0) };
        if !k.of(&self.inner) {
            return Err(Error::InvalidArgument(format!(
                "the transaction writes keyspace {:?} of another store",
                k.name()
            )));
        }
        self.writes.note(k);
        Ok(k.id())
    }

    /// Reads `key` with its expiry, then puts its value back until `at` (`None`: never).
    fn change_expiry(
        &mut self,
        keyspace: Option<&Keyspace>,
        key: &[u8],
        at: Option<SystemTime>,
    ) -> Result<bool> {
        let Some(value) = self.read_key(keyspace, key)? else {
            return Ok(false);
        };
        let expiry = at.map_or(NEVER, |at| expiry::stored(millis_of(at)));
        // An expiry already past (on the clock the transaction began at) is a delete.
        let value = Some(value).filter(|_| expiry == NEVER || expiry > self.began);
        self.write(keyspace, key.to_vec(), value, expiry)?;
        Ok(true)
    }

    /// Counts `bytes` more (plus `OVERHEAD`) against the limit, or refuses them.
    fn charge(&mut self, bytes: usize) -> Result<()> {
        let after = self.bytes.saturating_add(bytes + OVERHEAD);
        if after > self.limit {
            return Err(Error::InvalidArgument(format!(
                "the transaction would hold {after} bytes of reads and writes, over its limit \
                 of {} (Transaction::with_limit)",
                self.limit
            )));
        }
        self.bytes = after;
        Ok(())
    }

    fn note(&mut self, read: Read) {
        self.reads.push(read);
    }
}

/// The bytes of a bound's key (0 when unbounded).
fn bound_len(b: &Bound<Vec<u8>>) -> usize {
    match b {
        Bound::Included(k) | Bound::Excluded(k) => k.len(),
        Bound::Unbounded => 0,
    }
}
