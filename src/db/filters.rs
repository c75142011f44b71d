//! The settings that decide how new tables are written and read, as `Options` takes them:
//! which filters (`Filters`), which prefix filters (`PrefixFilters`), which range filters
//! (`RangeFilters`) and which compression (`Compressions`); and what one new table gets (`TableFilters`), whoever decided it (the
//! fixed policy, `Options::filters_for_level`, or the budget, `budget::Plan`).
//!
//! Each is one value, so no rule compares a setting with its default: a store's options
//! record (`stored_options.rs`) keeps each of the three, and `Options` says for each whether
//! it is given (`Some`) or left to the record (`None`).

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::allocation::FilterBudget;
use crate::filter::{FilterPolicy, RangePolicy};
use crate::prefix::PrefixExtractor;
use crate::table::Compression;

/// Which whole-key filters new tables get, and, with prefix filters, from what memory.
///
/// ```
/// use lsm_bloom::{FilterBudget, FilterKind, FilterPolicy, Filters};
/// // The default: 10 bits per key on average, planned per level (README "Filter memory as
/// // a budget").
/// assert_eq!(Filters::default(), Filters::Budget(FilterBudget::bits_per_key(10.0)));
/// // One policy everywhere, none on level 0.
/// let fixed = Filters::fixed(FilterPolicy::bits_per_key(FilterKind::Ribbon, 8.0)).without_on(0);
/// assert_eq!(fixed.policy_for_level(0), None);
/// ```
#[derive(Clone, Debug, PartialEq)]
pub enum Filters {
    /// Filter memory as a budget: each new table's filter gets the kind and bits/key the
    /// budget allocates to its level (`src/db/budget.rs`), so level 0, which every lookup
    /// probes, gets the most bits per key; with prefix filters, their runs are planned from
    /// the same memory. `DbStats::filter_budget` shows the allocation.
    Budget(FilterBudget),
    /// One policy for every level, and per-level overrides (`None` there: no filter on that
    /// level). Prefix filters get their level's policy.
    Fixed {
        /// The policy of every level without an override.
        policy: FilterPolicy,
        /// Per-level overrides.
        per_level: BTreeMap<usize, Option<FilterPolicy>>,
    },
    /// No filters: a lookup reads a data block of every table whose range holds its key.
    None,
}

impl Default for Filters {
    /// A budget of 10 bits per key on average (`FilterBudget::default()`).
    fn default() -> Self {
        Filters::DEFAULT
    }
}

impl Filters {
    /// `Filters::default()`, as a constant.
    pub const DEFAULT: Filters = Filters::Budget(FilterBudget::bits_per_key(10.0));

    /// `policy` on every level.
    pub fn fixed(policy: FilterPolicy) -> Self {
        Filters::Fixed {
            policy,
            per_level: BTreeMap::new(),
        }
    }

    /// The same fixed filters with `policy` on `level` (`None`: no filter there). Unchanged
    /// unless `Fixed`.
    pub fn with_level(mut self, level: usize, policy: Option<FilterPolicy>) -> Self {
        if let Filters::Fixed { per_level, .. } = &mut self {
            per_level.insert(level, policy);
        }
        self
    }

    /// The same fixed filters with none on `level`.
    pub fn without_on(self, level: usize) -> Self {
        self.with_level(level, None)
    }

    /// The budget, if the filters are a budget.
    pub fn budget(&self) -> Option<&FilterBudget> {
        match self {
            Filters::Budget(b) => Some(b),
            _ => None,
        }
    }

    /// The policy of a table written to `level` under fixed filters (`None` under a budget,
    /// which decides per table, and without filters).
    pub fn policy_for_level(&self, level: usize) -> Option<FilterPolicy> {
        match self {
            Filters::Fixed { policy, per_level } => {
                per_level.get(&level).copied().unwrap_or(Some(*policy))
            }
            Filters::Budget(_) | Filters::None => None,
        }
    }
}

/// Prefix filters: beside (or instead of) each table's whole-key filter, a filter over its
/// keys' distinct prefixes under a rule, so `Db::scan_prefix` (or a `scan` whose range lies
/// inside one prefix) skips every table whose prefix filter says "absent". Tables written
/// under another rule, or none, are read (counted in `LevelStats::prefix_unfiltered`), so
/// changing it is safe at any reopen.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub enum PrefixFilters {
    /// No prefix filters (the default).
    #[default]
    None,
    /// Prefix filters under `rule`.
    On {
        /// Which part of a key is its prefix.
        rule: PrefixExtractor,
        /// Keep whole-key filters beside them (false: prefix filters only, and `get` asks
        /// them with the key's prefix).
        whole_key_filters: bool,
    },
}

impl PrefixFilters {
    /// Prefix filters under `rule`, beside the whole-key filters.
    pub fn with(rule: PrefixExtractor) -> Self {
        PrefixFilters::On {
            rule,
            whole_key_filters: true,
        }
    }

    /// Prefix filters under `rule` instead of whole-key filters.
    pub fn only(rule: PrefixExtractor) -> Self {
        PrefixFilters::On {
            rule,
            whole_key_filters: false,
        }
    }

    /// The prefix rule, if there are prefix filters.
    pub fn rule(&self) -> Option<PrefixExtractor> {
        match self {
            PrefixFilters::None => None,
            PrefixFilters::On { rule, .. } => Some(*rule),
        }
    }

    /// Whether tables get whole-key filters (true unless prefix filters replace them).
    pub fn whole_key_filters(&self) -> bool {
        match self {
            PrefixFilters::None => true,
            PrefixFilters::On {
                whole_key_filters, ..
            } => *whole_key_filters,
        }
    }
}

/// Range filters: beside each table's other filters, a filter over its keys that answers
/// whether a short range may hold one (`filter::range`, Grafite), so a scan of an empty short
/// range skips the table unread, as a get of an absent key does. Asked by `Db::scan`,
/// `Snapshot::scan` and `Db::contains_range` for each table the range overlaps; tables
/// written without one, and ranges over twice the policy's longest, read the table (counted
/// in `LevelStats::range_unfiltered`). Changing it is safe at any reopen: each table records
/// its own.
///
/// Off by default: a range filter costs its bits per key of memory and a build per table
/// written, and pays only for scans of short ranges that are often empty.
///
/// ```
/// use lsm_bloom::{Filters, FilterBudget, Options, RangeFilters, RangePolicy};
/// // 16 bits per key in every table, on top of the point filters' budget.
/// let fixed = RangeFilters::On(RangePolicy::bits_per_key(16.0, 32).unwrap());
/// // Sized by the budget with the point filters: 26 bits per key for both kinds.
/// let opts = Options::default().with_filters(Some(Filters::Budget(FilterBudget::bits_per_key(26.0)))).with_range_filters(Some(RangeFilters::InBudget { max_range: 32 }));
/// assert_eq!(fixed.max_range(), Some(32));
/// assert_eq!(opts.range_filters().policy(), None);
/// ```
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub enum RangeFilters {
    /// No range filters (the default).
    #[default]
    None,
    /// A range filter with this policy in every new table; its memory is on top of any
    /// filter budget.
    On(RangePolicy),
    /// Range filters for ranges of up to `max_range` points, sized by the filter budget
    /// (`Filters::Budget`, which this needs) as runs of their own, as prefix filters are: each
    /// level-0 table and each deeper level is a run, and the budget's memory is spread over
    /// point, prefix and range runs to make the sum of their rates smallest (a range run's
    /// rate taken on a range of `max_range` points). A run the budget cannot give the bits
    /// for a useful filter (about `2 + log2(max_range)` per key) gets none.
    /// `DbStats::filter_budget` shows the allocation.
    InBudget {
        /// The longest range answered, in points (1 to 2^40).
        max_range: u64,
    },
}

impl RangeFilters {
    /// The fixed policy of new tables' range filters (`On`; `None` when the budget sizes
    /// them, or without range filters).
    pub fn policy(&self) -> Option<RangePolicy> {
        match self {
            RangeFilters::None | RangeFilters::InBudget { .. } => None,
            RangeFilters::On(p) => Some(*p),
        }
    }

    /// The longest range new tables' range filters answer, if they get one.
    pub fn max_range(&self) -> Option<u64> {
        match self {
            RangeFilters::None => None,
            RangeFilters::On(p) => Some(p.max_range()),
            RangeFilters::InBudget { max_range } => Some(*max_range),
        }
    }
}

/// How new tables' data blocks are compressed: one codec, with per-level overrides (e.g. none
/// for levels 0 and 1, which are small and rewritten soon, LZ4 below). Filters, indexes and
/// the block cache hold raw bytes, so absent-key gets and cache hits never decompress.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct Compressions {
    /// The codec of every level without an override (default none).
    pub default: Compression,
    /// Per-level overrides.
    pub per_level: BTreeMap<usize, Compression>,
}

impl Compressions {
    /// No compression anywhere, as a constant.
    pub const NONE: Compressions = Compressions {
        default: Compression::None,
        per_level: BTreeMap::new(),
    };

    /// The same with `codec` on `level`.
    pub fn with_level(mut self, level: usize, codec: Compression) -> Self {
        self.per_level.insert(level, codec);
        self
    }

    /// The codec of tables written to `level`.
    pub fn for_level(&self, level: usize) -> Compression {
        self.per_level.get(&level).copied().unwrap_or(self.default)
    }
}

impl From<Compression> for Compressions {
    /// `codec` on every level.
    fn from(codec: Compression) -> Self {
        Compressions {
            default: codec,
            per_level: BTreeMap::new(),
        }
    }
}

/// The filters one new table gets: from the level's fixed policy, or what the filter budget
/// allocates to its runs.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub(crate) struct TableFilters {
    /// The whole-key filter (`None`: none).
    pub(crate) key: Option<FilterPolicy>,
    /// The prefix filter (`None`: none).
    pub(crate) prefix: Option<FilterPolicy>,
    /// The range filter (`None`: none).
    pub(crate) range: Option<RangePolicy>,
}
