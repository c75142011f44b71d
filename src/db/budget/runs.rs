//! The pieces a budget plan works with: the runs it allocates over (`Run`: which filters of
//! which tables, and their rate curve), the live tables' filters it settles (`Held`), and what
//! it hands the table about to be built (`Plan::new_table_filters`).

use super::Allocation;
use crate::db::filters::TableFilters;
use crate::filter::budget::{self, Curve};
use crate::filter::range::format as range_format;
use crate::filter::{format, ribbon, FilterKind, FilterPolicy, RangePolicy};
use crate::table::Table;

/// A filter's curve and bits per key (or per prefix).
pub(super) type CurveBits = (Curve, f64);

/// Which filters of a table a run is made of.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Filtered {
    /// Whole-key filters (probed by gets).
    Keys,
    /// Prefix filters (probed by prefix scans), holding distinct prefixes.
    Prefixes,
    /// Range filters sized by the budget (probed by scans of short ranges), holding keys.
    Ranges,
}

/// An allocation plus the kind and bits/key for the table(s) about to be built.
pub(crate) struct Plan {
    pub(crate) allocation: Allocation,
    /// (whole-key filter, prefix filter, budgeted range filter) of the new table(s).
    pub(super) new_table: [Option<CurveBits>; 3],
    /// A fixed range policy, on top of the budget (`RangeFilters::On`).
    pub(super) fixed_range: Option<RangePolicy>,
}

impl Plan {
    /// The policies for the new table(s); `None` where the allocation gives a filter no useful
    /// bits. `salt` (a table or job number) picks, for Ribbon, between r and r + 1 result bits
    /// in the proportion the allocation's bits/key asks for (`budget::ribbon_split`).
    pub(crate) fn new_table_filters(&self, salt: u64) -> TableFilters {
        let point = |(curve, bits): CurveBits| {
            let Curve::Point(kind) = curve else {
                return None;
            };
            if kind == FilterKind::Ribbon {
                let (r, frac) = budget::ribbon_split(bits);
                let coin = (crate::filter::hash_key(&salt.to_le_bytes()) >> 11) as f64
                    / (1u64 << 53) as f64;
                let r = r + u32::from(coin < frac);
                return (r > 0).then(|| {
                    FilterPolicy::bits_per_key(kind, f64::from(r) * ribbon::MODEL_SLOTS_PER_KEY)
                        .with_num_probes(r)
                });
            }
            (budget::fpr_at(kind, bits) < 1.0).then(|| FilterPolicy::bits_per_key(kind, bits))
        };
        let range = |(curve, bits): CurveBits| match curve {
            Curve::Range { max_range } if budget::fpr_of(curve, bits) < 1.0 => {
                RangePolicy::bits_per_key(bits, max_range).ok()
            }
            _ => None,
        };
        let [key, prefix, ranges] = self.new_table;
        TableFilters {
            key: key.and_then(point),
            prefix: prefix.and_then(point),
            range: ranges.and_then(range).or(self.fixed_range),
        }
    }
}

/// One run a lookup probes: a level-0 table's filter, or one deeper level's; whole-key,
/// prefix or range filters.
pub(super) struct Run {
    pub(super) level: usize,
    /// Level 0: which table (0 = oldest); 0 deeper.
    pub(super) l0: usize,
    pub(super) what: Filtered,
    pub(super) curve: Curve,
    /// Keys (prefixes, for a prefix run) the filter holds.
    pub(super) keys: u64,
}

/// Keys and distinct prefixes of a table or a level.
#[derive(Clone, Copy, Default)]
pub(super) struct Counts {
    pub(super) keys: u64,
    pub(super) prefixes: u64,
}

impl Counts {
    pub(super) fn of(t: &Table) -> Counts {
        let p = t.properties();
        Counts {
            keys: p.entries,
            prefixes: p.prefixes,
        }
    }
    pub(super) fn add(&mut self, o: Counts) {
        self.keys = self.keys.saturating_add(o.keys);
        self.prefixes = self.prefixes.saturating_add(o.prefixes);
    }
}

/// A live table's filter, with the run it belongs to.
pub(super) struct Held {
    pub(super) level: usize,
    pub(super) l0: usize,
    pub(super) what: Filtered,
    pub(super) keys: u64,
    /// Bits of its array: the block less its header and trailer, which `overhead` counts
    /// for every table.
    pub(super) bits: u64,
}

/// Header and trailer bytes of a point filter block (`format`).
pub(super) const POINT_BLOCK_FRAME: u64 = (format::HEADER_LEN + format::TRAILER_LEN) as u64;
/// Bytes a table's range filter holds beside its arrays, charged per table: its header and
/// trailer's worth (`range::format`), for the decoded fields and the reader.
pub(super) const RANGE_BLOCK_FRAME: u64 =
    (range_format::HEADER_LEN + range_format::TRAILER_LEN) as u64;

/// The array bytes of a filter block of `bytes` bytes framed in `frame` bytes (0: no block).
pub(super) fn array_bytes(bytes: u64, frame: u64) -> u64 {
    bytes.saturating_sub(frame)
}
