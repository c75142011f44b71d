//! Fault injection: a workload of puts, deletes, batches, flushes and compactions runs against
//! a `FaultyFs` that fails its Nth file operation (create, write, sync, truncate, rename,
//! remove, directory sync), for every N the workload reaches, in four ways: that one
//! operation fails; it and every later one fail (a disk that stays full); a write stores half
//! its buffer and fails (ENOSPC mid-append); the operation panics (a bug in the background
//! thread). Each run must not panic or hang; then the database is reopened on the real file
//! system and must hold every write that returned `Ok`, none that returned `ReadOnly`, and the
//! one write whose own I/O failed either whole or not at all.

mod common;

use std::collections::BTreeMap;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::tiny_options;
use common::workload::{apply, batch, workload, Model, Ops, Step};
use lsm_bloom::fs::{Fault, FaultyFs, FsOp};
use lsm_bloom::{Db, Error, Options};

fn outcome(r: &std::thread::Result<lsm_bloom::Result<()>>) -> String {
    match r {
        Ok(Ok(())) => "ok".into(),
        Ok(Err(e)) => e.to_string(),
        Err(_) => "panicked".into(),
    }
}

fn options(fs: &FaultyFs, sync_writes: bool) -> Options {
    tiny_options()
        .with_sync_writes(sync_writes)
        .with_fs(Arc::new(fs.clone()))
}

/// What a run under faults left: the acknowledged state, and the write that failed with its
/// own I/O error (it may or may not have reached the disk).
struct Outcome {
    acked: Model,
    ambiguous: Option<Ops>,
    opened: bool,
}

fn run(dir: &std::path::Path, fs: &FaultyFs, sync_writes: bool, steps: &[Step]) -> Outcome {
    let mut out = Outcome {
        acked: Model::new(),
        ambiguous: None,
        opened: false,
    };
    let opened = catch_unwind(AssertUnwindSafe(|| Db::open(dir, options(fs, sync_writes))));
    let Ok(Ok(db)) = opened else {
        return out;
    };
    out.opened = true;
    let mut failed = false;
    let mut log = Vec::new();
    for step in steps {
        match step {
            Step::Write(ops) => {
                let b = batch(ops);
                let result = catch_unwind(AssertUnwindSafe(|| db.write(b))).unwrap_or_else(|_| {
                    Err(Error::Panicked {
                        message: "injected".into(),
                    })
                });
                if let Err(e) = &result {
                    log.push(format!("write: {e}"));
                }
                match result {
                    Ok(()) => {
                        assert!(
                            !failed,
                            "a write was acknowledged after the store failed ({:?}): {log:#?}",
                            fs.failed()
                        );
                        apply(&mut out.acked, ops);
                    }
                    Err(Error::ReadOnly { .. }) => failed = true,
                    Err(e) => {
                        assert!(
                            matches!(e, Error::Io { .. } | Error::Panicked { .. }),
                            "write failed with an unexpected error: {e}"
                        );
                        assert!(out.ambiguous.is_none(), "two writes failed with I/O errors");
                        out.ambiguous = Some(ops.clone());
                        failed = true;
                    }
                }
            }
            Step::Flush => {
                failed |= !matches!(catch_unwind(AssertUnwindSafe(|| db.flush())), Ok(Ok(())))
            }
            Step::Compact => {
                let r = catch_unwind(AssertUnwindSafe(|| db.compact()));
                log.push(format!("compact: {}", outcome(&r)));
                failed |= !matches!(r, Ok(Ok(())))
            }
        }
        if failed {
            // Reads keep working in the error state.
            if let Some((k, v)) = out.acked.iter().next() {
                let got = db.get(k).expect("reads work after a write failure");
                if out.ambiguous.is_none() {
                    assert_eq!(got.as_ref(), Some(v), "read after failure");
                }
            }
        }
    }
    drop(db); // must not hang, whatever failed
    out
}

fn check_reopened(dir: &std::path::Path, out: &Outcome, what: &str) {
    let db = Db::open(dir, Options::default())
        .unwrap_or_else(|e| panic!("{what}: reopen on the real file system failed: {e}"));
    let found: Model = db
        .scan::<&[u8], _>(..)
        .unwrap()
        .map(|r| r.unwrap())
        .collect();
    let mut with = out.acked.clone();
    if let Some(ops) = &out.ambiguous {
        apply(&mut with, ops);
    }
    assert!(
        found == out.acked || found == with,
        "{what}: after reopen the store holds {} keys; acknowledged state has {}{}",
        found.len(),
        out.acked.len(),
        if out.ambiguous.is_some() {
            " (plus one failed batch, which may be whole or absent)"
        } else {
            ""
        }
    );
    for (k, v) in out.acked.iter().take(5) {
        if out.ambiguous.is_none() {
            assert_eq!(
                db.get(k).unwrap().as_ref(),
                Some(v),
                "{what}: get after reopen"
            );
        }
    }
    db.put(b"after-reopen", b"ok")
        .expect("writes work after reopening");
}

/// Keeps injected panics (thousands of them) out of the output; other panics print as usual.
fn quiet_injected_panics() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        let default = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            let msg = info
                .payload()
                .downcast_ref::<String>()
                .map(String::as_str)
                .unwrap_or("");
            if !msg.contains("FaultyFs: injected panic") {
                default(info);
            }
        }));
    });
}

/// Runs every failure point of the workload with each fault; returns (points, failed ops by
/// kind).
fn sweep(sync_writes: bool, seed: u64, len: usize) -> (u64, BTreeMap<String, u64>) {
    quiet_injected_panics();
    let steps = workload(seed, len);
    let clean_fs = FaultyFs::new();
    let dir = tempfile::tempdir().unwrap();
    let clean = run(dir.path(), &clean_fs, sync_writes, &steps);
    assert!(clean.opened && clean.ambiguous.is_none());
    check_reopened(dir.path(), &clean, "clean run");
    let total = clean_fs.ops();
    assert!(total > 100, "workload made only {total} file operations");

    let started = Arc::new(AtomicU64::new(u64::MAX));
    let epoch = Instant::now();
    let watchdog = {
        let started = Arc::clone(&started);
        std::thread::spawn(move || loop {
            std::thread::sleep(Duration::from_secs(1));
            let s = started.load(Ordering::Relaxed);
            if s == u64::MAX - 1 {
                return;
            }
            if s != u64::MAX && epoch.elapsed().as_secs() > s + 60 {
                eprintln!("a fault-injection run hung for 60 s: aborting");
                std::process::abort();
            }
        })
    };
    let mut points = 0;
    let mut kinds: BTreeMap<String, u64> = BTreeMap::new();
    let faults = [
        ("once", Fault::Error),
        ("sticky", Fault::Error),
        ("partial", Fault::PartialWrite),
        ("panic", Fault::Panic),
    ];
    for n in 1..=total {
        for (name, fault) in faults {
            started.store(epoch.elapsed().as_secs(), Ordering::Relaxed);
            let dir = tempfile::tempdir().unwrap();
            let fs = FaultyFs::new();
            if name == "sticky" {
                fs.fail_from(n, fault);
            } else {
                fs.fail_once(n, fault);
            }
            let out = run(dir.path(), &fs, sync_writes, &steps);
            let failed: Vec<FsOp> = fs.failed();
            if let Some(op) = failed.first() {
                points += 1;
                *kinds.entry(format!("{op:?}/{name}")).or_default() += 1;
            }
            check_reopened(
                dir.path(),
                &out,
                &format!("sync_writes={sync_writes} fault {name} at op {n} ({failed:?})"),
            );
        }
    }
    started.store(u64::MAX - 1, Ordering::Relaxed);
    watchdog.join().unwrap();
    (points, kinds)
}

fn report(label: &str, points: u64, kinds: &BTreeMap<String, u64>) {
    println!("{label}: {points} failure points exercised");
    for (k, n) in kinds {
        println!("  {k}: {n}");
    }
}

#[test]
fn every_failure_point_keeps_acknowledged_writes_without_sync() {
    // The full workload with `LSM_BLOOM_THOROUGH` (`.ci/run`); a shorter one, whose every
    // failure point is still tried, in a plain `cargo test`.
    let (points, kinds) = sweep(false, 11, common::scaled(160, 70));
    report("sync_writes=false", points, &kinds);
    let least = common::scaled(400, 150);
    assert!(points > least, "only {points} failure points reached");
    for op in ["Create", "Write", "Sync", "Rename", "SyncDir"] {
        assert!(
            kinds.keys().any(|k| k.starts_with(op)),
            "no {op} failure was exercised: {kinds:?}"
        );
    }
}

#[test]
fn every_failure_point_keeps_acknowledged_writes_with_sync() {
    let (points, kinds) = sweep(true, 12, common::scaled(120, 50));
    report("sync_writes=true", points, &kinds);
    let least = common::scaled(400, 150);
    assert!(points > least, "only {points} failure points reached");
}
