//! Decoding files for people: what the `dump_filter` example prints. `inspect_path` looks at a
//! path and returns a [`Report`] that serialises to JSON (`serde`) and prints as text
//! (`Display`). Each kind of file gets one variant: a directory is a database, a file opening
//! with the filter magic is a filter block, one with the range filter magic a range filter block, a file closing with the table magic is an SSTable;
//! a file closing with RocksDB's block-based table magic is a RocksDB SST, and a directory
//! whose `CURRENT` names a `MANIFEST-` a RocksDB database (`rocksdb_sst.rs`, `rocksdb_dir.rs`).
//! `Report::problems` lists what was invalid (a damaged filter inside a table does not stop
//! the rest of the report).

use std::path::Path;

use serde::Serialize;

use crate::error::{Error, Result};
use crate::filter::{FilterInfo, FilterKind, FilterReader, RangeFilterInfo, RangeFilterReader};
use crate::table::{FilterState, Properties, RangeFilterState, Table, TABLE_MAGIC};

mod database;
mod rocksdb_block;
mod rocksdb_builtin;
mod rocksdb_checksum;
pub mod rocksdb_dir;
pub mod rocksdb_partitions;
pub mod rocksdb_sst;
mod text;

pub use database::{BudgetArgs, DatabaseReport, KeyspaceReport};
use rocksdb_dir::RocksDatabaseReport;
use rocksdb_sst::RocksTableReport;

/// What `inspect_path` found.
#[derive(Clone, Debug, Serialize)]
#[serde(tag = "type", rename_all = "snake_case")]
#[expect(
    clippy::large_enum_variant,
    reason = "one report per dump_filter run; boxing would only complicate matching on it"
)]
pub enum Report {
    /// A stand-alone filter block file.
    Filter(FilterReport),
    /// A stand-alone range-filter block file (FORMAT.md §9).
    RangeFilter(RangeFilterReport),
    /// One SSTable.
    Table(TableReport),
    /// A database directory.
    Database(DatabaseReport),
    /// A RocksDB SST file.
    RocksdbTable(RocksTableReport),
    /// A RocksDB database directory.
    RocksdbDatabase(RocksDatabaseReport),
}

/// An SSTable: its properties and its filter.
#[derive(Clone, Debug, Serialize)]
pub struct TableReport {
    /// File name.
    pub file: String,
    /// Level (from the manifest; for a lone file, the level it was written for).
    pub level: u32,
    /// File size in bytes.
    pub file_bytes: u64,
    /// The properties block.
    pub properties: Properties,
    /// "valid", "none" (written without a filter) or "invalid".
    pub filter_status: &'static str,
    /// Why the filter is invalid.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub filter_error: Option<String>,
    /// The filter, when valid.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub filter: Option<FilterReport>,
    /// FPR measured by probing the filter with 100,000 random hashes (valid filters only).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub observed_fpr_random_probes: Option<f64>,
    /// Table format version (FORMAT.md §3).
    pub format_version: u32,
    /// The prefix filter (format 2): "valid", "none" or "invalid".
    pub prefix_filter_status: &'static str,
    /// Why the prefix filter is invalid.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub prefix_filter_error: Option<String>,
    /// The prefix filter, when valid (its `n` is the number of distinct prefixes).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub prefix_filter: Option<FilterReport>,
    /// The range filter (format 4): "valid", "none" or "invalid".
    pub range_filter_status: &'static str,
    /// Why the range filter is invalid.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub range_filter_error: Option<String>,
    /// The range filter, when valid.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub range_filter: Option<RangeFilterReport>,
    /// The first `SHOWN_RANGES` deleted ranges (format 6), first and last key each, printable;
    /// `properties.range_deletes` counts them all.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub deleted_ranges: Vec<[String; 2]>,
}

/// Deleted ranges a table report lists (the count covers the rest).
pub const SHOWN_RANGES: usize = 20;

/// Totals for one level or the whole database.
#[derive(Clone, Debug, Default, Serialize)]
pub struct Totals {
    /// Tables.
    pub tables: u64,
    /// Entries in them.
    pub entries: u64,
    /// Bytes of data blocks on disk (compressed where compression shrank them).
    pub data_bytes: u64,
    /// Bytes of the same data blocks uncompressed.
    pub raw_data_bytes: u64,
    /// Keys covered by valid filters.
    pub filter_keys: u64,
    /// Bytes of valid filter blocks (what the store holds in memory).
    pub filter_bytes: u64,
    /// Filter bits per covered key.
    pub bits_per_key: f64,
    /// Sum of the filters' expected FPRs (expected wasted reads for an absent key that
    /// reaches every table).
    pub expected_fpr_sum: f64,
    /// Sum of the filters' FPRs measured with random probes.
    pub observed_fpr_sum: f64,
    /// Filter blocks (whole-key, prefix or range) that failed validation.
    pub invalid_filters: u64,
    /// Tables with a valid range filter.
    pub range_filters: u64,
    /// Bytes of valid range-filter blocks.
    pub range_filter_bytes: u64,
    /// Tables with a valid prefix filter.
    pub prefix_filters: u64,
    /// Distinct prefixes in those filters (summed over tables).
    pub prefixes: u64,
    /// Bytes of valid prefix filter blocks.
    pub prefix_filter_bytes: u64,
    /// Sum of the prefix filters' expected FPRs (expected wasted reads for an absent-prefix
    /// scan that overlaps every table).
    pub prefix_expected_fpr_sum: f64,
    /// Prefix rules the tables were written under (`PrefixExtractor::id`).
    pub prefix_rules: Vec<String>,
    /// Filter kinds the valid filters use.
    pub kinds: Vec<FilterKind>,
    /// Bits per key the tables' writers asked for (the properties' value, key-weighted):
    /// under a filter budget, what the budget allocated when each table was written.
    pub requested_bits_per_key: f64,
    #[serde(skip)]
    requested_bits: f64,
}

impl Report {
    /// Everything found invalid, one line each (empty when all is well).
    pub fn problems(&self) -> Vec<String> {
        let table_problems = |t: &TableReport| {
            let whole = t
                .filter_error
                .as_ref()
                .map(|e| format!("{}: filter block: {e}", t.file));
            let prefix = t
                .prefix_filter_error
                .as_ref()
                .map(|e| format!("{}: prefix filter block: {e}", t.file));
            let range = t
                .range_filter_error
                .as_ref()
                .map(|e| format!("{}: range filter block: {e}", t.file));
            whole.into_iter().chain(prefix).chain(range)
        };
        match self {
            Report::Filter(_) | Report::RangeFilter(_) => Vec::new(),
            Report::Table(t) => table_problems(t).collect(),
            Report::Database(d) => {
                let spaces = d.keyspaces.iter().flat_map(|k| k.levels.iter().flatten());
                d.levels
                    .iter()
                    .flatten()
                    .chain(spaces)
                    .flat_map(table_problems)
                    .collect()
            }
            Report::RocksdbTable(t) => rocks_problems(t).collect(),
            Report::RocksdbDatabase(d) => d
                .levels
                .iter()
                .flatten()
                .chain(&d.unleveled)
                .flat_map(rocks_problems)
                .collect(),
        }
    }
}

fn rocks_problems(t: &RocksTableReport) -> impl Iterator<Item = String> + '_ {
    t.filters.iter().filter_map(move |f| {
        f.error
            .as_ref()
            .filter(|_| f.status == "invalid")
            .map(|e| format!("{}: filter block {}: {e}", t.file, f.metaindex_key))
    })
}

const RANDOM_PROBES: u64 = 100_000;

fn random_probe_fpr<B: AsRef<[u8]>>(r: &FilterReader<B>) -> f64 {
    let mut x = 0x9E37_79B9_7F4A_7C15u64;
    let hits = (0..RANDOM_PROBES)
        .filter(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            r.may_contain_hash(x)
        })
        .count();
    hits as f64 / RANDOM_PROBES as f64
}

/// Status, error and report of a table's filter.
type FilterParts = (&'static str, Option<String>, Option<FilterReport>);

fn filter_parts(state: &FilterState) -> FilterParts {
    match state {
        FilterState::Valid(r) => (
            "valid",
            None,
            Some(FilterReport {
                checksum: "ok",
                info: r.info(),
            }),
        ),
        FilterState::None => ("none", None, None),
        FilterState::Invalid(e) => ("invalid", Some(e.to_string()), None),
    }
}

impl TableReport {
    fn new(t: &Table, level: Option<u32>) -> Self {
        let (filter_status, filter_error, filter) = filter_parts(t.filter());
        // Random probes only for the whole-key filter: nothing reports the prefix filter's.
        let observed = match t.filter() {
            FilterState::Valid(r) => Some(random_probe_fpr(r)),
            _ => None,
        };
        let (prefix_filter_status, prefix_filter_error, prefix_filter) =
            filter_parts(t.prefix_filter());
        let (range_filter_status, range_filter_error, range_filter) = match t.range_filter() {
            RangeFilterState::Valid(r) => (
                "valid",
                None,
                Some(RangeFilterReport {
                    checksum: "ok",
                    info: r.info(),
                }),
            ),
            RangeFilterState::None => ("none", None, None),
            RangeFilterState::Invalid(e) => ("invalid", Some(e.to_string()), None),
        };
        TableReport {
            file: t
                .path()
                .file_name()
                .map_or_else(String::new, |f| f.to_string_lossy().into_owned()),
            level: level.unwrap_or(t.properties().level),
            file_bytes: t.file_size(),
            properties: t.properties().clone(),
            filter_status,
            filter_error,
            filter,
            observed_fpr_random_probes: observed,
            format_version: t.format_version(),
            prefix_filter_status,
            prefix_filter_error,
            prefix_filter,
            range_filter_status,
            range_filter_error,
            range_filter,
            deleted_ranges: t
                .range_deletes()
                .ranges()
                .iter()
                .take(SHOWN_RANGES)
                .map(|r| {
                    let last = match &r.end {
                        crate::table::End::Through(k) => printable(k),
                        crate::table::End::Before(k) => format!("below {}", printable(k)),
                        crate::table::End::Unbounded => "the last key".into(),
                    };
                    [printable(&r.start), last]
                })
                .collect(),
        }
    }
}

impl Totals {
    fn add(&mut self, t: &TableReport) {
        self.tables += 1;
        self.entries = self.entries.saturating_add(t.properties.entries); // from disk
        self.data_bytes = self.data_bytes.saturating_add(t.properties.data_bytes);
        self.raw_data_bytes = self
            .raw_data_bytes
            .saturating_add(t.properties.raw_data_bytes);
        if let Some(f) = &t.filter {
            self.filter_keys = self.filter_keys.saturating_add(f.info.n);
            self.filter_bytes = self.filter_bytes.saturating_add(f.info.block_bytes);
            self.expected_fpr_sum += f.info.expected_fpr;
            self.observed_fpr_sum += t.observed_fpr_random_probes.unwrap_or(0.0);
            if !self.kinds.contains(&f.info.kind) {
                self.kinds.push(f.info.kind);
                self.kinds.sort_by_key(|k| k.id());
            }
            self.requested_bits += t.properties.filter_bits_per_key * f.info.n as f64;
        }
        if let Some(f) = &t.prefix_filter {
            self.prefix_filters += 1;
            self.prefixes = self.prefixes.saturating_add(f.info.n);
            self.prefix_filter_bytes = self.prefix_filter_bytes.saturating_add(f.info.block_bytes);
            self.prefix_expected_fpr_sum += f.info.expected_fpr;
            let rule = t.properties.prefix_extractor.clone().unwrap_or_default();
            if !self.prefix_rules.contains(&rule) {
                self.prefix_rules.push(rule);
            }
        }
        if let Some(r) = &t.range_filter {
            self.range_filters += 1;
            self.range_filter_bytes = self.range_filter_bytes.saturating_add(r.info.block_bytes);
        }
        self.invalid_filters += [
            t.filter_status,
            t.prefix_filter_status,
            t.range_filter_status,
        ]
        .iter()
        .filter(|s| **s == "invalid")
        .count() as u64;
        (self.bits_per_key, self.requested_bits_per_key) = if self.filter_keys == 0 {
            (0.0, 0.0)
        } else {
            let keys = self.filter_keys as f64;
            (
                self.filter_bytes as f64 * 8.0 / keys,
                self.requested_bits / keys,
            )
        };
    }
}

/// A valid filter block.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct FilterReport {
    /// Always "ok": an invalid block is an error, not a report.
    pub checksum: &'static str,
    /// Everything the block says about itself.
    #[serde(flatten)]
    pub info: FilterInfo,
}

impl FilterReport {
    /// Validates `block` and describes it.
    pub fn from_block(block: &[u8]) -> Result<Self> {
        let reader = FilterReader::new(block)?;
        Ok(FilterReport {
            checksum: "ok",
            info: reader.info(),
        })
    }
}

/// A valid range-filter block.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct RangeFilterReport {
    /// Always "ok": an invalid block is an error, not a report.
    pub checksum: &'static str,
    /// Everything the block says about itself.
    #[serde(flatten)]
    pub info: RangeFilterInfo,
}

/// Reads and describes the filter block file, SSTable or database directory at `path`.
pub fn inspect_path(path: &Path) -> Result<Report> {
    inspect_path_with_budget(path, None)
}

/// `inspect_path`; for a database directory, also the allocation the budget would make for its
/// current shape.
pub fn inspect_path_with_budget(path: &Path, filter_budget: Option<&BudgetArgs>) -> Result<Report> {
    if path.is_dir() {
        if rocksdb_dir::is_rocksdb_dir(path) {
            return rocksdb_dir::read_database(path).map(Report::RocksdbDatabase);
        }
        return database::inspect(path, filter_budget).map(Report::Database);
    }
    let bytes =
        std::fs::read(path).map_err(|e| Error::io(format!("reading {}", path.display()), e))?;
    if bytes.starts_with(&crate::filter::range::format::MAGIC) {
        let reader =
            RangeFilterReader::new(&bytes).map_err(|e| Error::corruption(path, e.to_string()))?;
        return Ok(Report::RangeFilter(RangeFilterReport {
            checksum: "ok",
            info: reader.info(),
        }));
    }
    let filter_magic = bytes.starts_with(&crate::filter::format::MAGIC);
    if !filter_magic && rocksdb_sst::is_rocksdb_sst(&bytes) {
        let name = path
            .file_name()
            .map_or_else(String::new, |f| f.to_string_lossy().into_owned());
        return rocksdb_sst::read_table(&name, &bytes)
            .map(Report::RocksdbTable)
            .map_err(|e| Error::corruption(path, e));
    }
    if !filter_magic && bytes.len() >= crate::table::FOOTER_V1_LEN && bytes.ends_with(&TABLE_MAGIC)
    {
        let t = Table::open(path, 0)?;
        return Ok(Report::Table(TableReport::new(&t, None)));
    }
    FilterReport::from_block(&bytes)
        .map(Report::Filter)
        .map_err(|e| match e {
            Error::Filter(f) => Error::corruption(path, f.to_string()),
            other => other,
        })
}

/// A key as text: printable ASCII as is, other bytes as `\xNN` (`coding::printable`).
pub use crate::coding::printable;
