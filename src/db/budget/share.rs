//! One filter budget over several keyspaces: each keyspace's part of it (`split`), with which
//! its tables are then planned (`plan`), so that the keyspaces' filters together stay within
//! the budget and go where lookups are.
//!
//! The split is one weighted allocation over every keyspace's runs (`filter::budget::
//! allocate_weighted`): a run of keyspace `k` weighs `k`'s share of the recent lookups
//! (`lookups.rs`), since each lookup of `k` probes each of `k`'s runs and no other keyspace's.
//! What the allocation gives `k`'s runs together is `k`'s part. Within a keyspace every run
//! weighs the same, so planning it with its part alone gives back the joint allocation's
//! bits for its runs (up to the grid, and the details the split leaves out: prefix and range
//! runs, level 0's planned-for tables, block frames).
//!
//! Each keyspace is also given a floor of `FLOOR` of the lookups, spread by keys, so that one
//! never looked up still gets some filter. With no lookups seen at all (a store just opened,
//! or written but not read), the split is by keys: every keyspace gets the same bits per key,
//! as if each were alone under the budget. A budget shared by one keyspace with keys is that
//! keyspace's whole.

use super::{FilterBudget, FilterMemory};
use crate::db::version::{Version, MAX_LEVELS};
use crate::filter::budget::{allocate_weighted, Curve};

/// Share of the lookups every keyspace is credited beyond its own, spread by keys.
const FLOOR: f64 = 0.1;

/// One keyspace's part in a split.
#[derive(Clone, Debug)]
pub(crate) struct Member {
    /// Its runs: (rate curve, keys).
    pub(crate) runs: Vec<(Curve, u64)>,
    /// Its recent lookups (decayed).
    pub(crate) lookups: f64,
}

impl Member {
    /// A keyspace with `version`'s runs under budget `b` — each level-0 table, each
    /// deeper level, in the kinds `plan` gives them — and `pending` keys about to be flushed
    /// (a run of level 0).
    pub(crate) fn of(b: &FilterBudget, version: &Version, pending: u64, lookups: f64) -> Member {
        let levels = version.levels();
        let level_keys: Vec<u64> = levels
            .iter()
            .map(|ts| ts.iter().map(|t| t.properties().entries).sum())
            .collect();
        let largest = (1..MAX_LEVELS)
            .filter(|&l| level_keys[l] > 0)
            .max_by_key(|&l| (level_keys[l], std::cmp::Reverse(l)));
        let kind = |level: usize| match largest {
            Some(big) if level > 0 && level >= big => b.last_level_kind,
            _ => b.upper_kind,
        };
        let l0 = levels[0].iter().map(|t| t.properties().entries);
        let mut runs: Vec<(Curve, u64)> = l0
            .chain((pending > 0).then_some(pending))
            .map(|n| (Curve::Point(kind(0)), n))
            .collect();
        for (level, &n) in level_keys.iter().enumerate().skip(1) {
            if n > 0 {
                runs.push((Curve::Point(kind(level)), n));
            }
        }
        Member { runs, lookups }
    }

    fn keys(&self) -> u64 {
        self.runs.iter().map(|r| r.1).sum()
    }
}

/// Each member's part of `b` (in `members`' order): a total of bytes as a smaller total, an
/// average of bits per key as the member's own average (the module comment says how).
pub(crate) fn split(b: &FilterBudget, members: &[Member]) -> Vec<FilterBudget> {
    let keys: Vec<u64> = members.iter().map(Member::keys).collect();
    let all_keys: u64 = keys.iter().sum();
    let holding = keys.iter().filter(|&&k| k > 0).count();
    let lookups: f64 = members.iter().map(|m| m.lookups).sum();
    let with_memory = |m: FilterMemory| FilterBudget { memory: m, ..*b };
    if holding <= 1 || all_keys == 0 {
        return vec![*b; members.len()];
    }
    if lookups <= 0.0 {
        // By keys: the same bits per key for all.
        return keys
            .iter()
            .map(|&k| match b.memory {
                FilterMemory::TotalBytes(total) => with_memory(FilterMemory::TotalBytes(
                    (total as f64 * k as f64 / all_keys as f64) as u64,
                )),
                FilterMemory::BitsPerKey(_) => *b,
            })
            .collect();
    }
    let total_bits = match b.memory {
        FilterMemory::TotalBytes(total) => total as f64 * 8.0,
        FilterMemory::BitsPerKey(bpk) => bpk * all_keys as f64,
    };
    let mut runs = Vec::new();
    for (m, &k) in members.iter().zip(&keys) {
        let weight = m.lookups + FLOOR * lookups * k as f64 / all_keys as f64;
        runs.extend(m.runs.iter().map(|&(curve, n)| (curve, n, weight)));
    }
    let bits = allocate_weighted(&runs, total_bits);
    let mut at = 0;
    members
        .iter()
        .zip(&keys)
        .map(|(m, &k)| {
            let mine: f64 = m
                .runs
                .iter()
                .zip(&bits[at..])
                .map(|(r, b)| r.1 as f64 * b)
                .sum();
            at += m.runs.len();
            match b.memory {
                FilterMemory::TotalBytes(_) => {
                    with_memory(FilterMemory::TotalBytes((mine / 8.0) as u64))
                }
                FilterMemory::BitsPerKey(_) if k == 0 => *b,
                FilterMemory::BitsPerKey(_) => {
                    with_memory(FilterMemory::BitsPerKey(mine / k as f64))
                }
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::filter::FilterKind;

    fn member(_id: u32, runs: &[u64], lookups: f64) -> Member {
        let c = Curve::Point(FilterKind::Blocked);
        Member {
            runs: runs.iter().map(|&n| (c, n)).collect(),
            lookups,
        }
    }

    fn bytes(b: &FilterBudget) -> f64 {
        match b.memory {
            FilterMemory::TotalBytes(n) => n as f64,
            FilterMemory::BitsPerKey(_) => unreachable!("a total stays a total"),
        }
    }

    #[test]
    fn without_lookups_a_total_is_split_by_keys_and_bits_per_key_are_not() {
        let total = FilterBudget::total_bytes(1_000_000);
        let parts = split(&total, &[member(1, &[100], 0.0), member(2, &[300], 0.0)]);
        assert_eq!((bytes(&parts[0]), bytes(&parts[1])), (250_000.0, 750_000.0));
        let alone = split(&total, &[member(1, &[100], 5.0), member(2, &[], 0.0)]);
        assert_eq!(alone, [total, total], "one keyspace with keys: the whole");
        let bits = FilterBudget::bits_per_key(8.0);
        assert_eq!(
            split(&bits, &[member(1, &[10], 0.0), member(2, &[99], 0.0)]),
            [bits, bits]
        );
    }

    /// The keyspace looked up more gets more of the memory, the total is kept, and the
    /// lookup-weighted wasted reads fall below the split by keys.
    #[test]
    fn lookups_move_memory_to_the_keyspace_looked_up() {
        let total = FilterBudget::total_bytes(2_000_000); // 8 bits/key over 2 × 10^6 keys
        let members = [
            member(1, &[100_000, 900_000], 95.0),
            member(2, &[100_000, 900_000], 5.0),
        ];
        let parts = split(&total, &members);
        let (hot, cold) = (bytes(&parts[0]), bytes(&parts[1]));
        assert!(hot > 1.3 * cold, "hot {hot}, cold {cold}");
        assert!(hot + cold <= 2_000_000.0 + 1.0);
        // Wasted reads per lookup, each keyspace's runs under an even plan of its part.
        let wasted = |part: f64, runs: &[u64]| {
            let c: Vec<(FilterKind, u64)> =
                runs.iter().map(|&n| (FilterKind::Blocked, n)).collect();
            let b = crate::filter::budget::allocate_runs(&c, part * 8.0);
            crate::filter::budget::expected_wasted_reads(FilterKind::Blocked, &b)
        };
        let runs = [100_000, 900_000];
        let weighted = 0.95 * wasted(hot, &runs) + 0.05 * wasted(cold, &runs);
        let even = wasted(1_000_000.0, &runs);
        assert!(weighted < 0.8 * even, "weighted {weighted}, even {even}");
        let bpk = split(&FilterBudget::bits_per_key(8.0), &members);
        match (bpk[0].memory, bpk[1].memory) {
            (FilterMemory::BitsPerKey(h), FilterMemory::BitsPerKey(c)) => {
                assert!(h > c && (h + c) / 2.0 <= 8.0 + 1e-9, "{h} {c}")
            }
            other => panic!("{other:?}"),
        }
    }
}
