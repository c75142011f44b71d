//! What an open table knows about its filter blocks: a validated filter, none, or one that
//! failed validation and why (`FilterState`, `FilterProblem`), and what a prefix filter says
//! (`PrefixCheck`). Built by `Table::open`; read by the store's read path and stats.

use crate::filter::{FilterError, FilterReader};

/// The table's filter as loaded at open.
#[derive(Debug)]
pub enum FilterState {
    /// A validated filter block.
    Valid(FilterReader<Vec<u8>>),
    /// The table was written without a filter.
    None,
    /// The filter block failed validation or does not match its table; the table is read as
    /// if it had no filter (counted in `DbStats::filter_validation_failures`).
    Invalid(FilterProblem),
}

/// Why a table's filter block is not used.
#[derive(Clone, Debug, PartialEq)]
pub enum FilterProblem {
    /// The block itself is damaged or of an unknown kind or version.
    Damaged(FilterError),
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
