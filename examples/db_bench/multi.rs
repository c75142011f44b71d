//! The batched-read phases: the same keys as a read phase, looked up `BATCH` at a time with
//! each engine's batched read (ours `Db::multi_get`, RocksDB `batched_multi_get_cf`; fjall has
//! none and is left out). Reported per key, beside our single get on the same keys.

use super::{read_syscalls, timed_parallel, Engine, Sample};

/// Keys per batch.
pub const BATCH: usize = 64;

/// `keys` cut into batches: each with how many of its keys are present.
pub fn batches(keys: &[([u8; 16], bool)]) -> Vec<(Vec<[u8; 16]>, usize)> {
    keys.chunks(BATCH)
        .map(|c| {
            let present = c.iter().filter(|(_, p)| *p).count();
            (c.iter().map(|(k, _)| *k).collect(), present)
        })
        .collect()
}

/// Runs every batch through `e.multi_get` on `threads` threads; `None` if `e` has no batched
/// read. Panics on a wrong count of found keys.
pub fn phase(e: &dyn Engine, batches: &[(Vec<[u8; 16]>, usize)], threads: usize) -> Option<Sample> {
    e.multi_get(&[])?;
    let d0 = e.data_block_reads();
    let s0 = read_syscalls();
    let secs = timed_parallel(batches, threads, |part| {
        for (keys, present) in part {
            let found = e.multi_get(keys).unwrap_or(0);
            assert_eq!(found, *present, "{}: wrong multi_get answer", e.name());
        }
    });
    let n = batches.iter().map(|(k, _)| k.len()).sum::<usize>() as f64;
    Some(Sample {
        ops_per_sec: n / secs,
        read_syscalls_per_op: (read_syscalls() - s0) as f64 / n,
        data_block_reads_per_op: d0
            .zip(e.data_block_reads())
            .map(|(a, b)| (b - a) as f64 / n),
    })
}

/// The filter probes of `bare_probes`, `BATCH` keys at a time as `Db::multi_get` makes them:
/// per level-0 table and deeper level, every key's filter line prefetched, then every key
/// probed. Returns keys per second: the limit for a batched absent lookup.
pub fn bare_batched(
    levels: &[Vec<std::sync::Arc<lsm_bloom::table::Table>>],
    keys: &[([u8; 16], bool)],
    threads: usize,
) -> f64 {
    use lsm_bloom::table::{FilterState, Table};
    let max_prefixes = crate::phases::max_prefixes(levels);
    let stage = |found: &[Option<&Table>], hashes: &[u64], keys: &[([u8; 16], bool)]| {
        for (t, h) in found.iter().zip(hashes) {
            if let Some(FilterState::Valid(f)) = t.map(Table::filter) {
                f.prefetch_prehashed(*h);
            }
        }
        let mut maybe = 0u64;
        for ((t, h), (k, _)) in found.iter().zip(hashes).zip(keys) {
            maybe += u64::from(match t.map(Table::filter) {
                Some(FilterState::Valid(f)) => f.may_contain_prehashed(k, *h),
                Some(_) => true,
                None => false,
            });
        }
        maybe
    };
    let secs = timed_parallel(keys, threads, |part| {
        let mut maybe = 0u64;
        let mut found: Vec<Option<&Table>> = Vec::with_capacity(BATCH);
        for batch in part.chunks(BATCH) {
            let hashes: Vec<u64> = batch
                .iter()
                .map(|(k, _)| lsm_bloom::filter::hash_key(k))
                .collect();
            for t in levels[0].iter().rev() {
                found.clear();
                found.extend(batch.iter().map(|(k, _)| t.covers(k).then_some(&**t)));
                maybe += stage(&found, &hashes, batch);
            }
            for (tables, prefixes) in levels[1..].iter().zip(&max_prefixes[1..]) {
                found.clear();
                found.extend(
                    batch
                        .iter()
                        .map(|(k, _)| Table::in_level_by(tables, prefixes, k).map(|t| &**t)),
                );
                maybe += stage(&found, &hashes, batch);
            }
        }
        std::hint::black_box(maybe);
    });
    keys.len() as f64 / secs
}
