//! Filter memory as a budget: how many bits per key each run of a store should get.
//!
//! A lookup of an absent key probes one filter per run (each level-0 table, then one table per
//! deeper level) and wastes a read for every false positive, so its expected wasted reads are
//! the sum of the runs' false-positive rates. For a fixed total of filter bits, that sum is
//! smallest when every run's rate falls equally fast per bit spent (Monkey, Dayan et al.,
//! SIGMOD 2017): with the textbook filter's `p = e^(-b (ln 2)^2)` this gives rates proportional
//! to the runs' key counts — the small young runs get many bits per key, the huge last level
//! few. The blocked filter's curve is not that exponential (`math::blocked_fpr`, with the
//! probe count changing in steps), and Ribbon's is a staircase (2^-r every 1.06 bits), so
//! `allocate` optimises numerically: for a Lagrange multiplier λ each run takes the bits/key on
//! a 1/16-bit grid minimising `fpr(b) + λ n b` (a vertex of the curve's lower convex hull), and
//! λ is bisected until the total fits the budget.
//!
//! Use: `allocate(kind, &keys_per_run, total_bits)` → bits/key per run (same order); runs of
//! mixed kinds, range filters among them, through `allocate_curves`. Pure math, no I/O; the
//! store decides what the runs are and when to recompute.
//!
//! A range filter's run (`Curve::Range`) enters the same sum with its rate on a range of its
//! design length `L`: Grafite's bound `L / 2^(b − 2)` at `b` bits per key (`range`), 1 below
//! the 3 bits a range policy needs. An empty scan of up to `L` points probes one range filter
//! per run, as an absent get probes one point filter, so each wasted seek weighs as a wasted
//! get's read. For `L = 32` a range filter needs `2 + log2 L = 7` bits per key before its rate
//! drops under 1 at all, so a budget that cannot give a run that much gives it none.
//!
//! Worked example (the runs of unit test `skewed_runs_beat_uniform`: two L0 tables of 10^5
//! keys, levels of 10^6 and 10^7): expected wasted reads per absent-key
//! lookup, uniform bits/key against this allocation of the same memory —
//!
//! | kind | avg bits/key | allocation (L0, L0, L1, L2) | uniform | allocated | saved |
//! |---|---|---|---|---|---|
//! | textbook | 5 | 14.06, 14.06, 9.19, 4.38 | 0.3674 | 0.1367 | 63% |
//! | textbook | 8 | 17.06, 17.06, 12.19, 7.38 | 0.0863 | 0.0324 | 63% |
//! | textbook | 10 | 18.94, 18.94, 14.19, 9.25 | 0.0328 | 0.0131 | 60% |
//! | blocked | 5 | 14.56, 14.56, 9.25, 4.38 | 0.3715 | 0.1393 | 63% |
//! | blocked | 8 | 17.94, 17.94, 12.50, 7.31 | 0.0925 | 0.0355 | 62% |
//! | blocked | 10 | 20.50, 20.50, 14.63, 9.31 | 0.0383 | 0.0146 | 62% |
//!
//! The last level, holding 89% of the keys, gives up under one bit per key; the young runs
//! get two to three times the average. Measured reads in a store: `examples/filter_budget.rs` (docs/benchmarks.md).

use std::sync::OnceLock;

use super::{math, ribbon, FilterKind};

/// The rate curve of a run's filter: a point filter of a kind, or a range filter asked about
/// ranges of up to `max_range` points.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Curve {
    /// A point (whole-key or prefix) filter of this kind.
    Point(FilterKind),
    /// A range filter (`filter::range`) designed for ranges of up to `max_range` points.
    Range {
        /// The design length, in points.
        max_range: u64,
    },
}

/// Bits per key below which a range filter is not built (`RangePolicy::bits_per_key`'s least).
const RANGE_MIN_BITS: f64 = 3.0;

/// Expected false-positive rate of a run's filter at `bits_per_key`: `fpr_at` for a point
/// filter; for a range filter, Grafite's bound on a range of its design length,
/// `max_range / 2^(bits − 2)`, capped at 1 (and 1 under `RANGE_MIN_BITS`).
pub fn fpr_of(curve: Curve, bits_per_key: f64) -> f64 {
    match curve {
        Curve::Point(kind) => fpr_at(kind, bits_per_key),
        Curve::Range { .. } if bits_per_key < RANGE_MIN_BITS => 1.0,
        Curve::Range { max_range } => (max_range as f64 * (2.0 - bits_per_key).exp2()).min(1.0),
    }
}

/// Bits/key the grid goes up to: beyond this no rate is worth its memory here.
const MAX_BITS_PER_KEY: f64 = 32.0;
/// Grid steps per bit.
const STEPS_PER_BIT: f64 = 16.0;

/// Expected false-positive rate of `kind` at `bits_per_key`, with the probe count the filter
/// would use (1 with no bits: every lookup passes).
pub fn fpr_at(kind: FilterKind, bits_per_key: f64) -> f64 {
    if bits_per_key <= 0.0 {
        return 1.0;
    }
    match kind {
        FilterKind::Standard => {
            let k = math::optimal_k(bits_per_key, 1.0);
            math::standard_fpr(bits_per_key, 1.0, k)
        }
        FilterKind::Blocked => {
            math::blocked_fpr(bits_per_key, math::blocked_default_k(bits_per_key))
        }
        // A Ribbon filter has whole result bits r, at r × 1.06 bits/key. A level given bits in
        // between gets a matching share of tables with r and r + 1 (`ribbon_split`), so its
        // rate is the same mix of 2^-r and 2^-(r+1) (r = 0: no filter, every lookup passes).
        FilterKind::Ribbon => {
            let (r, frac) = ribbon_split(bits_per_key);
            let at = |r: u32| if r == 0 { 1.0 } else { math::ribbon_fpr(r) };
            (1.0 - frac) * at(r) + frac * at(r + 1)
        }
    }
}

/// A Ribbon budget of `bits_per_key` as whole result bits: `r` and the share of tables that
/// should get `r + 1`.
pub fn ribbon_split(bits_per_key: f64) -> (u32, f64) {
    let x = (bits_per_key / ribbon::MODEL_SLOTS_PER_KEY).clamp(0.0, f64::from(math::MAX_PROBES));
    let r = (x + 1e-9).floor();
    (r as u32, (x - r).max(0.0))
}

/// Bits/key for each run (`keys_per_run[i]` keys) so that `Σ keys × bits ≤ total_bits` and the
/// sum of the runs' expected FPRs is as small as the 1/16-bit grid allows. Runs without keys
/// get 0. A budget too small for any bits gives every run 0.
pub fn allocate(kind: FilterKind, keys_per_run: &[u64], total_bits: f64) -> Vec<f64> {
    let runs: Vec<(FilterKind, u64)> = keys_per_run.iter().map(|&n| (kind, n)).collect();
    allocate_runs(&runs, total_bits)
}

/// The lower convex hull of `(bits/key, rate)` over the grid for `rate`: a linear cost
/// `p + s·b` is smallest at one of its vertices (`cheapest`).
fn hull_of(rate: impl Fn(f64) -> f64) -> Vec<(f64, f64)> {
    let steps = (MAX_BITS_PER_KEY * STEPS_PER_BIT) as usize;
    let mut h: Vec<(f64, f64)> = Vec::new();
    for i in 0..=steps {
        let b = i as f64 / STEPS_PER_BIT;
        let p = (b, rate(b));
        while h.len() >= 2 {
            let (o, a) = (h[h.len() - 2], h[h.len() - 1]);
            // Drop `a` unless o → a → p turns left (strictly convex from below).
            if (a.0 - o.0) * (p.1 - o.1) - (a.1 - o.1) * (p.0 - o.0) <= 0.0 {
                h.pop();
            } else {
                break;
            }
        }
        h.push(p);
    }
    h
}

/// A point filter kind's hull, computed once per kind (the store plans on every table it
/// writes, so this stays cheap).
fn hull(kind: FilterKind) -> &'static [(f64, f64)] {
    static HULLS: [OnceLock<Vec<(f64, f64)>>; 3] =
        [OnceLock::new(), OnceLock::new(), OnceLock::new()];
    let slot = match kind {
        FilterKind::Standard => 0,
        FilterKind::Blocked => 1,
        FilterKind::Ribbon => 2,
    };
    HULLS[slot].get_or_init(|| hull_of(|b| fpr_at(kind, b)))
}

/// The hull vertex minimising `p + slope × b`, found by binary search on the edge slopes.
fn cheapest_on(h: &[(f64, f64)], slope: f64) -> f64 {
    // Edge i goes from vertex i to i + 1; moving along it pays while it falls faster than
    // `slope` rises. Edge slopes increase along a lower hull.
    let pays = |i: usize| (h[i + 1].1 - h[i].1) / (h[i + 1].0 - h[i].0) < -slope;
    let (mut lo, mut hi) = (0, h.len().saturating_sub(1)); // answer in lo..=hi
    while lo < hi {
        let mid = (lo + hi) / 2;
        if pays(mid) {
            lo = mid + 1;
        } else {
            hi = mid;
        }
    }
    h.get(lo).map_or(0.0, |&(b, _)| b)
}

/// The point filter hull vertex minimising `p + slope × b`.
#[cfg(test)]
fn cheapest(kind: FilterKind, slope: f64) -> f64 {
    cheapest_on(hull(kind), slope)
}

/// `allocate` for runs that may use different kinds (`runs[i] = (kind, keys)`): each run's
/// bits follow its own kind's curve, all under one multiplier, so the budget goes where it
/// buys the largest drop in the sum of rates whatever the kinds.
pub fn allocate_runs(runs: &[(FilterKind, u64)], total_bits: f64) -> Vec<f64> {
    let runs: Vec<(Curve, u64)> = runs.iter().map(|&(k, n)| (Curve::Point(k), n)).collect();
    allocate_curves(&runs, total_bits)
}

/// `allocate_runs` for runs of any curve, range filters among them (`runs[i] = (curve,
/// keys)`).
pub fn allocate_curves(runs: &[(Curve, u64)], total_bits: f64) -> Vec<f64> {
    let weighted: Vec<(Curve, u64, f64)> = runs.iter().map(|&(c, n)| (c, n, 1.0)).collect();
    allocate_weighted(&weighted, total_bits)
}

/// `allocate_curves` for runs probed at different rates (`runs[i] = (curve, keys, weight)`):
/// the sum minimised is `Σ weight × rate`, so a run probed twice as often is worth its rate
/// twice. Each run then takes the hull vertex minimising `weight × p + λ n b`, i.e. the slope
/// `λ n / weight`. The runs of several keyspaces of one store under one budget are weighted by
/// each keyspace's share of the lookups. A run of weight 0 gets no bits.
pub fn allocate_weighted(runs: &[(Curve, u64, f64)], total_bits: f64) -> Vec<f64> {
    // Scaled so that the heaviest weighs 1: the bisection's range of λ is set for slopes of
    // `λ × keys`.
    let heaviest = runs.iter().map(|r| r.2).fold(0.0, f64::max);
    if heaviest <= 0.0 {
        return vec![0.0; runs.len()];
    }
    let runs: Vec<(Curve, u64, f64)> = runs.iter().map(|&(c, n, w)| (c, n, w / heaviest)).collect();
    let runs = &runs[..];
    // Range hulls depend on the design length: built here, once per length.
    let mut range_hulls: Vec<(u64, Vec<(f64, f64)>)> = Vec::new();
    for &(curve, _, _) in runs {
        if let Curve::Range { max_range } = curve {
            if !range_hulls.iter().any(|(l, _)| *l == max_range) {
                range_hulls.push((max_range, hull_of(|b| fpr_of(curve, b))));
            }
        }
    }
    let hulls: Vec<&[(f64, f64)]> = runs
        .iter()
        .map(|&(curve, _, _)| match curve {
            Curve::Point(kind) => hull(kind),
            Curve::Range { max_range } => range_hulls
                .iter()
                .find(|(l, _)| *l == max_range)
                .map_or(&[][..], |(_, h)| h.as_slice()),
        })
        .collect();
    let pick = |lambda: f64| -> Vec<f64> {
        runs.iter()
            .zip(&hulls)
            .map(|(&(_, n, w), h)| {
                if n == 0 || w <= 0.0 {
                    return 0.0;
                }
                cheapest_on(h, lambda * n as f64 / w)
            })
            .collect()
    };
    let used = |bits: &[f64]| -> f64 {
        bits.iter()
            .zip(runs)
            .map(|(b, &(_, n, _))| b * n as f64)
            .sum()
    };
    // A larger λ makes bits dearer, so every run takes fewer: bisect (geometrically) for the
    // smallest λ whose allocation fits.
    let (mut lo, mut hi) = (1e-30_f64, 1e3_f64);
    if used(&pick(lo)) <= total_bits {
        return pick(lo);
    }
    // 64 halvings of ln λ's range (~76) leave it within 1e-17: far below the grid's steps.
    for _ in 0..64 {
        let mid = (lo * hi).sqrt();
        if used(&pick(mid)) <= total_bits {
            hi = mid;
        } else {
            lo = mid;
        }
    }
    let best = pick(hi);
    if used(&best) <= total_bits {
        best
    } else {
        vec![0.0; runs.len()]
    }
}

/// Sum of the runs' expected FPRs under `bits_per_key` (the expected wasted reads of an
/// absent-key lookup that probes every run).
pub fn expected_wasted_reads(kind: FilterKind, bits_per_key: &[f64]) -> f64 {
    bits_per_key.iter().map(|&b| fpr_at(kind, b)).sum()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Weights move bits to the runs probed more: two equal runs, one probed 9 times as
    /// often, split the memory unevenly and the weighted sum of rates falls below the even
    /// split's; equal weights give what `allocate_curves` gives, whatever their scale.
    #[test]
    fn weights_move_bits_to_the_runs_probed_more() {
        let c = Curve::Point(FilterKind::Blocked);
        let total = 2.0 * 1e6 * 8.0;
        let even = allocate_curves(&[(c, 1_000_000), (c, 1_000_000)], total);
        let same = allocate_weighted(&[(c, 1_000_000, 1e6), (c, 1_000_000, 1e6)], total);
        assert_eq!(even, same);
        let w = allocate_weighted(&[(c, 1_000_000, 9.0), (c, 1_000_000, 1.0)], total);
        assert!(
            w[0] > even[0] + 2.0 && w[1] < even[1] - 2.0,
            "{w:?} vs {even:?}"
        );
        assert!((w[0] + w[1]) * 1e6 <= total);
        let cost = |b: &[f64]| 9.0 * fpr_of(c, b[0]) + fpr_of(c, b[1]);
        assert!(
            cost(&w) < 0.8 * cost(&even),
            "{} vs {}",
            cost(&w),
            cost(&even)
        );
        assert_eq!(allocate_weighted(&[(c, 10, 0.0)], total), [0.0]);
    }

    const RUNS: [u64; 4] = [100_000, 100_000, 1_000_000, 10_000_000];

    fn total_keys(runs: &[u64]) -> f64 {
        runs.iter().sum::<u64>() as f64
    }

    #[test]
    fn skewed_runs_beat_uniform() {
        for kind in [FilterKind::Standard, FilterKind::Blocked] {
            for avg in [5.0, 8.0, 10.0] {
                let budget = avg * total_keys(&RUNS);
                let bits = allocate(kind, &RUNS, budget);
                let spent: f64 = bits.iter().zip(RUNS).map(|(b, n)| b * n as f64).sum();
                assert!(
                    spent <= budget + 1e-6,
                    "{kind:?} {avg}: spent {spent} > {budget}"
                );
                let uniform = expected_wasted_reads(kind, &[avg; 4]);
                let optimised = expected_wasted_reads(kind, &bits);
                assert!(
                    optimised < 0.7 * uniform,
                    "{kind:?} at {avg} bits/key: optimised {optimised} vs uniform {uniform}"
                );
                // Small runs get at least as many bits per key as big ones.
                assert!(bits.windows(2).all(|w| w[0] >= w[1]), "{bits:?}");
                assert!(bits[3] < avg && bits[0] > avg, "{bits:?}");
            }
        }
    }

    #[test]
    fn textbook_rates_come_out_proportional_to_run_sizes() {
        let runs = [1_000_000u64, 10_000_000, 100_000_000];
        let bits = allocate(FilterKind::Standard, &runs, 10.0 * total_keys(&runs));
        let p: Vec<f64> = bits
            .iter()
            .map(|&b| fpr_at(FilterKind::Standard, b))
            .collect();
        for i in 1..runs.len() {
            // Monkey: p_i / p_j = n_i / n_j (here 10), within the grid's and k's steps.
            let ratio = p[i] / p[i - 1];
            assert!((6.0..16.0).contains(&ratio), "rates {p:?}, bits {bits:?}");
        }
    }

    #[test]
    fn a_ribbon_last_level_saves_more_than_bloom_alone() {
        for avg in [5.0, 8.0, 10.0] {
            let budget = avg * total_keys(&RUNS);
            let blocked = expected_wasted_reads(
                FilterKind::Blocked,
                &allocate(FilterKind::Blocked, &RUNS, budget),
            );
            let kinds = [
                FilterKind::Blocked,
                FilterKind::Blocked,
                FilterKind::Blocked,
                FilterKind::Ribbon,
            ];
            let runs: Vec<_> = kinds.into_iter().zip(RUNS).collect();
            let bits = allocate_runs(&runs, budget);
            let spent: f64 = bits.iter().zip(RUNS).map(|(b, n)| b * n as f64).sum();
            assert!(spent <= budget + 1e-6);
            let mixed: f64 = kinds.iter().zip(&bits).map(|(&k, &b)| fpr_at(k, b)).sum();
            assert!(
                mixed < blocked,
                "{avg}: mixed {mixed} vs blocked {blocked} ({bits:?})"
            );
        }
    }

    #[test]
    fn hull_pick_costs_no_more_than_any_grid_point() {
        // The convex-hull search must find the grid's cheapest p + s·b for every slope.
        for kind in [
            FilterKind::Standard,
            FilterKind::Blocked,
            FilterKind::Ribbon,
        ] {
            for e in (-60..10).step_by(3) {
                let slope = 2f64.powf(f64::from(e) / 2.0);
                let picked = cheapest(kind, slope);
                let cost = |b: f64| fpr_at(kind, b) + slope * b;
                let best = (0..=(MAX_BITS_PER_KEY * STEPS_PER_BIT) as usize)
                    .map(|i| cost(i as f64 / STEPS_PER_BIT))
                    .fold(f64::INFINITY, f64::min);
                assert!(
                    cost(picked) <= best + 1e-12,
                    "{kind:?} slope {slope}: picked {picked} costs {}, grid best {best}",
                    cost(picked)
                );
            }
        }
    }

    #[test]
    fn ribbon_bits_split_into_whole_result_bits() {
        let s = ribbon::MODEL_SLOTS_PER_KEY;
        assert_eq!(ribbon_split(7.0 * s), (7, 0.0));
        let (r, frac) = ribbon_split(7.5 * s);
        assert_eq!(r, 7);
        assert!((frac - 0.5).abs() < 1e-9);
        // Halfway between r = 7 and r = 8 the rate is halfway between theirs.
        let mid = fpr_at(FilterKind::Ribbon, 7.5 * s);
        assert!((mid - (0.5f64.powi(7) + 0.5f64.powi(8)) / 2.0).abs() < 1e-12);
        assert_eq!(fpr_at(FilterKind::Ribbon, 0.0), 1.0);
        assert!((fpr_at(FilterKind::Ribbon, 0.5 * s) - 0.75).abs() < 1e-12);
    }

    #[test]
    fn range_runs_share_the_budget_by_their_bound() {
        let range = Curve::Range { max_range: 32 };
        assert_eq!(fpr_of(range, 2.9), 1.0);
        assert_eq!(fpr_of(range, 6.0), 1.0); // 32 / 2^4 caps at 1
        assert!((fpr_of(range, 16.0) - 32.0 / 16384.0).abs() < 1e-15);
        // Two point runs and two range runs over the same keys.
        let runs = [
            (Curve::Point(FilterKind::Blocked), 100_000),
            (Curve::Point(FilterKind::Blocked), 1_000_000),
            (range, 100_000),
            (range, 1_000_000),
        ];
        let n = 2.2e6;
        for avg in [4.0, 13.0, 26.0] {
            let bits = allocate_curves(&runs, avg * n);
            let spent: f64 = bits.iter().zip(&runs).map(|(b, r)| b * r.1 as f64).sum();
            assert!(spent <= avg * n + 1e-6, "{avg}: spent {spent}");
            let sum =
                |bits: &[f64]| -> f64 { runs.iter().zip(bits).map(|(r, &b)| fpr_of(r.0, b)).sum() };
            // Never worse than the same memory split evenly per key.
            assert!(sum(&bits) <= sum(&[avg; 4]) + 1e-12, "{avg}: {bits:?}");
            // A range run is given 0 or at least the bits that bring its rate under 1.
            for b in &bits[2..] {
                assert!(*b == 0.0 || fpr_of(range, *b) < 1.0, "{avg}: {bits:?}");
            }
            if avg >= 13.0 {
                assert!(bits[2] > 7.0 && bits[3] > 7.0, "{avg}: {bits:?}");
                // The smaller run of each curve gets more bits per key.
                assert!(bits[0] > bits[1] && bits[2] > bits[3], "{avg}: {bits:?}");
            }
        }
        // At 4 bits/key the small range run is worth a filter (its rate drops from 1 to
        // ~0.01 for 1.3 Mbit), the large one is not.
        let bits = allocate_curves(&runs, 4.0 * n);
        assert!(bits[2] > 7.0 && bits[3] == 0.0, "{bits:?}");
        // A budget too small for any range filter leaves them none.
        let bits = allocate_curves(&runs, 0.3 * n);
        assert_eq!(&bits[2..], &[0.0, 0.0], "{bits:?}");
        // A longer design length costs more bits for the same rate.
        let short = allocate_curves(&[(range, 1000)], 15_000.0)[0];
        let long = allocate_curves(
            &[(Curve::Range { max_range: 1024 }, 1000), (range, 1000)],
            30_000.0,
        );
        assert!(
            long[0] > long[1] && (short - 15.0).abs() < 1e-9,
            "{short} {long:?}"
        );
    }

    #[test]
    fn equal_runs_get_equal_bits_and_edges_hold() {
        let bits = allocate(FilterKind::Blocked, &[500, 500, 500], 1500.0 * 10.0);
        assert!(bits.iter().all(|&b| (b - bits[0]).abs() < 1e-9), "{bits:?}");
        assert!((bits[0] - 10.0).abs() <= 1.0 / 16.0, "{bits:?}");
        assert_eq!(allocate(FilterKind::Blocked, &[0, 1000], 8000.0)[0], 0.0);
        assert_eq!(allocate(FilterKind::Blocked, &[1000], 0.0), vec![0.0]);
        assert!(allocate(FilterKind::Standard, &[], 100.0).is_empty());
        // A generous budget is capped by the grid, not spent for nothing.
        let rich = allocate(FilterKind::Standard, &[10], 1e9);
        assert!(rich[0] <= MAX_BITS_PER_KEY);
    }
}
