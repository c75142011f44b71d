//! Where replaced tables and flushed memtables go to be dropped by a background thread, never
//! by a reader.
//!
//! A table a compaction replaced is unlinked at once, but readers that loaded the old state
//! still hold it, and whoever drops the last reference closes the file. Closing the last
//! descriptor of an unlinked file frees its blocks there and then — with a file system
//! mounted with `discard`, the close waits for the device to trim them. Measured under a
//! sustained write load (`perf record -e sched:sched_switch -g`): a reader thread blocked in
//! `__fput → ext4_evict_inode → ext4_truncate → blkdev_issue_discard` for up to 100 ms, the
//! longest gets of the run. Dropping a flushed memtable likewise frees tens of thousands of
//! allocations. So a background thread that replaces either keeps a reference here, and
//! `sweep` (run by the compaction threads after each job and when they wake, at least every
//! `Options::idle_compaction_after`) drops those no one else holds any more.

use std::sync::{Arc, Mutex};

use super::locks::lock;
use super::memtable::Memtable;
use crate::table::Table;

/// Something replaced, waiting for its last reader.
enum Gone {
    Table(Arc<Table>),
    Memtable(Arc<Memtable>),
}

impl Gone {
    /// True when only the graveyard refers to it: no reader can reach it again (no published
    /// state names it), so dropping it here is the last drop.
    fn unreferenced(&self) -> bool {
        match self {
            Gone::Table(t) => Arc::strong_count(t) == 1,
            Gone::Memtable(m) => Arc::strong_count(m) == 1,
        }
    }
}

/// The replaced tables and memtables not yet dropped.
#[derive(Default)]
pub(super) struct Graveyard(Mutex<Vec<Gone>>);

impl Graveyard {
    /// Keeps `tables` until no reader holds them.
    pub(super) fn bury_tables(&self, tables: impl IntoIterator<Item = Arc<Table>>) {
        lock(&self.0).extend(tables.into_iter().map(Gone::Table));
    }

    /// Keeps `mem` until no reader holds it.
    pub(super) fn bury_memtable(&self, mem: Arc<Memtable>) {
        lock(&self.0).push(Gone::Memtable(mem));
    }

    /// Drops, on the calling thread, everything no reader holds any more.
    pub(super) fn sweep(&self) {
        let done: Vec<Gone> = {
            let mut all = lock(&self.0);
            let (done, kept) = std::mem::take(&mut *all)
                .into_iter()
                .partition(Gone::unreferenced);
            *all = kept;
            done
        };
        drop(done); // outside the lock: closing files may wait for the device
    }

    /// Entries waiting.
    #[cfg(test)]
    pub(super) fn len(&self) -> usize {
        lock(&self.0).len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_entry_is_dropped_only_once_no_one_else_holds_it() {
        let g = Graveyard::default();
        let reader = Arc::new(Memtable::new(1));
        g.bury_memtable(Arc::clone(&reader));
        g.bury_memtable(Arc::new(Memtable::new(2)));
        g.sweep();
        assert_eq!(g.len(), 1, "the memtable a reader holds was dropped");
        assert_eq!(Arc::strong_count(&reader), 2);
        drop(reader); // the reader is done: its drop is not the last one
        g.sweep();
        assert_eq!(g.len(), 0);
    }
}
