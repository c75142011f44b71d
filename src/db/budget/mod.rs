//! The store's filter memory budget (`Filters::Budget`): which kind and how many bits per
//! key each new table's filter gets, so that the sum of the false-positive rates an absent-key
//! lookup meets is as small as the budget allows (`filter::budget` does the optimisation).
//!
//! Use: before building a table, `plan(budget, version, change, outlook)` with the change about
//! to be made (`Change::Flush` with the memtable's key and prefix counts, `Change::Compaction`
//! with the job) → `Plan::new_table_filters()` for the builder. `Db::stats()` calls it with `Change::None` to
//! show the allocation the current shape gets.
//!
//! Runs: each level-0 table is a run (a lookup probes every one), each deeper level is one run
//! (a lookup probes one table there). With a prefix rule, the prefix filters form runs of their
//! own in the same way (a prefix scan probes one prefix filter per run, as a get probes one key
//! filter), holding each table's distinct prefixes; key and prefix runs share the budget, so
//! the sum of every run's false-positive rate is what the allocation minimises. The budget is
//! still per key of the store: prefixes bring no memory of their own. Range filters sized by
//! the budget (`RangeFilters::InBudget`) form runs of their own too, holding each table's keys,
//! their rate taken on a range of the design length (`filter::budget::Curve::Range`); range
//! filters of a fixed policy (`RangeFilters::On`) are not planned, and their memory is on top
//! of the budget. Level 0 and the levels above the largest use
//! `FilterBudget::upper_kind`; the largest level (most keys; normally the deepest) and any
//! level below it use `last_level_kind`. The largest rather than simply the deepest, because
//! without dynamic level sizing a new deepest level starts with a few tables while the one
//! above still holds most keys (seen in `tests/db_budget.rs`: L3 75,119 keys, L4 2,382).
//!
//! Level 0 is planned as if it held `l0_compaction_trigger - 1` tables (the most a settled store
//! keeps there; the missing ones are of the size of the latest flush): a store that spent its
//! whole budget on level 1 while level 0 happened to be empty would have nothing left for the
//! next flushes, whose tables Monkey wants to give the most bits per key. Those planned-for
//! tables hold no memory until they are written, so a store with level 0 empty spends less.
//! For an average bits/key budget their keys count in the budget (they bring it when written),
//! so the levels below lose only the difference between the level-0 bits and the average.
//!
//! Tables already written keep their filters (they are not rewritten to re-size them). The ones
//! holding more bits than the current allocation gives their run — built when the store was
//! smaller — are *reserved*: their surplus is taken off the budget before the rest is
//! allocated, so the total stays within it; compaction rewrites them at the new size in time.
//! What can exceed the budget is the table being built (its filter is sized before the next
//! plan counts it) and block overheads: the "± one table's filter" of the issue.

use std::sync::Arc;

pub use super::allocation::{Allocation, FilterBudget, FilterMemory, LevelAllocation};
use super::filters::RangeFilters;
use super::version::{Version, MAX_LEVELS};
use crate::filter::budget::{self, Curve};
use crate::table::{FilterState, Table};
pub(crate) use runs::Plan;
use runs::{array_bytes, Counts, Filtered, Held, Run, POINT_BLOCK_FRAME, RANGE_BLOCK_FRAME};

mod runs;
mod share;
pub(crate) use share::{split, Member};

/// A change about to be made to the table set, whose new table(s) the plan sizes.
pub(crate) enum Change<'a> {
    /// Nothing: the allocation for the current shape (stats).
    None,
    /// A new level-0 table of this many keys and distinct prefixes.
    Flush { keys: u64, prefixes: u64 },
    /// These input tables merged into `output_level`.
    Compaction {
        inputs: &'a [(usize, Arc<Table>)],
        output_level: usize,
        target_file_size: u64,
    },
}

/// What the plan is for (from `Options`): which filters tables get, and how level 0 fills.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Outlook {
    /// Level-0 tables to plan for at least (`l0_compaction_trigger - 1`).
    pub(crate) runs: usize,
    /// Memtable size in bytes: with no level-0 table to go by, a flush's key count is
    /// estimated as this many bytes of entries of the store's mean size.
    pub(crate) memtable_bytes: u64,
    /// Whole-key filters are built (`PrefixFilters::whole_key_filters`).
    pub(crate) key_filters: bool,
    /// Prefix filters are built (`Options::prefix_filters`).
    pub(crate) prefix_filters: bool,
    /// Range filters are built (`Options::range_filters`): planned as runs under `InBudget`.
    pub(crate) range_filters: RangeFilters,
}

impl Outlook {
    pub(crate) fn of(opts: &super::options::Options) -> Self {
        Outlook {
            runs: opts.l0_compaction_trigger.saturating_sub(1),
            memtable_bytes: opts.memtable_size as u64,
            key_filters: opts.prefix_filters().whole_key_filters(),
            prefix_filters: opts.prefix_rule().is_some(),
            range_filters: opts.range_filters(),
        }
    }
}

/// The most bits per key the allocation gives a run (`filter::budget`'s grid).
const MAX_BITS_PER_KEY_PLANNED: f64 = 32.0;

/// How far below its run's share (before older tables' surplus is settled) a new table's
/// filter may go, in bits per key: one bit, at most ~2× the run's rate (one Ribbon result bit;
/// ~1.6× for the blocked Bloom).
const FLOOR_BITS: f64 = 1.0;

/// The allocation for `version` after `change`.
pub(crate) fn plan(
    b: &FilterBudget,
    version: &Version,
    change: Change<'_>,
    outlook: Outlook,
) -> Plan {
    let replaced = |t: &Table| match &change {
        Change::Compaction { inputs, .. } => inputs.iter().any(|(_, i)| i.id() == t.id()),
        _ => false,
    };
    // Counts per level after the change; level 0 keeps one run per table.
    let mut level_counts = [Counts::default(); MAX_LEVELS];
    let mut l0_runs: Vec<Counts> = Vec::new();
    let (mut all, mut raw_bytes) = (Counts::default(), 0u64);
    let mut held: Vec<Held> = Vec::new();
    let mut filter_bytes = 0u64;
    let range_design = match outlook.range_filters {
        RangeFilters::InBudget { max_range } => Some(max_range),
        RangeFilters::None | RangeFilters::On(_) => None,
    };
    let planned_ranges = range_design.is_some();
    let mut live_tables = 0u64;
    for (level, tables) in version.levels().iter().enumerate() {
        // Entry size over every table, compaction inputs included (they may be all there is).
        for t in tables {
            all.add(Counts::of(t));
            // Uncompressed: a memtable holds entries raw.
            raw_bytes = raw_bytes.saturating_add(t.properties().raw_data_bytes);
        }
        for t in tables.iter().filter(|t| !replaced(t)) {
            live_tables += 1;
            let c = Counts::of(t);
            let l0 = l0_runs.len();
            if level == 0 {
                l0_runs.push(c);
            } else {
                level_counts[level].add(c);
            }
            let key_bytes = match t.filter() {
                FilterState::Valid(_) => t.filter_bytes(),
                _ => 0,
            };
            let prefix_bytes = t.prefix_filter_bytes();
            filter_bytes = filter_bytes.saturating_add(key_bytes + prefix_bytes);
            // A table's range filter counts against the budget only when the budget sizes
            // range filters; a table written under a fixed range policy keeps it as surplus
            // then (reserved), as a bigger point filter does.
            let range_bytes = if planned_ranges {
                t.range_filter_bytes()
            } else {
                0
            };
            filter_bytes = filter_bytes.saturating_add(range_bytes);
            for (what, keys, bits) in [
                (
                    Filtered::Keys,
                    c.keys,
                    array_bytes(key_bytes, POINT_BLOCK_FRAME),
                ),
                (
                    Filtered::Prefixes,
                    c.prefixes,
                    array_bytes(prefix_bytes, POINT_BLOCK_FRAME),
                ),
                // A decoded range filter holds its arrays and samples, not its block.
                (Filtered::Ranges, c.keys, range_bytes),
            ] {
                held.push(Held {
                    level,
                    l0,
                    what,
                    keys,
                    bits: bits.saturating_mul(8),
                });
            }
        }
    }
    let mut new_tables = 0u64;
    let new_level = match &change {
        Change::None => None,
        Change::Flush { keys, prefixes } => {
            l0_runs.push(Counts {
                keys: *keys,
                prefixes: *prefixes,
            });
            new_tables = 1;
            Some(0)
        }
        Change::Compaction {
            inputs,
            output_level,
            target_file_size,
        } => {
            let mut c = Counts::default();
            for (_, t) in inputs.iter() {
                c.add(Counts::of(t));
            }
            let bytes: u64 = inputs.iter().map(|(_, t)| t.file_size()).sum();
            if *output_level > 0 {
                level_counts[*output_level].add(c);
            } else {
                l0_runs.push(c);
            }
            new_tables = bytes / (*target_file_size).max(1) + 1;
            Some(*output_level)
        }
    };
    // Planned-for level-0 tables: as big as the real ones, or as a flush would make them.
    let real_l0 = l0_runs.len();
    let flush = if real_l0 > 0 {
        let mut sum = Counts::default();
        l0_runs.iter().for_each(|c| sum.add(*c));
        Counts {
            keys: sum.keys / real_l0 as u64,
            prefixes: sum.prefixes / real_l0 as u64,
        }
    } else if let Some(raw) = raw_bytes.checked_div(all.keys) {
        // A memtable counts each entry's key and value plus a fixed overhead; in a block's raw
        // payload an entry is key, value and `ENTRY_HEAD` bytes.
        let per_entry = raw.saturating_sub(crate::table::ENTRY_HEAD as u64)
            + super::memtable::ENTRY_OVERHEAD as u64;
        let keys = outlook.memtable_bytes / per_entry.max(1);
        let prefixes = (keys as f64 * all.prefixes as f64 / all.keys as f64) as u64;
        Counts { keys, prefixes }
    } else {
        Counts::default()
    };
    if flush.keys > 0 {
        while l0_runs.len() < outlook.runs {
            l0_runs.push(flush);
        }
    }
    let deepest = (1..MAX_LEVELS).rev().find(|&l| level_counts[l].keys > 0);
    // The first level ≥ 1 holding the most keys.
    let largest = (1..MAX_LEVELS)
        .filter(|&l| level_counts[l].keys > 0)
        .max_by_key(|&l| (level_counts[l].keys, std::cmp::Reverse(l)));
    let kind_of = |level: usize| {
        if level > 0 && largest.is_some_and(|big| level >= big) {
            b.last_level_kind
        } else {
            b.upper_kind
        }
    };
    let curve_of = |what: Filtered, level: usize| match (what, range_design) {
        (Filtered::Ranges, Some(max_range)) => Curve::Range { max_range },
        _ => Curve::Point(kind_of(level)),
    };
    let planned = [
        (Filtered::Keys, outlook.key_filters),
        (Filtered::Prefixes, outlook.prefix_filters),
        (Filtered::Ranges, planned_ranges),
    ];
    let count = |what: Filtered, c: &Counts| match what {
        Filtered::Prefixes => c.prefixes,
        Filtered::Keys | Filtered::Ranges => c.keys,
    };
    let mut runs: Vec<Run> = Vec::new();
    for (l0, c) in l0_runs.iter().enumerate() {
        for (what, on) in planned {
            if on {
                runs.push(Run {
                    level: 0,
                    l0,
                    what,
                    curve: curve_of(what, 0),
                    keys: count(what, c),
                });
            }
        }
    }
    for (level, c) in level_counts.iter().enumerate().skip(1) {
        for (what, on) in planned {
            let keys = count(what, c);
            if on && keys > 0 {
                runs.push(Run {
                    level,
                    l0: 0,
                    what,
                    curve: curve_of(what, level),
                    keys,
                });
            }
        }
    }
    let run_of = |level: usize, l0: usize, what: Filtered| {
        runs.iter()
            .position(|r| r.level == level && r.what == what && (level > 0 || r.l0 == l0))
    };
    // An average bits/key budget counts the planned-for level-0 keys too: when those tables
    // are written their keys bring their share, so until then the store holds about
    // `bits × keys held` — a little more while level-0 tables written under earlier, more
    // generous plans wait for their compaction (up to 1.4% over at 60,000 keys and 6
    // bits/key, `tests/db_budget.rs`). (Counting only the keys held made a settled store keep
    // ~15% of its budget idle for the next flushes; this halves that.) Prefix filters spend
    // the same budget: it is per key of the store, whatever filters hold them.
    let total_keys: u64 = l0_runs
        .iter()
        .chain(&level_counts[1..])
        .map(|c| c.keys)
        .sum();
    let budget_bits = match b.memory {
        FilterMemory::BitsPerKey(bpk) => bpk * total_keys as f64,
        FilterMemory::TotalBytes(bytes) => bytes as f64 * 8.0,
    };
    // Every filter block carries a header and trailer the allocation cannot spend.
    let frames_per_table: u64 = planned
        .iter()
        .filter(|(_, on)| *on)
        .map(|(what, _)| match what {
            Filtered::Ranges => RANGE_BLOCK_FRAME,
            Filtered::Keys | Filtered::Prefixes => POINT_BLOCK_FRAME,
        })
        .sum();
    let overhead = ((live_tables + new_tables) * frames_per_table * 8) as f64;
    let curves_keys: Vec<(Curve, u64)> = runs.iter().map(|r| (r.curve, r.keys)).collect();
    // The allocation with `reserve` bits set aside, and what older tables then hold over (or,
    // negative, under) their runs' targets.
    let spend = budget_bits - overhead;
    // Each held filter's run, found once (the bisection below allocates ~40 times).
    let held_runs: Vec<Option<usize>> =
        held.iter().map(|h| run_of(h.level, h.l0, h.what)).collect();
    let allocate_with = |reserve: f64| -> (Vec<f64>, f64) {
        let bits = budget::allocate_curves(&curves_keys, (spend - reserve).max(0.0));
        let excess = held
            .iter()
            .zip(&held_runs)
            .map(|(h, run)| {
                let target = run.map_or(0.0, |r| bits[r] * h.keys as f64);
                h.bits as f64 - target
            })
            .sum();
        (bits, excess)
    };
    // The reserve equal to the difference it causes (a smaller plan leaves more surplus, so
    // `excess(reserve) - reserve` falls as the reserve grows): bisect for it. Then the live
    // tables plus the new ones hold exactly what the plan spends. A negative reserve hands
    // the new tables what older, smaller filters left unspent. (Iterating `reserve = excess`
    // converged too slowly when one big level held the surplus.)
    //
    // With no new table (`Change::None`, the report) nothing settles the surplus: the shares
    // stand, and the reserve shown is the surplus itself. (Bisecting there has no root when
    // every run is held, as with level 0 at `outlook.runs` tables: `excess - reserve` is then
    // the same for every reserve, and a shortfall sent the search to the end of its range,
    // so every level read `MAX_BITS_PER_KEY_PLANNED`.)
    let (mut bits, excess) = allocate_with(0.0);
    let unreserved = bits.clone();
    let reserve = match new_level {
        None => excess,
        Some(_) if excess.abs() > 8.0 => {
            let run_keys: u64 = runs.iter().map(|r| r.keys).sum();
            let most = MAX_BITS_PER_KEY_PLANNED * run_keys as f64 + spend.abs();
            let (mut lo, mut hi) = (-most, spend.max(0.0));
            for _ in 0..40 {
                let mid = (lo + hi) / 2.0;
                if allocate_with(mid).1 > mid {
                    lo = mid;
                } else {
                    hi = mid;
                }
            }
            bits = allocate_with(hi).0;
            hi
        }
        Some(_) => 0.0,
    };
    // A new table gets its run's share (`bits`), but never more than `FLOOR_BITS` below the
    // share before settling older tables' surplus (`unreserved`); half the share bounds it
    // where the share is under two bits. A run's rate is the mean of its tables' rates, and
    // a rate is exponential in bits: a table starved to pay back another's surplus costs far
    // more than the surplus saves. Measured at 10^8 keys with a floor of half the share: the
    // largest level held 8.85 bits/key of Ribbon, which would give ~0.003 spread evenly, at a
    // rate of 0.023 (README, the scale series); with this floor, 9.21 bits/key at 0.0041, and
    // 0.0054 false positives per absent get in all (was 0.016–0.026), in the same memory. And
    // filter_budget's 10^7-key run had two level-2 tables written with no filter at all. The
    // floor can put the total over the budget by up to `FLOOR_BITS` per key of the tables
    // written while older ones hold a surplus, until compaction rewrites the surplus away.
    //
    // The report (`Change::None`) shows each run's share: `given` is then `unreserved`. (It
    // had shown `bits` after settling, which read 0 bits/key and a rate of 1 per run whenever
    // the filters held exceed the budget, e.g. after reopening with a smaller one, while new
    // tables were given the floor; and, with every run held, 32 bits/key for a shortfall.)
    let given: Vec<f64> = bits
        .iter()
        .zip(&unreserved)
        .map(|(&b, &u)| b.max((u - FLOOR_BITS).max(0.5 * u)))
        .collect();
    let mut levels: Vec<LevelAllocation> = Vec::new();
    let top = deepest.unwrap_or(0).max(new_level.unwrap_or(0));
    for (level, counts) in level_counts.iter().enumerate().take(top + 1) {
        // Level 0: its real runs, or the planned-for ones when it has none.
        let summary = |what: Filtered| {
            let mine: Vec<usize> = (0..runs.len())
                .filter(|&i| runs[i].level == level && runs[i].what == what)
                .filter(|&i| level > 0 || runs[i].l0 < real_l0 || real_l0 == 0)
                .collect();
            let keys: u64 = mine.iter().map(|&i| runs[i].keys).sum();
            let weighted: f64 = mine.iter().map(|&i| given[i] * runs[i].keys as f64).sum();
            let fpr = mine
                .iter()
                .fold(0.0, |sum, &i| sum + budget::fpr_of(runs[i].curve, given[i]));
            (
                keys,
                if keys == 0 {
                    0.0
                } else {
                    weighted / keys as f64
                },
                fpr,
            )
        };
        let (_, bits_per_key, fpr) = summary(Filtered::Keys);
        let (prefixes, prefix_bits, prefix_fpr) = summary(Filtered::Prefixes);
        let (_, range_bits, range_fpr) = summary(Filtered::Ranges);
        let real_runs = if level == 0 {
            real_l0
        } else {
            usize::from(counts.keys > 0)
        };
        let keys = if level == 0 {
            l0_runs.iter().take(real_l0).map(|c| c.keys).sum()
        } else {
            counts.keys
        };
        let tables = &version.levels()[level];
        levels.push(LevelAllocation {
            level,
            runs: real_runs as u64,
            keys,
            kind: Some(kind_of(level)),
            bits_per_key,
            // Only runs that exist cost a lookup anything.
            expected_fpr: if real_runs == 0 { 0.0 } else { fpr },
            filter_bytes: tables
                .iter()
                .filter(|t| matches!(t.filter(), FilterState::Valid(_)))
                .map(|t| t.filter_bytes())
                .sum(),
            prefixes: if real_runs == 0 { 0 } else { prefixes },
            prefix_bits_per_key: prefix_bits,
            prefix_expected_fpr: if real_runs == 0 { 0.0 } else { prefix_fpr },
            prefix_filter_bytes: tables.iter().map(|t| t.prefix_filter_bytes()).sum(),
            range_bits_per_key: range_bits,
            range_expected_fpr: if real_runs == 0 { 0.0 } else { range_fpr },
            range_filter_bytes: tables.iter().map(|t| t.range_filter_bytes()).sum(),
        });
    }
    let new_table = |what: Filtered| {
        let level = new_level?;
        // The new table's own run: the last real level-0 run, or its level's.
        let l0 = if level == 0 {
            real_l0.checked_sub(1)?
        } else {
            0
        };
        let i = run_of(level, l0, what)?;
        Some((runs[i].curve, given[i]))
    };
    Plan {
        allocation: Allocation {
            budget_bytes: (budget_bits / 8.0) as u64,
            filter_bytes,
            reserved_bytes: (reserve / 8.0) as i64,
            levels,
            range_design,
        },
        new_table: [
            new_table(Filtered::Keys),
            new_table(Filtered::Prefixes),
            new_table(Filtered::Ranges),
        ],
        fixed_range: outlook.range_filters.policy(),
    }
}
