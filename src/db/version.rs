//! The published read state: the immutable table set (`Version`) and the memtables, and how a
//! new one reaches readers.
//!
//! Nothing here is changed in place. A flush, compaction or memtable rotation builds a new
//! `State` from the current one (`Inner::update_state` in `inner.rs`, serialised by
//! `Inner::publish`) and stores it in the `ArcSwap`; a reader loads whichever is current
//! (`Inner::read_state`) and keeps using it, tables included, for the whole operation even if
//! a newer one is published meanwhile (a replaced table's file may be deleted: its open
//! handle still reads). The load is arc-swap's: it borrows a per-thread debt slot rather than
//! writing the shared reference count, so concurrent `get`s write no common cache line.

use std::sync::Arc;

use super::memtable::Memtable;
use crate::table::Table;

/// Levels the store uses (0..MAX_LEVELS): the manifest, compaction, the budget and the
/// statistics all size their per-level arrays by it.
pub const MAX_LEVELS: usize = 7;

/// Live tables per level: level 0 oldest first, other levels sorted by key.
/// Changed only through `edit`, which keeps `max_prefixes` in step with `levels`.
#[derive(Clone, Debug)]
pub(crate) struct Version {
    levels: Vec<Vec<Arc<Table>>>,
    /// Per level, each table's `max_prefix`, in the level's order: what a lookup's search for
    /// its table on a level reads (`Table::in_level_by`).
    max_prefixes: Vec<Vec<u64>>,
}

impl Version {
    pub(crate) fn empty() -> Self {
        Version {
            levels: vec![Vec::new(); MAX_LEVELS],
            max_prefixes: vec![Vec::new(); MAX_LEVELS],
        }
    }

    /// The tables per level.
    pub(crate) fn levels(&self) -> &[Vec<Arc<Table>>] {
        &self.levels
    }

    /// Changes the table set with `f`, then derives the search arrays from it again.
    pub(crate) fn edit<R>(&mut self, f: impl FnOnce(&mut [Vec<Arc<Table>>]) -> R) -> R {
        let r = f(&mut self.levels);
        self.max_prefixes = self
            .levels
            .iter()
            .map(|tables| tables.iter().map(|t| t.max_prefix()).collect())
            .collect();
        r
    }

    /// The table of `level` (1 and deeper) whose range holds `key`, if any.
    #[inline]
    pub(crate) fn in_level(&self, level: usize, key: &[u8]) -> Option<&Arc<Table>> {
        Table::in_level_by(&self.levels[level], &self.max_prefixes[level], key)
    }

    pub(crate) fn level_bytes(&self, level: usize) -> u64 {
        self.levels[level].iter().map(|t| t.file_size()).sum()
    }

    /// Deepest level holding any table.
    pub(crate) fn deepest_nonempty(&self) -> Option<usize> {
        (0..MAX_LEVELS).rev().find(|&l| !self.levels[l].is_empty())
    }
}

/// What readers see: the mutable memtable, the immutable ones waiting for flush, the tables.
/// Never changed in place: a change publishes a new `State` (`Inner::update_state`).
#[derive(Clone)]
pub(super) struct State {
    pub(super) mem: Arc<Memtable>,
    /// Oldest first.
    pub(super) imm: Vec<Arc<Memtable>>,
    pub(super) version: Arc<Version>,
}
