//! # lsm-bloom
//!
//! Bloom filter blocks for SSTables, and an embedded LSM key-value store whose point lookups
//! skip every table whose filter says "absent" — so looking up a key that is not there costs
//! almost no disk reads.
//!
//! - [`filter`]: the filter blocks on their own (standard and cache-local blocked Bloom,
//!   Ribbon, and Grafite range filters), usable by any table format. Depends on nothing else
//!   in this crate.
//! - [`table`]: SSTables with data, index, filter, range filter and properties blocks.
//! - [`db`]: the store — WAL, memtable, tables, manifest, leveled compaction, recovery.
//! - [`prefix`]: prefix rules; with one set, tables also carry prefix filters and
//!   `Db::scan_prefix` skips the tables that lack the prefix. With `Options::range_filters`,
//!   a scan of a short range skips the tables whose range filter says it is empty.
//! - [`inspect`]: what the `dump_filter` tool prints.
//! - `rocksdb` (feature `rocksdb-plugin`): the same filter blocks, and a per-level filter
//!   budget, as RocksDB filter policies.
//! - [`fs`]: the file operations the write path makes, and a fault-injecting file system
//!   for testing what happens when they fail.
//! - [`expiry`]: keys that expire (`WriteBatch::put_with_expiry`), and the clock that says
//!   when.
//!
//! Every on-disk byte is specified in `FORMAT.md`.
//!
//! ```
//! use lsm_bloom::{Db, Options};
//!
//! let dir = tempfile::tempdir().expect("temporary directory");
//! let db = Db::open(dir.path(), Options::default())?;
//! db.put(b"url:https://example.com/", b"seen")?;
//! db.flush()?; // now in a table with a filter block
//! assert!(db.get(b"url:https://example.com/")?.is_some());
//! assert!(db.get(b"url:https://example.com/other")?.is_none()); // filter skips the table
//! assert_eq!(db.stats().total.data_block_reads, 1);
//! # Ok::<(), lsm_bloom::Error>(())
//! ```
#![cfg_attr(docsrs, feature(doc_cfg))]
#![deny(missing_docs)]
#![deny(unsafe_op_in_unsafe_fn)]
#![deny(clippy::undocumented_unsafe_blocks)]

#[macro_use]
mod setters;

mod coding;
pub mod db;
pub mod error;
pub mod expiry;
pub mod filter;
mod framed;
pub mod fs;
pub mod huge_pages;
pub mod inspect;
mod prefetch;
pub mod prefix;
#[cfg(feature = "replication")]
#[cfg_attr(docsrs, doc(cfg(feature = "replication")))]
pub mod replication;
#[cfg(feature = "rocksdb-plugin")]
#[cfg_attr(docsrs, doc(cfg(feature = "rocksdb-plugin")))]
pub mod rocksdb;
pub mod table;

#[cfg(test)]
mod fuzz_tests;

#[cfg(test)]
mod test_counts;

/// The rustls this crate is built with (feature `tls`), for its TLS configurations.
#[cfg(feature = "tls")]
#[cfg_attr(docsrs, doc(cfg(feature = "tls")))]
pub use rustls;

pub use db::stats::{DbStats, KeyspaceStats};
pub use db::{
    Allocation, BatchOps, CheckpointReport, Compressions, Db, DbCursor, DbIter, FilterBudget,
    FilterMemory, Filters, HugePages, Keyspace, KeyspaceOptions, LevelAllocation, OptionChange,
    Options, OptionsReport, PrefixFilters, RangeFilters, RecoveryReport, Snapshot,
    SnapshotKeyspace, Transaction, TransactionIter, WalRecovery, WriteBatch, WriteOptions,
    DEFAULT_KEYSPACE, DEFAULT_TRANSACTION_LIMIT,
};
pub use error::{Error, Result};
pub use expiry::{Clock, DefaultTtl, KeyExpiry, ManualClock, SystemClock, MAX_TTL};
pub use filter::{FilterKind, FilterPolicy, RangePolicy};
pub use prefix::PrefixExtractor;
pub use table::Compression;

/// The README's examples, compiled and run as doctests.
#[doc = include_str!("../README.md")]
#[cfg(doctest)]
pub struct ReadmeDoctests;

/// docs/options.md's example, compiled and run as a doctest.
#[doc = include_str!("../docs/options.md")]
#[cfg(doctest)]
pub struct OptionsDoctests;

/// docs/keyspaces.md's example, compiled and run as a doctest.
#[doc = include_str!("../docs/keyspaces.md")]
#[cfg(doctest)]
pub struct KeyspacesDoctests;

/// docs/expiry.md's example, compiled and run as a doctest.
#[doc = include_str!("../docs/expiry.md")]
#[cfg(doctest)]
pub struct ExpiryDoctests;

/// docs/range-deletes.md's example, compiled and run as a doctest.
#[doc = include_str!("../docs/range-deletes.md")]
#[cfg(doctest)]
pub struct RangeDeletesDoctests;

/// docs/transactions.md's example, compiled and run as a doctest.
#[doc = include_str!("../docs/transactions.md")]
#[cfg(doctest)]
pub struct TransactionsDoctests;
