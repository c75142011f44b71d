//! The store's filter memory budget (`Options::filter_budget`): which kind and how many bits per
//! key each new table's filter gets, so that the sum of the false-positive rates an absent-key
//! lookup meets is as small as the budget allows (`filter::budget` does the optimisation).
//!
//! Use: before building a table, `plan(budget, version, change, outlook)` with the change about to be
//! made (`Change::Flush` with the memtable's key count, `Change::Compaction` with the job) →
//! `Plan::new_table_policy()` for the builder. `Db::stats()` calls it with `Change::None` to
//! show the allocation the current shape gets.
//!
//! Runs: each level-0 table is a run (a lookup probes every one), each deeper level is one run
//! (a lookup probes one table there). Level 0 and the levels above the largest use
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

use serde::{Deserialize, Serialize};

use super::version::{Version, MAX_LEVELS};
use crate::error::{Error, Result};
use crate::filter::{budget, format, ribbon, FilterKind, FilterPolicy};
use crate::table::{FilterState, Table};

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

impl FilterBudget {
    /// An average of `bits` bits per key, default kinds.
    pub fn bits_per_key(bits: f64) -> Self {
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

/// A change about to be made to the table set, whose new table(s) the plan sizes.
pub(crate) enum Change<'a> {
    /// Nothing: the allocation for the current shape (stats).
    None,
    /// A new level-0 table of this many keys.
    Flush { keys: u64 },
    /// These input tables merged into `output_level`.
    Compaction {
        inputs: &'a [(usize, Arc<Table>)],
        output_level: usize,
        target_file_size: u64,
    },
}

/// One level's share of the budget (in `DbStats::filter_budget`).
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct LevelAllocation {
    /// Level.
    pub level: usize,
    /// Runs a lookup probes here (level 0: its tables; deeper: 1).
    pub runs: u64,
    /// Keys (table entries) in the level.
    pub keys: u64,
    /// Filter kind new tables here get.
    pub kind: Option<FilterKind>,
    /// Bits per key allocated (level 0: key-weighted mean over its runs; with no table there,
    /// what the next flush's table would get).
    pub bits_per_key: f64,
    /// Sum over the level's runs of the model's false-positive rate at the allocation.
    pub expected_fpr: f64,
    /// Bytes of the filters the level's tables hold now.
    pub filter_bytes: u64,
}

/// The allocation for one shape of the store.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct Allocation {
    /// The budget in bytes for this shape (`BitsPerKey` × keys / 8, or `TotalBytes`).
    pub budget_bytes: u64,
    /// Filter bytes all live tables hold now.
    pub filter_bytes: u64,
    /// Bytes older tables hold beyond (negative: short of) what their runs are allocated now,
    /// taken off (added to) the budget for new tables.
    pub reserved_bytes: i64,
    /// Per level, from 0 to the deepest with keys.
    pub levels: Vec<LevelAllocation>,
}

/// What level 0 is planned for (from `Options`).
#[derive(Clone, Copy, Debug)]
pub(crate) struct L0Outlook {
    /// Level-0 tables to plan for at least (`l0_compaction_trigger - 1`).
    pub(crate) runs: usize,
    /// Memtable size in bytes: with no level-0 table to go by, a flush's key count is
    /// estimated as this many bytes of entries of the store's mean size.
    pub(crate) memtable_bytes: u64,
}

impl L0Outlook {
    pub(crate) fn of(opts: &super::Options) -> Self {
        L0Outlook {
            runs: opts.l0_compaction_trigger.saturating_sub(1),
            memtable_bytes: opts.memtable_size as u64,
        }
    }
}

/// An allocation plus the kind and bits/key for the table(s) about to be built.
pub(crate) struct Plan {
    pub(crate) allocation: Allocation,
    new_table: Option<(FilterKind, f64)>,
}

impl Plan {
    /// The policy for the new table(s); `None` when the allocation gives them no useful bits.
    /// `salt` (a table or job number) picks, for Ribbon, between r and r + 1 result bits in the
    /// proportion the allocation's bits/key asks for (`budget::ribbon_split`).
    pub(crate) fn new_table_policy(&self, salt: u64) -> Option<FilterPolicy> {
        let (kind, bits) = self.new_table?;
        if kind == FilterKind::Ribbon {
            let (r, frac) = budget::ribbon_split(bits);
            let coin =
                (crate::filter::hash_key(&salt.to_le_bytes()) >> 11) as f64 / (1u64 << 53) as f64;
            let r = r + u32::from(coin < frac);
            return (r > 0).then(|| {
                FilterPolicy::bits_per_key(kind, f64::from(r) * ribbon::MODEL_SLOTS_PER_KEY)
                    .with_num_probes(r)
            });
        }
        (budget::fpr_at(kind, bits) < 1.0).then(|| FilterPolicy::bits_per_key(kind, bits))
    }
}

/// The most bits per key the allocation gives a run (`filter::budget`'s grid).
const MAX_BITS_PER_KEY_PLANNED: f64 = 32.0;

struct Run {
    level: usize,
    kind: FilterKind,
    keys: u64,
}

/// The allocation for `version` after `change`.
pub(crate) fn plan(
    b: &FilterBudget,
    version: &Version,
    change: Change<'_>,
    outlook: L0Outlook,
) -> Plan {
    let replaced = |t: &Table| match &change {
        Change::Compaction { inputs, .. } => inputs.iter().any(|(_, i)| i.id() == t.id()),
        _ => false,
    };
    let entries = |t: &Table| t.properties().entries;
    // Keys per level after the change; level 0 keeps one run per table.
    let mut level_keys = [0u64; MAX_LEVELS];
    let mut l0_runs: Vec<u64> = Vec::new();
    let (mut entries_total, mut data_bytes) = (0u64, 0u64);
    let mut held: Vec<(usize, u64, u64)> = Vec::new(); // (level, keys, filter bits) per table
    let mut filter_bytes = 0u64;
    let mut live_tables = 0u64;
    for (level, tables) in version.levels.iter().enumerate() {
        // Entry size over every table, compaction inputs included (they may be all there is).
        for t in tables {
            entries_total = entries_total.saturating_add(entries(t));
            // Uncompressed: a memtable holds entries raw.
            data_bytes = data_bytes.saturating_add(t.properties().raw_data_bytes);
        }
        for t in tables.iter().filter(|t| !replaced(t)) {
            live_tables += 1;
            if level == 0 {
                l0_runs.push(entries(t));
            } else {
                level_keys[level] = level_keys[level].saturating_add(entries(t));
            }
            let bytes = match t.filter() {
                FilterState::Valid(_) => t.filter_bytes(),
                _ => 0,
            };
            filter_bytes = filter_bytes.saturating_add(bytes);
            held.push((level, entries(t), bytes.saturating_mul(8)));
        }
    }
    let mut new_tables = 0u64;
    let new_level = match &change {
        Change::None => None,
        Change::Flush { keys } => {
            l0_runs.push(*keys);
            new_tables = 1;
            Some(0)
        }
        Change::Compaction {
            inputs,
            output_level,
            target_file_size,
        } => {
            let keys: u64 = inputs.iter().map(|(_, t)| entries(t)).sum();
            let bytes: u64 = inputs.iter().map(|(_, t)| t.file_size()).sum();
            if *output_level > 0 {
                level_keys[*output_level] = level_keys[*output_level].saturating_add(keys);
            } else {
                l0_runs.push(keys);
            }
            new_tables = bytes / (*target_file_size).max(1) + 1;
            Some(*output_level)
        }
    };
    // Planned-for level-0 tables: as big as the real ones, or as a flush would make them.
    let real_l0 = l0_runs.len();
    let flush_keys = if real_l0 > 0 {
        l0_runs.iter().sum::<u64>() / real_l0 as u64
    } else if let Some(on_disk) = data_bytes.checked_div(entries_total) {
        // A memtable counts each entry's key and value plus a fixed overhead; in a block's raw
        // payload an entry is key, value and 9 bytes.
        let per_entry = on_disk.saturating_sub(9) + super::memtable::ENTRY_OVERHEAD as u64;
        outlook.memtable_bytes / per_entry.max(1)
    } else {
        0
    };
    if flush_keys > 0 {
        while l0_runs.len() < outlook.runs {
            l0_runs.push(flush_keys);
        }
    }
    let deepest = (1..MAX_LEVELS).rev().find(|&l| level_keys[l] > 0);
    // The first level ≥ 1 holding the most keys.
    let largest = (1..MAX_LEVELS)
        .filter(|&l| level_keys[l] > 0)
        .max_by_key(|&l| (level_keys[l], std::cmp::Reverse(l)));
    let kind_of = |level: usize| {
        if level > 0 && largest.is_some_and(|big| level >= big) {
            b.last_level_kind
        } else {
            b.upper_kind
        }
    };
    let mut runs: Vec<Run> = l0_runs
        .iter()
        .map(|&keys| Run {
            level: 0,
            kind: kind_of(0),
            keys,
        })
        .collect();
    for (level, &keys) in level_keys.iter().enumerate().skip(1) {
        if keys > 0 {
            runs.push(Run {
                level,
                kind: kind_of(level),
                keys,
            });
        }
    }
    // An average bits/key budget counts the planned-for level-0 keys too: when those tables
    // are written their keys bring their share, so until then the store holds less than
    // `bits × keys held`, never more. (Counting only the keys held made a settled store keep
    // ~15% of its budget idle for the next flushes; this halves that.)
    let total_keys: u64 = runs.iter().map(|r| r.keys).sum::<u64>();
    let budget_bits = match b.memory {
        FilterMemory::BitsPerKey(bpk) => bpk * total_keys as f64,
        FilterMemory::TotalBytes(bytes) => bytes as f64 * 8.0,
    };
    // Every filter block carries a header and trailer the allocation cannot spend.
    let overhead =
        ((live_tables + new_tables) * (format::HEADER_LEN + format::TRAILER_LEN) as u64 * 8) as f64;
    let kinds_keys: Vec<(FilterKind, u64)> = runs.iter().map(|r| (r.kind, r.keys)).collect();
    // A table's run: level-0 tables in order, one per deeper level.
    let run_of = |i_l0: &mut usize, level: usize| -> Option<usize> {
        if level == 0 {
            *i_l0 += 1;
            Some(*i_l0 - 1)
        } else {
            runs.iter().position(|r| r.level == level)
        }
    };
    // The allocation with `reserve` bits set aside, and what older tables then hold over (or,
    // negative, under) their runs' targets.
    let spend = budget_bits - overhead;
    let allocate_with = |reserve: f64| -> (Vec<f64>, f64) {
        let bits = budget::allocate_runs(&kinds_keys, (spend - reserve).max(0.0));
        let mut i_l0 = 0;
        let excess = held
            .iter()
            .map(|&(level, keys, held_bits)| {
                let target = run_of(&mut i_l0, level).map_or(0.0, |r| bits[r] * keys as f64);
                held_bits as f64 - target
            })
            .sum();
        (bits, excess)
    };
    // The reserve equal to the difference it causes (a smaller plan leaves more surplus, so
    // `excess(reserve) - reserve` falls as the reserve grows): bisect for it. Then the live
    // tables plus the new ones hold exactly what the plan spends. A negative reserve hands
    // the new tables what older, smaller filters left unspent. (Iterating `reserve = excess`
    // converged too slowly when one big level held the surplus.)
    let (mut bits, excess) = allocate_with(0.0);
    let unreserved = bits.clone();
    let mut reserve = 0.0;
    if excess.abs() > 8.0 {
        let most = MAX_BITS_PER_KEY_PLANNED * total_keys as f64 + spend.abs();
        let (mut lo, mut hi) = (-most, spend.max(0.0));
        for _ in 0..40 {
            let mid = (lo + hi) / 2.0;
            if allocate_with(mid).1 > mid {
                lo = mid;
            } else {
                hi = mid;
            }
        }
        reserve = hi;
        bits = allocate_with(hi).0;
    }
    let mut levels: Vec<LevelAllocation> = Vec::new();
    let top = deepest.unwrap_or(0).max(new_level.unwrap_or(0));
    for level in 0..=top {
        // Level 0: its real runs, or the planned-for ones when it has none.
        let mine: Vec<usize> = (0..runs.len())
            .filter(|&i| runs[i].level == level)
            .filter(|&i| level > 0 || i < real_l0 || real_l0 == 0)
            .collect();
        let real_runs = if level == 0 { real_l0 } else { mine.len() };
        let keys: u64 = mine.iter().map(|&i| runs[i].keys).sum();
        let weighted: f64 = mine.iter().map(|&i| bits[i] * runs[i].keys as f64).sum();
        levels.push(LevelAllocation {
            level,
            runs: real_runs as u64,
            keys: if real_runs == 0 { 0 } else { keys },
            kind: Some(kind_of(level)),
            bits_per_key: if keys == 0 {
                0.0
            } else {
                weighted / keys as f64
            },
            // Only runs that exist cost a lookup anything.
            expected_fpr: if real_runs == 0 {
                0.0
            } else {
                mine.iter()
                    .fold(0.0, |sum, &i| sum + budget::fpr_at(runs[i].kind, bits[i]))
            },
            filter_bytes: version.levels[level]
                .iter()
                .filter(|t| matches!(t.filter(), FilterState::Valid(_)))
                .map(|t| t.filter_bytes())
                .sum(),
        });
    }
    let new_table = new_level.and_then(|level| {
        // The new table's own run: the last level-0 run, or its level's.
        let i = if level == 0 {
            real_l0.checked_sub(1)
        } else {
            runs.iter().position(|r| r.level == level)
        }?;
        // Never below half of what the plan gives the run before settling older tables'
        // surplus: filter_budget's 10^7-key run had two level-2 tables written with no filter
        // at all (the surplus of level-1 tables built when level 1 was small took everything),
        // each costing a read on 1/62 of absent lookups until rewritten. The floor can put
        // the total over the budget by part of this table's filter until compaction rewrites
        // the surplus away.
        Some((runs[i].kind, bits[i].max(0.5 * unreserved[i])))
    });
    Plan {
        allocation: Allocation {
            budget_bytes: (budget_bits / 8.0) as u64,
            filter_bytes,
            reserved_bytes: (reserve / 8.0) as i64,
            levels,
        },
        new_table,
    }
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
        Ok(())
    }
}
