//! Procedure calls (`Op::Call`): read-modify-write and conditional writes decided when their
//! entry is applied, from the replicated data as the log leaves it (etcd's way). A service
//! registers its [`Procedures`] on every node (`ReplicationConfig::procedures`); each call
//! reads through a [`CallContext`], writes through it into the entry's batch, and answers
//! bytes that go back to its writer.
//!
//! Determinism is the contract: every node applies the same entries in the same order and
//! must write the same bytes, so a procedure may depend only on its arguments, the context's
//! reads and the call's time (`CallContext::now_millis`, stamped once by the writer) — no
//! clock, randomness or local state — and every node must run the same procedures.
//!
//! A call's reads see the data as applied before its entry plus every write the entry made
//! before it, its own included. The entry's earlier writes are kept in an `Overlay` (by
//! place and key, and the ranges deleted), as they are still in the unwritten batch; the
//! batch of earlier entries is written before an entry with calls is applied (`apply.rs`),
//! so the overlay covers one entry only.

use std::collections::HashMap;
use std::ops::{Bound, RangeBounds};
use std::time::{Duration, UNIX_EPOCH};

use super::keyspaces::{Place, Staged};
use super::{data_key, data_range};
use crate::db::WriteBatch;

/// A service's procedures, run by every node's state machine as it applies `Op::Call`s
/// (module comment: they must be deterministic, and the same on every node).
pub trait Procedures: Send + Sync + std::fmt::Debug + 'static {
    /// Runs the procedure `name` on `args`, reading and writing through `ctx`; returns the
    /// answer its writer gets. An error is a failure of the store under `ctx` (pass it on):
    /// the apply stops, as on any storage failure. A procedure that refuses its arguments
    /// writes nothing and says so in its answer. An unknown `name` should do the same.
    fn call(&self, name: &str, args: &[u8], ctx: &mut CallContext<'_>) -> crate::Result<Vec<u8>>;
}

/// A value as a call reads it: its bytes and when it expires (`None`: never), in
/// milliseconds since the Unix epoch.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Stored {
    /// The value.
    pub value: Vec<u8>,
    /// When it expires; `None`: never.
    pub expires: Option<u64>,
}

/// Where a place's key is in the overlay.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
enum PlaceId {
    Default,
    Own(String),
}

fn place_id(p: &Place) -> PlaceId {
    match p {
        Place::Default => PlaceId::Default,
        Place::Own(k) => PlaceId::Own(k.name().to_string()),
    }
}

/// The writes of the entry being applied, before its batch is written: what a call must
/// see of them.
#[derive(Default)]
pub(super) struct Overlay {
    /// Keys written by the entry: their value, or `None` if deleted.
    keys: HashMap<(PlaceId, Vec<u8>), Option<Stored>>,
    /// Ranges the entry deleted, each before any later write in `keys`.
    ranges: Vec<(PlaceId, KeyBounds)>,
}

/// Keys and their values, in key order.
pub type Pairs = Vec<(Vec<u8>, Vec<u8>)>;

/// A range's two bounds.
type KeyBounds = (Bound<Vec<u8>>, Bound<Vec<u8>>);

impl Overlay {
    pub(super) fn put(&mut self, place: &Place, key: &[u8], value: &[u8], expires: Option<u64>) {
        let stored = Stored {
            value: value.to_vec(),
            expires,
        };
        self.keys
            .insert((place_id(place), key.to_vec()), Some(stored));
    }

    pub(super) fn delete(&mut self, place: &Place, key: &[u8]) {
        self.keys.insert((place_id(place), key.to_vec()), None);
    }

    pub(super) fn delete_range(
        &mut self,
        place: &Place,
        start: &Bound<Vec<u8>>,
        end: &Bound<Vec<u8>>,
    ) {
        let id = place_id(place);
        let range = (start.clone(), end.clone());
        self.keys.retain(|(p, k), _| *p != id || !range.contains(k));
        self.ranges.push((id, range));
    }

    /// What the entry's writes say of `key` in `place`: `Some(found)` when they decide it.
    fn get(&self, place: &Place, key: &[u8]) -> Option<Option<Stored>> {
        let id = place_id(place);
        // A `HashMap` of owned keys: look up with a copy (calls read a few keys each).
        if let Some(v) = self.keys.get(&(id.clone(), key.to_vec())) {
            return Some(v.clone());
        }
        let deleted = self.ranges.iter().any(|(p, (s, e))| {
            let range: (Bound<&[u8]>, Bound<&[u8]>) =
                (s.as_ref().map(Vec::as_slice), e.as_ref().map(Vec::as_slice));
            *p == id && RangeBounds::<[u8]>::contains::<[u8]>(&range, key)
        });
        deleted.then_some(None)
    }

    pub(super) fn clear(&mut self) {
        self.keys.clear();
        self.ranges.clear();
    }
}

/// What a procedure reads and writes through: the replicated data as its entry leaves it so
/// far, at the call's time. Writes join the entry's batch.
pub struct CallContext<'a> {
    pub(super) at: u64,
    pub(super) staged: &'a mut Staged,
    pub(super) batch: &'a mut WriteBatch,
    pub(super) overlay: &'a mut Overlay,
}

impl CallContext<'_> {
    /// The call's time, in milliseconds since the Unix epoch: what expiry is judged by.
    pub fn now_millis(&self) -> u64 {
        self.at
    }

    /// `key`'s value in the replicated keyspace `keyspace` (`""`: the default one), and its
    /// expiry; `None` if absent, or expired at the call's time.
    pub fn get(&self, keyspace: &str, key: &[u8]) -> crate::Result<Option<Stored>> {
        let Some(place) = self.staged.resolve(keyspace) else {
            return Ok(None);
        };
        let found = match self.overlay.get(&place, key) {
            Some(found) => found,
            None => {
                let entry = match &place {
                    Place::Default => self.staged.db().entry_at(&data_key(key), self.at)?,
                    Place::Own(k) => k.entry_at(key, self.at)?,
                };
                entry.map(|(value, expires)| Stored { value, expires })
            }
        };
        Ok(found.filter(|s| s.expires.is_none_or(|at| at > self.at)))
    }

    /// The live keys and values of `keyspace` from `start` up to `end` (excluded), in key
    /// order, at most `limit` of them, and whether more follow: as `get` reads them, the
    /// entry's earlier writes included. The work is bounded by `limit` plus the keys the
    /// entry deleted in the range.
    pub fn scan(
        &self,
        keyspace: &str,
        start: &[u8],
        end: &[u8],
        limit: usize,
    ) -> crate::Result<(Pairs, bool)> {
        let Some(place) = self.staged.resolve(keyspace) else {
            return Ok((Vec::new(), false));
        };
        let inside = |k: &[u8]| start <= k && k < end;
        let range = (
            Bound::Included(start.to_vec()),
            Bound::Excluded(end.to_vec()),
        );
        // The store's entries not decided by the entry's writes, up to one past the limit.
        let (own, range, strip) = match &place {
            Place::Default => (
                None,
                data_range(Bound::Included(start), Bound::Excluded(end)),
                1,
            ),
            Place::Own(k) => (Some(k), range, 0),
        };
        let iter = crate::db::scan_at(self.staged.db(), own, range, self.at)?;
        let mut found = std::collections::BTreeMap::new();
        for e in iter {
            let (key, value) = e?;
            let key = key.get(strip..).unwrap_or_default().to_vec();
            if self.overlay.get(&place, &key).is_some() {
                continue;
            }
            found.insert(key, value);
            if found.len() > limit {
                break;
            }
        }
        // The entry's own live writes in the range.
        let id = place_id(&place);
        for ((p, k), v) in &self.overlay.keys {
            if *p == id && inside(k) {
                if let Some(s) = v
                    .as_ref()
                    .filter(|s| s.expires.is_none_or(|at| at > self.at))
                {
                    found.insert(k.clone(), s.value.clone());
                }
            }
        }
        let more = found.len() > limit;
        Ok((found.into_iter().take(limit).collect(), more))
    }

    /// Sets `key` to `value` in `keyspace` until `expires` (ms since the epoch; `None`:
    /// never), as `Op::PutUntil` / `Op::PutIn` do.
    pub fn put(
        &mut self,
        keyspace: &str,
        key: &[u8],
        value: &[u8],
        expires: Option<u64>,
    ) -> crate::Result<()> {
        let place = self.staged.place_for_write(keyspace, self.batch)?;
        self.overlay.put(&place, key, value, expires);
        put_at(self.batch, &place, key, value, expires);
        Ok(())
    }

    /// Removes `key` from `keyspace`.
    pub fn delete(&mut self, keyspace: &str, key: &[u8]) {
        if let Some(place) = self.staged.resolve(keyspace) {
            self.overlay.delete(&place, key);
            delete_at(self.batch, &place, key);
        }
    }

    /// Removes every key of `keyspace` from `start` up to `end` (excluded), as
    /// `Op::DeleteRange` does; the call's later reads see them gone.
    pub fn delete_range(&mut self, keyspace: &str, start: &[u8], end: &[u8]) {
        if let Some(place) = self.staged.resolve(keyspace) {
            let range = (
                Bound::Included(start.to_vec()),
                Bound::Excluded(end.to_vec()),
            );
            self.overlay.delete_range(&place, &range.0, &range.1);
            delete_range_at(self.batch, &place, range);
        }
    }
}

/// A put into `place` (the batch's form of one).
pub(super) fn put_at(
    batch: &mut WriteBatch,
    place: &Place,
    key: &[u8],
    value: &[u8],
    expires: Option<u64>,
) {
    // A `SystemTime` holds every u64 of milliseconds on Linux (i64 seconds); where it would
    // not, the latest it holds, which the store clamps like any time past its own latest.
    let at = expires.map(|ms| {
        UNIX_EPOCH
            .checked_add(Duration::from_millis(ms))
            .unwrap_or(UNIX_EPOCH + Duration::from_millis(u64::MAX >> 11))
    });
    match (place, at) {
        (Place::Default, None) => batch.put(data_key(key), value),
        (Place::Default, Some(at)) => batch.put_with_expiry(data_key(key), value, at),
        (Place::Own(k), None) => batch.put_in(k, key, value),
        (Place::Own(k), Some(at)) => batch.put_in_with_expiry(k, key, value, at),
    };
}

/// A delete from `place`.
pub(super) fn delete_at(batch: &mut WriteBatch, place: &Place, key: &[u8]) {
    match place {
        Place::Default => batch.delete(data_key(key)),
        Place::Own(k) => batch.delete_in(k, key),
    };
}

/// A range delete in `place`: in the default place, the data keys of the range only.
pub(super) fn delete_range_at(
    batch: &mut WriteBatch,
    place: &Place,
    (start, end): (Bound<Vec<u8>>, Bound<Vec<u8>>),
) {
    match place {
        Place::Default => {
            let (start, end) = (
                start.as_ref().map(Vec::as_slice),
                end.as_ref().map(Vec::as_slice),
            );
            batch.delete_range(data_range(start, end));
        }
        Place::Own(k) => {
            batch.delete_range_in(k, (start, end));
        }
    };
}
