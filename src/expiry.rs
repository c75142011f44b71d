//! Expiry times: when a key written with one stops existing, and the clock that says when.
//!
//! A put may carry an expiry (`WriteBatch::put_with_expiry`, `put_with_ttl`): an absolute
//! time in milliseconds since the Unix epoch, stored beside the value in the log, the
//! memtable and the table (FORMAT.md §2, §3). From that time on the key is absent to every
//! read, exactly as if a deletion had been written then: an expired entry hides the key's
//! older versions, as a tombstone does. The store never rewrites an entry to expire it; a
//! read decides, from its own reading of the store's clock (`Options::clock`).
//!
//! A point read takes that reading at most once, and only when it meets an entry that carries
//! an expiry (`Now`). A scan, a cursor and a snapshot take theirs when they start and keep it
//! (`Reading`): a snapshot's reads see the keys that were live when it was made, whatever the
//! time now. A store that never held an expiring entry reads no clock at all.
//!
//! Depends on nothing else in the crate: the table layer decodes expiries, the store reads
//! the clock.

use std::cell::Cell;
use std::fmt::Debug;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// The expiry of an entry that never expires (a put without one, in memory only: the
/// formats store no expiry for such entries).
pub(crate) const NEVER: u64 = u64::MAX;

/// The earliest expiry stored: an expiry at or before the epoch is stored as 1 ms past it
/// (already passed), so that a reading of 0 (`Now::never`) expires nothing.
const EARLIEST: u64 = 1;

/// Where a store reads the time that decides whether an entry has expired: the system's
/// clock (`SystemClock`, the default), or one a test moves by hand (`ManualClock`).
pub trait Clock: Send + Sync + Debug {
    /// Milliseconds since the Unix epoch.
    fn now_millis(&self) -> u64;
}

/// The system's wall clock (`SystemTime::now`). A time before the epoch reads as 0.
#[derive(Clone, Copy, Debug, Default)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now_millis(&self) -> u64 {
        millis_of(SystemTime::now())
    }
}

/// A clock that stands still until told to move: for tests of expiry.
#[derive(Debug, Default)]
pub struct ManualClock {
    millis: AtomicU64,
}

impl ManualClock {
    /// A clock reading `millis` milliseconds since the epoch.
    pub fn new(millis: u64) -> Self {
        ManualClock {
            millis: AtomicU64::new(millis),
        }
    }
    /// Sets the reading.
    pub fn set(&self, millis: u64) {
        self.millis.store(millis, Ordering::SeqCst);
    }
    /// Moves the reading forward by `by`.
    pub fn advance(&self, by: Duration) {
        let ms = u64::try_from(by.as_millis()).unwrap_or(u64::MAX);
        let _ = self
            .millis
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |m| {
                Some(m.saturating_add(ms))
            });
    }
}

impl Clock for ManualClock {
    fn now_millis(&self) -> u64 {
        self.millis.load(Ordering::SeqCst)
    }
}

/// A keyspace's default time to live (`KeyspaceOptions::default_ttl`): how long a put
/// written there without an expiry of its own lives.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DefaultTtl {
    /// Puts without an expiry never expire.
    Never,
    /// Puts without an expiry expire this long after they are written (by the store's clock,
    /// read once per batch), kept to the millisecond: at least 1 ms, at most `MAX_TTL`.
    After(Duration),
}

/// The longest default time to live: 100 years.
pub const MAX_TTL: Duration = Duration::from_secs(100 * 365 * 86_400);

impl DefaultTtl {
    /// The time to live in whole milliseconds, `None` for `Never`.
    pub(crate) fn millis(self) -> Option<u64> {
        match self {
            DefaultTtl::Never => None,
            DefaultTtl::After(d) => Some(u64::try_from(d.as_millis()).unwrap_or(u64::MAX)),
        }
    }

    /// `Err` naming what is wrong when it is out of range.
    pub(crate) fn check(self) -> Result<(), String> {
        match self {
            DefaultTtl::After(d) if d < Duration::from_millis(1) || d > MAX_TTL => Err(format!(
                "default_ttl of {d:?} (from 1 ms to 100 years; DefaultTtl::Never for none)"
            )),
            _ => Ok(()),
        }
    }
}

/// What `Db::expiry_of` found for a key.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum KeyExpiry {
    /// The key is absent (never written, deleted, or expired).
    Absent,
    /// The key is live and never expires.
    Never,
    /// The key is live until this time (milliseconds since the Unix epoch).
    At(u64),
}

impl KeyExpiry {
    /// The expiry time as a `SystemTime`, when there is one.
    pub fn time(self) -> Option<SystemTime> {
        match self {
            KeyExpiry::At(ms) => Some(UNIX_EPOCH + Duration::from_millis(ms)),
            KeyExpiry::Absent | KeyExpiry::Never => None,
        }
    }
}

/// Milliseconds since the epoch of `t` (0 before it, `u64::MAX - 1` at most).
pub(crate) fn millis_of(t: SystemTime) -> u64 {
    t.duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
        .min(NEVER - 1)
}

/// The stored form of an expiry at `millis`: at least `EARLIEST`, below `NEVER`.
pub(crate) fn stored(millis: u64) -> u64 {
    millis.clamp(EARLIEST, NEVER - 1)
}

/// One read's reading of the clock, taken when first needed (see the module comment).
pub(crate) struct Now<'c> {
    clock: Option<&'c dyn Clock>,
    /// The reading; 0 until taken (a clock reading 0 expires nothing either: every stored
    /// expiry is at least `EARLIEST`).
    reading: Cell<u64>,
}

impl<'c> Now<'c> {
    /// A reading of `clock`, taken at the first expiry it is asked about.
    pub(crate) fn of(clock: &'c dyn Clock) -> Self {
        Now {
            clock: Some(clock),
            reading: Cell::new(0),
        }
    }
    /// A reading already taken (a snapshot's).
    pub(crate) fn fixed(millis: u64) -> Now<'static> {
        Now {
            clock: None,
            reading: Cell::new(millis),
        }
    }
    /// A reading before every expiry: nothing has expired (flushes and compactions, which
    /// carry every entry as it is).
    pub(crate) fn never() -> Now<'static> {
        Now::fixed(0)
    }
    /// The reading, taken now if not yet taken.
    pub(crate) fn millis(&self) -> u64 {
        if let Some(c) = self.clock {
            if self.reading.get() == 0 {
                self.reading.set(c.now_millis().min(NEVER - 1));
            }
        }
        self.reading.get()
    }
    /// Whether an entry expiring at `at` (`NEVER`: never) has expired at this reading.
    #[inline(always)]
    pub(crate) fn expired(&self, at: u64) -> bool {
        at != NEVER && at <= self.millis()
    }
    /// The reading, if the clock was read (0: not, or a fixed reading of none).
    pub(crate) fn taken(&self) -> u64 {
        self.reading.get()
    }
}

/// A scan's, a cursor's or a snapshot's reading of the clock, taken when it starts: 0 (nothing
/// expires) when the store has never held an expiring entry, so such a walk reads no clock
/// and shares nothing with other threads (`Inner::reading`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Reading(pub(crate) u64);

impl Reading {
    /// Whether an entry expiring at `at` has expired at this reading (as `Now::expired`).
    #[inline(always)]
    pub(crate) fn expired(self, at: u64) -> bool {
        at != NEVER && at <= self.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_reading_is_taken_once_and_only_when_asked() {
        let clock = ManualClock::new(100);
        let now = Now::of(&clock);
        assert!(!now.expired(NEVER));
        clock.set(200);
        assert!(now.expired(150), "the first reading is taken here: 200");
        clock.set(300);
        assert!(!now.expired(250), "and kept: 200, not 300");
        assert!(now.expired(200), "an entry expires at its expiry time");
        assert!(
            !Now::never().expired(stored(0)),
            "nothing expires at reading 0"
        );
        assert!(Now::fixed(5).expired(stored(0)));
    }

    #[test]
    fn stored_expiries_lie_between_earliest_and_never() {
        assert_eq!(stored(0), 1);
        assert_eq!(stored(u64::MAX), NEVER - 1);
        assert_eq!(millis_of(UNIX_EPOCH - Duration::from_secs(1)), 0);
        assert_eq!(millis_of(UNIX_EPOCH + Duration::from_millis(1234)), 1234);
        assert_eq!(
            KeyExpiry::At(1234).time(),
            Some(UNIX_EPOCH + Duration::from_millis(1234))
        );
    }
}
