//! Write slowdown: how long a group commit waits when compaction falls behind — level 0
//! filling faster than it is emptied, or the compaction debt (`compaction::pending_bytes`)
//! growing — so writers ease off before they meet the stop (`Options::l0_stop_writes_trigger`,
//! `hard_pending_compaction_bytes_limit`, where a write waits for compaction outright).
//!
//! RocksDB's write controller: from `l0_slowdown_writes_trigger` tables on, or past
//! `soft_pending_compaction_bytes_limit`, writes may go at `delayed_write_rate` bytes per
//! second; each time level 0 or the debt has grown since the last group the rate falls by a
//! fifth, each time one shrank (and neither grew) it rises by a quarter (never above the
//! configured rate). A group's wait is its WAL bytes over the rate, added up and slept once it
//! reaches a millisecond, so that a single small write is not rounded up to the scheduler's
//! granularity. The leader sleeps holding the writer lock: the writes queued behind it wait
//! too, which is the point.

use std::time::Duration;

/// Below this the sleeps are summed instead of taken.
const MIN_SLEEP: Duration = Duration::from_millis(1);
/// The rate never falls below this share of `delayed_write_rate`.
const FLOOR: f64 = 1.0 / 256.0;

/// What the slowdown follows: level 0's table count and the compaction debt in bytes.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(super) struct Pressure {
    pub(super) l0: usize,
    pub(super) pending: u64,
}

impl Pressure {
    fn grew_since(self, then: Pressure) -> bool {
        self.l0 > then.l0 || self.pending > then.pending
    }
}

/// The slowdown's state, kept under the writer lock.
#[derive(Debug, Default)]
pub(super) struct Throttle {
    /// Bytes per second allowed now (0 when not slowing).
    rate: f64,
    /// The pressure at the last group.
    last: Pressure,
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
        } else if now.grew_since(self.last) {
            self.rate = (self.rate * 0.8).max(base * FLOOR);
        } else if now != self.last {
            self.rate = (self.rate * 1.25).min(base);
        }
        self.last = now;
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

    fn at(l0: usize, pending: u64) -> Pressure {
        Pressure { l0, pending }
    }

    #[test]
    fn waits_that_grow_with_the_pressure_and_ease_as_it_falls() {
        let mut t = Throttle::default();
        let base = 1 << 20; // 1 MiB/s: a 1 KiB group owes ~1 ms
        assert!(!t.active());
        // The first group: a MiB at a MiB per second.
        let first = t.delay(1 << 20, at(4, 0), base).unwrap();
        assert!((first.as_secs_f64() - 1.0).abs() < 1e-6, "{first:?}");
        assert!(t.active());
        // Small groups are summed until a millisecond is owed.
        assert_eq!(t.delay(100, at(4, 0), base), None);
        let summed = (0..20).filter_map(|_| t.delay(100, at(4, 0), base)).count();
        assert!(summed >= 1, "the owed wait was never slept");
        // Two more tables: the rate falls twice, by a fifth each.
        t.delay(0, at(5, 0), base);
        t.delay(0, at(6, 0), base);
        let slower = t.delay(1 << 20, at(6, 0), base).unwrap();
        assert!(
            (slower.as_secs_f64() - 1.0 / 0.64).abs() < 1e-3,
            "{slower:?}"
        );
        // The debt grew, with level 0 unchanged: slower again.
        let debt = t.delay(1 << 20, at(6, 1 << 30), base).unwrap();
        assert!((debt.as_secs_f64() - 1.0 / 0.512).abs() < 1e-3, "{debt:?}");
        // One table compacted away: faster; the debt shrinking while level 0 grows: slower.
        let eased = t.delay(1 << 20, at(5, 1 << 30), base).unwrap();
        assert!((eased.as_secs_f64() - 1.0 / 0.64).abs() < 1e-3, "{eased:?}");
        let mixed = t.delay(1 << 20, at(6, 1 << 29), base).unwrap();
        assert!(mixed > eased, "{mixed:?} after {eased:?}");
        // Never above the configured rate, however far the pressure falls.
        for l0 in (1..30).rev() {
            t.delay(0, at(l0, 0), base);
        }
        let capped = t.delay(1 << 20, at(0, 0), base).unwrap();
        assert!((capped.as_secs_f64() - 1.0).abs() < 1e-6, "{capped:?}");
        // Nor below its floor, however far it rises.
        for l0 in 0..100 {
            t.delay(0, at(l0, 0), base);
        }
        let floor = t.delay(1 << 20, at(100, 0), base).unwrap();
        assert!(
            (floor.as_secs_f64() - 1.0 / FLOOR).abs() < 1e-3,
            "{floor:?}"
        );
        // Reset: the next slowdown starts afresh at the configured rate.
        t.reset();
        assert!(!t.active());
        let again = t.delay(1 << 20, at(9, 1 << 40), base).unwrap();
        assert!((again.as_secs_f64() - 1.0).abs() < 1e-6);
    }
}
