//! Keys that expire (`put_with_expiry`, `put_with_ttl`), read through every read path against
//! a model, with the store's clock moved by hand (`ManualClock`): at every clock reading an
//! expired key is absent, exactly, whether its entry lies in a memtable, a level-0 table or a
//! deeper one, before and after flushes, compactions and reopens, and in snapshots taken
//! before it expired.

mod common;

use std::collections::BTreeMap;
use std::ops::{Bound, RangeBounds};
use std::sync::Arc;
use std::time::{Duration, UNIX_EPOCH};

use common::{tiny_options, Rng};
use lsm_bloom::{Clock, Db, KeyExpiry, ManualClock, Options, Snapshot, WriteBatch};

/// A key's model entry: its value and its expiry (ms since the epoch), if any.
type Model = BTreeMap<Vec<u8>, (Vec<u8>, Option<u64>)>;

/// The model's live keys at `now`, in order.
fn live(model: &Model, now: u64) -> Vec<(Vec<u8>, Vec<u8>)> {
    model
        .iter()
        .filter(|(_, (_, at))| at.is_none_or(|at| at > now))
        .map(|(k, (v, _))| (k.clone(), v.clone()))
        .collect()
}

/// What `expiry_of` should say about `k` at `now`.
fn model_expiry(model: &Model, k: &[u8], now: u64) -> KeyExpiry {
    match model.get(k) {
        None => KeyExpiry::Absent,
        Some((_, None)) => KeyExpiry::Never,
        Some((_, Some(at))) if *at <= now => KeyExpiry::Absent,
        Some((_, Some(at))) => KeyExpiry::At(*at),
    }
}

fn key(rng: &mut Rng) -> Vec<u8> {
    format!("k{:03}", rng.below(120)).into_bytes()
}

fn at(ms: u64) -> std::time::SystemTime {
    UNIX_EPOCH + Duration::from_millis(ms)
}

/// A snapshot with the model as it was and the clock reading it was taken at.
struct Held {
    snap: Snapshot,
    model: Model,
    now: u64,
}

/// Every read of `snap` (and of the store when `snap` is `None`) agrees with `model` at `now`.
fn check_reads(d: &Db, snap: Option<&Snapshot>, model: &Model, now: u64, rng: &mut Rng, ctx: &str) {
    let want = live(model, now);
    let lookup = |k: &[u8]| want.iter().find(|(w, _)| w == k).map(|(_, v)| v.clone());
    for _ in 0..4 {
        let k = key(rng);
        let (got, with) = match snap {
            Some(s) => (s.get(&k).unwrap(), s.get_with(&k, <[u8]>::to_vec).unwrap()),
            None => (d.get(&k).unwrap(), d.get_with(&k, <[u8]>::to_vec).unwrap()),
        };
        assert_eq!(
            got,
            lookup(&k),
            "{ctx}: get {}",
            String::from_utf8_lossy(&k)
        );
        assert_eq!(with, lookup(&k), "{ctx}: get_with");
        let expiry = match snap {
            Some(s) => s.expiry_of(&k).unwrap(),
            None => d.expiry_of(&k).unwrap(),
        };
        assert_eq!(expiry, model_expiry(model, &k, now), "{ctx}: expiry_of");
    }
    let keys: Vec<Vec<u8>> = (0..6).map(|_| key(rng)).collect();
    let got = match snap {
        Some(s) => s.multi_get(&keys),
        None => d.multi_get(&keys),
    };
    for (k, g) in keys.iter().zip(got) {
        assert_eq!(g.unwrap(), lookup(k), "{ctx}: multi_get");
    }
    let (mut a, mut b) = (key(rng), key(rng));
    if a > b {
        std::mem::swap(&mut a, &mut b);
    }
    let range = (Bound::Included(a), Bound::Excluded(b));
    let in_range: Vec<_> = want
        .iter()
        .filter(|(k, _)| range.contains(k))
        .cloned()
        .collect();
    let it = match snap {
        Some(s) => s.scan(range.clone()).unwrap(),
        None => d.scan(range.clone()).unwrap(),
    };
    let fwd: Vec<_> = it.map(Result::unwrap).collect();
    assert_eq!(fwd, in_range, "{ctx}: scan forward {range:?}");
    let it = match snap {
        Some(s) => s.scan(range.clone()).unwrap(),
        None => d.scan(range.clone()).unwrap(),
    };
    let mut back: Vec<_> = it.rev().map(Result::unwrap).collect();
    back.reverse();
    assert_eq!(back, in_range, "{ctx}: scan backward");
    let contains = match snap {
        Some(s) => s.contains_range(range.clone()).unwrap(),
        None => d.contains_range(range.clone()).unwrap(),
    };
    assert_eq!(
        contains,
        !in_range.is_empty(),
        "{ctx}: contains_range {range:?}"
    );
    let mut c = match snap {
        Some(s) => s.cursor_in(range.clone()),
        None => d.cursor_in(range.clone()),
    };
    let mut walked = Vec::new();
    let mut on = c.seek_to_first().unwrap();
    while on {
        let (k, v) = c.entry().unwrap();
        walked.push((k.to_vec(), v.to_vec()));
        on = c.next().unwrap();
    }
    assert_eq!(walked, in_range, "{ctx}: cursor");
}

/// The model run: `steps` random steps of seed `seed`. With `plain` false nearly every write
/// is a put with an expiry, so tables that expired whole (read unread, `expired_skips`) are
/// common; returns how many table reads such skips spared.
fn run(seed: u64, steps: usize, opts: Options, plain: bool) -> u64 {
    let dir = tempfile::tempdir().unwrap();
    let clock = Arc::new(ManualClock::new(1_000_000));
    let opts = opts.with_clock(clock.clone());
    let mut rng = Rng::new(seed);
    let mut db = Some(Db::open(dir.path(), opts.clone()).unwrap());
    let mut model = Model::new();
    let mut held: Vec<Held> = Vec::new();
    let mut expired_seen = 0;
    let mut skips = 0;
    let skipped = |d: &Db| {
        d.stats()
            .levels
            .iter()
            .map(|l| l.expired_skips)
            .sum::<u64>()
    };
    for step in 0..steps {
        let d = db.as_ref().unwrap();
        let now = clock.now_millis();
        let ctx = format!("seed {seed} step {step} clock {now}");
        // Without `plain`, a plain put now and then (3%): older values a table expired whole
        // could wrongly uncover.
        let roll = match rng.below(100) {
            3..=19 | 40..=52 if !plain => 20,
            roll => roll,
        };
        match roll {
            0..=19 => {
                let (k, v) = (key(&mut rng), format!("v{step}").into_bytes());
                d.put(&k, &v).unwrap();
                model.insert(k, (v, None));
            }
            20..=39 => {
                // Expiries from a little in the past to 200 ms ahead.
                let (k, v) = (key(&mut rng), format!("e{step}").into_bytes());
                let when = now + rng.below(200) - 20;
                if rng.chance(50) {
                    d.put_with_expiry(&k, &v, at(when)).unwrap();
                } else {
                    let ttl = when.saturating_sub(now);
                    d.put_with_ttl(&k, &v, Duration::from_millis(ttl)).unwrap();
                    model.insert(k, (v, Some(now + ttl)));
                    continue;
                }
                model.insert(k, (v, Some(when)));
            }
            40..=46 => {
                let k = key(&mut rng);
                d.delete(&k).unwrap();
                model.remove(&k);
            }
            47..=52 => {
                let mut batch = WriteBatch::new();
                for _ in 0..rng.below(6) + 1 {
                    let k = key(&mut rng);
                    let v = format!("b{step}").into_bytes();
                    match rng.below(3) {
                        0 => {
                            batch.delete(k.clone());
                            model.remove(&k);
                        }
                        1 => {
                            batch.put(k.clone(), v.clone());
                            model.insert(k, (v, None));
                        }
                        _ => {
                            let when = now + rng.below(100) + 1;
                            batch.put_with_expiry(k.clone(), v.clone(), at(when));
                            model.insert(k, (v, Some(when)));
                        }
                    }
                }
                d.write(batch).unwrap();
            }
            53..=64 => {
                clock.advance(Duration::from_millis(rng.below(30)));
            }
            65..=84 => {
                let now = clock.now_millis();
                expired_seen += model
                    .values()
                    .filter(|(_, at)| at.is_some_and(|at| at <= now))
                    .count();
                check_reads(d, None, &model, now, &mut rng, &ctx);
            }
            85..=88 => {
                if held.len() < 3 {
                    held.push(Held {
                        snap: d.snapshot(),
                        model: model.clone(),
                        now: clock.now_millis(),
                    });
                } else {
                    held.remove(rng.below(3) as usize);
                }
            }
            89..=91 => {
                for h in &held {
                    let ctx = format!("{ctx}: snapshot at {}", h.now);
                    check_reads(d, Some(&h.snap), &h.model, h.now, &mut rng, &ctx);
                }
            }
            92..=94 => d.flush().unwrap(),
            95..=97 => d.compact().unwrap(),
            _ => {
                held.clear();
                skips += skipped(d);
                db.take().unwrap().close().unwrap();
                db = Some(Db::open(dir.path(), opts.clone()).unwrap());
            }
        }
    }
    let d = db.unwrap();
    let now = clock.now_millis();
    let all: Vec<_> = d.iter().map(Result::unwrap).collect();
    assert_eq!(all, live(&model, now), "seed {seed}: final scan");
    assert!(
        expired_seen > 50,
        "seed {seed}: only {expired_seen} expired keys were read"
    );
    skips + skipped(&d)
}

#[test]
fn model_with_expiry_and_a_manual_clock() {
    for seed in 1..=4 {
        run(seed, 2500, tiny_options(), true);
    }
}

/// Every write a put with an expiry: tables expire whole, and reads skip them while they
/// wait to be dropped.
#[test]
fn model_with_only_expiring_puts() {
    let skips: u64 = (1..=3)
        .map(|seed| run(seed, 2500, tiny_options(), false))
        .sum();
    assert!(skips > 0, "no read skipped a table expired whole");
    println!("{skips} table reads skipped");
}

#[test]
fn model_with_expiry_and_parallel_jobs() {
    let opts = tiny_options().with_background_threads(4);
    for seed in 10..=11 {
        run(seed, 2500, opts.clone(), true);
    }
}

/// An expired entry hides the key's older value wherever the two lie, as a deletion would,
/// and keeps hiding it after the compactions that drop the expired entry.
#[test]
fn an_expired_key_never_shows_its_older_value() {
    let dir = tempfile::tempdir().unwrap();
    let clock = Arc::new(ManualClock::new(5_000));
    let db = Db::open(dir.path(), tiny_options().with_clock(clock.clone())).unwrap();
    db.put("k", "old").unwrap();
    db.flush().unwrap();
    db.compact().unwrap();
    db.put_with_expiry("k", "new", at(6_000)).unwrap();
    assert_eq!(db.get("k").unwrap(), Some(b"new".to_vec()));
    assert_eq!(db.expiry_of("k").unwrap(), KeyExpiry::At(6_000));
    let before = db.snapshot();
    clock.set(6_000);
    for step in ["memtable", "level 0", "compacted"] {
        assert_eq!(db.get("k").unwrap(), None, "{step}");
        assert_eq!(db.expiry_of("k").unwrap(), KeyExpiry::Absent, "{step}");
        assert!(db.iter().next().is_none(), "{step}");
        assert_eq!(
            before.get("k").unwrap(),
            Some(b"new".to_vec()),
            "{step}: snapshot"
        );
        match step {
            "memtable" => db.flush().unwrap(),
            _ => db.compact().unwrap(),
        }
    }
    drop(before);
    db.close().unwrap();
    let db = Db::open(dir.path(), tiny_options().with_clock(clock.clone())).unwrap();
    assert_eq!(db.get("k").unwrap(), None, "after a reopen");
    // The compaction at the bottom dropped the expired entry and the value it hid: no table
    // is left.
    let s = db.stats();
    let tables: Vec<u64> = s.levels.iter().map(|l| l.tables).collect();
    assert_eq!(
        (s.total.tables, s.total.data_bytes),
        (0, 0),
        "tables per level {tables:?}"
    );
}

/// Expiring entries survive a reopen from the log alone (no flush), and the manifest moves to
/// version 3 before the first one is logged (builds that cannot read tag 4 refuse it).
#[test]
fn expiry_survives_replay_and_the_manifest_says_so() {
    let dir = tempfile::tempdir().unwrap();
    let clock = Arc::new(ManualClock::new(10_000));
    let opts = Options::default().with_clock(clock.clone());
    let manifest_version = || std::fs::read(dir.path().join("MANIFEST")).unwrap()[4];
    let db = Db::open(dir.path(), opts.clone()).unwrap();
    db.put("plain", "1").unwrap();
    assert_eq!(manifest_version(), 1);
    db.put_with_ttl("soon", "2", Duration::from_millis(500))
        .unwrap();
    assert_eq!(manifest_version(), 3);
    drop(db); // no close: the memtable is replayed from the log
    let db = Db::open(dir.path(), opts.clone()).unwrap();
    assert_eq!(db.expiry_of("soon").unwrap(), KeyExpiry::At(10_500));
    assert_eq!(db.expiry_of("plain").unwrap(), KeyExpiry::Never);
    assert_eq!(db.expiry_of("none").unwrap(), KeyExpiry::Absent);
    clock.advance(Duration::from_millis(500));
    assert_eq!(db.get("soon").unwrap(), None);
    db.close().unwrap();
    assert_eq!(manifest_version(), 3, "version 3 stays");
}

#[test]
fn expiring_puts_need_table_format_5_and_bops_cannot_carry_them() {
    let dir = tempfile::tempdir().unwrap();
    let db = Db::open(dir.path(), Options::default().with_table_format_version(4)).unwrap();
    let e = db
        .put_with_ttl("k", "v", Duration::from_secs(1))
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("table format 5") && e.contains("table_format_version"),
        "{e}"
    );
    assert_eq!(db.get("k").unwrap(), None);
    let mut b = WriteBatch::new();
    b.put_with_expiry("k", "v", at(1));
    let e = b.into_ops().unwrap_err().to_string();
    assert!(e.contains("expiry"), "{e}");
}

/// One write of the power-loss workload: a key, and its value with its expiry (`None`: a
/// deletion).
type Write = (Vec<u8>, Option<(Vec<u8>, Option<u64>)>);

/// The power-loss workload's writes: plain puts, expiring puts (some already expired at the
/// clock's 1,000,000), deletions; the first expiring put also moves the manifest to version 3.
fn power_writes() -> Vec<Write> {
    (0..48u64)
        .map(|i| {
            let k = format!("k{:02}", i % 13).into_bytes();
            let v = format!("v{i}").into_bytes();
            match i % 4 {
                0 => (k, Some((v, None))),
                1 => (k, Some((v, Some(1_000_000 + i * 1_000)))),
                2 => (k, Some((v, Some(999_000 + i)))),
                _ => (k, None),
            }
        })
        .collect()
}

/// Runs the power-loss workload on `fs` (flushing every 8 writes, compacting after 24);
/// returns how many writes returned `Ok`.
fn power_run(
    dir: &std::path::Path,
    fs: &lsm_bloom::fs::PowerLossFs,
    clock: &Arc<ManualClock>,
) -> usize {
    let opts = tiny_options()
        .with_sync_writes(true)
        .with_clock(clock.clone())
        .with_fs(Arc::new(fs.clone()));
    let Ok(db) = Db::open(dir, opts) else {
        return 0;
    };
    for (i, (k, w)) in power_writes().into_iter().enumerate() {
        let done = match w {
            Some((v, Some(ms))) => db.put_with_expiry(&k, &v, at(ms)),
            Some((v, None)) => db.put(&k, &v),
            None => db.delete(&k),
        };
        if done.is_err() {
            return i;
        }
        let background = match i {
            23 => db.compact(),
            i if i % 8 == 7 => db.flush(),
            _ => Ok(()),
        };
        if background.is_err() {
            return i + 1;
        }
    }
    power_writes().len()
}

/// Every key's value and expiry after the first `n` writes, at the clock's 1,000,000.
fn power_model(n: usize) -> BTreeMap<Vec<u8>, (Option<Vec<u8>>, KeyExpiry)> {
    let mut m = BTreeMap::new();
    for (k, w) in power_writes().into_iter().take(n) {
        let state = match w {
            Some((_, Some(ms))) if ms <= 1_000_000 => (None, KeyExpiry::Absent),
            Some((v, Some(ms))) => (Some(v), KeyExpiry::At(ms)),
            Some((v, None)) => (Some(v), KeyExpiry::Never),
            None => (None, KeyExpiry::Absent),
        };
        m.insert(k, state);
    }
    for i in 0..13 {
        m.entry(format!("k{i:02}").into_bytes())
            .or_insert((None, KeyExpiry::Absent));
    }
    m
}

/// With `sync_writes`, a power cut at any file operation keeps every acknowledged write with
/// its expiry (the one in flight may or may not be there), including a cut while the manifest
/// moves to version 3 before the first expiring put is logged.
#[test]
fn a_power_loss_keeps_every_acknowledged_expiry() {
    use lsm_bloom::fs::{PowerLossFs, UnsyncedTail};
    let clock = Arc::new(ManualClock::new(1_000_000));
    let clean = PowerLossFs::new();
    let dir = tempfile::tempdir().unwrap();
    assert_eq!(
        power_run(&dir.path().join("db"), &clean, &clock),
        power_writes().len()
    );
    let total = clean.ops();
    let mut cuts = 0;
    for n in 1..=total {
        let dir = tempfile::tempdir().unwrap();
        let store = dir.path().join("db");
        let fs = PowerLossFs::new();
        fs.cut_at(n);
        let acked = power_run(&store, &fs, &clock);
        if !fs.is_cut() {
            continue;
        }
        cuts += 1;
        for tail in [UnsyncedTail::Dropped, UnsyncedTail::RandomPages] {
            let to = tempfile::tempdir().unwrap();
            fs.write_durable(&store, to.path(), tail, n).unwrap();
            let what = format!("cut at op {n} of {total}, tail {tail:?}, {acked} acknowledged");
            let db = Db::open(to.path(), tiny_options().with_clock(clock.clone()))
                .unwrap_or_else(|e| panic!("{what}: open failed: {e}"));
            let found: BTreeMap<_, _> = power_model(0)
                .into_keys()
                .map(|k| {
                    let state = (db.get(&k).unwrap(), db.expiry_of(&k).unwrap());
                    (k, state)
                })
                .collect();
            let in_flight = (acked + 1).min(power_writes().len());
            assert!(
                found == power_model(acked) || found == power_model(in_flight),
                "{what}: the store holds {found:?}"
            );
        }
    }
    assert!(cuts > 100, "only {cuts} cuts");
}

/// A checkpoint keeps every expiry, of entries in memtables (written to its log) and in
/// tables, and its manifest is of version 3 as the store's is.
#[test]
fn a_checkpoint_keeps_expiries() {
    let dir = tempfile::tempdir().unwrap();
    let clock = Arc::new(ManualClock::new(50_000));
    let opts = Options::default().with_clock(clock.clone());
    let db = Db::open(dir.path().join("live"), opts.clone()).unwrap();
    let users = db.keyspace("users").unwrap();
    db.put_with_expiry("flushed", "1", at(60_000)).unwrap();
    db.flush().unwrap();
    db.put_with_expiry("in-memtable", "2", at(70_000)).unwrap();
    users
        .put_with_ttl("u", "3", Duration::from_secs(30))
        .unwrap();
    db.put("plain", "4").unwrap();
    db.checkpoint(dir.path().join("copy")).unwrap();
    let manifest = std::fs::read(dir.path().join("copy/MANIFEST")).unwrap();
    assert_eq!(manifest[4], 3);
    let copy = Db::open(dir.path().join("copy"), opts).unwrap();
    let users = copy.keyspace("users").unwrap();
    assert_eq!(copy.expiry_of("flushed").unwrap(), KeyExpiry::At(60_000));
    assert_eq!(
        copy.expiry_of("in-memtable").unwrap(),
        KeyExpiry::At(70_000)
    );
    assert_eq!(users.expiry_of("u").unwrap(), KeyExpiry::At(80_000));
    assert_eq!(copy.expiry_of("plain").unwrap(), KeyExpiry::Never);
    clock.set(70_000);
    assert_eq!(copy.get("in-memtable").unwrap(), None);
    assert_eq!(users.get("u").unwrap(), Some(b"3".to_vec()));
}

/// Options on `clock` under which the background work drops whole expired tables only, and
/// only when woken (no idle compaction); level 0 holds up to 8 tables. (A table mostly
/// expired would otherwise be rewritten: `a_table_mostly_expired_is_rewritten`.)
fn no_reclaim(clock: &Arc<ManualClock>) -> Options {
    Options::default()
        .with_clock(clock.clone())
        .with_idle_compaction_after(None)
        .with_expired_reclaim_after(None)
        .with_expired_share_to_reclaim(None)
        .with_expired_ratio_to_reclaim(None)
        .with_l0_compaction_trigger(8)
        .with_l0_slowdown_writes_trigger(16)
        .with_l0_stop_writes_trigger(20)
}

/// A table whose every entry has expired, and under which no older table holds any of its
/// keys, is dropped whole by the background work without being read; one that shadows older
/// values stays (dropping it would bring them back).
#[test]
fn fully_expired_tables_are_dropped_whole_unread() {
    let dir = tempfile::tempdir().unwrap();
    let clock = Arc::new(ManualClock::new(100_000));
    let db = Db::open(dir.path(), no_reclaim(&clock)).unwrap();
    for i in 0..100 {
        db.put(format!("d{i:03}"), "old").unwrap();
    }
    db.compact().unwrap(); // level 1: the d keys without expiry
    let tables = |db: &Db| -> Vec<u64> { db.stats().levels.iter().map(|l| l.tables).collect() };
    let mut batch = WriteBatch::new();
    for i in 0..200 {
        batch.put_with_expiry(format!("a{i:03}"), "soon", at(200_000));
    }
    db.write(batch).unwrap();
    let expiring = |db: &Db| {
        db.keyspace(lsm_bloom::DEFAULT_KEYSPACE)
            .unwrap()
            .approximate_expiring_len()
            .unwrap()
    };
    assert_eq!(expiring(&db), 200, "the memtable's count");
    db.flush().unwrap(); // level 0: every entry expires, nothing under it
    assert_eq!(expiring(&db), 200, "the table's properties");
    for i in 0..100 {
        db.put(format!("b{i:03}"), "kept").unwrap();
    }
    db.flush().unwrap();
    for i in 0..100 {
        db.put_with_expiry(format!("d{i:03}"), "new", at(200_000))
            .unwrap();
    }
    db.flush().unwrap(); // level 0: every entry expires, but it hides level 1's d keys
    assert_eq!(tables(&db)[..2], [3, 1]);
    let files = || std::fs::read_dir(dir.path()).unwrap().count();
    let (before, read_before) = (files(), db.stats().compaction_bytes_read);
    clock.set(200_000);
    // Any wake-up of the background threads looks again: a flush is one.
    db.put("c", "x").unwrap();
    db.flush().unwrap();
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while db.stats().expired_tables_dropped == 0 {
        assert!(
            std::time::Instant::now() < deadline,
            "no expired table dropped"
        );
        std::thread::sleep(Duration::from_millis(5));
    }
    std::thread::sleep(Duration::from_millis(50)); // nothing else goes
    let s = db.stats();
    assert_eq!(s.expired_tables_dropped, 1);
    assert_eq!(
        s.expired_entries_dropped, 200,
        "each put of the dropped table"
    );
    assert_eq!(expiring(&db), 100, "the d keys' table's");
    assert_eq!(s.compaction_bytes_read, read_before, "dropped unread");
    assert_eq!(tables(&db)[..2], [3, 1], "a's table went, c's came");
    assert_eq!(files(), before, "a's file removed, c's added");
    for i in (0..100).step_by(7) {
        assert_eq!(db.get(format!("a{i:03}")).unwrap(), None);
        assert_eq!(db.get(format!("b{i:03}")).unwrap(), Some(b"kept".to_vec()));
        assert_eq!(
            db.get(format!("d{i:03}")).unwrap(),
            None,
            "the old d value stays hidden"
        );
    }
    // A compaction rewrites the rest: the expired d puts go, counted once each.
    db.compact().unwrap();
    assert_eq!(db.stats().expired_entries_dropped, 300);
    assert_eq!(expiring(&db), 0);
}

/// A get or multi_get that meets a table expired whole, with no older table that could hold
/// the key, answers "absent" without probing its filter or reading a block (`expired_skips`);
/// a scan passes over such a table when no older table overlaps it. One over older values of
/// its keys is still read, and keeps hiding them.
#[test]
fn reads_skip_tables_expired_whole_unread() {
    let dir = tempfile::tempdir().unwrap();
    let clock = Arc::new(ManualClock::new(100_000));
    // No background work drops the expired tables first: nothing wakes it.
    let db = Db::open(dir.path(), no_reclaim(&clock)).unwrap();
    for i in 0..100 {
        db.put(format!("b{i:03}"), "old").unwrap();
        db.put(format!("d{i:03}"), "old").unwrap();
    }
    // Inside the a keys' range (between a050 and a051), in an older table: from a051 on, the
    // a table is not the last that may hold a key.
    db.put("a050z", "live").unwrap();
    db.compact().unwrap(); // level 1: b and d keys and a050z, without expiry
    let mut batch = WriteBatch::new();
    for i in 0..100 {
        batch.put_with_expiry(format!("a{i:03}"), "soon", at(200_000));
    }
    db.write(batch).unwrap();
    db.flush().unwrap(); // level 0: a keys
    let mut batch = WriteBatch::new();
    for i in 0..100 {
        batch.put_with_expiry(format!("d{i:03}"), "soon", at(200_000));
    }
    db.write(batch).unwrap();
    db.flush().unwrap(); // level 0: d keys over level 1's
    let mut batch = WriteBatch::new();
    for i in 0..100 {
        batch.put_with_expiry(format!("e{i:03}"), "soon", at(200_000));
    }
    db.write(batch).unwrap();
    db.flush().unwrap(); // level 0: e keys, beyond every older table's range
                         // The flushes' own look at the table set is over before the clock moves (it would drop
                         // the e table once expired): nothing wakes the background after this.
    db.wait_for_compactions().unwrap();
    let skips = |db: &Db| {
        db.stats()
            .levels
            .iter()
            .map(|l| l.expired_skips)
            .sum::<u64>()
    };
    let probes = |db: &Db| {
        let s = db.stats();
        (
            s.total.filter_checks + s.total.unfiltered_probes,
            s.total.data_block_reads,
        )
    };
    // Before expiry: read as any table.
    assert_eq!(db.get("a007").unwrap(), Some(b"soon".to_vec()));
    assert_eq!(skips(&db), 0);
    clock.set(200_000);
    // The first read to meet an expiring entry after the clock moved reads the clock, and the
    // store records the time: from then on gets skip the table without reading the clock.
    assert_eq!(db.get("a000").unwrap(), None);
    let before = probes(&db);
    for i in 1..=50 {
        assert_eq!(db.get(format!("a{i:03}")).unwrap(), None);
    }
    assert_eq!(
        db.get("a0505").unwrap(),
        None,
        "absent, in the table's range"
    );
    let found = db.multi_get(&["a001", "a002"]);
    assert_eq!(found[0].as_ref().unwrap(), &None);
    assert_eq!(found[1].as_ref().unwrap(), &None);
    assert_eq!(skips(&db), 53, "50 gets, a0505 and the multi_get's two");
    assert_eq!(probes(&db), before, "no filter probed, no block read");
    // Where an older table may hold the key, the expired table is read: a050z is live.
    for i in 51..100 {
        assert_eq!(db.get(format!("a{i:03}")).unwrap(), None);
    }
    assert_eq!(db.get("a050z").unwrap(), Some(b"live".to_vec()));
    let found = db.multi_get(&["a050z", "a060"]);
    assert_eq!(found[0].as_ref().unwrap(), &Some(b"live".to_vec()));
    assert_eq!(found[1].as_ref().unwrap(), &None);
    assert_eq!(skips(&db), 53);
    let checks = probes(&db).0;
    assert!(checks > before.0, "the a table was probed");
    // The d table hides level 1's values: read, not skipped, and still absent.
    for i in (0..100).step_by(9) {
        assert_eq!(db.get(format!("d{i:03}")).unwrap(), None);
        let got = db.multi_get(&[format!("d{i:03}")]);
        assert_eq!(got[0].as_ref().unwrap(), &None);
    }
    assert_eq!(skips(&db), 53);
    assert!(probes(&db).0 > checks, "the d table was probed");
    // Scans pass over the e table unopened (no older table overlaps it), and read the a and
    // d tables, which hide older values. The background may drop the e table, expired whole,
    // at any moment now (a wake-up of `wait_for_compactions` can reach a compaction thread
    // after the clock moved): a scan that began after that has no table to pass over, so the
    // counts are exact only while the table is still there once the reads are done.
    let e_table = |db: &Db| {
        db.levels()
            .iter()
            .flatten()
            .any(|t| t.min_key().starts_with(b"e"))
    };
    let passed = |db: &Db, from: u64, want: u64, what: &str| {
        let got = skips(db) - from;
        match e_table(db) {
            true => assert_eq!(got, want, "{what}"),
            false => assert!(got <= want, "{what}: {got} skips, the table dropped"),
        }
    };
    let scan_blocks = |db: &Db| db.stats().total.scan_block_reads;
    let blocks = scan_blocks(&db);
    assert_eq!(db.scan("e".."f").unwrap().count(), 0);
    assert_eq!(db.scan("e".."f").unwrap().rev().count(), 0);
    assert_eq!(db.expiry_of("e005").unwrap(), KeyExpiry::Absent);
    passed(&db, 53, 3, "two scans and expiry_of");
    assert_eq!(scan_blocks(&db), blocks, "no block of the e table read");
    let from = skips(&db);
    let all: Vec<Vec<u8>> = db.iter().map(|e| e.unwrap().0).collect();
    let mut want: Vec<Vec<u8>> = (0..100).map(|i| format!("b{i:03}").into_bytes()).collect();
    want.insert(0, b"a050z".to_vec());
    assert_eq!(all, want);
    passed(&db, from, 1, "the whole scan passed over the e table only");
}

/// A store of 200 keys on one level, every other one (or 3 in 5) expiring at 1,005,000, on a
/// clock at 1,000,000 that the compaction threads look at every 10 ms.
fn half_expiring(
    dir: &std::path::Path,
    opts: Options,
    expiring_per_5: u64,
) -> (Db, Arc<ManualClock>) {
    let clock = Arc::new(ManualClock::new(1_000_000));
    let opts = opts
        .with_clock(clock.clone())
        .with_idle_compaction_after(Some(Duration::from_millis(10)));
    let db = Db::open(dir, opts).unwrap();
    for i in 0..200u64 {
        let k = format!("k{i:03}");
        match i % 5 < expiring_per_5 {
            true => db.put_with_expiry(&k, [b'e'; 100], at(1_005_000)).unwrap(),
            false => db.put(&k, [b'p'; 100]).unwrap(),
        }
    }
    db.compact().unwrap();
    (db, clock)
}

fn data_bytes(db: &Db) -> u64 {
    db.stats().total.data_bytes
}

/// Waits up to 10 s for a compaction beyond `done`; false if none came.
fn compaction_after(db: &Db, done: u64) -> bool {
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while db.stats().compactions == done {
        if std::time::Instant::now() > deadline {
            return false;
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    true
}

/// Whether a compaction comes once `clock` is set to `at`: waited for up to 10 s when one is
/// `expected`, else 200 ms are given for one to come.
fn compaction_at(db: &Db, clock: &ManualClock, at: u64, expected: bool) -> bool {
    let done = db.stats().compactions;
    clock.set(at);
    if expected {
        return compaction_after(db, done);
    }
    std::thread::sleep(Duration::from_millis(200));
    db.stats().compactions != done
}

/// A table holding puts that expired longer ago than `expired_reclaim_after` is rewritten
/// without them, though nothing else would compact it; not before.
#[test]
fn expired_data_leaves_the_disk_within_the_bound() {
    let dir = tempfile::tempdir().unwrap();
    let opts = Options::default()
        .with_expired_reclaim_after(Some(Duration::from_secs(10)))
        .with_expired_share_to_reclaim(None)
        .with_expired_ratio_to_reclaim(None);
    let (db, clock) = half_expiring(dir.path(), opts, 1);
    let (full, done) = (data_bytes(&db), db.stats().compactions);
    clock.set(1_005_000 + 9_000);
    std::thread::sleep(Duration::from_millis(200));
    assert_eq!(db.stats().compactions, done, "expired 9 s ago: not yet");
    clock.set(1_005_000 + 10_000);
    assert!(
        compaction_after(&db, done),
        "expired 10 s ago: no compaction came"
    );
    let left = data_bytes(&db);
    assert!(left * 100 < full * 85, "{left} of {full} data bytes left");
    std::thread::sleep(Duration::from_millis(200));
    assert_eq!(db.stats().compactions, done + 1, "one rewrite, not a loop");
    for i in (0..200u64).step_by(3) {
        let want = (i % 5 != 0).then(|| vec![b'p'; 100]);
        assert_eq!(db.get(format!("k{i:03}")).unwrap(), want);
    }
}

/// A table whose expired share reaches `expired_share_to_reclaim` is rewritten as soon as it
/// does; below it, not.
#[test]
fn a_table_mostly_expired_is_rewritten() {
    for (per_5, rewritten) in [(3, true), (2, false)] {
        let dir = tempfile::tempdir().unwrap();
        let opts = Options::default()
            .with_expired_reclaim_after(None)
            .with_expired_share_to_reclaim(Some(0.5))
            .with_expired_ratio_to_reclaim(None);
        let (db, clock) = half_expiring(dir.path(), opts, per_5);
        let came = compaction_at(&db, &clock, 1_005_000, rewritten);
        assert_eq!(came, rewritten, "{per_5} in 5 expired");
    }
}

/// Once the store's estimated expired bytes pass `expired_ratio_to_reclaim` of its live
/// bytes, the most expired table is rewritten (once: its output has nothing expired); below
/// the ratio, not. One key in 5 expiring: expired ÷ live is 1 ÷ 4 once they have.
#[test]
fn expired_data_past_the_store_wide_ratio_is_rewritten() {
    for (ratio, rewritten) in [(0.2, true), (0.3, false)] {
        let dir = tempfile::tempdir().unwrap();
        let opts = Options::default()
            .with_expired_reclaim_after(None)
            .with_expired_share_to_reclaim(None)
            .with_expired_ratio_to_reclaim(Some(ratio));
        let (db, clock) = half_expiring(dir.path(), opts, 1);
        let (full, done) = (data_bytes(&db), db.stats().compactions);
        clock.set(1_004_999);
        std::thread::sleep(Duration::from_millis(200));
        assert_eq!(db.stats().compactions, done, "nothing expired yet");
        let came = compaction_at(&db, &clock, 1_005_000, rewritten);
        assert_eq!(came, rewritten, "ratio {ratio}");
        if rewritten {
            assert!(data_bytes(&db) * 100 < full * 85, "the expired puts left");
            std::thread::sleep(Duration::from_millis(200));
            assert_eq!(db.stats().compactions, done + 1, "one rewrite, not a loop");
        }
        for i in (0..200u64).step_by(7) {
            let want = (i % 5 != 0).then(|| vec![b'p'; 100]);
            assert_eq!(db.get(format!("k{i:03}")).unwrap(), want);
        }
    }
}

#[test]
fn a_bad_share_is_refused_by_name() {
    let dir = tempfile::tempdir().unwrap();
    for share in [0.0, 1.5, f64::NAN] {
        let opts = Options::default().with_expired_share_to_reclaim(Some(share));
        let e = Db::open(dir.path(), opts).err().unwrap().to_string();
        assert!(e.contains("expired_share_to_reclaim"), "{e}");
    }
    for ratio in [0.0, -1.0, f64::NAN] {
        let opts = Options::default().with_expired_ratio_to_reclaim(Some(ratio));
        let e = Db::open(dir.path(), opts).err().unwrap().to_string();
        assert!(e.contains("expired_ratio_to_reclaim"), "{e}");
    }
}

/// A snapshot's `expiry_of` answers at the snapshot's time, in every keyspace.
#[test]
fn a_snapshot_tells_expiries_at_its_own_time() {
    let dir = tempfile::tempdir().unwrap();
    let clock = Arc::new(ManualClock::new(10_000));
    let db = Db::open(dir.path(), Options::default().with_clock(clock.clone())).unwrap();
    let users = db.keyspace("users").unwrap();
    db.put_with_expiry("k", "v", at(11_000)).unwrap();
    users.put_with_expiry("u", "v", at(12_000)).unwrap();
    let snap = db.snapshot();
    clock.set(20_000);
    db.put("k", "again").unwrap();
    assert_eq!(snap.expiry_of("k").unwrap(), KeyExpiry::At(11_000));
    let in_users = snap.keyspace(&users).unwrap();
    assert_eq!(in_users.expiry_of("u").unwrap(), KeyExpiry::At(12_000));
    assert_eq!(users.expiry_of("u").unwrap(), KeyExpiry::Absent);
    assert_eq!(db.expiry_of("k").unwrap(), KeyExpiry::Never);
    assert_eq!(snap.expiry_of("none").unwrap(), KeyExpiry::Absent);
}
