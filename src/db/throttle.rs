//! Write slowdown: how long a group commit waits when level 0 is filling faster than
//! compaction empties it, so writers ease off before they meet the stop
//! (`Options::l0_stop_writes_trigger`, where a write waits for compaction outright).
//!
//! RocksDB's write controller, reduced to level 0: from `l0_slowdown_writes_trigger` tables
//! on, writes may go at `delayed_write_rate` bytes per second; each further table that lands
//! while slowed cuts the rate by a fifth, each one compaction takes away raises it by a
//! quarter (never above the configured rate). A group's wait is its WAL bytes over the rate,
//! added up and slept once it reaches a millisecond, so that a single small write is not
//! rounded up to the scheduler's granularity. The leader sleeps holding the writer lock: the
//! writes queued behind it wait too, which is the point.

use std::time::Duration;

/// Below this the sleeps are summed instead of taken.
const MIN_SLEEP: Duration = Duration::from_millis(1);
/// The rate never falls below this share of `delayed_write_rate`.
const FLOOR: f64 = 1.0 / 256.0;

/// The slowdown's state, kept under the writer lock.
#[derive(Debug, Default)]
pub(super) struct Throttle {
    /// Bytes per second allowed now (0 when not slowing).
    rate: f64,
    /// Level-0 tables at the last group.
    last_l0: usize,
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

    /// How long a group of `bytes` should wait with `l0` level-0 tables, given the slowdown
    /// trigger `from` and the configured `base` rate; `None` when writes go at full speed or the
    /// wait owed is still under a millisecond.
    pub(super) fn delay(
        &mut self,
        bytes: usize,
        l0: usize,
        from: usize,
        base: u64,
    ) -> Option<Duration> {
        if l0 < from {
            *self = Throttle::default();
            return None;
        }
        let base = base as f64;
        if self.rate == 0.0 {
            self.rate = base;
        } else if l0 > self.last_l0 {
            self.rate = (self.rate * 0.8).max(base * FLOOR);
        } else if l0 < self.last_l0 {
            self.rate = (self.rate * 1.25).min(base);
        }
        self.last_l0 = l0;
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

    #[test]
    fn no_wait_below_the_trigger_then_waits_that_grow_with_level_0_and_ease_as_it_shrinks() {
        let mut t = Throttle::default();
        let base = 1 << 20; // 1 MiB/s: a 1 KiB group owes ~1 ms
        assert_eq!(t.delay(1 << 20, 3, 4, base), None);
        // At the trigger: a MiB at a MiB per second.
        let at = t.delay(1 << 20, 4, 4, base).unwrap();
        assert!((at.as_secs_f64() - 1.0).abs() < 1e-6, "{at:?}");
        // Small groups are summed until a millisecond is owed.
        assert_eq!(t.delay(100, 4, 4, base), None);
        let summed = (0..20).filter_map(|_| t.delay(100, 4, 4, base)).count();
        assert!(summed >= 1, "the owed wait was never slept");
        // Two more tables: the rate falls twice, by a fifth each.
        t.delay(0, 5, 4, base);
        t.delay(0, 6, 4, base);
        let slower = t.delay(1 << 20, 6, 4, base).unwrap();
        assert!(
            (slower.as_secs_f64() - 1.0 / 0.64).abs() < 1e-3,
            "{slower:?}"
        );
        // One table compacted away: faster again, capped at the configured rate.
        let eased = t.delay(1 << 20, 5, 4, base).unwrap();
        assert!(eased < slower);
        // Back below the trigger: no wait, and the next slowdown starts afresh.
        assert_eq!(t.delay(1 << 20, 2, 4, base), None);
        let again = t.delay(1 << 20, 4, 4, base).unwrap();
        assert!((again.as_secs_f64() - 1.0).abs() < 1e-6);
    }
}
