//! `Db::multi_get` and `Snapshot::multi_get`: for random batches (duplicates, absent keys,
//! deleted keys, keys in the memtable, level 0 and every deeper level, more keys than one
//! chunk) every answer is the one `get` gives and the model holds, under each kind of filter,
//! with and without filters, prefix filters only, block cache on and off, tables read through
//! memory maps (uncompressed and LZ4); a batch reads each
//! data block it needs once; a read fault fails only the keys that needed the damaged read.

mod common;

use std::collections::BTreeMap;
use std::sync::Arc;

use common::{random_write, tiny_options, Rng};
use lsm_bloom::fs::{FaultyFs, FileSystem, ReadFault};
use lsm_bloom::{
    Compression, Db, Error, FilterKind, FilterPolicy, Filters, Options, PrefixExtractor,
    PrefixFilters,
};

type Model = BTreeMap<Vec<u8>, Vec<u8>>;

/// Keys `g:NNNN`: the group before the colon is a prefix under `delimiter(':', 1)`.
fn key(i: u64) -> Vec<u8> {
    format!("{}:{i:05}", i % 7).into_bytes()
}

/// Writes 4 rounds of puts and deletes over 3,000 keys, flushing after each, lets compactions
/// settle, then writes one level-0 table's worth and a little more that stays in the
/// memtable. Returns the model.
fn fill(db: &Db, seed: u64) -> Model {
    let mut model = Model::new();
    let mut rng = Rng::new(seed);
    let mut write = |db: &Db, rng: &mut Rng, round: u64| {
        random_write(db, &mut model, rng, key, round, 15);
    };
    for round in 0..4 {
        for _ in 0..900 {
            write(db, &mut rng, round);
        }
        db.flush().unwrap();
    }
    db.wait_for_compactions().unwrap();
    // Two overlapping level-0 tables (below the compaction trigger of `options`), then the
    // memtable.
    for round in 4..6 {
        for _ in 0..200 {
            write(db, &mut rng, round);
        }
        db.flush().unwrap();
    }
    for _ in 0..40 {
        write(db, &mut rng, 6);
    }
    model
}

/// `tiny_options` keeping up to 3 tables in level 0, with a memtable that holds a round of
/// `fill` (900 writes of about 45 bytes), so each `flush` makes exactly one level-0 table and
/// the shape `fill` leaves does not depend on when a background compaction runs. (With
/// `tiny_options`' 4 KiB memtable, each tail round flushed two or three tables on its own, level
/// 0 reached the trigger, and whether the compaction had run by the shape check decided it.)
fn options() -> Options {
    tiny_options()
        .with_l0_compaction_trigger(4)
        .with_idle_compaction_after(None)
        .with_memtable_size(64 * 1024)
}

/// A random batch of 1 to 200 keys: present, deleted, never written and repeated ones.
fn batch(rng: &mut Rng) -> Vec<Vec<u8>> {
    let n = 1 + rng.below(200) as usize;
    let mut keys: Vec<Vec<u8>> = Vec::with_capacity(n);
    for _ in 0..n {
        let k = match rng.below(10) {
            0 if !keys.is_empty() => keys[rng.below(keys.len() as u64) as usize].clone(),
            1 => key(3000 + rng.below(3000)), // never written
            // never written, under a prefix no table holds ("3a:" sorts between "3:" and "4:")
            2 => format!("{}a:{:05}", rng.below(6), rng.below(3000)).into_bytes(),
            3 => b"zz-outside".to_vec(), // beyond every table's range
            _ => key(rng.below(3000)),
        };
        keys.push(k);
    }
    keys
}

/// The filter counters a lookup moves: tables probed, then per level filter checks, "absent"
/// and "maybe" answers, unfiltered probes, prefix checks and prefix "absent" answers.
fn filter_counts(db: &Db) -> Vec<u64> {
    let s = db.stats();
    let mut counts = vec![s.tables_probed];
    for l in &s.levels {
        counts.extend([
            l.filter_checks,
            l.filter_useful,
            l.filter_positive,
            l.unfiltered_probes,
            l.prefix_checks,
            l.prefix_useful,
        ]);
    }
    counts
}

/// Checks `multi_get` of random batches against `get` and the model, and its filter
/// counters against theirs; returns how many
/// answers were values, deletions-or-absent.
fn check_batches(db: &Db, model: &Model, rng: &mut Rng, what: &str) -> (usize, usize) {
    let (mut values, mut nones, mut compared) = (0, 0, 0);
    for _ in 0..60 {
        let keys = batch(rng);
        let tables = db.levels();
        let before = filter_counts(db);
        let got = db.multi_get(&keys);
        let batched = filter_counts(db);
        let single: Vec<Option<Vec<u8>>> = keys.iter().map(|k| db.get(k).unwrap()).collect();
        let after = filter_counts(db);
        // The batch asks the same filters of the same tables as the gets, and counts alike,
        // when a background compaction did not change the tables in between (`tables` holds
        // the old ones, so an address is never reused for a new table).
        let unchanged = db.levels().iter().zip(&tables).all(|(now, then)| {
            now.len() == then.len() && now.iter().zip(then).all(|(a, b)| Arc::ptr_eq(a, b))
        });
        if unchanged {
            compared += 1;
            let diff =
                |a: &[u64], b: &[u64]| a.iter().zip(b).map(|(x, y)| x - y).collect::<Vec<_>>();
            assert_eq!(
                diff(&batched, &before),
                diff(&after, &batched),
                "{what}: multi_get's filter counters against get's"
            );
        }
        assert_eq!(got.len(), keys.len(), "{what}");
        for ((k, g), s) in keys.iter().zip(got).zip(single) {
            let g = g.unwrap_or_else(|e| panic!("{what}: multi_get {k:?} failed: {e}"));
            assert_eq!(g.as_ref(), model.get(k), "{what}: multi_get {k:?}");
            assert_eq!(g, s, "{what}: get {k:?}");
            if g.is_some() {
                values += 1;
            } else {
                nones += 1;
            }
        }
    }
    // Compactions run after `fill` for a few batches at most.
    assert!(
        compared >= 30,
        "{what}: only {compared} batches saw unchanged tables"
    );
    (values, nones)
}

#[test]
fn multi_get_answers_as_get_does_for_random_batches() {
    let prefix_only = options().with_prefix_filters(Some(PrefixFilters::On {
        rule: PrefixExtractor::delimiter(b':', 1),
        whole_key_filters: false,
    }));
    let variants: Vec<(&str, Options)> = vec![
        ("blocked", options()),
        (
            "standard, cache",
            options()
                .with_filters(Some(Filters::fixed(FilterPolicy::bits_per_key(
                    FilterKind::Standard,
                    10.0,
                ))))
                .with_block_cache_bytes(1 << 20),
        ),
        (
            "ribbon",
            options().with_filters(Some(Filters::fixed(FilterPolicy::bits_per_key(
                FilterKind::Ribbon,
                10.0,
            )))),
        ),
        ("no filters", options().with_filters(Some(Filters::None))),
        ("prefix filters only", prefix_only),
        ("mmap reads", options().with_mmap_reads(true)),
        (
            "mmap reads, lz4, cache",
            options()
                .with_mmap_reads(true)
                .with_compression(Some(Compression::Lz4.into()))
                .with_block_cache_bytes(1 << 20),
        ),
    ];
    for (seed, (what, opts)) in variants.into_iter().enumerate() {
        let dir = tempfile::tempdir().unwrap();
        let db = Db::open(dir.path(), opts).unwrap();
        let model = fill(&db, seed as u64);
        let levels: Vec<usize> = db.levels().iter().map(Vec::len).collect();
        assert!(
            levels[0] >= 2 && levels[1..].iter().filter(|&&n| n > 0).count() >= 2,
            "{what}: the keys should sit in two level-0 tables and two deeper levels: {levels:?}"
        );
        let mut rng = Rng::new(100 + seed as u64);
        let before = db.stats().total;
        let (values, nones) = check_batches(&db, &model, &mut rng, what);
        let after = db.stats().total;
        assert!(
            values > 1000 && nones > 1000,
            "{what}: {values} values, {nones} nones"
        );
        // A full scan returns the model (mapped tables are scanned by copies out of the map).
        let scanned: Model = db
            .scan::<&[u8], _>(..)
            .unwrap()
            .map(|e| e.unwrap_or_else(|e| panic!("{what}: scan failed: {e}")))
            .collect();
        assert!(scanned == model, "{what}: the scan differs from the model");
        if what != "no filters" {
            let said_absent = (after.filter_useful - before.filter_useful)
                + (after.prefix_useful - before.prefix_useful);
            assert!(said_absent > 0, "{what}: no filter answered 'absent'");
        }

        // A snapshot's batch answers as of the snapshot, through later writes and a flush.
        let snap = db.snapshot();
        let frozen = model.clone();
        for i in 0..300 {
            db.put(key(i), b"later").unwrap();
            db.delete(key(1000 + i)).unwrap();
        }
        db.flush().unwrap();
        let keys: Vec<Vec<u8>> = (0..1400).step_by(3).map(key).collect();
        for (k, g) in keys.iter().zip(snap.multi_get(&keys)) {
            let g = g.unwrap();
            assert_eq!(g.as_ref(), frozen.get(k), "{what}: snapshot {k:?}");
            assert_eq!(g, snap.get(k).unwrap(), "{what}: snapshot get {k:?}");
        }
    }
}

#[test]
fn an_empty_batch_and_an_empty_store_answer_nothing_and_none() {
    let dir = tempfile::tempdir().unwrap();
    let db = Db::open(dir.path(), tiny_options()).unwrap();
    assert!(db.multi_get::<&[u8]>(&[]).is_empty());
    let got = db.multi_get(&["a", "b", "a"]);
    assert!(got.iter().all(|g| matches!(g, Ok(None))), "{got:?}");
}

#[test]
fn a_batch_reads_each_data_block_it_needs_once() {
    let dir = tempfile::tempdir().unwrap();
    let opts = Options::default()
        .with_block_size(4096)
        .with_block_cache_bytes(0);
    let db = Db::open(dir.path(), opts).unwrap();
    for i in 0..2000u64 {
        db.put(format!("k{i:05}"), b"value").unwrap();
    }
    db.compact().unwrap();
    // 40 neighbouring keys (~20 bytes each) span at most 2 blocks of 4 KiB.
    let keys: Vec<String> = (500..540).map(|i| format!("k{i:05}")).collect();
    let reads = |db: &Db| db.stats().total.data_block_reads;
    let r0 = reads(&db);
    for k in &keys {
        assert_eq!(db.get(k).unwrap().as_deref(), Some(&b"value"[..]));
    }
    let one_by_one = reads(&db) - r0;
    let r1 = reads(&db);
    let got = db.multi_get(&keys);
    let batched = reads(&db) - r1;
    assert!(got
        .iter()
        .all(|g| matches!(g, Ok(Some(v)) if v == b"value")));
    assert_eq!(one_by_one, 40);
    assert!(
        (1..=2).contains(&batched),
        "the batch read {batched} blocks"
    );
}

fn typed(e: &Error) -> bool {
    // A flipped bit in a table's version field reads as a newer format (FORMAT.md §3).
    matches!(
        e,
        Error::Io { .. } | Error::Corruption { .. } | Error::UnsupportedVersion { .. }
    )
}

#[test]
fn a_read_fault_fails_only_the_keys_that_needed_the_damaged_read() {
    let dir = tempfile::tempdir().unwrap();
    let model = {
        let db = Db::open(dir.path(), tiny_options()).unwrap();
        let m = fill(&db, 9);
        db.flush().unwrap();
        m
    };
    let fs = FaultyFs::new();
    let opts = tiny_options()
        .with_fs(Arc::new(fs.clone()))
        .with_block_cache_bytes(0);
    let db = Db::open(dir.path(), opts).unwrap();
    // `fill` leaves level 0 over its trigger, so the reopened store compacts in the
    // background: its reads would race the fault's arming below (`reads() + k` already
    // passed when armed, the fault never fires). Let it finish first.
    db.wait_for_compactions().unwrap();
    let mut rng = Rng::new(21);
    let (mut mixed, mut failed_keys) = (0, 0);
    for round in 0..300 {
        let fault = match round % 3 {
            0 => ReadFault::Error,
            1 => ReadFault::Short,
            _ => ReadFault::FlipBit(rng.next()),
        };
        let keys = batch(&mut rng);
        let before = fs.reads_failed();
        fs.fail_read(fs.reads() + 1 + rng.below(4), fault);
        let got = db.multi_get(&keys);
        let hit = fs.reads_failed() > before;
        let mut errors = 0;
        for (k, g) in keys.iter().zip(&got) {
            match g {
                Ok(v) => assert_eq!(v.as_ref(), model.get(k), "{k:?} under {fault:?}"),
                Err(e) => {
                    assert!(hit && typed(e), "{k:?} failed without a fault: {e}");
                    errors += 1;
                    // The same key without the fault answers right.
                    assert_eq!(db.get(k).unwrap().as_ref(), model.get(k));
                }
            }
        }
        // Consume an unused fault with reads of our own, so it cannot fire later (within the
        // four reads it was armed ahead by; a fault that never fires is a test bug, not a hang).
        for tries in 0.. {
            if fs.reads_failed() > before {
                break;
            }
            assert!(tries < 8, "round {round}: the armed read fault never fired");
            let _ = fs.read_all(&dir.path().join("MANIFEST"));
        }
        failed_keys += errors;
        if errors > 0 && errors < keys.len() {
            mixed += 1;
        }
    }
    assert!(failed_keys > 50, "only {failed_keys} keys met a fault");
    assert!(
        mixed > 20,
        "only {mixed} batches had both failed and answered keys"
    );
}
