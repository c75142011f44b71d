//! The memtable's hash index: each key written to the memtable → the newest entry of it in
//! the memtable's log (`mod.rs`). A point lookup is one probe here, where the skip list it
//! replaced walked ~2 nodes per level (a cache miss each below the levels that stay cached).
//!
//! Open addressing with linear probing over 8-byte atomic slots. A slot is 0 (empty) or the
//! top 32 bits of the key's hash (its tag) beside the entry's number + 1 (32 bits). A slot's
//! home is the tag's top bits (as many as the table has slots), so growing the table moves
//! each slot by its tag alone, in one pass without touching an entry: measured, growing by
//! rehashing each entry's key cost 5.3% of a 2M-key bulk load, one cache miss per key. A
//! lookup compares tags first and reads an entry (to compare its key) only on a tag match,
//! so a probe of a slot holding another key costs no load beyond the slot's own line.
//!
//! One writer (the store's writer lock), any number of lock-free readers: the writer stores a
//! slot with `Release` after the entry it points at is written, a reader loads it with
//! `Acquire`. A slot, once claimed, always holds the same key (its entry number only moves to
//! newer versions), so a reader probing while the writer inserts finds either the old or the
//! new version, both whole. The writer keeps the load at most one half (`needs_growth`); a
//! larger table is built beside the old one and published whole (`mod.rs`), so a reader on
//! the old table still ends its probe at an empty slot. Why not a crate: the index stores no
//! key (the log holds it), one 8-byte slot per key; a general concurrent map (`papaya`,
//! `dashmap`) stores its own copy of each key and, for `dashmap`, takes a lock a reader
//! writes to (measured: shared writes made two threads slower than one).

use std::sync::atomic::{AtomicU64, Ordering};

/// Most entries one memtable can index (2^32 - 2: at 64 bytes each, 256 GiB of memtable).
pub(super) const MAX_ENTRIES: usize = u32::MAX as usize - 1;
/// Slots of a new memtable's index (a power of two, at most 2^32).
const INITIAL_SLOTS: usize = 1024;
/// Slots of a new index of a keyspace other than the default (`Index::small`): a rotation
/// makes a memtable for every keyspace, most of which may take few writes, and 1,000
/// keyspaces would otherwise zero 8 MiB on the writer's path at each rotation. The index
/// doubles as it fills, so a busy keyspace pays a few small rebuilds.
const SMALL_SLOTS: usize = 16;

/// The slot of `entry` for a key hashed to `hash`.
fn slot(hash: u64, entry: usize) -> u64 {
    hash & !u64::from(u32::MAX) | (entry as u64 + 1)
}

/// The entry a non-empty slot names.
fn entry_of(slot: u64) -> usize {
    (slot & u64::from(u32::MAX)) as usize - 1
}

/// A slot found by `Index::slot_for`: where it is, and the entry it names (`None`: the empty
/// slot a new key claims).
pub(super) struct Slot {
    pos: usize,
    pub(super) entry: Option<usize>,
}

/// A table of slots (see the module comment).
pub(super) struct Index {
    slots: Box<[AtomicU64]>,
    /// `32 - log2(slots)`: the tag's top bits give a slot's home.
    shift: u32,
}

impl Default for Index {
    fn default() -> Self {
        Index::with_slots(INITIAL_SLOTS)
    }
}

impl Index {
    /// An empty table of `SMALL_SLOTS` slots.
    pub(super) fn small() -> Self {
        Index::with_slots(SMALL_SLOTS)
    }

    /// An empty table that takes `keys` keys without growing (at least `INITIAL_SLOTS`
    /// slots, at most 2^32).
    pub(super) fn for_keys(keys: usize) -> Self {
        let slots = keys.saturating_mul(2).saturating_add(2).next_power_of_two();
        Index::with_slots(slots.clamp(INITIAL_SLOTS, u32::MAX as usize + 1))
    }

    /// An empty table of `n` slots (a power of two, at most 2^32).
    fn with_slots(n: usize) -> Self {
        debug_assert!(n.is_power_of_two() && n.trailing_zeros() <= 32);
        Index {
            slots: (0..n).map(|_| AtomicU64::new(0)).collect(),
            shift: 32 - n.trailing_zeros(),
        }
    }

    /// True when one more key would take the load above one half.
    pub(super) fn needs_growth(&self, keys: usize) -> bool {
        (keys + 1) * 2 > self.slots.len()
    }

    /// Where the probe for a key hashed to `hash` starts.
    fn home(&self, hash: u64) -> usize {
        // `checked_shr`: a shift of 32 (a table of one slot) leaves nothing.
        ((hash >> 32) as u32).checked_shr(self.shift).unwrap_or(0) as usize
    }

    /// The slot of the key hashed to `hash` (`is_key(entry)`: the entry holds that key), or
    /// the empty slot that ends its probe sequence.
    pub(super) fn slot_for(&self, hash: u64, mut is_key: impl FnMut(usize) -> bool) -> Slot {
        let mask = self.slots.len() - 1;
        let mut pos = self.home(hash);
        loop {
            let s = self.slots[pos].load(Ordering::Acquire);
            if s == 0 {
                return Slot { pos, entry: None };
            }
            if s >> 32 == hash >> 32 && is_key(entry_of(s)) {
                return Slot {
                    pos,
                    entry: Some(entry_of(s)),
                };
            }
            pos = (pos + 1) & mask;
        }
    }

    /// The newest entry of the key hashed to `hash`, `None` when the key was never written.
    pub(super) fn find(&self, hash: u64, is_key: impl FnMut(usize) -> bool) -> Option<usize> {
        self.slot_for(hash, is_key).entry
    }

    /// Writer only: points `at` (from `slot_for` on this table, for the key hashed to `hash`,
    /// with nothing set since) at `entry`, written before this call. A new key claims the
    /// empty slot; the caller keeps the load at most one half.
    pub(super) fn set(&self, at: Slot, hash: u64, entry: usize) {
        debug_assert!(entry <= MAX_ENTRIES);
        self.slots[at.pos].store(slot(hash, entry), Ordering::Release);
    }

    /// The newest entry of every key, in slot order.
    pub(super) fn entries(&self) -> impl Iterator<Item = usize> + '_ {
        self.slots
            .iter()
            .filter_map(|s| match s.load(Ordering::Acquire) {
                0 => None,
                s => Some(entry_of(s)),
            })
    }

    /// Writer only: a table of twice the slots holding the same keys, each placed by its tag
    /// (keys are distinct: no entry is read).
    pub(super) fn grown(&self) -> Index {
        let next = Index::with_slots(self.slots.len() * 2);
        for s in self.slots.iter().map(|s| s.load(Ordering::Relaxed)) {
            if s != 0 {
                // A slot's top 32 bits are its key's hash's: it stands for the hash here.
                let at = next.slot_for(s, |_| false);
                next.set(at, s, entry_of(s));
            }
        }
        next
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What `Memtable::apply` does: find the key's slot, point it at `entry`; the entry it
    /// named before.
    fn insert(
        index: &Index,
        hash: u64,
        entry: usize,
        is_key: impl FnMut(usize) -> bool,
    ) -> Option<usize> {
        let at = index.slot_for(hash, is_key);
        let previous = at.entry;
        index.set(at, hash, entry);
        previous
    }

    /// Keys are their entry numbers here; `hashes[e]` is entry e's hash.
    fn insert_all(index: &Index, hashes: &[u64]) {
        for (e, &h) in hashes.iter().enumerate() {
            assert_eq!(
                insert(index, h, e, |o| o == e),
                None,
                "entry {e} is a new key"
            );
        }
    }

    #[test]
    fn colliding_hashes_and_tags_keep_keys_apart() {
        // Equal hashes (same home, same tag), the same home with another tag, and wrap-around
        // from the last slot (home 1023 of 1024).
        let hashes = [
            5 << 54,
            5 << 54,
            5 << 54 | 1 << 33,
            1023 << 54,
            1023 << 54,
            7,
        ];
        let index = Index::default();
        insert_all(&index, &hashes);
        for (e, &h) in hashes.iter().enumerate() {
            assert_eq!(index.find(h, |o| o == e), Some(e));
        }
        assert_eq!(index.find(5 << 54, |_| false), None);
        assert_eq!(
            index.find(6 << 54, |_| true),
            None,
            "empty slot ends the probe"
        );
        // A new version replaces the old in place and reports it.
        assert_eq!(insert(&index, 5 << 54, 10, |o| o == 1), Some(1));
        assert_eq!(index.find(5 << 54, |o| o == 10), Some(10));
        assert_eq!(index.find(5 << 54, |o| o == 1), None);
        let mut all: Vec<usize> = index.entries().collect();
        all.sort_unstable();
        assert_eq!(all, vec![0, 2, 3, 4, 5, 10]);
    }

    #[test]
    fn growing_keeps_every_key_findable() {
        let hashes: Vec<u64> = (0..5000u64)
            .map(|i| i.wrapping_mul(0x9E37_79B9_7F4A_7C15))
            .collect();
        let mut index = Index::default();
        for (e, &h) in hashes.iter().enumerate() {
            if index.needs_growth(e) {
                index = index.grown();
            }
            assert_eq!(insert(&index, h, e, |o| o == e), None);
        }
        assert!(index.slots.len() >= 2 * hashes.len());
        for (e, &h) in hashes.iter().enumerate() {
            assert_eq!(index.find(h, |o| o == e), Some(e), "entry {e}");
        }
        assert_eq!(index.entries().count(), hashes.len());
    }
}
