//! Point lookups: memtables newest first, then level-0 tables newest first, then one table
//! per deeper level found by binary search. The key is hashed once; a table's data is read
//! only if its key range holds the key and its filter says "maybe". A table whose filter was
//! rejected at open is read without one (counted in `DbStats`).

use super::inner::Inner;
use super::stats::add;
use crate::error::Result;
use crate::filter::hash_key;
use crate::table::{FilterState, Table, TableReadStats};

/// What one place (memtable or table) says about a key.
pub(super) enum Lookup {
    /// The key's newest value is here.
    Value(Vec<u8>),
    /// The key's newest entry here is a deletion.
    Tombstone,
    /// Nothing here: look further down.
    Absent,
}

impl From<Option<Option<Vec<u8>>>> for Lookup {
    fn from(found: Option<Option<Vec<u8>>>) -> Self {
        match found {
            Some(Some(v)) => Lookup::Value(v),
            Some(None) => Lookup::Tombstone,
            None => Lookup::Absent,
        }
    }
}

impl Inner {
    /// The value of `key`, or `None`.
    pub(super) fn get(&self, key: &[u8]) -> Result<Option<Vec<u8>>> {
        add(&self.counters.gets, 1);
        let (mem, imm, version) = self.snapshot();
        for m in std::iter::once(&mem).chain(imm.iter().rev()) {
            match Lookup::from(m.get(key)) {
                Lookup::Value(v) => return Ok(Some(v)),
                Lookup::Tombstone => return Ok(None),
                Lookup::Absent => {}
            }
        }
        let hash = hash_key(key);
        let level0 = version.levels[0].iter().rev().map(|t| (0, t));
        let deeper = version
            .levels
            .iter()
            .enumerate()
            .skip(1)
            .filter_map(|(level, tables)| {
                let i = tables.partition_point(|t| t.max_key() < key);
                tables.get(i).map(|t| (level, t))
            });
        for (level, t) in level0.chain(deeper) {
            match self.probe(level, t, key, hash)? {
                Lookup::Value(v) => return Ok(Some(v)),
                Lookup::Tombstone => return Ok(None),
                Lookup::Absent => {}
            }
        }
        Ok(None)
    }

    /// Consults `t` for `key`: range, then filter, then one data block.
    fn probe(&self, level: usize, t: &Table, key: &[u8], hash: u64) -> Result<Lookup> {
        if !t.covers(key) {
            return Ok(Lookup::Absent);
        }
        add(&self.counters.tables_probed, 1);
        let c = &self.counters.levels[level];
        let filtered = match t.filter() {
            FilterState::Valid(f) => {
                add(&c.filter_checks, 1);
                let maybe = if f.header().seed == crate::filter::hash::DEFAULT_SEED {
                    f.may_contain_hash(hash)
                } else {
                    f.may_contain(key)
                };
                if !maybe {
                    add(&c.filter_useful, 1);
                    return Ok(Lookup::Absent);
                }
                add(&c.filter_positive, 1);
                true
            }
            FilterState::None | FilterState::Invalid(_) => {
                add(&c.unfiltered_probes, 1);
                false
            }
        };
        let mut reads = TableReadStats::default();
        let found = t.get(key, &mut reads);
        add(&c.data_block_reads, reads.blocks);
        add(&c.bytes_read, reads.bytes);
        let found = Lookup::from(found?);
        if filtered && !matches!(found, Lookup::Absent) {
            add(&c.filter_true_positive, 1);
        }
        Ok(found)
    }
}
