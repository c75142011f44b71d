//! SSTables: immutable sorted files of (key, value-or-tombstone) entries, each carrying a
//! filter block over its keys. Layout: FORMAT.md §3.
//!
//! Write: `TableBuilder::create(path, options)` → `(add)*` in strictly increasing key order →
//! `finish()`. Read: `Table::open(path, id)` validates the footer, loads the index, properties
//! and filter blocks into memory (a filter that fails validation is dropped and reported, never
//! trusted), and `Table::get` finds one data block per call: in the store's `BlockCache` if
//! given one, else read from the file (and then cached).

mod block;
mod builder;
mod cache;
mod compression;
mod doorkeeper;
mod expiries;
mod filter_state;
mod footer;
mod index;
mod iter;
mod properties;
mod range;
mod range_set;
mod reader;
mod scratch;

pub use block::{BlockHandle, Entry};
pub(crate) use block::{ENTRY_HEAD, TAG_DELETE, TAG_PUT};
pub use builder::{TableBuilder, TableBuilderOptions};
pub use cache::BlockCache;
pub use compression::Compression;
pub use filter_state::{
    FilterBytes, FilterPages, FilterProblem, FilterState, PrefixCheck, RangeCheck, RangeFilterState,
};
pub use footer::{Footer, FOOTER_LEN, FOOTER_V1_LEN, FOOTER_V2_LEN, TABLE_MAGIC, TABLE_VERSION};
pub(crate) use iter::TableCursor;
pub use iter::TableIter;
pub use properties::Properties;
pub(crate) use range::{Cursor, Direction, KeyRange};
pub use range_set::{successor, DeletedRange, End, RangeSet};
pub(crate) use reader::{BlockRef, LentValue};
pub use reader::{Table, TableOpen, TableReadStats, TableReads};

/// Decoders of the blocks inside a table, for the crate's decoder fuzz test.
#[cfg(test)]
pub(crate) mod decoders {
    pub(crate) use super::block::{decode_entries, put_entry, seal, seek, unseal};
    pub(crate) use super::cache::{find, find_checked};
    pub(crate) use super::compression::{open_block, BlockCompressor};
    pub(crate) use super::index::Index;
    pub(crate) use super::range_set::RangeSet;
    pub(crate) use super::reader::Table;
}
