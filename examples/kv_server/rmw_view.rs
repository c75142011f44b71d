//! What a change (`rmw.rs`) sees of one database: its string values and its Bloom filter
//! keys (`bloom.rs`), each in a place of its own, and the rules that make the two one set of
//! keys with a type each.
//!
//! A key is a string if the values place holds it, else a Bloom filter if the filters place
//! holds its header (`bloom::header_key`), else absent. A plain `SET` or `MSET` writes the
//! values place without looking (they stay as fast as before filters existed), so a filter's
//! header may lie under a string of the same name: it is dead, never read while the string
//! lives, and every change that removes or expires a string removes it too (`put`, `delete`,
//! and `Space::put_until` / `Space::delete` for the writes that bypass changes).

use std::collections::HashMap;

use lsm_bloom::KeyExpiry;

use super::bloom::{header_key, items_range, Header};
use super::resp::Reply;
use super::store::{Space, StoreResult};

/// A live value and its expiry (ms since the epoch; `None`: never), or absent.
pub type Found = Option<(Vec<u8>, Option<u64>)>;

/// A key wherever it lives: its place and what it holds there (a filter's header), or
/// absent.
pub type Located = Option<(Place, Vec<u8>, Option<u64>)>;

/// A range's live keys and values as a change lists them: at most a limit of them, and
/// whether more follow.
pub type Listed = (Vec<(Vec<u8>, Vec<u8>)>, bool);

/// Where a change reads and writes in its database.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Place {
    /// String values, under their keys.
    Values,
    /// Bloom filter keys: headers, items and the generation counter (`bloom.rs`).
    Filters,
}

/// Redis's answer to a command on a key of another type.
pub fn wrong_type() -> Reply {
    Reply::Error("WRONGTYPE Operation against a key holding the wrong kind of value".into())
}

/// Where a change reads and writes one database; its reads see its writes.
pub trait Rmw {
    /// `key`'s value and expiry in `place`, if it is live there.
    fn read(&mut self, place: Place, key: &[u8]) -> StoreResult<Found>;
    /// Whether `key` is live in `place` (no value copied where the store allows).
    fn contains(&mut self, place: Place, key: &[u8]) -> StoreResult<bool>;
    /// Sets `key` in `place` to a value and expiry, or deletes it (`None`).
    fn write(&mut self, place: Place, key: &[u8], to: Found) -> StoreResult<()>;
    /// Deletes every key of `place` from `start` up to `end` (excluded).
    fn delete_range(&mut self, place: Place, start: &[u8], end: &[u8]) -> StoreResult<()>;
    /// The live keys of `place` from `start` up to `end` (excluded) and their values, in
    /// order, at most `limit` of them.
    fn entries(&mut self, place: Place, range: (&[u8], &[u8]), limit: usize)
        -> StoreResult<Listed>;
    /// The time the change is decided at, in ms since the epoch.
    fn now_ms(&self) -> u64;

    /// The string `key`'s value and expiry, if it is live; `WRONGTYPE` for a filter.
    fn get(&mut self, key: &[u8]) -> StoreResult<Found> {
        match self.read(Place::Values, key)? {
            Some(found) => Ok(Some(found)),
            None if self.contains(Place::Filters, &header_key(key))? => Err(wrong_type()),
            None => Ok(None),
        }
    }

    /// `key` wherever it lives: the place and what it holds there (a filter's header).
    fn locate(&mut self, key: &[u8]) -> StoreResult<Located> {
        if let Some((v, e)) = self.read(Place::Values, key)? {
            return Ok(Some((Place::Values, v, e)));
        }
        Ok(self
            .read(Place::Filters, &header_key(key))?
            .map(|(v, e)| (Place::Filters, v, e)))
    }

    /// Whether `key` is live, of any type.
    fn exists(&mut self, key: &[u8]) -> StoreResult<bool> {
        Ok(
            self.contains(Place::Values, key)?
                || self.contains(Place::Filters, &header_key(key))?,
        )
    }

    /// Sets the string `key` to `value` until `expires` (`None`: never), replacing a filter
    /// of that name.
    fn put(&mut self, key: &[u8], value: Vec<u8>, expires: Option<u64>) -> StoreResult<()> {
        self.drop_filter(key)?;
        self.write(Place::Values, key, Some((value, expires)))
    }

    /// Writes what `locate` found back to its place (`key` as the command names it).
    fn put_at(
        &mut self,
        place: Place,
        key: &[u8],
        value: Vec<u8>,
        expires: Option<u64>,
    ) -> StoreResult<()> {
        match place {
            Place::Values => self.put(key, value, expires),
            Place::Filters => self.write(Place::Filters, &header_key(key), Some((value, expires))),
        }
    }

    /// Removes `key`, of any type (a filter's items stay behind, unreachable: `bloom.rs`).
    fn delete(&mut self, key: &[u8]) -> StoreResult<()> {
        self.drop_filter(key)?;
        self.write(Place::Values, key, None)
    }

    /// Removes the filter named `key`, if there is one: its header, and its items (a
    /// damaged header goes alone).
    fn drop_filter(&mut self, key: &[u8]) -> StoreResult<()> {
        let h = header_key(key);
        if let Some((header, _)) = self.read(Place::Filters, &h)? {
            if let Ok(header) = Header::decode(&header) {
                let (start, end) = items_range(header.generation);
                self.delete_range(Place::Filters, &start, &end)?;
            }
            self.write(Place::Filters, &h, None)?;
        }
        Ok(())
    }
}

/// A change's view of one database of the local store (or, as the negative control of the
/// cluster tests, a cluster node's own reads): reads now, writes batched until `finish`.
pub struct SpaceRmw<'s, 'a> {
    space: &'s Space<'a>,
    /// The database's filters keyspace as the change first looked for it (`Unmade`: none);
    /// not looked up by a change that never touches filters.
    filters: std::cell::OnceCell<Space<'a>>,
    now: u64,
    /// What the change wrote, for its later reads and then the batch: each key's last value
    /// and expiry, or deleted.
    written: [HashMap<Vec<u8>, Found>; 2],
    /// The ranges the change deleted, from and up to (excluded), by place: written before
    /// its other writes (which `written` keeps only if made after the range's delete).
    deleted: [Vec<(Vec<u8>, Vec<u8>)>; 2],
}

impl Place {
    fn index(self) -> usize {
        match self {
            Place::Values => 0,
            Place::Filters => 1,
        }
    }
}

impl<'s, 'a> SpaceRmw<'s, 'a> {
    pub fn new(space: &'s Space<'a>, now: u64) -> Self {
        SpaceRmw {
            space,
            filters: std::cell::OnceCell::new(),
            now,
            written: [HashMap::new(), HashMap::new()],
            deleted: [Vec::new(), Vec::new()],
        }
    }

    /// The database's space of `place` (`Unmade` where it has none).
    pub fn space_of(&self, place: Place) -> StoreResult<&Space<'a>> {
        match place {
            Place::Values => Ok(self.space),
            Place::Filters => {
                if let Some(fs) = self.filters.get() {
                    return Ok(fs);
                }
                let fs = self.space.filters(false)?;
                Ok(self.filters.get_or_init(|| fs))
            }
        }
    }

    /// Writes the change's writes as one batch, if it made any (the filters keyspace made
    /// if a filter is written and the database has none).
    pub fn finish(self) -> StoreResult<()> {
        let (mut batch, space) = self.batch();
        match self.fill(&mut batch)? {
            true => space.write(batch),
            false => Ok(()),
        }
    }

    /// A new batch of the store, and the database it writes through.
    pub fn batch(&self) -> (super::store::Batch, &'s Space<'a>) {
        (self.space.batch(), self.space)
    }

    /// Adds the change's writes to `batch` (the filters keyspace made if a filter is
    /// written and the database has none): whether it made any.
    pub fn fill(mut self, batch: &mut super::store::Batch) -> StoreResult<bool> {
        if self.written.iter().all(HashMap::is_empty) && self.deleted.iter().all(Vec::is_empty) {
            return Ok(false);
        }
        let writes_filters = self.written[Place::Filters.index()]
            .values()
            .any(Option::is_some);
        if writes_filters && matches!(self.space_of(Place::Filters)?, Space::Unmade) {
            self.filters = std::cell::OnceCell::from(self.space.filters(true)?);
        }
        let written = std::mem::take(&mut self.written);
        let deleted = std::mem::take(&mut self.deleted);
        let places = [Place::Values, Place::Filters]
            .into_iter()
            .zip(written)
            .zip(deleted);
        for ((place, writes), ranges) in places {
            if writes.is_empty() && ranges.is_empty() {
                continue;
            }
            let space = self.space_of(place)?;
            for (start, end) in ranges {
                space.delete_range(batch, start, end);
            }
            for (key, w) in writes {
                match w {
                    None => space.delete(batch, key),
                    Some((value, None)) => space.put(batch, key, value),
                    Some((value, Some(at))) => space.put_until(batch, key, value, at),
                }
            }
        }
        Ok(true)
    }

    /// Whether the change's writes decide `key` in `place`: `Some(live)` if they do.
    fn decided(&self, place: Place, key: &[u8]) -> Option<bool> {
        if let Some(w) = self.written[place.index()].get(key) {
            return Some(w.is_some());
        }
        self.in_deleted(place, key).then_some(false)
    }

    /// The keys the change wrote live in `place` from `start` up to `end` (excluded), and
    /// their values.
    fn written_in(&self, place: Place, start: &[u8], end: &[u8]) -> Vec<(Vec<u8>, Vec<u8>)> {
        let inside = |k: &Vec<u8>| start <= k.as_slice() && k.as_slice() < end;
        self.written[place.index()]
            .iter()
            .filter(|(k, _)| inside(k))
            .filter_map(|(k, w)| w.as_ref().map(|(v, _)| (k.clone(), v.clone())))
            .collect()
    }
}

impl SpaceRmw<'_, '_> {
    /// Whether a range the change deleted holds `key`.
    fn in_deleted(&self, place: Place, key: &[u8]) -> bool {
        let ranges = &self.deleted[place.index()];
        ranges
            .iter()
            .any(|(s, e)| s.as_slice() <= key && key < e.as_slice())
    }
}

impl Rmw for SpaceRmw<'_, '_> {
    fn read(&mut self, place: Place, key: &[u8]) -> StoreResult<Found> {
        if let Some(w) = self.written[place.index()].get(key) {
            return Ok(w.clone());
        }
        if self.in_deleted(place, key) {
            return Ok(None);
        }
        let space = self.space_of(place)?;
        Ok(super::values::Values::read(space, key)?.map(|(v, e)| {
            let at = match e {
                KeyExpiry::At(at) => Some(at),
                KeyExpiry::Never | KeyExpiry::Absent => None,
            };
            (v, at)
        }))
    }

    fn contains(&mut self, place: Place, key: &[u8]) -> StoreResult<bool> {
        if let Some(live) = self.decided(place, key) {
            return Ok(live);
        }
        Ok(self.space_of(place)?.get_with(key, |_| ())?.is_some())
    }

    fn write(&mut self, place: Place, key: &[u8], to: Found) -> StoreResult<()> {
        self.written[place.index()].insert(key.to_vec(), to);
        Ok(())
    }

    fn delete_range(&mut self, place: Place, start: &[u8], end: &[u8]) -> StoreResult<()> {
        let inside = |k: &[u8]| start <= k && k < end;
        self.written[place.index()].retain(|k, _| !inside(k));
        self.deleted[place.index()].push((start.to_vec(), end.to_vec()));
        Ok(())
    }

    fn entries(
        &mut self,
        place: Place,
        (start, end): (&[u8], &[u8]),
        limit: usize,
    ) -> StoreResult<Listed> {
        let mut found = std::collections::BTreeMap::new();
        let stored = self
            .space_of(place)?
            .scan(start.to_vec(), std::ops::Bound::Excluded(end.to_vec()))?;
        for e in stored {
            let (k, v) = e.map_err(|e| Reply::err(e.to_string()))?;
            if self.decided(place, &k).is_none() {
                found.insert(k, v);
                if found.len() > limit {
                    break;
                }
            }
        }
        found.extend(self.written_in(place, start, end));
        let more = found.len() > limit;
        Ok((found.into_iter().take(limit).collect(), more))
    }

    fn now_ms(&self) -> u64 {
        self.now
    }
}
