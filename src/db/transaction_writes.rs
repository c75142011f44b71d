//! The writes a transaction holds for its commit (`Transaction`): puts and deletes by keyspace
//! and key, and the ranges it deleted. Reads consult them before the snapshot: an own write of
//! a key is its value, a key inside an own range is absent.
//!
//! Order within the transaction is kept the way a `WriteBatch` keeps it: a range deletes the
//! transaction's earlier writes inside it at once (they leave the map), so the writes left
//! inside a range were all made after it. The commit's batch therefore holds the ranges first
//! and the writes after them, which gives each key its last write.
//!
//! The ranges are a plain list per keyspace, searched in turn: a transaction deletes few
//! ranges, and their bytes count against its limit like its other writes.

use std::collections::{BTreeMap, VecDeque};
use std::ops::{Bound, RangeBounds};
use std::time::{Duration, UNIX_EPOCH};

use super::batch::WriteBatch;
use super::keyspace::Keyspace;
use crate::expiry::NEVER;

/// A range with owned bounds, as `own_bounds` gives it.
pub(super) type OwnRange = (Bound<Vec<u8>>, Bound<Vec<u8>>);

/// A put or delete the transaction holds.
#[derive(Debug)]
pub(super) struct Pending {
    /// `None`: a delete.
    pub(super) value: Option<Vec<u8>>,
    /// A put's stored expiry, or `NEVER`.
    pub(super) expiry: u64,
}

/// What an own write says of a key, before the snapshot is asked.
pub(super) enum Own<'a> {
    /// The transaction wrote nothing over it: the snapshot answers.
    Unwritten,
    /// The transaction deleted it, alone or in a range.
    Deleted,
    /// The transaction put it.
    Put(&'a Pending),
}

/// A transaction's own writes, by keyspace id.
#[derive(Debug, Default)]
pub(super) struct OwnWrites {
    keys: BTreeMap<u32, BTreeMap<Vec<u8>, Pending>>,
    ranges: BTreeMap<u32, Vec<OwnRange>>,
    /// A handle of each keyspace written other than the default (the batch needs them).
    keyspaces: Vec<Keyspace>,
}

/// Whether `range` holds `key`.
pub(super) fn covers(range: &OwnRange, key: &[u8]) -> bool {
    fn b(b: &Bound<Vec<u8>>) -> Bound<&[u8]> {
        b.as_ref().map(Vec::as_slice)
    }
    RangeBounds::<&[u8]>::contains(&(b(&range.0), b(&range.1)), &key)
}

impl OwnWrites {
    /// Notes `keyspace` (when not the default) as one the commit writes.
    pub(super) fn note(&mut self, keyspace: &Keyspace) {
        if !self.keyspaces.iter().any(|h| h.id() == keyspace.id()) {
            self.keyspaces.push(keyspace.clone());
        }
    }

    /// Puts (`Some`) or deletes (`None`) `key` in keyspace `id`, over any earlier own write.
    pub(super) fn write(&mut self, id: u32, key: Vec<u8>, value: Option<Vec<u8>>, expiry: u64) {
        self.keys
            .entry(id)
            .or_default()
            .insert(key, Pending { value, expiry });
    }

    /// Deletes `range` in keyspace `id`: the own writes inside it go now, the snapshot's keys
    /// inside it read as absent from now on.
    pub(super) fn delete_range(&mut self, id: u32, range: OwnRange) {
        if let Some(keys) = self.keys.get_mut(&id) {
            keys.retain(|k, _| !covers(&range, k));
        }
        self.ranges.entry(id).or_default().push(range);
    }

    /// What the own writes say of `key` in keyspace `id`.
    pub(super) fn of(&self, id: u32, key: &[u8]) -> Own<'_> {
        if let Some(p) = self.keys.get(&id).and_then(|k| k.get(key)) {
            return match p.value {
                Some(_) => Own::Put(p),
                None => Own::Deleted,
            };
        }
        if self.ranges_of(id).iter().any(|r| covers(r, key)) {
            return Own::Deleted;
        }
        Own::Unwritten
    }

    /// The ranges deleted in keyspace `id`, in the order given.
    pub(super) fn ranges_of(&self, id: u32) -> &[OwnRange] {
        self.ranges.get(&id).map_or(&[], Vec::as_slice)
    }

    /// The puts and deletes of keyspace `id` in `range`, in key order.
    pub(super) fn in_range(
        &self,
        id: u32,
        range: OwnRange,
    ) -> impl Iterator<Item = (&Vec<u8>, &Pending)> {
        self.keys
            .get(&id)
            .into_iter()
            .flat_map(move |k| k.range::<Vec<u8>, _>(range.clone()))
    }

    /// How many puts and deletes are held, over every keyspace.
    pub(super) fn key_count(&self) -> usize {
        self.keys.values().map(BTreeMap::len).sum()
    }

    /// The commit's batch: every range, then every put and delete (see the module comment).
    pub(super) fn to_batch(&self) -> WriteBatch {
        let mut batch = WriteBatch::new();
        let keyspace = |id: u32| self.keyspaces.iter().find(|k| k.id() == id);
        for (&id, ranges) in &self.ranges {
            for r in ranges {
                match keyspace(id) {
                    None => batch.delete_range(r.clone()),
                    Some(k) => batch.delete_range_in(k, r.clone()),
                };
            }
        }
        for (&id, writes) in &self.keys {
            for (key, p) in writes {
                let key = key.as_slice();
                let at = || UNIX_EPOCH + Duration::from_millis(p.expiry);
                match (keyspace(id), &p.value) {
                    (None, None) => batch.delete(key),
                    (None, Some(v)) if p.expiry == NEVER => batch.put(key, v.as_slice()),
                    (None, Some(v)) => batch.put_with_expiry(key, v.as_slice(), at()),
                    (Some(k), None) => batch.delete_in(k, key),
                    (Some(k), Some(v)) if p.expiry == NEVER => batch.put_in(k, key, v.as_slice()),
                    (Some(k), Some(v)) => batch.put_in_with_expiry(k, key, v.as_slice(), at()),
                };
            }
        }
        batch
    }
}

/// The snapshot's entries a scan must hide: those inside a range the transaction deleted.
#[derive(Debug, Default)]
pub(super) struct Hidden(Vec<OwnRange>);

impl Hidden {
    pub(super) fn new(ranges: &[OwnRange]) -> Self {
        Hidden(ranges.to_vec())
    }

    pub(super) fn hides(&self, key: &[u8]) -> bool {
        self.0.iter().any(|r| covers(r, key))
    }
}

/// Own writes as a scan lays them over the snapshot, in key order (`None`: deleted).
pub(super) type Overlay = VecDeque<(Vec<u8>, Option<Vec<u8>>)>;
