//! Write slowdown: how long a group commit waits when background work falls behind —
//! memtables retired faster than they are flushed, level 0 filling faster than it is emptied,
//! or the compaction debt (`compaction::pending_bytes`) growing — so writers ease off before
//! they meet the stop (`Options::max_immutable_memtables`, `l0_stop_writes_trigger`,
//! `hard_pending_compaction_bytes_limit`, where a write waits outright).
//!
//! RocksDB's write controller: with all but one of `max_immutable_memtables` waiting for a
//! flush (when it allows at least 3), from `l0_slowdown_writes_trigger` tables on, or past
//! `soft_pending_compaction_bytes_limit`, writes may go at `delayed_write_rate` bytes per
//! second (`pressure` decides); each time what set the slowdown off (the memtables waiting,
//! level 0's table count, or else the debt) has grown since the last group the rate falls by
//! a fifth, each time it shrank it rises by a quarter (never above the configured rate). A
//! group's wait is its WAL bytes over the rate, added up and slept once it reaches a
//! millisecond, so that a single small write is not rounded up to the scheduler's
//! granularity. The leader sleeps holding the writer lock: the writes queued behind it wait
//! too, which is the point.

use std::cmp::Ordering;
use std::time::Duration;

use super::options::Options;

/// Below this the sleeps are summed instead of taken.
const MIN_SLEEP: Duration = Duration::from_millis(1);
/// The rate never falls below this share of `delayed_write_rate`.
const FLOOR: f64 = 1.0 / 256.0;

/// What the slowdown follows: the memtables waiting for a flush when they are one short of
/// the stop, else level 0's table count when it is at its trigger, else the compaction debt
/// in bytes. One signal at a time: they can move apart (a level-0 compaction empties level
/// 0 and may add to level 1's excess), and following both would slow writes down for the
/// work that relieves the pressure. The memtables come first: theirs is the nearest stop.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Pressure {
    /// Immutable memtables waiting for a flush.
    Memtables(usize),
    /// Level-0 tables.
    Level0(usize),
    /// Compaction debt, in bytes.
    Debt(u64),
}

impl Pressure {
    /// How `self` compares with `then`; `None` when they measure different things.
    fn change_since(self, then: Option<Pressure>) -> Option<Ordering> {
        match (self, then) {
            (Pressure::Memtables(a), Some(Pressure::Memtables(b))) => Some(a.cmp(&b)),
            (Pressure::Level0(a), Some(Pressure::Level0(b))) => Some(a.cmp(&b)),
            (Pressure::Debt(a), Some(Pressure::Debt(b))) => Some(a.cmp(&b)),
            _ => None,
        }
    }

    /// Why writes are slowed, for the log.
    pub(super) fn reason(self) -> &'static str {
        match self {
            Pressure::Memtables(_) => "immutable memtables one short of max_immutable_memtables",
            Pressure::Level0(_) => "level 0 at l0_slowdown_writes_trigger",
            Pressure::Debt(_) => "pending compaction bytes at soft_pending_compaction_bytes_limit",
        }
    }
}

/// What slows writes down with `imm` immutable memtables waiting for a flush, `l0` level-0
/// tables and a compaction debt of `pending` bytes under `opts`, if anything does. A trigger
/// at or above its stop slows nothing: only the stop applies (`Options`). The memtables slow
/// writes only where `max_immutable_memtables` is at least 3, as in RocksDB: with fewer, one
/// short of the stop is most of the time, and a write would be slowed at every rotation.
pub(super) fn pressure(opts: &Options, imm: usize, l0: usize, pending: u64) -> Option<Pressure> {
    let max = opts.max_immutable_memtables;
    if max >= 3 && imm + 1 >= max {
        return Some(Pressure::Memtables(imm));
    }
    let (from, stop) = (opts.l0_slowdown_writes_trigger, opts.l0_stop_writes_trigger);
    if from < stop && l0 >= from {
        return Some(Pressure::Level0(l0));
    }
    let soft = opts.soft_pending_compaction_bytes_limit?;
    let below_hard = opts
        .hard_pending_compaction_bytes_limit
        .is_none_or(|hard| soft < hard);
    (pending >= soft && below_hard).then_some(Pressure::Debt(pending))
}

/// The slowdown's state, kept under the writer lock.
#[derive(Debug, Default)]
pub(super) struct Throttle {
    /// Bytes per second allowed now (0 when not slowing).
    rate: f64,
    /// The pressure at the last group.
    last: Option<Pressure>,
    /// Wait owed and not yet slept, in seconds.
    owed: f64,
}

impl Throttle {
    /// True while writes are being slowed down.
    pub(super) fn active(&self) -> bool {
        self.rate > 0.0
    }

    /// Back to full speed.
    pub(super) fn reset(&mut self) {
        *self = Throttle::default();
    }

    /// How long a group of `bytes` should wait, writes being slowed under pressure `now` with
    /// the configured `base` rate; `None` while the wait owed is still under a millisecond.
    /// The caller decides whether writes are slowed at all (and `reset`s when they are not).
    pub(super) fn delay(&mut self, bytes: usize, now: Pressure, base: u64) -> Option<Duration> {
        let base = base as f64;
        if self.rate == 0.0 {
            self.rate = base;
        } else {
            match now.change_since(self.last) {
                Some(Ordering::Greater) => self.rate = (self.rate * 0.8).max(base * FLOOR),
                Some(Ordering::Less) => self.rate = (self.rate * 1.25).min(base),
                _ => {}
            }
        }
        self.last = Some(now);
        self.owed += bytes as f64 / self.rate;
        let wait = Duration::from_secs_f64(self.owed);
        if wait < MIN_SLEEP {
            return None;
        }
        self.owed = 0.0;
        Some(wait)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    use Pressure::{Debt, Level0, Memtables};

    #[test]
    fn waits_that_grow_with_the_pressure_and_ease_as_it_falls() {
        let mut t = Throttle::default();
        let base = 1 << 20; // 1 MiB/s: a 1 KiB group owes ~1 ms
        let secs = |d: Option<Duration>| d.unwrap().as_secs_f64();
        assert!(!t.active());
        // The first group: a MiB at a MiB per second.
        assert!((secs(t.delay(1 << 20, Level0(4), base)) - 1.0).abs() < 1e-6);
        assert!(t.active());
        // Small groups are summed until a millisecond is owed.
        assert_eq!(t.delay(100, Level0(4), base), None);
        let summed = (0..20)
            .filter_map(|_| t.delay(100, Level0(4), base))
            .count();
        assert!(summed >= 1, "the owed wait was never slept");
        // Two more tables: the rate falls twice, by a fifth each.
        t.delay(0, Level0(5), base);
        t.delay(0, Level0(6), base);
        let slower = secs(t.delay(1 << 20, Level0(6), base));
        assert!((slower - 1.0 / 0.64).abs() < 1e-3, "{slower}");
        // One table compacted away: faster by a quarter.
        let eased = secs(t.delay(1 << 20, Level0(5), base));
        assert!((eased - 1.0 / 0.8).abs() < 1e-3, "{eased}");
        // Now the debt sets it off: no change at the switch, then it follows the debt.
        assert!((secs(t.delay(1 << 20, Debt(1 << 30), base)) - eased).abs() < 1e-3);
        let debt = secs(t.delay(1 << 20, Debt(1 << 31), base));
        assert!((debt - 1.0 / 0.64).abs() < 1e-3, "{debt}");
        let paid = secs(t.delay(1 << 20, Debt(1 << 29), base));
        assert!((paid - eased).abs() < 1e-3, "{paid}");
        // Never above the configured rate, however far the pressure falls.
        for l0 in (1..30).rev() {
            t.delay(0, Level0(l0), base);
        }
        assert!((secs(t.delay(1 << 20, Level0(0), base)) - 1.0).abs() < 1e-6);
        // Nor below its floor, however far it rises.
        for l0 in 0..100 {
            t.delay(0, Level0(l0), base);
        }
        let floor = secs(t.delay(1 << 20, Level0(100), base));
        assert!((floor - 1.0 / FLOOR).abs() < 1e-3, "{floor}");
        // Reset: the next slowdown starts afresh at the configured rate.
        t.reset();
        assert!(!t.active());
        assert!((secs(t.delay(1 << 20, Debt(1 << 40), base)) - 1.0).abs() < 1e-6);
    }

    /// Level 0 at its trigger wins; the debt slows writes from the soft limit; a trigger or
    /// soft limit at or above its stop, or `None`, slows nothing.
    #[test]
    fn what_slows_writes() {
        let o = Options::default()
            .with_l0_slowdown_writes_trigger(4)
            .with_l0_stop_writes_trigger(8)
            .with_soft_pending_compaction_bytes_limit(Some(100))
            .with_hard_pending_compaction_bytes_limit(Some(200));
        assert_eq!(pressure(&o, 0, 3, 99), None);
        assert_eq!(pressure(&o, 0, 4, 500), Some(Level0(4)));
        assert_eq!(pressure(&o, 0, 3, 100), Some(Debt(100)));
        assert_eq!(
            pressure(&o, 0, 3, 100).map(Pressure::reason),
            Some(Debt(0).reason())
        );
        let o2 = o.clone().with_l0_slowdown_writes_trigger(8);
        assert_eq!(pressure(&o2, 0, 9, 0), None);
        let o3 = o
            .clone()
            .with_soft_pending_compaction_bytes_limit(Some(200));
        assert_eq!(pressure(&o3, 0, 0, 1 << 40), None);
        let o4 = o.clone().with_soft_pending_compaction_bytes_limit(None);
        assert_eq!(pressure(&o4, 0, 0, 1 << 40), None);
        // Memtables one short of the stop come first, where the stop is at least 3.
        let o5 = o.clone().with_max_immutable_memtables(4);
        assert_eq!(pressure(&o5, 2, 0, 0), None);
        assert_eq!(pressure(&o5, 3, 0, 0), Some(Memtables(3)));
        assert_eq!(pressure(&o5, 3, 4, 500), Some(Memtables(3)));
        assert_eq!(pressure(&o5, 2, 4, 500), Some(Level0(4)));
        let o6 = o.with_max_immutable_memtables(2);
        assert_eq!(pressure(&o6, 1, 0, 0), None);
    }
}
