//! What every workload times: samples and medians, the keys of a phase, threads started
//! together, a read phase, the bare filter probes, and the bulk load.

use std::sync::{Arc, Barrier};
use std::time::Instant;

use lsm_bloom::table::{FilterState, Table};
use serde::Serialize;

use crate::{key, mix, read_syscalls, value, Args, Engine, ABSENT};

#[derive(Serialize, Clone, Default)]
pub(crate) struct Sample {
    pub(crate) ops_per_sec: f64,
    pub(crate) read_syscalls_per_op: f64,
    pub(crate) data_block_reads_per_op: Option<f64>,
}

pub(crate) fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v.get(v.len() / 2).copied().unwrap_or(0.0)
}

pub(crate) fn median_sample(v: &[Sample]) -> Sample {
    Sample {
        ops_per_sec: median(v.iter().map(|s| s.ops_per_sec).collect()),
        read_syscalls_per_op: median(v.iter().map(|s| s.read_syscalls_per_op).collect()),
        data_block_reads_per_op: v
            .first()
            .and_then(|s| s.data_block_reads_per_op)
            .map(|_| median(v.iter().filter_map(|s| s.data_block_reads_per_op).collect())),
    }
}

/// `ops` keys: `absent_pct`% absent, the rest present.
pub(crate) fn phase_keys(args: &Args, absent_pct: u64, seed: u64) -> Vec<([u8; 16], bool)> {
    (0..args.ops)
        .map(|i| {
            // Seed in the high half: each seed draws its own keys. (`i ^ seed` drew the same set
            // for every seed below `ops`, reordered: a phase found the blocks the previous
            // phases' false positives had read in the block cache.)
            let r = mix(i.wrapping_add(seed << 32));
            if r % 100 < absent_pct {
                (key(ABSENT + (r >> 8) % (1 << 30)), false)
            } else if args.hold.is_some() && args.hold_skew != 1.0 {
                let u = (r >> 11) as f64 / (1u64 << 53) as f64;
                (
                    key((u.powf(args.hold_skew) * args.keys as f64) as u64),
                    true,
                )
            } else {
                (key((r >> 8) % args.keys), true)
            }
        })
        .collect()
}

/// Runs `f` on each of `threads` chunks of `items` at once; returns the wall time from the
/// first thread's start to the last thread's end.
pub(crate) fn timed_parallel<T: Sync>(items: &[T], threads: usize, f: impl Fn(&[T]) + Sync) -> f64 {
    let chunk = items.len().div_ceil(threads.max(1)).max(1);
    let start = Barrier::new(threads + 1);
    let spans: Vec<(Instant, Instant)> = std::thread::scope(|s| {
        let workers: Vec<_> = items
            .chunks(chunk)
            .map(|part| {
                let (start, f) = (&start, &f);
                s.spawn(move || {
                    start.wait();
                    let t0 = Instant::now();
                    f(part);
                    (t0, Instant::now())
                })
            })
            .collect();
        start.wait();
        workers
            .into_iter()
            .map(|w| w.join().expect("worker"))
            .collect()
    });
    // From the first thread's start to the last one's end.
    let first = spans.iter().map(|s| s.0).min();
    let last = spans.iter().map(|s| s.1).max();
    first
        .zip(last)
        .map_or(0.0, |(a, b)| b.saturating_duration_since(a).as_secs_f64())
        .max(1e-9)
}

pub(crate) fn read_phase(e: &dyn Engine, keys: &[([u8; 16], bool)], threads: usize) -> Sample {
    let d0 = e.data_block_reads();
    let s0 = read_syscalls();
    let secs = timed_parallel(keys, threads, |part| {
        for (k, present) in part {
            let found = e.get(k);
            assert_eq!(
                found,
                *present,
                "{}: wrong answer (present = {present})",
                e.name()
            );
        }
    });
    let n = keys.len() as f64;
    Sample {
        ops_per_sec: n / secs,
        read_syscalls_per_op: (read_syscalls() - s0) as f64 / n,
        data_block_reads_per_op: d0
            .zip(e.data_block_reads())
            .map(|(a, b)| (b - a) as f64 / n),
    }
}

/// Each level's tables' `max_prefix`es, which a `get`'s search reads (`Table::in_level_by`).
pub(crate) fn max_prefixes(levels: &[Vec<Arc<Table>>]) -> Vec<Vec<u64>> {
    levels
        .iter()
        .map(|tables| tables.iter().map(|t| t.max_prefix()).collect())
        .collect()
}

/// The filter probes an absent `get` makes, and nothing else: returns probes per second.
pub(crate) fn bare_probes(
    levels: &[Vec<Arc<Table>>],
    keys: &[([u8; 16], bool)],
    threads: usize,
) -> f64 {
    let max_prefixes = max_prefixes(levels);
    let may_contain = |t: &Table, key: &[u8], hash: u64| match t.filter() {
        FilterState::Valid(f) => f.may_contain_prehashed(key, hash),
        _ => true,
    };
    let secs = timed_parallel(keys, threads, |part| {
        let mut maybe = 0u64;
        for (k, _) in part {
            let key = k.as_slice();
            let hash = lsm_bloom::filter::hash_key(key);
            for t in levels[0].iter().rev() {
                if t.covers(key) && may_contain(t, key, hash) {
                    maybe += 1;
                }
            }
            for (tables, prefixes) in levels[1..].iter().zip(&max_prefixes[1..]) {
                if let Some(t) = Table::in_level_by(tables, prefixes, key) {
                    if may_contain(t, key, hash) {
                        maybe += 1;
                    }
                }
            }
        }
        std::hint::black_box(maybe);
    });
    keys.len() as f64 / secs
}

/// Loads each of `engines` in turn on one thread (`load`), printing its rate and shape.
pub(crate) fn load_each(engines: &[&dyn Engine], args: &Args) {
    let width = engines.iter().map(|e| e.name().len()).max().unwrap_or(0);
    for e in engines {
        let rate = load(*e, args, 1);
        eprintln!(
            "{:>width$}: loaded at {rate:.0} puts/s, tables {:?}",
            e.name(),
            e.tables_per_level()
        );
    }
}

pub(crate) fn load(e: &dyn Engine, args: &Args, threads: usize) -> f64 {
    let ids: Vec<u64> = (0..args.keys).collect();
    let t = Instant::now();
    timed_parallel(&ids, threads, |part| {
        let mut v = Vec::with_capacity(args.value_size);
        for i in part {
            value(args, *i, &mut v);
            e.put(&key(*i), &v);
        }
    });
    e.settle();
    args.keys as f64 / t.elapsed().as_secs_f64()
}
