//! The live shape of one database as an lsm-bloom budget policy sees it, so the budget plans
//! on the tables that exist rather than on a model.
//!
//! RocksDB tells a filter policy only the level a new file is written for. But every filter
//! block the policy builds passes through it twice: at `Finish` (level and key count known)
//! and when RocksDB opens the table and asks for a reader of that block. The shape remembers
//! recently built blocks by their CRC-32 (`built`), and counts a reader whose block it built as
//! live at that level until the reader is dropped (RocksDB drops it when the table is closed or
//! deleted). Level-0 tables are runs of their own; each deeper level is one run. Blocks built
//! before this process (a reopened database) are live at an unknown level, counted with the
//! last level, where most keys are.
//!
//! `plan` then spreads `average × keys` bits over the runs plus the new file with
//! `filter::budget::allocate_runs` and returns the new file's bits/key: a flush beside the live
//! runs; a compaction output beside the live levels ≥ 1 and one level-0 run of the last
//! flush's size (not the live level-0 tables, which an L0 → base compaction consumes). Each
//! plan is computed once per file, at `Finish`, under a mutex that no probe takes. With
//! `cache_index_and_filter_blocks` RocksDB drops readers whose filter leaves its block cache,
//! so the shape then counts the tables whose filters are cached.

use std::collections::{BTreeMap, VecDeque};
use std::sync::{Mutex, MutexGuard};

use crate::filter::{budget, FilterKind};

/// Built blocks remembered until their table is opened (RocksDB opens a new table right after
/// writing it, so a short memory suffices).
const REMEMBERED: usize = 4096;

/// Where a live reader's keys are counted, for `closed`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Live {
    level: Option<i32>,
    id: u64,
    keys: u64,
}

#[derive(Debug, Default)]
struct Inner {
    built: VecDeque<(u32, i32)>,
    /// Live level-0 tables: id → keys.
    l0: BTreeMap<u64, u64>,
    /// Live keys per level ≥ 1.
    levels: BTreeMap<i32, u64>,
    /// Live keys of blocks this process did not build.
    unknown: u64,
    /// Keys of the last level-0 table built (what the next flush will hold, roughly).
    flush_keys: u64,
    next_id: u64,
}

/// One database's live filter runs (see the module docs).
#[derive(Debug, Default)]
pub struct Shape {
    inner: Mutex<Inner>,
}

impl Shape {
    fn lock(&self) -> MutexGuard<'_, Inner> {
        // The counts stay consistent under any panic (plain arithmetic), so keep using them.
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// A block with checksum `crc` and `keys` keys was built for `level`.
    pub fn built(&self, crc: u32, level: i32, keys: u64) {
        let mut s = self.lock();
        if level == 0 {
            s.flush_keys = keys;
        }
        if s.built.len() == REMEMBERED {
            s.built.pop_front();
        }
        s.built.push_back((crc, level));
    }

    /// A reader was created for a valid block with checksum `crc` and `keys` keys.
    pub fn opened(&self, crc: u32, keys: u64) -> Live {
        let mut s = self.lock();
        let level = s.built.iter().rev().find(|b| b.0 == crc).map(|b| b.1);
        let id = s.next_id;
        s.next_id += 1;
        match level {
            Some(0) => {
                s.l0.insert(id, keys);
            }
            Some(l) => *s.levels.entry(l).or_default() += keys,
            None => s.unknown += keys,
        }
        Live { level, id, keys }
    }

    /// The reader `live` was dropped.
    pub fn closed(&self, live: Live) {
        let mut s = self.lock();
        match live.level {
            Some(0) => {
                s.l0.remove(&live.id);
            }
            Some(l) => {
                if let Some(k) = s.levels.get_mut(&l) {
                    *k = k.saturating_sub(live.keys);
                }
            }
            None => s.unknown = s.unknown.saturating_sub(live.keys),
        }
    }

    /// Live runs, level 0 first: `(level, keys)`.
    pub fn runs(&self) -> Vec<(i32, u64)> {
        let s = self.lock();
        let mut runs: Vec<(i32, u64)> = s.l0.values().map(|&k| (0, k)).collect();
        runs.extend(
            s.levels
                .iter()
                .filter(|(_, &k)| k > 0)
                .map(|(&l, &k)| (l, k)),
        );
        if s.unknown > 0 {
            match runs.iter_mut().rfind(|r| r.0 > 0) {
                Some(last) => last.1 += s.unknown,
                None => runs.push((i32::MAX, s.unknown)),
            }
        }
        runs
    }

    /// Bits/key for a new file of `keys` keys at `level` under an average of `average_bits`
    /// on `kind`'s curve.
    ///
    /// A flush (level 0) is planned beside the live runs. A compaction output (level ≥ 1) is
    /// planned without the live level-0 tables — an L0 → base compaction consumes them, and
    /// counting them would starve the level being written — but with one level-0 run of the
    /// last flush's size, the young table that will sit above it (Monkey's share for it is
    /// paid here, at the big level, once).
    pub fn plan(&self, kind: FilterKind, average_bits: f64, level: i32, keys: u64) -> f64 {
        let mut runs = self.runs();
        let mine = if level <= 0 {
            runs.push((0, keys));
            runs.len() - 1
        } else {
            let flush = self.lock().flush_keys;
            runs.retain(|r| r.0 != 0);
            if flush > 0 {
                runs.insert(0, (0, flush));
            }
            if let Some(i) = runs.iter().position(|r| r.0 == level) {
                runs[i].1 += keys;
                i
            } else {
                runs.push((level, keys));
                runs.len() - 1
            }
        };
        let weighted: Vec<(FilterKind, u64)> = runs.iter().map(|&(_, k)| (kind, k)).collect();
        let total: f64 = runs.iter().map(|r| r.1 as f64).sum();
        let plan = budget::allocate_runs(&weighted, average_bits * total);
        plan.get(mine).copied().unwrap_or(average_bits)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn readers_of_built_blocks_count_at_their_level_until_closed() {
        let s = Shape::default();
        s.built(11, 0, 1000);
        s.built(22, 6, 50_000);
        let a = s.opened(11, 1000);
        let b = s.opened(22, 50_000);
        let c = s.opened(33, 7000); // not built here: counted with the last level
        assert_eq!(s.runs(), vec![(0, 1000), (6, 57_000)]);
        s.closed(c);
        s.closed(a);
        assert_eq!(s.runs(), vec![(6, 50_000)]);
        s.closed(b);
        assert!(s.runs().is_empty());
    }

    #[test]
    fn small_young_runs_get_more_bits_and_the_memory_averages_out() {
        let s = Shape::default();
        s.built(1, 6, 1_000_000);
        let _big = s.opened(1, 1_000_000);
        for crc in [2, 3] {
            s.built(crc, 0, 100_000);
            let _ = s.opened(crc, 100_000);
        }
        let kind = FilterKind::Blocked;
        // A third level-0 file: planned beside the two live ones and the big level.
        let l0 = s.plan(kind, 10.0, 0, 100_000);
        assert!(l0 > 12.0, "L0 {l0}");
        // A compaction output at the last level is planned without the live level-0 tables
        // (they are its inputs) but beside one flush-sized run to come, and gets less than
        // the average: together the two spend the average.
        let last = s.plan(kind, 10.0, 6, 0);
        assert!(last < 10.0, "last {last}");
        let young = {
            let t = Shape::default();
            t.built(9, 6, 1_000_000);
            let _ = t.opened(9, 1_000_000);
            t.plan(kind, 10.0, 0, 100_000)
        };
        let avg = (100_000.0 * young + 1_000_000.0 * last) / 1_100_000.0;
        assert!((9.6..=10.0).contains(&avg), "average {avg}");
        // With nothing live, a file gets the average.
        assert!((Shape::default().plan(kind, 10.0, 0, 5000) - 10.0).abs() < 0.1);
    }
}
