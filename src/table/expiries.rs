//! How a table's expiring puts' expiries are spread, for the properties (FORMAT.md §3):
//! their count, earliest and latest, and from table format 7 their key and value bytes and
//! the expiries at 15 evenly spaced ranks between (`EXPIRY_QUANTILES`). The compaction picker estimates from them how much of
//! a table has expired at a given time (`expired_fraction`) to decide which tables to rewrite
//! (docs/expiry.md).
//!
//! Why quantiles: before format 7 the estimate took the expiries as spread evenly between the
//! earliest and the latest, which misjudges the common case. A table merged from puts written
//! over an hour with time-to-live drawn up to an hour holds expiries bunched early and a thin
//! tail to the latest: at the end of `db_bench --workload expiry` (4×10^6 keys) the even
//! spread put the tables' expired bytes at 1.6 MB of 48 MB where 6.5 MiB of the 12 MiB on
//! disk had expired, so the store-wide bound never acted (expired ÷ live reached 2.8). The
//! bytes, because a share of entries misjudges a table whose expired puts a compaction has
//! made tombstones (kept while a deeper level may hold the key): there 12% of the entries
//! were expiring puts, holding 45% of the bytes.
//!
//! The ranks come from a uniform sample of at most `SAMPLE` expiries (reservoir sampling,
//! deterministic), so a builder holds 8 KiB for them whatever the table's size: a rank read
//! from 1,024 samples is off by about 1.5% of the puts (one standard deviation at the median).

use crate::expiry::NEVER;

/// Points stored between the earliest and the latest expiry (format 7): the expiries at ranks
/// k/16 of the expiring puts, k = 1..=15.
pub(crate) const EXPIRY_QUANTILES: usize = 15;

/// Expiries a builder keeps a sample of.
const SAMPLE: usize = 1024;

/// A builder's account of its expiring puts.
#[derive(Debug)]
pub(crate) struct Expiries {
    /// Expiring puts added.
    count: u64,
    /// Their key and value bytes.
    bytes: u64,
    /// The earliest and latest expiry among them.
    span: Option<(u64, u64)>,
    /// A uniform sample of their expiries (all of them while there are at most `SAMPLE`).
    sample: Vec<u64>,
    /// The sampler's generator state (xorshift64; fixed seed: the same puts give the same
    /// table).
    rng: u64,
}

impl Default for Expiries {
    fn default() -> Self {
        Expiries {
            count: 0,
            bytes: 0,
            span: None,
            sample: Vec::new(),
            rng: 0x9E37_79B9_7F4A_7C15,
        }
    }
}

impl Expiries {
    /// Counts a put of `bytes` key and value bytes expiring at `at` (`NEVER`: none; not
    /// counted).
    pub(crate) fn add(&mut self, at: u64, bytes: usize) {
        if at == NEVER {
            return;
        }
        self.count += 1;
        self.bytes += bytes as u64;
        self.span = Some(match self.span {
            None => (at, at),
            Some((e, l)) => (e.min(at), l.max(at)),
        });
        if self.sample.len() < SAMPLE {
            self.sample.push(at);
            return;
        }
        // Algorithm R: the count-th put replaces a sampled one with probability SAMPLE/count.
        self.rng ^= self.rng << 13;
        self.rng ^= self.rng >> 7;
        self.rng ^= self.rng << 17;
        let slot = self.rng % self.count;
        if let Some(s) = self.sample.get_mut(slot as usize) {
            *s = at;
        }
    }

    /// Expiring puts counted so far.
    pub(crate) fn count(&self) -> u64 {
        self.count
    }

    /// Their key and value bytes.
    pub(crate) fn bytes(&self) -> u64 {
        self.bytes
    }

    /// The earliest and latest expiry, `None` without any.
    pub(crate) fn span(&self) -> Option<(u64, u64)> {
        self.span
    }

    /// The expiries at ranks k/16, k = 1..=15, of the sample (nearest rank); empty without
    /// any expiring put.
    pub(crate) fn quantiles(&self) -> Vec<u64> {
        if self.sample.is_empty() {
            return Vec::new();
        }
        let mut sorted = self.sample.clone();
        sorted.sort_unstable();
        let n = sorted.len();
        (1..=EXPIRY_QUANTILES)
            .map(|k| sorted[(k * n / (EXPIRY_QUANTILES + 1)).min(n - 1)])
            .collect()
    }
}

/// The fraction of a table's expiring puts expired at `now` (an expiry at or before `now` has
/// passed), from their `span` and `quantiles` (empty before format 7: taken as spread evenly
/// over the span). Linear between the stored points.
pub(crate) fn expired_fraction(span: (u64, u64), quantiles: &[u64], now: u64) -> f64 {
    let (earliest, latest) = span;
    if now >= latest {
        return 1.0;
    }
    if now < earliest {
        return 0.0;
    }
    // The points at ranks 0, 1/m, …, 1 (m segments); `now` lies in [earliest, latest).
    let m = quantiles.len() + 1;
    let point = |i: usize| match i {
        0 => earliest,
        i if i == m => latest,
        i => quantiles[i - 1],
    };
    // The last point not after `now` (its segment's end lies after `now`).
    let k = (0..=m).rfind(|&i| point(i) <= now).unwrap_or(0).min(m - 1);
    let (a, b) = (point(k), point(k + 1));
    let within = match b > a {
        true => (now - a + 1) as f64 / (b - a + 1) as f64,
        false => 1.0,
    };
    (k as f64 + within.min(1.0)) / m as f64
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every expiry kept while they fit the sample: the quantiles are the exact ranks, and the
    /// fraction expired follows them; past the sample, ranks stay within a few percent.
    #[test]
    fn quantiles_follow_the_expiries_and_the_fraction_follows_the_quantiles() {
        // 900 puts: 800 expiring at 1..=800, 100 at 10_000..10_100 (a thin late tail).
        let mut e = Expiries::default();
        for at in (1..=800).chain(10_000..10_100) {
            e.add(at, 10);
        }
        e.add(NEVER, 10);
        assert_eq!((e.count(), e.span()), (900, Some((1, 10_099))));
        assert_eq!(e.bytes(), 9_000);
        let q = e.quantiles();
        assert_eq!(q.len(), EXPIRY_QUANTILES);
        assert_eq!(q[0], 57); // rank 900/16 = 56 (0-based) holds 57
        assert!(q.windows(2).all(|w| w[0] <= w[1]));
        let span = e.span().unwrap();
        let f = |now| expired_fraction(span, &q, now);
        // At 800, 8/9 of the puts have expired: the even spread would say 8%.
        assert!((f(800) - 8.0 / 9.0).abs() < 0.07, "{}", f(800));
        assert!(expired_fraction(span, &[], 800) < 0.1);
        assert_eq!((f(0), f(10_099), f(u64::MAX - 1)), (0.0, 1.0, 1.0));
        let mut last = 0.0;
        for now in (0..10_200).step_by(37) {
            assert!(f(now) >= last, "not monotone at {now}");
            last = f(now);
        }
        // 100,000 puts through a 1,024 sample: ranks within 4% of the truth.
        let mut e = Expiries::default();
        for i in 0..100_000u64 {
            e.add((i * 7_919) % 100_000 + 1, 1);
        }
        let q = e.quantiles();
        for (k, &at) in q.iter().enumerate() {
            let want = (k as f64 + 1.0) / 16.0 * 100_000.0;
            assert!((at as f64 - want).abs() < 4_000.0, "rank {k}: {at}");
        }
    }

    /// Equal points (many puts expiring at once) give no division by zero and no jump back.
    #[test]
    fn ties_and_a_single_expiry() {
        let span = (100, 200);
        let q = [100; EXPIRY_QUANTILES];
        assert_eq!(expired_fraction(span, &q, 99), 0.0);
        assert!(expired_fraction(span, &q, 100) >= 15.0 / 16.0);
        assert_eq!(expired_fraction((5, 5), &[5; EXPIRY_QUANTILES], 5), 1.0);
        assert_eq!(expired_fraction((5, 5), &[], 4), 0.0);
    }
}
