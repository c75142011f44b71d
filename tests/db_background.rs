//! Background work beside writes: a flush is not held up by a compaction, compactions run side
//! by side, and writes that must wait are slowed or stopped — counted in `DbStats` and logged.

mod common;

use std::sync::Arc;
use std::time::{Duration, Instant};

use common::captured::Captured;
use common::{fill, tiny_options, wait_until};
use lsm_bloom::fs::FaultyFs;
use lsm_bloom::{Db, Options};

/// With the disk slow to read, a compaction of two level-0 tables takes seconds; a memtable
/// flushed meanwhile reaches level 0 while it still runs. (With one background thread doing
/// both, the flush waited for the whole compaction.)
#[test]
fn a_flush_completes_while_a_long_compaction_runs() {
    let dir = tempfile::tempdir().unwrap();
    let fs = FaultyFs::new();
    let opts = Options::default()
        .with_l0_compaction_trigger(2)
        .with_idle_compaction_after(None)
        .with_fs(Arc::new(fs.clone()));
    let db = Db::open(dir.path(), opts).unwrap();
    fill(&db, "a", 2_000);
    db.flush().unwrap();
    // Each block read of the compaction's inputs now waits 20 ms: ~100 blocks, seconds.
    fs.delay_reads(Duration::from_millis(20));
    fill(&db, "b", 2_000);
    db.flush().unwrap();
    wait_until("the compaction starts", Duration::from_secs(10), || {
        db.stats().compactions_running == 1
    });
    fill(&db, "c", 100);
    let t = Instant::now();
    db.flush().unwrap();
    let took = t.elapsed();
    let s = db.stats();
    assert_eq!(
        (s.compactions, s.compactions_running),
        (0, 1),
        "the flush returned after {took:?}, when the compaction had ended"
    );
    assert_eq!(s.levels[0].tables, 3, "the new table is not in level 0");
    assert_eq!(
        db.get("c000007").unwrap().as_deref(),
        Some(&[b'v'; 100][..])
    );
    fs.delay_reads(Duration::ZERO);
    db.wait_for_compactions().unwrap();
    assert!(db.stats().compactions >= 1);
    for tag in ["a", "b", "c"] {
        assert!(db.get(format!("{tag}000042")).unwrap().is_some(), "{tag}");
    }
}

/// Many small jobs on a slow disk with four compaction threads: jobs overlap in many orders,
/// and at least two compactions ran at once. Every key written is read back with its last
/// value, after a reopen too.
#[test]
fn compactions_run_side_by_side_and_lose_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let fs = FaultyFs::new();
    fs.delay_syncs(Duration::from_millis(2));
    fs.delay_reads(Duration::from_micros(200));
    let opts = tiny_options()
        .with_background_threads(4)
        .with_fs(Arc::new(fs.clone()));
    let db = Db::open(dir.path(), opts.clone()).unwrap();
    let keys = 6_000u32;
    for round in 0..3u32 {
        for i in 0..keys {
            let k = (u64::from(i) * 7_919 % u64::from(keys)) as usize; // 7,919 is prime: every key once
            db.put(format!("k{k:06}"), format!("{round}:{k}")).unwrap();
        }
    }
    db.wait_for_compactions().unwrap();
    let s = db.stats();
    assert!(
        s.most_compactions_running >= 2,
        "never more than {} compaction at once ({} compactions)",
        s.most_compactions_running,
        s.compactions
    );
    let check = |db: &Db, when: &str| {
        for k in 0..keys as usize {
            let v = db.get(format!("k{k:06}")).unwrap();
            assert_eq!(
                v.as_deref(),
                Some(format!("2:{k}").as_bytes()),
                "k{k:06} {when}"
            );
        }
        assert_eq!(db.scan::<&[u8], _>(..).unwrap().count(), keys as usize);
    };
    check(&db, "before the reopen");
    db.close().unwrap();
    let db = Db::open(dir.path(), opts).unwrap();
    check(&db, "after the reopen");
}

/// Level 0 at the slowdown trigger: writes go at `delayed_write_rate`, each group sleeping
/// its share, counted and logged; below it again, full speed and "ends" logged.
#[test]
fn slowdowns_are_counted_and_logged() {
    let dir = tempfile::tempdir().unwrap();
    let rate = 256 * 1024;
    let opts = Options::default()
        .with_l0_compaction_trigger(10)
        .with_idle_compaction_after(None)
        .with_l0_slowdown_writes_trigger(2)
        .with_l0_stop_writes_trigger(20)
        .with_delayed_write_rate(rate);
    let db = Db::open(dir.path(), opts).unwrap();
    let log = Captured::default();
    tracing::subscriber::with_default(log.clone(), || {
        fill(&db, "a", 100);
        db.flush().unwrap();
        assert_eq!(db.stats().write_slowdowns, 0, "slowed below the trigger");
        fill(&db, "b", 100);
        db.flush().unwrap();
        // Two level-0 tables: ~64 KiB of records at 256 KiB/s, about a quarter of a second.
        let t = Instant::now();
        fill(&db, "c", 500);
        let took = t.elapsed();
        let s = db.stats();
        assert!(s.write_slowdowns > 0, "{s:?}");
        let expected = Duration::from_secs_f64(500.0 * 120.0 / rate as f64);
        assert!(
            took >= expected.mul_f64(0.8),
            "500 writes took {took:?}, the rate allows {expected:?}"
        );
        assert!(s.write_slowdown_micros >= expected.as_micros() as u64 * 8 / 10);
        assert!(s.longest_write_slowdown_micros >= 1_000, "{s:?}");
        assert!(log.any(&["INFO", "write slowdown begins", "level0_tables=2"]));
        db.compact().unwrap();
        fill(&db, "d", 10);
        assert!(log.any(&["write slowdown ends"]), "{:?}", log.0);
    });
}

/// Level 0 never slows writes here, but compactions are slow (every table read waits): the
/// compaction debt passes the soft limit and writes are slowed, counted and logged with that
/// reason; once compactions catch up the debt is gone and so is the slowdown.
#[test]
fn the_compaction_debt_slows_writes_past_the_soft_limit() {
    let dir = tempfile::tempdir().unwrap();
    let fs = FaultyFs::new();
    let opts = Options::default()
        .with_l0_compaction_trigger(2)
        .with_l0_slowdown_writes_trigger(100)
        .with_l0_stop_writes_trigger(100)
        .with_idle_compaction_after(None)
        .with_soft_pending_compaction_bytes_limit(Some(1))
        .with_hard_pending_compaction_bytes_limit(None)
        .with_delayed_write_rate(256 * 1024)
        .with_fs(Arc::new(fs.clone()));
    let db = Db::open(dir.path(), opts).unwrap();
    let log = Captured::default();
    tracing::subscriber::with_default(log.clone(), || {
        fill(&db, "a", 200);
        db.flush().unwrap();
        assert_eq!(db.stats().pending_compaction_bytes, 0, "one level-0 table");
        fs.delay_reads(Duration::from_millis(20));
        fill(&db, "b", 200);
        db.flush().unwrap();
        let debt = db.stats().pending_compaction_bytes;
        assert!(
            debt > 0,
            "two level-0 tables at a trigger of two owe nothing"
        );
        fill(&db, "c", 500);
        let s = db.stats();
        assert!(
            s.write_slowdowns > 0 && s.write_slowdown_micros > 0,
            "{s:?}"
        );
        assert_eq!(s.write_stalls, 0, "{s:?}");
        assert!(log.any(&[
            "INFO",
            "write slowdown begins",
            "soft_pending_compaction_bytes_limit",
            &format!("pending_compaction_bytes={debt}"),
        ]));
        fs.delay_reads(Duration::ZERO);
        db.wait_for_compactions().unwrap();
        assert_eq!(db.stats().pending_compaction_bytes, 0);
        fill(&db, "d", 10);
        assert!(log.any(&["write slowdown ends"]), "{:?}", log.0);
    });
    for tag in ["a", "b", "c", "d"] {
        assert!(db.get(format!("{tag}000007")).unwrap().is_some(), "{tag}");
    }
}

/// Past the hard limit a retired memtable waits for compaction: the stop is counted with
/// its length and logged naming the debt, and no write is lost.
#[test]
fn the_compaction_debt_stops_writes_at_the_hard_limit() {
    let dir = tempfile::tempdir().unwrap();
    let fs = FaultyFs::new();
    let opts = Options::default()
        .with_memtable_size(16 * 1024)
        .with_max_immutable_memtables(16)
        .with_l0_compaction_trigger(2)
        .with_l0_slowdown_writes_trigger(100)
        .with_l0_stop_writes_trigger(100)
        .with_idle_compaction_after(None)
        .with_hard_pending_compaction_bytes_limit(Some(1))
        .with_fs(Arc::new(fs.clone()));
    let db = Db::open(dir.path(), opts).unwrap();
    let log = Captured::default();
    fill(&db, "a", 100);
    db.flush().unwrap();
    // A second level-0 table reaches the trigger: the debt is positive until its slow
    // compaction is installed, and every memtable retired meanwhile waits.
    fs.delay_reads(Duration::from_millis(20));
    fill(&db, "b", 100);
    db.flush().unwrap();
    assert!(db.stats().pending_compaction_bytes > 0);
    tracing::subscriber::with_default(log.clone(), || fill(&db, "c", 1_000));
    let s = db.stats();
    assert!(s.write_stalls >= 1, "{s:?}");
    assert!(s.longest_write_stall_micros >= 20_000, "{s:?}");
    assert!(
        log.any(&[
            "WARN",
            "writes stopped",
            "hard_pending_compaction_bytes_limit"
        ]),
        "{:?}",
        log.0
    );
    fs.delay_reads(Duration::ZERO);
    db.wait_for_compactions().unwrap();
    assert_eq!(db.scan::<&[u8], _>(..).unwrap().count(), 1_200);
}

/// Flushes held back (table files cannot be created): once `max_immutable_memtables` are
/// waiting, a write stops until they are flushed; the stop is counted with its length and
/// logged as a warning naming why.
#[test]
fn stalls_are_counted_with_their_length_and_logged() {
    let dir = tempfile::tempdir().unwrap();
    let fs = FaultyFs::new();
    let opts = Options::default()
        .with_memtable_size(16 * 1024)
        .with_max_immutable_memtables(1)
        .with_fs(Arc::new(fs.clone()));
    let db = Db::open(dir.path(), opts).unwrap();
    let log = Captured::default();
    fs.hold_table_creates(true);
    let release = {
        let fs = fs.clone();
        std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(300));
            fs.hold_table_creates(false);
        })
    };
    tracing::subscriber::with_default(log.clone(), || fill(&db, "a", 1_000));
    release.join().unwrap();
    let s = db.stats();
    assert!(s.write_stalls >= 1, "{s:?}");
    assert!(
        s.longest_write_stall_micros >= 200_000
            && s.write_stall_micros >= s.longest_write_stall_micros,
        "{s:?}"
    );
    assert!(
        log.any(&[
            "WARN",
            "writes stopped",
            "immutable memtables waiting for a flush"
        ]),
        "{:?}",
        log.0
    );
}

/// Flushes held back: with all but one of `max_immutable_memtables` waiting, writes are
/// slowed down (counted, logged naming the memtables) before they would stop; once the
/// flushes go through, the slowdown ends and nothing is lost.
#[test]
fn memtables_waiting_for_a_flush_slow_writes_before_they_stop() {
    let dir = tempfile::tempdir().unwrap();
    let fs = FaultyFs::new();
    let opts = Options::default()
        .with_memtable_size(16 * 1024)
        .with_max_immutable_memtables(3)
        .with_delayed_write_rate(256 * 1024)
        .with_idle_compaction_after(None)
        .with_fs(Arc::new(fs.clone()));
    let db = Db::open(dir.path(), opts).unwrap();
    let log = Captured::default();
    // Held flushes go however the test ends (a failed assertion would otherwise leave the
    // store's close waiting for them).
    let held = fs.hold_table_creates_scoped();
    tracing::subscriber::with_default(log.clone(), || {
        // ~171 bytes a record as a memtable counts it: a 16 KiB memtable is full at ~96, so
        // two wait after ~192 writes and a third would stop writes at ~288.
        fill(&db, "a", 250);
        let s = db.stats();
        assert!(s.write_slowdowns > 0, "{s:?}");
        assert_eq!(
            s.write_stalls, 0,
            "stopped before the third memtable: {s:?}"
        );
        assert!(
            log.any(&[
                "INFO",
                "write slowdown begins",
                "immutable memtables one short of max_immutable_memtables",
                "immutable_memtables=2",
            ]),
            "{:?}",
            log.0
        );
        drop(held);
        db.flush().unwrap();
        fill(&db, "b", 10);
        assert!(
            log.any(&["write slowdown ends", "immutable_memtables=0"]),
            "{:?}",
            log.0
        );
    });
    for tag in ["a", "b"] {
        assert!(db.get(format!("{tag}000007")).unwrap().is_some(), "{tag}");
    }
}

/// Writes stop: level 0 is compacted away by itself once `idle_compaction_after` has passed,
/// though it holds fewer tables than the trigger; `wait_for_compactions` does it at once.
#[test]
fn an_idle_store_compacts_level_0_away() {
    let dir = tempfile::tempdir().unwrap();
    let opts = Options::default()
        .with_l0_compaction_trigger(8)
        .with_idle_compaction_after(Some(Duration::from_millis(300)));
    let db = Db::open(dir.path(), opts).unwrap();
    for t in 0..3 {
        fill(&db, &format!("t{t}-"), 500);
        db.flush().unwrap();
    }
    let l0 = |db: &Db| db.stats().levels[0].tables;
    assert_eq!(l0(&db), 3, "compacted while writes were still coming");
    wait_until("level 0 is empty", Duration::from_secs(10), || l0(&db) == 0);
    assert_eq!(db.stats().compactions, 1);
    assert_eq!(
        db.get("t1-000123").unwrap().as_deref(),
        Some(&[b'v'; 100][..])
    );

    // Without the idle rule, level 0 stays; wait_for_compactions with it: empty on return.
    for (idle, left) in [(None, 2), (Some(Duration::from_secs(3600)), 0)] {
        let dir = tempfile::tempdir().unwrap();
        let opts = Options::default()
            .with_l0_compaction_trigger(8)
            .with_idle_compaction_after(idle);
        let db = Db::open(dir.path(), opts).unwrap();
        for t in 0..2 {
            fill(&db, &format!("t{t}-"), 500);
            db.flush().unwrap();
        }
        db.wait_for_compactions().unwrap();
        assert_eq!(l0(&db), left, "idle rule {idle:?}");
    }
}
