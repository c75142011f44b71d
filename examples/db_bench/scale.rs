//! `--workload scale`: absent-key lookups of lsm-bloom as the store grows
//! (`--scale-keys 1000000,10000000,100000000`), in units of this machine's memory latency.
//!
//! For each size: a new store, loaded as in the main workload (`--keys` is ignored; values
//! `--value-size`, one thread) and settled, and one untimed pass of absent gets. Then, per
//! round (`--rounds`, medians reported):
//!
//! - **the unit**: one dependent random load over `--chase-mib` MiB (512 by default): a
//!   pointer chase through a random cycle, so every hop waits for the last one and misses
//!   every cache and, at this size, the TLB: what one "trip to memory" costs here;
//! - **absent get**: `--ops` absent keys through `Db::get` on one thread;
//! - **absent multi_get**: the same keys through `Db::multi_get`, 64 at a time (per key);
//! - **bare serial probes**: the same keys through the filter probes an absent get makes,
//!   one after another, nothing else (`bare_probes`);
//! - **bare batched probes**: the same, 64 keys per level at a time with prefetches
//!   (`multi::bare_batched`).
//!
//! Each is printed in ns per key and in units; the filter memory, the tables per level, the
//! filters' false positives per absent get (each a data-block read with a cold cache) and the
//! data-block reads per absent get (the false positives the block cache did not hold) are
//! printed beside them. Each round and the warm-up draw keys of their own.
//!
//! With `--huge-pages-ab`, each size then also runs the huge-page A/B (`huge_pages_ab`): per
//! round, the same store closed and reopened with its filters in ordinary memory and then in
//! huge-page memory (`Options::filter_huge_pages`), a warm-up pass, then absent gets,
//! multi_get and bare serial and batched probes on the same keys for each; medians and the
//! ratio are printed, with the
//! process's `AnonHugePages` (how much the kernel did back with 2 MiB pages).

use std::path::Path;
use std::time::Instant;

use lsm_bloom::{Db, HugePages};

use crate::{
    bare_probes, load, median, mix, multi, open_ours, ours_options, phase_keys, read_phase, Args,
    Engine, Ours,
};

/// Nanoseconds per hop of a dependent random walk over `mib` MiB (2,000,000 hops).
pub fn pointer_chase_ns(cycle: &[u32]) -> f64 {
    const HOPS: usize = 2_000_000;
    let mut at = 0u32;
    let t = Instant::now();
    for _ in 0..HOPS {
        at = cycle[at as usize];
    }
    std::hint::black_box(at);
    t.elapsed().as_secs_f64() * 1e9 / HOPS as f64
}

/// A single random cycle through `mib` MiB of `u32` slots (Sattolo's shuffle): following
/// it from any slot visits every slot once, in an order the prefetchers cannot guess.
pub fn random_cycle(mib: u64) -> Vec<u32> {
    let n = ((mib << 20) / 4).max(2) as usize;
    let mut order: Vec<u32> = (0..n as u32).collect();
    let mut x = 0x5EED_u64;
    for i in (1..n).rev() {
        x = mix(x);
        order.swap(i, (x % i as u64) as usize);
    }
    // order[i] -> order[i + 1] for every i, closing the cycle.
    let mut next = vec![0u32; n];
    for i in 0..n {
        next[order[i] as usize] = order[(i + 1) % n];
    }
    next
}

struct Line {
    keys: u64,
    tables: Vec<u64>,
    filter_mib: f64,
    unit: f64,
    get: f64,
    multi: f64,
    serial: f64,
    batched: f64,
    reads: f64,
    false_positives: f64,
    levels: Vec<LevelLine>,
}

/// One level's filters and what the timed absent gets met there.
struct LevelLine {
    level: usize,
    tables: u64,
    bits_per_key: f64,
    /// The model's false-positive rate for a lookup reaching the level at the budget's share.
    planned: f64,
    /// The filters' own expected rates (from their parameters), summed over the runs.
    built: f64,
    /// Filter checks per absent get.
    checks: f64,
    /// False positives per absent get.
    false_positives: f64,
    /// The filters as written: tables per (kind, probes or result bits), with their mean
    /// bits per key.
    written: String,
}

/// Per level: the tables' filters grouped by kind and k (Ribbon: result bits), e.g.
/// "ribbon r9 ×12 (9.6 b/k), blocked k6 ×3 (8.8 b/k)"; "none ×N" for tables without one.
fn written_filters(levels: &[Vec<std::sync::Arc<lsm_bloom::table::Table>>]) -> Vec<String> {
    use lsm_bloom::table::FilterState;
    levels
        .iter()
        .map(|tables| {
            let mut groups: std::collections::BTreeMap<String, (u64, u64, u64)> =
                Default::default();
            for t in tables {
                let (name, bits, keys) = match t.filter() {
                    FilterState::Valid(r) => {
                        let h = r.header();
                        let p = if h.kind == lsm_bloom::FilterKind::Ribbon {
                            "r"
                        } else {
                            "k"
                        };
                        (
                            format!("{:?} {p}{}", h.kind, h.k),
                            t.filter_bytes() * 8,
                            h.n,
                        )
                    }
                    _ => ("none".to_string(), 0, t.properties().entries),
                };
                let g = groups.entry(name).or_default();
                *g = (g.0 + 1, g.1 + bits, g.2 + keys);
            }
            groups
                .iter()
                .map(|(name, (n, bits, keys))| {
                    format!(
                        "{name} ×{n} ({:.1} b/k)",
                        *bits as f64 / (*keys).max(1) as f64
                    )
                })
                .collect::<Vec<_>>()
                .join(", ")
        })
        .collect()
}

/// Per level: (filter checks, false positives) so far.
fn level_counts(ours: &crate::Ours) -> Vec<(u64, u64)> {
    ours.0
        .stats()
        .levels
        .iter()
        .map(|l| (l.filter_checks, l.filter_positive - l.filter_true_positive))
        .collect()
}

pub fn run(args: &Args) {
    eprintln!(
        "scale workload: keys {:?}, {}-byte values, {} absent keys per phase and round, {} rounds, unit: pointer chase over {} MiB",
        args.scale_keys, args.value_size, args.ops, args.rounds, args.chase_mib
    );
    let cycle = random_cycle(args.chase_mib);
    let mut lines = Vec::new();
    let mut ab = Vec::new();
    for &n in &args.scale_keys {
        let sized = Args {
            keys: n,
            ..args.clone()
        };
        let dir = tempfile::tempdir().expect("tempdir");
        let ours = open_ours(dir.path(), &sized);
        let t0 = Instant::now();
        let rate = load(&ours, &sized, 1);
        let stats = ours.0.stats();
        let tables = ours.tables_per_level();
        eprintln!(
            "{n} keys: loaded in {:.0} s ({rate:.0} puts/s); tables {tables:?}",
            t0.elapsed().as_secs_f64()
        );
        // One untimed pass first: the first gets after a load pay one-time costs (measured at
        // 3×10^5 keys: 4.2 µs per get in a first pass of 20,000, 0.2 µs after).
        let warm = phase_keys(&sized, 100, 7);
        read_phase(&ours, &warm, 1);
        multi::phase(&ours, &multi::batches(&warm), 1);
        let levels = ours.0.levels();
        let (mut unit, mut get, mut multi_ns, mut serial, mut batched, mut reads) =
            (vec![], vec![], vec![], vec![], vec![], vec![]);
        let mut false_positives = vec![];
        let mut per_level = vec![(0u64, 0u64); stats.levels.len()];
        let mut gets = 0u64;
        for round in 0..args.rounds {
            let keys = phase_keys(&sized, 100, 31 + round as u64);
            unit.push(pointer_chase_ns(&cycle));
            let before = ours.false_positives();
            let level_before = level_counts(&ours);
            let s = read_phase(&ours, &keys, 1);
            false_positives.push((ours.false_positives() - before) as f64 / keys.len() as f64);
            for ((sum, b), a) in per_level
                .iter_mut()
                .zip(level_before)
                .zip(level_counts(&ours))
            {
                sum.0 += a.0 - b.0;
                sum.1 += a.1 - b.1;
            }
            gets += keys.len() as u64;
            get.push(1e9 / s.ops_per_sec);
            reads.push(s.data_block_reads_per_op.unwrap_or(0.0));
            let m = multi::phase(&ours, &multi::batches(&keys), 1).unwrap_or_default();
            multi_ns.push(1e9 / m.ops_per_sec);
            serial.push(1e9 / bare_probes(&levels, &keys, 1));
            batched.push(1e9 / multi::bare_batched(&levels, &keys, 1));
            eprintln!(
                "  round {round}: unit {:.0} ns, get {:.0} ns, multi_get {:.0} ns/key, bare serial {:.0} ns, bare batched {:.0} ns",
                unit[round], get[round], multi_ns[round], serial[round], batched[round]
            );
        }
        lines.push(Line {
            keys: n,
            tables,
            filter_mib: stats.total.filter_bytes as f64 / 1048576.0,
            unit: median(unit),
            get: median(get),
            multi: median(multi_ns),
            serial: median(serial),
            batched: median(batched),
            reads: median(reads),
            false_positives: median(false_positives),
            levels: level_lines(&stats, &per_level, gets, written_filters(&levels)),
        });
        drop(levels);
        if args.huge_pages_ab {
            ab.push(huge_pages_ab(
                ours,
                dir.path(),
                &sized,
                lines.last().map_or(0.0, |l| l.unit),
            ));
        }
    }
    println!("\n| keys | tables per level | filters MiB | unit (ns) | absent get ns (units) | multi_get ns/key (units; ÷ get) | bare serial probes ns | get ÷ bare serial | bare batched ns | filter false positives per absent get | data-block reads per absent get (block cache misses) |");
    println!("|---|---|---|---|---|---|---|---|---|---|---|");
    for l in &lines {
        println!(
            "| {} | {:?} | {:.1} | {:.0} | {:.0} ({:.2}) | {:.0} ({:.2}; {:.2}) | {:.0} | {:.2} | {:.0} | {:.4} | {:.4} |",
            l.keys,
            l.tables,
            l.filter_mib,
            l.unit,
            l.get,
            l.get / l.unit,
            l.multi,
            l.multi / l.unit,
            l.multi / l.get,
            l.serial,
            l.get / l.serial,
            l.batched,
            l.false_positives,
            l.reads
        );
    }
    if !ab.is_empty() {
        print_ab(&ab);
    }
    println!("\nPer level (all rounds' absent gets): planned = the model's false-positive rate for a lookup reaching the level at the budget's share for it (`DbStats::filter_budget`); built = the same from the filters as written.\n");
    println!("| keys | level | tables | filter bits/key | planned FPR | built FPR | checks per get | false positives per get | observed FPR | filters as written |");
    println!("|---|---|---|---|---|---|---|---|---|---|");
    for l in &lines {
        for v in &l.levels {
            println!(
                "| {} | {} | {} | {:.2} | {:.5} | {:.5} | {:.3} | {:.5} | {:.5} | {} |",
                l.keys,
                v.level,
                v.tables,
                v.bits_per_key,
                v.planned,
                v.built,
                v.checks,
                v.false_positives,
                v.false_positives / v.checks.max(f64::MIN_POSITIVE),
                v.written
            );
        }
    }
}

/// One size's huge-page A/B: medians over the rounds.
struct AbLine {
    keys: u64,
    unit: f64,
    get: [f64; 2],
    multi: [f64; 2],
    serial: [f64; 2],
    batched: [f64; 2],
    anon_huge_mib: f64,
}

/// `--huge-pages-ab` at one size (module comment): `ours` is closed and reopened twice per
/// round, ordinary memory first.
fn huge_pages_ab(ours: Ours, dir: &Path, args: &Args, unit: f64) -> AbLine {
    let mut db = Some(ours.0);
    let [mut get, mut multi_ns, mut serial, mut batched]: [[Vec<f64>; 2]; 4] = Default::default();
    let mut anon_huge_mib = 0.0;
    for round in 0..args.rounds {
        let keys = phase_keys(args, 100, 131 + round as u64);
        for (i, huge) in [false, true].into_iter().enumerate() {
            db.take().expect("open store").close().expect("close");
            let opts = ours_options(args).with_filter_huge_pages(if huge {
                HugePages::Always
            } else {
                HugePages::Never
            });
            let reopened = Ours(Db::open(dir, opts).expect("reopen"));
            read_phase(&reopened, &phase_keys(args, 100, 531 + round as u64), 1);
            get[i].push(1e9 / read_phase(&reopened, &keys, 1).ops_per_sec);
            let m = multi::phase(&reopened, &multi::batches(&keys), 1).unwrap_or_default();
            multi_ns[i].push(1e9 / m.ops_per_sec);
            let levels = reopened.0.levels();
            serial[i].push(1e9 / bare_probes(&levels, &keys, 1));
            batched[i].push(1e9 / multi::bare_batched(&levels, &keys, 1));
            if huge {
                anon_huge_mib = anon_huge_pages_kib() as f64 / 1024.0;
            }
            eprintln!(
                "  huge-page A/B round {round}, {}: get {:.0} ns, multi_get {:.0} ns/key, bare serial {:.0} ns, bare batched {:.0} ns",
                if huge { "huge pages" } else { "ordinary pages" },
                get[i][round],
                multi_ns[i][round],
                serial[i][round],
                batched[i][round]
            );
            drop(levels);
            db = Some(reopened.0);
        }
    }
    let medians = |[a, b]: [Vec<f64>; 2]| [median(a), median(b)];
    AbLine {
        keys: args.keys,
        unit,
        get: medians(get),
        multi: medians(multi_ns),
        serial: medians(serial),
        batched: medians(batched),
        anon_huge_mib,
    }
}

/// The process's anonymous memory backed by huge pages, in KiB (0 where not reported).
fn anon_huge_pages_kib() -> u64 {
    std::fs::read_to_string("/proc/self/smaps_rollup")
        .unwrap_or_default()
        .lines()
        .find_map(|l| l.strip_prefix("AnonHugePages:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or(0)
}

fn print_ab(ab: &[AbLine]) {
    println!("\nHuge-page A/B (the same store reopened per round, ordinary then huge-page filter memory; medians):\n");
    println!("| keys | unit (ns) | what | ordinary pages ns (units) | huge pages ns (units) | huge ÷ ordinary |");
    println!("|---|---|---|---|---|---|");
    for l in ab {
        for (what, [a, b]) in [
            ("absent get", l.get),
            ("absent multi_get, per key", l.multi),
            ("bare serial probes", l.serial),
            ("bare batched probes", l.batched),
        ] {
            println!(
                "| {} | {:.0} | {what} | {a:.0} ({:.2}) | {b:.0} ({:.2}) | {:.2} |",
                l.keys,
                l.unit,
                a / l.unit,
                b / l.unit,
                b / a
            );
        }
        println!(
            "\n{} keys: AnonHugePages {:.0} MiB with the filters in huge-page memory.",
            l.keys, l.anon_huge_mib
        );
    }
}

/// The per-level lines of one size: levels holding tables.
fn level_lines(
    stats: &lsm_bloom::DbStats,
    counts: &[(u64, u64)],
    gets: u64,
    written: Vec<String>,
) -> Vec<LevelLine> {
    let gets = gets.max(1) as f64;
    let planned = |level: usize| {
        let a = stats.filter_budget.as_ref()?;
        a.levels
            .iter()
            .find(|l| l.level == level)
            .map(|l| l.expected_fpr)
    };
    stats
        .levels
        .iter()
        .zip(counts)
        .enumerate()
        .filter(|(_, (l, _))| l.tables > 0)
        .map(|(level, (l, &(checks, fp)))| LevelLine {
            level,
            tables: l.tables,
            bits_per_key: l.filter_bits_per_key(),
            planned: planned(level).unwrap_or(f64::NAN),
            // Level 0: every table is a run; deeper: a lookup probes one table (the mean).
            built: if level == 0 {
                l.expected_fpr_sum
            } else {
                l.expected_fpr_sum / l.tables as f64
            },
            checks: checks as f64 / gets,
            false_positives: fp as f64 / gets,
            written: written.get(level).cloned().unwrap_or_default(),
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_cycle_visits_every_slot_once() {
        let c = random_cycle(1);
        let mut seen = vec![false; c.len()];
        let mut at = 0u32;
        for _ in 0..c.len() {
            assert!(!seen[at as usize]);
            seen[at as usize] = true;
            at = c[at as usize];
        }
        assert_eq!(at, 0);
    }
}
