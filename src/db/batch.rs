//! What a write is made of: `WriteBatch` (operations on any keyspaces, applied whole, each put
//! with or without an expiry) and `WriteOptions` (whether it is synced). A batch checks its
//! own size limits, so a batch that would not replay is refused before it is logged; the
//! write path (`write.rs`) commits it.

use std::time::SystemTime;

use super::keyspace::Keyspace;
use super::limits::{MAX_BATCH_SIZE, MAX_KEY_SIZE, MAX_VALUE_SIZE};
use super::wal::{self, Batch, Op};
use super::wal_range;
use crate::error::{Error, Result};
use crate::expiry::{self, millis_of, NEVER};
use crate::table::{successor, DeletedRange, End};
use std::ops::{Bound, RangeBounds};

/// A batch's operations on one keyspace, in order: each a key and its value (`None`: a
/// delete).
pub type BatchOps = Vec<(Vec<u8>, Option<Vec<u8>>)>;

/// Writes applied together: all or none survive a crash, and readers see all or none. A batch
/// may change several keyspaces (`put_in`, `delete_in`): it is still one log record, and
/// applied to all of them at once.
#[derive(Clone, Debug, Default)]
pub struct WriteBatch {
    pub(super) ops: Batch,
    /// Size of the batch's WAL record payload after its count (FORMAT.md §2).
    encoded: usize,
    /// A handle of each keyspace other than the default the batch changes: checked to belong
    /// to the store it is written to, and to be live, when it is written.
    pub(super) keyspaces: Vec<Keyspace>,
    /// Some put carries an expiry (its store must record that first, `Inner::note_expiry`).
    expiring: bool,
}

impl WriteBatch {
    /// An empty batch.
    pub fn new() -> Self {
        Self::default()
    }
    /// Sets `key` to `value` in the default keyspace.
    pub fn put(&mut self, key: impl Into<Vec<u8>>, value: impl Into<Vec<u8>>) -> &mut Self {
        self.add(0, key.into(), Some(value.into()), NEVER)
    }
    /// Sets `key` to `value` in the default keyspace until `at`: from then on the key is
    /// absent to every read, as if deleted at `at` (docs/expiry.md). A time already passed
    /// (the store's clock, `Options::clock`) writes a key that reads as absent; `Db::expiry_in`
    /// gives a time a duration from now. Kept to the millisecond.
    pub fn put_with_expiry(
        &mut self,
        key: impl Into<Vec<u8>>,
        value: impl Into<Vec<u8>>,
        at: SystemTime,
    ) -> &mut Self {
        self.add(
            0,
            key.into(),
            Some(value.into()),
            expiry::stored(millis_of(at)),
        )
    }
    /// Deletes `key` from the default keyspace.
    pub fn delete(&mut self, key: impl Into<Vec<u8>>) -> &mut Self {
        self.add(0, key.into(), None, NEVER)
    }
    /// Sets `key` to `value` in `keyspace` (a handle of the store the batch is written to).
    pub fn put_in(
        &mut self,
        keyspace: &Keyspace,
        key: impl Into<Vec<u8>>,
        value: impl Into<Vec<u8>>,
    ) -> &mut Self {
        self.note(keyspace);
        self.add(keyspace.id(), key.into(), Some(value.into()), NEVER)
    }
    /// `put_with_expiry` in `keyspace`.
    pub fn put_in_with_expiry(
        &mut self,
        keyspace: &Keyspace,
        key: impl Into<Vec<u8>>,
        value: impl Into<Vec<u8>>,
        at: SystemTime,
    ) -> &mut Self {
        self.note(keyspace);
        let at = expiry::stored(millis_of(at));
        self.add(keyspace.id(), key.into(), Some(value.into()), at)
    }
    /// Deletes `key` from `keyspace`.
    pub fn delete_in(&mut self, keyspace: &Keyspace, key: impl Into<Vec<u8>>) -> &mut Self {
        self.note(keyspace);
        self.add(keyspace.id(), key.into(), None, NEVER)
    }
    /// Deletes every key of the default keyspace in `range` (any bounds) with one operation,
    /// not one per key (RocksDB's `DeleteRange`): the keys written before this batch, and the
    /// batch's own earlier writes inside it; a later put of the batch inside it stays.
    /// docs/range-deletes.md. An empty range adds nothing.
    pub fn delete_range<K: AsRef<[u8]>>(&mut self, range: impl RangeBounds<K>) -> &mut Self {
        self.add_range(0, range)
    }
    /// `delete_range` in `keyspace`.
    pub fn delete_range_in<K: AsRef<[u8]>>(
        &mut self,
        keyspace: &Keyspace,
        range: impl RangeBounds<K>,
    ) -> &mut Self {
        self.note(keyspace);
        self.add_range(keyspace.id(), range)
    }
    fn add_range<K: AsRef<[u8]>>(
        &mut self,
        keyspace: u32,
        range: impl RangeBounds<K>,
    ) -> &mut Self {
        let r = deleted_range(range);
        if r.is_empty() {
            return self;
        }
        // The batch's earlier writes inside the range are deleted with it: they go now, so
        // that the range need only hide older batches (`wal::Batch::ranges`).
        let mut freed = 0;
        self.ops.part(keyspace).retain(|op| {
            let gone = r.covers(&op.key);
            if gone {
                freed +=
                    wal::op_encoded_len(op.key.len(), op.value.as_ref().map(Vec::len), op.expiry);
            }
            !gone
        });
        self.encoded -= freed;
        if keyspace != 0 && !self.ops.spaces.iter().any(|(id, _)| *id == keyspace) {
            self.encoded += wal::KEYSPACE_SWITCH_LEN;
        }
        self.encoded += wal_range::encoded_len(&r);
        self.ops.push_range(keyspace, r);
        self
    }
    /// Whether the batch deletes a range.
    pub(super) fn deletes_ranges(&self) -> bool {
        !self.ops.ranges.is_empty()
    }
    fn note(&mut self, keyspace: &Keyspace) {
        let known = |k: &Keyspace| k.id() == keyspace.id() && k.same_store(keyspace);
        if keyspace.id() != 0 && !self.keyspaces.iter().any(known) {
            self.keyspaces.push(keyspace.clone());
        }
    }
    fn add(
        &mut self,
        keyspace: u32,
        key: Vec<u8>,
        value: Option<Vec<u8>>,
        expiry: u64,
    ) -> &mut Self {
        self.encoded += wal::op_encoded_len(key.len(), value.as_ref().map(Vec::len), expiry);
        if keyspace != 0 && !self.ops.spaces.iter().any(|(id, _)| *id == keyspace) {
            self.encoded += wal::KEYSPACE_SWITCH_LEN;
        }
        self.expiring |= expiry != NEVER;
        self.ops.part(keyspace).push(Op { key, value, expiry });
        self
    }
    /// Whether some put of the batch carries an expiry.
    pub(super) fn expiring(&self) -> bool {
        self.expiring
    }
    /// Gives every put of keyspace `id` written without an expiry the expiry `at` (ms since
    /// the epoch): its keyspace's default time to live (`KeyspaceOptions::default_ttl`).
    pub(super) fn expire_unset(&mut self, id: u32, at: u64) {
        let at = expiry::stored(at);
        for op in self.ops.part(id).iter_mut() {
            if op.value.is_some() && op.expiry == NEVER {
                op.expiry = at;
                // The tag's expiry field (FORMAT.md §2).
                self.encoded +=
                    wal::op_encoded_len(0, Some(0), at) - wal::op_encoded_len(0, Some(0), NEVER);
                self.expiring = true;
            }
        }
    }
    /// Operations in the batch, on every keyspace.
    pub fn len(&self) -> usize {
        self.ops.len()
    }
    /// True when the batch holds nothing.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
    /// The batch's operations on the default keyspace in order, each a key and its value
    /// (`None`: a delete). `Error::InvalidArgument` if it changes other keyspaces too, holds
    /// a put with an expiry or deletes a range: none has a place in this list.
    pub fn into_ops(self) -> Result<BatchOps> {
        if self.deletes_ranges() {
            return Err(Error::InvalidArgument(
                "into_ops: the batch deletes a range, which BatchOps cannot carry".into(),
            ));
        }
        if let Some((id, _)) = self.ops.spaces.first() {
            return Err(Error::InvalidArgument(format!(
                "into_ops: the batch also changes keyspace id {id}, not only the default one"
            )));
        }
        if self.expiring {
            return Err(Error::InvalidArgument(
                "into_ops: the batch holds a put with an expiry, which BatchOps cannot carry"
                    .into(),
            ));
        }
        Ok(self
            .ops
            .default
            .into_iter()
            .map(|op| (op.key, op.value))
            .collect())
    }

    /// Bytes the batch takes in the write-ahead log (what `MAX_BATCH_SIZE` limits).
    pub fn encoded_len(&self) -> usize {
        wal::BATCH_HEADER_LEN + self.encoded
    }

    /// Checks every size limit, so a batch that would not replay is never acknowledged.
    pub(super) fn validate(&self) -> Result<()> {
        if self.encoded_len() > MAX_BATCH_SIZE {
            return Err(Error::InvalidArgument(format!(
                "write batch of {} operations encodes to {} bytes, over the {MAX_BATCH_SIZE}-byte \
                 limit (MAX_BATCH_SIZE): split it",
                self.len(),
                self.encoded_len()
            )));
        }
        for (_, r) in &self.ops.ranges {
            // A start made from an excluded bound is one byte longer than its key.
            let end = match &r.end {
                End::Before(k) | End::Through(k) => k.len(),
                End::Unbounded => 0,
            };
            if r.start.len() > MAX_KEY_SIZE + 1 || end > MAX_KEY_SIZE {
                return Err(Error::InvalidArgument(format!(
                    "a deleted range's bound exceeds the {MAX_KEY_SIZE}-byte key limit"
                )));
            }
        }
        for Op {
            key: k, value: v, ..
        } in self.ops.parts().flat_map(|(_, ops)| ops)
        {
            if k.len() > MAX_KEY_SIZE {
                return Err(Error::InvalidArgument(format!(
                    "key of {} bytes exceeds the {MAX_KEY_SIZE}-byte limit",
                    k.len()
                )));
            }
            if let Some(v) = v.as_ref().filter(|v| v.len() > MAX_VALUE_SIZE) {
                return Err(Error::InvalidArgument(format!(
                    "value of {} bytes exceeds the {MAX_VALUE_SIZE}-byte limit",
                    v.len()
                )));
            }
        }
        Ok(())
    }
}

/// The deleted range of `range`'s bounds: a start made inclusive (after an excluded key: its
/// `successor`; unbounded: the empty key, the first).
pub(super) fn deleted_range<K: AsRef<[u8]>>(range: impl RangeBounds<K>) -> DeletedRange {
    let start = match range.start_bound() {
        Bound::Included(k) => k.as_ref().to_vec(),
        Bound::Excluded(k) => successor(k.as_ref()),
        Bound::Unbounded => Vec::new(),
    };
    let end = match range.end_bound() {
        Bound::Included(k) => End::Through(k.as_ref().to_vec()),
        Bound::Excluded(k) => End::Before(k.as_ref().to_vec()),
        Bound::Unbounded => End::Unbounded,
    };
    DeletedRange { start, end }
}

/// How one write is made (`Db::write_opt`): `WriteOptions::default()`, or
/// `WriteOptions::synced()` for a write that must survive a power loss. `#[non_exhaustive]`
/// (see `Options`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct WriteOptions {
    /// Make the batch durable (the log synced, `fdatasync`) before the write returns `Ok`,
    /// whatever `Options::sync_writes` says: it then survives a power loss, and so does every
    /// write acknowledged before it. `false`: as `sync_writes` says. Concurrent durable
    /// writes share one sync (group commit), and a write without it that joins their group
    /// is synced with them.
    pub sync: bool,
}

impl WriteOptions {
    /// A write made durable before it returns (`sync` set).
    pub fn synced() -> Self {
        WriteOptions { sync: true }
    }
}

setters!(WriteOptions {
    with_sync => sync: bool,
});
