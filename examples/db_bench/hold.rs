//! `--hold`: load lsm-bloom alone, then run one read phase for `--hold-secs`, printing the
//! pid first, so that `perf record -e cpu-clock -g -p PID` sees nothing but that phase.

use std::time::{Duration, Instant};

use crate::{
    bare_probes, load, median, multi, open_ours, phase_keys, timed_parallel, Args, Engine,
};

/// `--hold`: see `Args::hold`.
pub(crate) fn hold(args: &Args, phase: &str) {
    let dir = tempfile::tempdir().expect("tempdir");
    let ours = open_ours(dir.path(), args);
    let rate = load(&ours, args, 1);
    if args.hold_compacted {
        ours.compact_all();
    }
    let absent_pct = if phase.starts_with("absent") { 100 } else { 0 };
    let keys = phase_keys(args, absent_pct, 1);
    let batched = phase.ends_with("-multi");
    eprintln!(
        "loaded at {rate:.0} puts/s; tables {:?}; pid {}: {phase} gets on {} thread(s) for {} s",
        ours.tables_per_level(),
        std::process::id(),
        args.hold_threads,
        args.hold_secs
    );
    if phase == "bare" {
        // The bare filter probes of absent gets, one key at a time and in batches.
        let levels = ours.0.levels();
        let until = Instant::now() + Duration::from_secs(args.hold_secs);
        let (mut serial, mut batched) = (Vec::new(), Vec::new());
        while Instant::now() < until {
            serial.push(bare_probes(&levels, &keys, args.hold_threads));
            batched.push(multi::bare_batched(&levels, &keys, args.hold_threads));
        }
        let (s, b) = (median(serial), median(batched));
        println!(
            "bare probes: {s:.0} keys/s one at a time, {b:.0} keys/s in batches of {} ({:.2}x)",
            multi::BATCH,
            b / s
        );
        return;
    }
    let until = Instant::now() + Duration::from_secs(args.hold_secs);
    let mut done = 0u64;
    let mut secs = 0.0;
    let before = ours.false_positives();
    let cache_before = ours.0.stats();
    let mut pass = 1;
    while Instant::now() < until {
        // Each pass draws keys of its own (as each phase and round of the full run does): with
        // the same keys again, the blocks the first pass's false positives read would be in
        // the block cache, and the profile would miss what a false positive costs.
        let keys = phase_keys(args, absent_pct, pass);
        pass += 1;
        let batches = multi::batches(&keys);
        secs += if batched {
            timed_parallel(&batches, args.hold_threads, |part| {
                for (keys, present) in part {
                    assert_eq!(ours.multi_get(keys), Some(*present));
                }
            })
        } else {
            timed_parallel(&keys, args.hold_threads, |part| {
                for (k, present) in part {
                    assert_eq!(ours.get(k), *present);
                }
            })
        };
        done += keys.len() as u64;
    }
    let false_positives = ours.false_positives() - before;
    let stats = ours.0.stats();
    let hits = stats.block_cache_hits - cache_before.block_cache_hits;
    let misses = stats.block_cache_misses - cache_before.block_cache_misses;
    println!(
        "{phase}: {:.0} gets/s on {} thread(s); filter false positives per get {:.4}; filters \
         {:.1} MiB; block cache hits {:.1}% of {} lookups",
        done as f64 / secs,
        args.hold_threads,
        false_positives as f64 / done as f64,
        stats.total.filter_bytes as f64 / f64::from(1 << 20),
        100.0 * hits as f64 / (hits + misses).max(1) as f64,
        hits + misses
    );
}
