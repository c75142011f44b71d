//! What an open table knows about its filter blocks: a validated filter, none, or one that
//! failed validation and why (`FilterState`, `RangeFilterState`, `FilterProblem`), what a
//! prefix or range filter says (`PrefixCheck`, `RangeCheck`), and where a loaded filter's
//! bytes live (`FilterBytes`, `FilterPages`). Built by `Table::open`; read by the store's read
//! path and stats.

use crate::filter::format::HEADER_LEN;
use crate::filter::{FilterError, FilterReader, RangeFilterError, RangeFilterReader};
use crate::huge_pages::{self, HugeBytes};

/// Where an open table holds its filter blocks (`Options::filter_huge_pages`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum FilterPages {
    /// On the heap, in ordinary pages.
    #[default]
    Heap,
    /// In the process's huge-page arena (`crate::huge_pages`), or on the heap where the arena
    /// cannot map memory.
    Huge,
}

/// A loaded filter block's bytes, placed so that its bit array (after the header) starts a
/// cache line: a blocked filter's probe then reads one line, never two. (With the heap's
/// 16-byte alignment and a 48-byte header, three lines in four straddled two.)
#[derive(Debug)]
pub enum FilterBytes {
    /// On the heap: `len` bytes at `start` in `buf`.
    Heap {
        /// The allocation, a cache line longer than the block.
        buf: Vec<u8>,
        /// Where the block starts in it.
        start: usize,
        /// The block's length.
        len: usize,
    },
    /// In huge-page memory.
    Huge(HugeBytes),
}

impl FilterBytes {
    /// `len` zeroed bytes where `pages` says (the heap if the arena cannot map memory), for
    /// the block to be read into.
    pub fn zeroed(len: usize, pages: FilterPages) -> FilterBytes {
        if pages == FilterPages::Huge {
            if let Ok(b) = huge_pages::shared().alloc_aligned_at(len, HEADER_LEN) {
                return FilterBytes::Huge(b);
            }
        }
        let buf = vec![0; len.saturating_add(LINE - 1)];
        let start = (LINE - (buf.as_ptr() as usize + HEADER_LEN) % LINE) % LINE;
        FilterBytes::Heap { buf, start, len }
    }
}

/// A cache line.
const LINE: usize = 64;

impl AsMut<[u8]> for FilterBytes {
    fn as_mut(&mut self) -> &mut [u8] {
        match self {
            FilterBytes::Heap { buf, start, len } => &mut buf[*start..*start + *len],
            FilterBytes::Huge(b) => b.as_mut(),
        }
    }
}

impl AsRef<[u8]> for FilterBytes {
    #[inline(always)]
    fn as_ref(&self) -> &[u8] {
        match self {
            FilterBytes::Heap { buf, start, len } => &buf[*start..*start + *len],
            FilterBytes::Huge(b) => b.as_ref(),
        }
    }
}

/// The table's filter as loaded at open.
#[derive(Debug)]
pub enum FilterState {
    /// A validated filter block.
    Valid(FilterReader<FilterBytes>),
    /// The table was written without a filter.
    None,
    /// The filter block failed validation or does not match its table; the table is read as
    /// if it had no filter (counted in `DbStats::filter_validation_failures`).
    Invalid(FilterProblem),
}

/// The table's range filter as loaded at open.
#[derive(Debug)]
pub enum RangeFilterState {
    /// A validated range-filter block (boxed: it is large, and the table holds it whether or
    /// not there is one).
    Valid(Box<RangeFilterReader>),
    /// The table was written without a range filter.
    None,
    /// The block failed validation or does not match its table; scans read the table as if
    /// it had none (counted in `DbStats::filter_validation_failures`).
    Invalid(FilterProblem),
}

/// What a table's range filter says about a scan's range (`Table::check_range`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RangeCheck {
    /// No key of the table lies in the range: skip the table.
    Empty,
    /// The filter says "maybe".
    Maybe,
    /// The range, within the table's keys, is wider than the filter answers: read the table.
    TooWide,
    /// No usable range filter (none written, or it failed validation): read the table.
    Unfiltered,
}

/// Why a table's filter block is not used.
#[derive(Clone, Debug, PartialEq)]
pub enum FilterProblem {
    /// The block itself is damaged or of an unknown kind or version.
    Damaged(FilterError),
    /// The range-filter block is damaged or of an unknown kind or version.
    RangeDamaged(RangeFilterError),
    /// The block is intact but describes a different number of keys than the table holds:
    /// it was not built over this table's keys, so an "absent" from it could be wrong.
    KeyCountMismatch {
        /// Keys the filter header says it holds.
        filter_keys: u64,
        /// Entries the table's properties say it holds.
        table_entries: u64,
    },
    /// An intact prefix filter block that holds a different number of prefixes than the
    /// table's properties record.
    PrefixCountMismatch {
        /// Prefixes the filter header says it holds.
        filter_prefixes: u64,
        /// Distinct prefixes the table's properties record.
        table_prefixes: u64,
    },
}

/// What a table's prefix filter says about a prefix (`Table::check_prefix`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PrefixCheck {
    /// No key of the table has this prefix: skip the table.
    Absent,
    /// The filter says "maybe".
    Maybe,
    /// No usable prefix filter under this rule (none written, written under another rule,
    /// or it failed validation): the table must be read.
    Unfiltered,
}

impl std::fmt::Display for FilterProblem {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            FilterProblem::Damaged(e) => write!(f, "{e}"),
            FilterProblem::RangeDamaged(e) => write!(f, "{e}"),
            FilterProblem::KeyCountMismatch {
                filter_keys,
                table_entries,
            } => write!(
                f,
                "filter holds {filter_keys} keys but the table has {table_entries} entries"
            ),
            FilterProblem::PrefixCountMismatch {
                filter_prefixes,
                table_prefixes,
            } => write!(
                f,
                "prefix filter holds {filter_prefixes} prefixes but the table records {table_prefixes}"
            ),
        }
    }
}
