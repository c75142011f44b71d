//! Asking a table's filters about a key, for the point lookups (`read.rs`, `multi_get.rs`):
//! the whole-key filter, or, for a table without a usable one, its prefix filter about the
//! key's prefix (hashed at most once per lookup, `KeyPrefix`); each answer counted in the
//! level's `LevelCounters` (one at a time, or tallied over a batch: `FilterTally`).

use std::sync::atomic::AtomicU64;

use super::counters::{bump, LevelCounters, ReadCounters};
use crate::filter::hash_key;
use crate::prefix::PrefixExtractor;
use crate::table::{FilterState, PrefixCheck, Table};

/// A key's prefix under the store's rule, hashed on first use.
pub(super) enum KeyPrefix<'k> {
    /// Not needed yet.
    Pending(Option<PrefixExtractor>, &'k [u8]),
    /// The rule, the prefix and its hash.
    Hashed(PrefixExtractor, &'k [u8], u64),
    /// No rule, or the rule gives the key no prefix.
    None,
}

impl<'k> KeyPrefix<'k> {
    /// The key's prefix under the store's rule, and its hash: worked out on the first call.
    pub(super) fn get(&mut self) -> Option<(PrefixExtractor, &'k [u8], u64)> {
        if let KeyPrefix::Pending(rule, key) = *self {
            *self = match rule.and_then(|r| r.prefix(key).map(|p| (r, p))) {
                Some((r, p)) => KeyPrefix::Hashed(r, p, hash_key(p)),
                None => KeyPrefix::None,
            };
        }
        match *self {
            KeyPrefix::Hashed(r, p, h) => Some((r, p, h)),
            _ => None,
        }
    }
}

/// What a table's filters say about a key.
pub(super) enum Verdict {
    /// A filter excludes the key: the table does not hold it.
    Absent,
    /// The data block must be read; `filtered` when a whole-key filter said "maybe" (a hit
    /// there is counted as the filter's true positive).
    Maybe { filtered: bool },
}

/// Asks `t`'s whole-key filter about `key`, or, without a usable one, its prefix filter about
/// the key's prefix; counts the answer in `c`.
#[inline(always)]
pub(super) fn check_filters(
    c: &LevelCounters,
    t: &Table,
    key: &[u8],
    hash: u64,
    prefix: &mut KeyPrefix,
) -> Verdict {
    let (verdict, answer) = ask_filters(t, key, hash, prefix);
    answer.count(c);
    verdict
}

/// Which filter answered a `check_filters` question, and how: what it counts.
#[derive(Clone, Copy)]
pub(super) enum FilterAnswer {
    /// The whole-key filter excluded the key.
    WholeAbsent,
    /// The whole-key filter said "maybe".
    WholeMaybe,
    /// The prefix filter excluded the key's prefix.
    PrefixAbsent,
    /// The prefix filter said "maybe".
    PrefixMaybe,
    /// No usable filter for the key.
    Unfiltered,
}

impl FilterAnswer {
    /// The counters of `c` one such answer moves: the check (or unfiltered probe), and the
    /// outcome where one is counted. The one mapping `count` and `FilterTally::flush` share.
    #[inline(always)]
    fn counters(self, c: &LevelCounters) -> (&AtomicU64, Option<&AtomicU64>) {
        match self {
            FilterAnswer::WholeAbsent => (&c.filter_checks, Some(&c.filter_useful)),
            FilterAnswer::WholeMaybe => (&c.filter_checks, Some(&c.filter_positive)),
            FilterAnswer::PrefixAbsent => (&c.prefix_checks, Some(&c.prefix_useful)),
            FilterAnswer::PrefixMaybe => (&c.prefix_checks, None),
            FilterAnswer::Unfiltered => (&c.unfiltered_probes, None),
        }
    }

    /// Adds this answer to `c`.
    #[inline(always)]
    fn count(self, c: &LevelCounters) {
        let (check, outcome) = self.counters(c);
        bump(check, 1);
        if let Some(outcome) = outcome {
            bump(outcome, 1);
        }
    }
}

/// `FilterAnswer`s summed over many questions in local variables, added to a level's
/// counters once (`multi_get`, per level and batch): one `bump` per key would chain every
/// key's probe to the last through the counter's store and load. Measured against a `bump`
/// per key: absent `multi_get` 0.986× the time on the stored 10^7-key store (`absent_ab
/// time-multi`, 8 interleaved pairs, 7 of them below 1) and 1.023× the rate compacted at the
/// defaults (`db_bench --defaults --hold absent-multi --hold-compacted`, 5 pairs).
#[derive(Default)]
pub(super) struct FilterTally {
    probed: u64,
    whole_absent: u64,
    whole_maybe: u64,
    prefix_absent: u64,
    prefix_maybe: u64,
    unfiltered: u64,
}

impl FilterTally {
    /// Counts one table probed and its filters' answer.
    #[inline(always)]
    pub(super) fn add(&mut self, answer: FilterAnswer) {
        self.probed += 1;
        let n = match answer {
            FilterAnswer::WholeAbsent => &mut self.whole_absent,
            FilterAnswer::WholeMaybe => &mut self.whole_maybe,
            FilterAnswer::PrefixAbsent => &mut self.prefix_absent,
            FilterAnswer::PrefixMaybe => &mut self.prefix_maybe,
            FilterAnswer::Unfiltered => &mut self.unfiltered,
        };
        *n += 1;
    }

    /// Adds the sums to `counters` (tables probed) and to `c` (the level's).
    pub(super) fn flush(&self, counters: &ReadCounters, c: &LevelCounters) {
        let add = |counter: &AtomicU64, n: u64| {
            if n > 0 {
                bump(counter, n);
            }
        };
        add(&counters.tables_probed, self.probed);
        for (answer, n) in [
            (FilterAnswer::WholeAbsent, self.whole_absent),
            (FilterAnswer::WholeMaybe, self.whole_maybe),
            (FilterAnswer::PrefixAbsent, self.prefix_absent),
            (FilterAnswer::PrefixMaybe, self.prefix_maybe),
            (FilterAnswer::Unfiltered, self.unfiltered),
        ] {
            let (check, outcome) = answer.counters(c);
            add(check, n);
            if let Some(outcome) = outcome {
                add(outcome, n);
            }
        }
    }
}

/// What `t`'s filters say about `key` (`check_filters`), and which answered, uncounted.
#[inline(always)]
pub(super) fn ask_filters(
    t: &Table,
    key: &[u8],
    hash: u64,
    prefix: &mut KeyPrefix,
) -> (Verdict, FilterAnswer) {
    match t.filter() {
        FilterState::Valid(f) => {
            if !f.may_contain_prehashed(key, hash) {
                return (Verdict::Absent, FilterAnswer::WholeAbsent);
            }
            (Verdict::Maybe { filtered: true }, FilterAnswer::WholeMaybe)
        }
        FilterState::None | FilterState::Invalid(_) => {
            let check = match prefix.get() {
                Some((rule, p, h)) => t.check_prefix(rule, p, h),
                None => PrefixCheck::Unfiltered,
            };
            match check {
                PrefixCheck::Absent => (Verdict::Absent, FilterAnswer::PrefixAbsent),
                PrefixCheck::Maybe => (
                    Verdict::Maybe { filtered: false },
                    FilterAnswer::PrefixMaybe,
                ),
                PrefixCheck::Unfiltered => {
                    (Verdict::Maybe { filtered: false }, FilterAnswer::Unfiltered)
                }
            }
        }
    }
}
