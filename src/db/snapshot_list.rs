//! The live snapshots of one store (`Inner::snapshots`, shared with each `Snapshot`): when each
//! was taken, for `DbStats::live_snapshots` and the oldest one's age.

use std::collections::BTreeMap;
use std::sync::atomic::AtomicU64;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use super::locks::lock;

/// The live snapshots of one store: when each was taken.
#[derive(Debug, Default)]
pub(super) struct Snapshots {
    pub(super) next_id: AtomicU64,
    pub(super) live: Mutex<BTreeMap<u64, Instant>>,
}

impl Snapshots {
    /// (live snapshots, age of the oldest).
    pub(super) fn summary(&self) -> (u64, Option<Duration>) {
        let live = lock(&self.live);
        let oldest = live.values().min().map(|t| t.elapsed());
        (live.len() as u64, oldest)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_registry_counts_live_snapshots_and_the_oldest_age() {
        let r = Snapshots::default();
        assert_eq!(r.summary(), (0, None));
        lock(&r.live).insert(1, Instant::now() - Duration::from_secs(5));
        lock(&r.live).insert(2, Instant::now());
        let (n, oldest) = r.summary();
        assert_eq!(n, 2);
        assert!(oldest.unwrap() >= Duration::from_secs(5));
    }
}
