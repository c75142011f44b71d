//! A table's entries in key order from a start bound (`Table::iter`), reading one data block
//! at a time; a damaged block ends the iteration with its error, never a skipped entry.

use std::ops::Bound;
use std::sync::Arc;

use super::block::{decode_entries, Entry};
use super::reader::{Table, TableReadStats};
use crate::error::{Error, Result};

/// Entries of one table in key order, from a start bound; see `Table::iter`.
pub struct TableIter {
    table: Arc<Table>,
    next_block: usize,
    entries: std::vec::IntoIter<Entry>,
    start: Bound<Vec<u8>>,
    /// Reads done so far.
    pub stats: TableReadStats,
    failed: bool,
}

impl TableIter {
    pub(super) fn new(table: Arc<Table>, next_block: usize, start: Bound<&[u8]>) -> TableIter {
        TableIter {
            table,
            next_block,
            entries: Vec::new().into_iter(),
            start: match start {
                Bound::Unbounded => Bound::Unbounded,
                Bound::Included(k) => Bound::Included(k.to_vec()),
                Bound::Excluded(k) => Bound::Excluded(k.to_vec()),
            },
            stats: TableReadStats::default(),
            failed: false,
        }
    }
}

impl Iterator for TableIter {
    type Item = Result<Entry>;

    fn next(&mut self) -> Option<Self::Item> {
        loop {
            if self.failed {
                return None;
            }
            if let Some(e) = self.entries.next() {
                let before_start = match &self.start {
                    Bound::Unbounded => false,
                    Bound::Included(s) => e.key < *s,
                    Bound::Excluded(s) => e.key <= *s,
                };
                if before_start {
                    continue;
                }
                self.start = Bound::Unbounded;
                return Some(Ok(e));
            }
            let handle = self.table.block_handle(self.next_block)?;
            self.next_block += 1;
            let decoded = self
                .table
                .read_block(handle, &mut self.stats)
                .and_then(|p| {
                    decode_entries(&p).map_err(|r| {
                        Error::corruption(
                            self.table.path(),
                            format!("data block at {}: {r}", handle.offset),
                        )
                    })
                });
            match decoded {
                Ok(entries) => self.entries = entries.into_iter(),
                Err(e) => {
                    self.failed = true;
                    return Some(Err(e));
                }
            }
        }
    }
}
