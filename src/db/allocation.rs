//! The filter budget's public face: what a caller asks for (`FilterBudget`) and what the
//! plan (`budget::plan`) allocates, as the store reports it: `DbStats::filter_budget`,
//! `dump_filter DIR`, the quickstart. Per level: the whole-key
//! filters' runs, keys, bits per key and expected false-positive rate, and the same for the
//! prefix filters when the store has a prefix rule (a prefix scan probes one prefix filter per
//! run, as a get probes one key filter per run).

use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};
use crate::filter::FilterKind;

/// How much filter memory the store may use.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub enum FilterMemory {
    /// A fixed total of filter bytes, however large the store grows (headers included).
    TotalBytes(u64),
    /// An average of bits per key over every key in the store; grows with the store.
    BitsPerKey(f64),
}

/// A filter memory budget, allocated per level to minimise expected wasted reads (Monkey).
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct FilterBudget {
    /// The memory to spend.
    pub memory: FilterMemory,
    /// Kind for level 0 and every level above the largest (default blocked Bloom: fast to
    /// build, and these tables are rewritten soon).
    pub upper_kind: FilterKind,
    /// Kind for the largest level (most keys, normally the deepest) and any level below it
    /// (default Ribbon: ~30% smaller at the same rate, ~7x slower to build; that level holds
    /// most of the keys and its tables live longest).
    pub last_level_kind: FilterKind,
}

setters!(FilterBudget {
    with_memory => memory: FilterMemory,
    with_upper_kind => upper_kind: FilterKind,
    with_last_level_kind => last_level_kind: FilterKind,
});

impl Default for FilterBudget {
    /// `Filters::default()`'s budget: 10 bits/key on average, the default kinds (blocked
    /// Bloom above the largest level, Ribbon on it). Ribbon there rather than blocked Bloom
    /// everywhere because it reads fewer data blocks from the same memory: measured with
    /// `db_bench --defaults [--ours-budget 10] --hold absent --keys 2000000`, 3 interleaved
    /// rounds, 0.0044-0.0146 false positives per absent get against 0.0185-0.0218 (a read
    /// each, from disk once the tables outgrow the page cache), for 0.69-0.90x the absent-get
    /// rate with tables and false-positive blocks in memory (the Ribbon probe costs more) and
    /// ~0.9x the load rate.
    fn default() -> Self {
        FilterBudget::bits_per_key(10.0)
    }
}

impl FilterBudget {
    /// An average of `bits` bits per key, default kinds.
    pub const fn bits_per_key(bits: f64) -> Self {
        FilterBudget {
            memory: FilterMemory::BitsPerKey(bits),
            upper_kind: FilterKind::Blocked,
            last_level_kind: FilterKind::Ribbon,
        }
    }

    /// A total of `bytes` bytes of filters, default kinds.
    pub fn total_bytes(bytes: u64) -> Self {
        FilterBudget {
            memory: FilterMemory::TotalBytes(bytes),
            ..FilterBudget::bits_per_key(0.0)
        }
    }

    /// The same budget with one kind everywhere.
    pub fn with_kind(mut self, kind: FilterKind) -> Self {
        self.upper_kind = kind;
        self.last_level_kind = kind;
        self
    }

    pub(crate) fn validate(&self) -> Result<()> {
        match self.memory {
            FilterMemory::BitsPerKey(b) if !(b.is_finite() && (0.0..=64.0).contains(&b)) => {
                Err(Error::InvalidArgument(format!(
                    "filter budget of {b} bits/key: must be in [0, 64]"
                )))
            }
            _ => Ok(()),
        }
    }
}

/// One level's share of the budget (in `DbStats::filter_budget`).
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
#[non_exhaustive]
pub struct LevelAllocation {
    /// Level.
    pub level: usize,
    /// Runs a lookup probes here (level 0: its tables; deeper: 1).
    pub runs: u64,
    /// Keys (table entries) in the level.
    pub keys: u64,
    /// Filter kind new tables here get.
    pub kind: Option<FilterKind>,
    /// Bits per key of the level's share of the budget for the current shape (Monkey's
    /// allocation, `db::budget`): what a new table here is built at, less what older tables
    /// hold over their shares (never more than one bit per key less) or plus what they hold
    /// short of them (`reserved_bytes`). Level 0: the key-weighted mean over its runs; with no
    /// table there, the next flush's table's share.
    pub bits_per_key: f64,
    /// Sum over the level's runs of the model's false-positive rate at `bits_per_key`.
    pub expected_fpr: f64,
    /// Bytes of the filters the level's tables hold now.
    pub filter_bytes: u64,
    /// Distinct prefixes in the level's tables (0 without a prefix rule).
    pub prefixes: u64,
    /// Bits per prefix allocated to the level's prefix filters (as `bits_per_key`).
    pub prefix_bits_per_key: f64,
    /// Sum over the level's prefix runs of the model's false-positive rate.
    pub prefix_expected_fpr: f64,
    /// Bytes of the prefix filters the level's tables hold now.
    pub prefix_filter_bytes: u64,
    /// Bits per key allocated to the level's range filters, when the budget sizes them
    /// (`RangeFilters::InBudget`; as `bits_per_key`, 0 otherwise).
    pub range_bits_per_key: f64,
    /// Sum over the level's range runs of the bound on a range of the design length.
    pub range_expected_fpr: f64,
    /// Bytes of the range filters the level's tables hold now (whatever sized them).
    pub range_filter_bytes: u64,
}

/// The allocation for one shape of the store.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
#[non_exhaustive]
pub struct Allocation {
    /// The budget in bytes for this shape (`BitsPerKey` × keys / 8, or `TotalBytes`).
    pub budget_bytes: u64,
    /// Filter bytes all live tables hold now.
    pub filter_bytes: u64,
    /// Bytes the tables hold beyond (negative: short of) their runs' shares, taken off (added
    /// to) the budget for new tables.
    pub reserved_bytes: i64,
    /// Per level, from 0 to the deepest with keys.
    pub levels: Vec<LevelAllocation>,
    /// The design length of the range filters the budget sizes (`RangeFilters::InBudget`);
    /// `None` when it sizes none.
    pub range_design: Option<u64>,
}

impl std::fmt::Display for Allocation {
    /// The per-level table `dump_filter` and the quickstart print.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        writeln!(
            f,
            "filter budget {} bytes: filters hold {} bytes, {} bytes {} than this plan gives their levels",
            self.budget_bytes,
            self.filter_bytes,
            self.reserved_bytes.unsigned_abs(),
            if self.reserved_bytes >= 0 { "more" } else { "less" }
        )?;
        writeln!(
            f,
            "  level  kind      runs        keys  bits/key allocated  filter bytes  expected FPR (sum over runs)"
        )?;
        for l in &self.levels {
            writeln!(
                f,
                "  {:>5}  {:<8}  {:>4}  {:>10}  {:>18.2}  {:>12}  {:.4}%",
                l.level,
                l.kind.map_or("none", FilterKind::name),
                l.runs,
                l.keys,
                l.bits_per_key,
                l.filter_bytes,
                l.expected_fpr * 100.0
            )?;
        }
        if self.levels.iter().any(|l| l.prefixes > 0) {
            writeln!(
                f,
                "  level  prefixes  bits/prefix allocated  prefix filter bytes  expected FPR (sum over runs)"
            )?;
            for l in &self.levels {
                writeln!(
                    f,
                    "  {:>5}  {:>8}  {:>21.2}  {:>19}  {:.4}%",
                    l.level,
                    l.prefixes,
                    l.prefix_bits_per_key,
                    l.prefix_filter_bytes,
                    l.prefix_expected_fpr * 100.0
                )?;
            }
        }
        if let Some(len) = self.range_design {
            writeln!(
                f,
                "  level  range bits/key allocated  range filter bytes  expected FPR on {len} points (sum over runs)"
            )?;
            for l in &self.levels {
                writeln!(
                    f,
                    "  {:>5}  {:>24.2}  {:>18}  {:.4}%",
                    l.level,
                    l.range_bits_per_key,
                    l.range_filter_bytes,
                    l.range_expected_fpr * 100.0
                )?;
            }
        }
        Ok(())
    }
}
