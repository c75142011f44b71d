//! What a table's reads hand out: a data block being looked at (`BlockRef`: cached, mapped,
//! or read into a thread's buffer), a value lent from one (`LentValue`), the block a cursor is
//! on (`Held`), and where a block was found (`Found`).

use std::ops::Range;
use std::sync::Arc;

use super::super::block::BlockHandle;
use super::super::cache::Block;
use super::super::scratch::Scratch;

/// A data block being looked at: one the block cache holds (or a copy read for it), or the
/// mapped bytes of one in a table read through a memory map.
pub(crate) enum BlockRef<'t> {
    /// A verified payload, shared with the cache.
    Cached(Arc<Block>),
    /// A verified payload inside the table's map.
    Mapped(&'t [u8]),
    /// A verified payload read into this thread's scratch buffer, not cached.
    Scratch(Scratch),
}

impl BlockRef<'_> {
    pub(super) fn payload(&self) -> &[u8] {
        match self {
            BlockRef::Cached(b) => b.payload(),
            BlockRef::Mapped(p) => p,
            BlockRef::Scratch(s) => &s.0,
        }
    }
}

/// A value found by `Table::get_lent`, lent from the data block that holds it (which it
/// keeps: a block read for the lookup goes back to the thread's buffers when this drops).
pub(crate) struct LentValue<'t> {
    pub(super) block: BlockRef<'t>,
    /// The value's place in the block's payload.
    pub(super) at: Range<usize>,
}

impl LentValue<'_> {
    /// The value's bytes.
    pub(crate) fn bytes(&self) -> &[u8] {
        &self.block.payload()[self.at.clone()]
    }
}

/// The data block a cursor (`iter.rs`) is on.
pub(crate) enum Held {
    /// None (before the first block, or after the last).
    Empty,
    /// Shared with the block cache.
    Cached(Arc<Block>),
    /// Read into a buffer of the thread's (`scratch.rs`), handed back when the cursor drops it.
    Owned(Scratch),
    /// These bytes of the table's map (verified when taken).
    Mapped(Range<usize>),
}

/// Where `find_block` found a data block.
pub(super) enum Found<'t> {
    Mapped(&'t [u8]),
    Cached(Arc<Block>),
    /// Neither: the caller reads it.
    Unread(BlockHandle),
}
