//! Reads of the replicated data as applied on this node: each resolves its keyspace's place
//! (`keyspaces.rs`) once, and again if a `Clear` applied meanwhile dropped it.

use std::ops::RangeBounds;

use super::keyspaces::Place;
use super::{data_key, data_range, StateMachine};
use crate::db::{Db, DbIter};
use crate::KeyExpiry;

impl StateMachine {
    /// The value of `key` as applied on this node (no consensus round: may be stale).
    pub fn get(&self, key: &[u8]) -> crate::Result<Option<Vec<u8>>> {
        self.get_with_in("", key, <[u8]>::to_vec)
    }

    /// `key`'s value lent to `f` where it lies (`Db::get_with`), as applied on this node.
    pub fn get_with<R>(&self, key: &[u8], f: impl FnOnce(&[u8]) -> R) -> crate::Result<Option<R>> {
        self.get_with_in("", key, f)
    }

    /// Runs `read` on where `keyspace`'s data lives (`None`: it is empty) and the store, as
    /// applied on this node; again, from the new map, if the place was dropped under it (a
    /// `Clear` applied meanwhile).
    fn read<T>(
        &self,
        keyspace: &str,
        mut read: impl FnMut(Option<Place>, &Db) -> crate::Result<T>,
    ) -> crate::Result<T> {
        let mut tries = 0;
        loop {
            let spaces = self.shared.spaces.load_full();
            match read(spaces.resolve(keyspace), &spaces.db) {
                Err(crate::Error::KeyspaceDropped { .. }) if tries < 3 => tries += 1,
                done => return done,
            }
        }
    }

    /// `key`'s value in the replicated keyspace `keyspace` (`""`: the default one, as
    /// `get_with`) lent to `f`, as applied on this node.
    pub fn get_with_in<R>(
        &self,
        keyspace: &str,
        key: &[u8],
        f: impl FnOnce(&[u8]) -> R,
    ) -> crate::Result<Option<R>> {
        let mut f = Some(f);
        let found = self.read(keyspace, |place, db| {
            let lend = |v: &[u8]| f.take().map(|f| f(v));
            match place {
                None => Ok(None),
                Some(Place::Default) => db.get_with(data_key(key), lend),
                Some(Place::Own(k)) => k.get_with(key, lend),
            }
        })?;
        Ok(found.flatten())
    }

    /// Whether `key` is live in the replicated keyspace `keyspace` and until when
    /// (`Db::expiry_of`), as applied on this node and by its clock.
    pub fn expiry_of_in(&self, keyspace: &str, key: &[u8]) -> crate::Result<KeyExpiry> {
        self.read(keyspace, |place, db| match place {
            None => Ok(KeyExpiry::Absent),
            Some(Place::Default) => db.expiry_of(data_key(key)),
            Some(Place::Own(k)) => k.expiry_of(key),
        })
    }

    /// An upper bound of the keys of the replicated keyspace `keyspace` with an expiry, as
    /// applied on this node (`Keyspace::approximate_expiring_len`; the default place's counts
    /// the whole default keyspace's).
    pub fn expiring_len_in(&self, keyspace: &str) -> crate::Result<u64> {
        self.read(keyspace, |place, db| match place {
            None => Ok(0),
            Some(Place::Default) => db
                .keyspace(crate::DEFAULT_KEYSPACE)?
                .approximate_expiring_len(),
            Some(Place::Own(k)) => k.approximate_expiring_len(),
        })
    }

    /// Live keys in `range` with their values, in key order, as applied on this node.
    pub fn scan<K: AsRef<[u8]>, R: RangeBounds<K>>(&self, range: R) -> crate::Result<Scan> {
        self.scan_in("", range)
    }

    /// `scan` in the replicated keyspace `keyspace`.
    pub fn scan_in<K: AsRef<[u8]>, R: RangeBounds<K>>(
        &self,
        keyspace: &str,
        range: R,
    ) -> crate::Result<Scan> {
        self.read(keyspace, |place, db| match place {
            None => Ok(Scan {
                inner: None,
                prefixed: false,
            }),
            Some(Place::Default) => {
                let range = data_range(
                    range.start_bound().map(AsRef::as_ref),
                    range.end_bound().map(AsRef::as_ref),
                );
                Ok(Scan {
                    inner: Some(db.scan::<Vec<u8>, _>(range)?),
                    prefixed: true,
                })
            }
            Some(Place::Own(k)) => Ok(Scan {
                inner: Some(k.scan((
                    range.start_bound().map(|k| k.as_ref().to_vec()),
                    range.end_bound().map(|k| k.as_ref().to_vec()),
                ))?),
                prefixed: false,
            }),
        })
    }

    /// The keys of the replicated keyspace `keyspace` as applied on this node: counted
    /// exactly when an upper bound taken without reading a table
    /// (`Keyspace::approximate_len`) is at most `exact_up_to`, else that bound.
    pub fn len_in(&self, keyspace: &str, exact_up_to: u64) -> crate::Result<u64> {
        let bound = self.read(keyspace, |place, db| match place {
            None => Ok(0),
            Some(Place::Default) => db.keyspace(crate::DEFAULT_KEYSPACE)?.approximate_len(),
            Some(Place::Own(k)) => k.approximate_len(),
        })?;
        if bound > exact_up_to {
            return Ok(bound);
        }
        let mut n = 0;
        for e in self
            .scan_in::<&[u8], _>(keyspace, ..)
            .map(|s| s.take(usize::try_from(exact_up_to).unwrap_or(usize::MAX) + 1))?
        {
            e?;
            n += 1;
        }
        Ok(n)
    }
}

/// A scan of the replicated data (`StateMachine::scan`): `(key, value)` in key order.
pub struct Scan {
    /// `None`: the keyspace is empty.
    inner: Option<DbIter>,
    /// Whether keys carry the default place's `d` prefix, removed here.
    prefixed: bool,
}

impl Scan {
    fn strip(&self, e: crate::Result<(Vec<u8>, Vec<u8>)>) -> crate::Result<(Vec<u8>, Vec<u8>)> {
        e.map(|(mut k, v)| {
            if self.prefixed {
                k.remove(0);
            }
            (k, v)
        })
    }
}

impl Iterator for Scan {
    type Item = crate::Result<(Vec<u8>, Vec<u8>)>;
    fn next(&mut self) -> Option<Self::Item> {
        let e = self.inner.as_mut()?.next()?;
        Some(self.strip(e))
    }
}

impl DoubleEndedIterator for Scan {
    fn next_back(&mut self) -> Option<Self::Item> {
        let e = self.inner.as_mut()?.next_back()?;
        Some(self.strip(e))
    }
}
