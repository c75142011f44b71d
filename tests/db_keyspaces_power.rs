//! Keyspaces under power loss: a cut at any file operation of a workload of cross-keyspace
//! batches, flushes and a drop recovers some prefix of the steps, never half a batch nor a
//! drop without the writes before it; a drop is durable when it returns.

mod common;

use std::path::Path;
use std::sync::Arc;

use common::keyspaces::{contents, files, Model};
use common::tiny_options;
use common::Rng;
use lsm_bloom::fs::{PowerLossFs, UnsyncedTail};
use lsm_bloom::{Db, WriteBatch, DEFAULT_KEYSPACE};

/// One workload: keyspaces "a" and "b" created, then batches across them and the default
/// keyspace, a flush now and then, and "b" dropped and created again half way.
#[derive(Clone, Debug)]
enum Step {
    Write(Vec<(usize, Vec<u8>, Option<Vec<u8>>)>),
    Flush,
    DropB,
}

fn power_workload(seed: u64, len: usize) -> Vec<Step> {
    let mut rng = Rng::new(seed);
    (0..len)
        .map(|i| {
            if i == len / 2 {
                return Step::DropB;
            }
            if rng.chance(8) {
                return Step::Flush;
            }
            let ops = (0..1 + rng.below(4))
                .map(|_| {
                    let key = format!("k{}", rng.below(30)).into_bytes();
                    let value = (!rng.chance(20)).then(|| vec![b'v'; 1 + rng.below(300) as usize]);
                    (rng.below(3) as usize, key, value)
                })
                .collect();
            Step::Write(ops)
        })
        .collect()
}

/// The model after the first `n` steps.
fn power_model(steps: &[Step], n: usize) -> Model {
    let mut m = Model::new();
    let names = [DEFAULT_KEYSPACE, "a", "b"];
    for step in &steps[..n] {
        match step {
            Step::Write(ops) => {
                for (ks, k, v) in ops {
                    let e = m.entry(names[*ks].to_string()).or_default();
                    match v {
                        Some(v) => e.insert(k.clone(), v.clone()),
                        None => e.remove(k),
                    };
                }
            }
            Step::DropB => {
                m.remove("b");
            }
            Step::Flush => {}
        }
    }
    m.retain(|_, v| !v.is_empty());
    m
}

/// Runs `steps` until the power is cut; returns (steps that returned `Ok`, steps attempted).
fn power_run(dir: &Path, fs: &PowerLossFs, sync: bool, steps: &[Step]) -> (usize, usize) {
    let opts = tiny_options()
        .with_sync_writes(sync)
        .with_fs(Arc::new(fs.clone()));
    let Ok(db) = Db::open(dir, opts) else {
        return (0, 0);
    };
    let (Ok(a), Ok(mut b)) = (db.keyspace("a"), db.keyspace("b")) else {
        return (0, 0);
    };
    for (i, step) in steps.iter().enumerate() {
        let ok = match step {
            Step::Write(ops) => {
                let mut batch = WriteBatch::new();
                for (ks, k, v) in ops {
                    match (ks, v) {
                        (0, Some(v)) => batch.put(k.clone(), v.clone()),
                        (0, None) => batch.delete(k.clone()),
                        (1, Some(v)) => batch.put_in(&a, k.clone(), v.clone()),
                        (1, None) => batch.delete_in(&a, k.clone()),
                        (_, Some(v)) => batch.put_in(&b, k.clone(), v.clone()),
                        (_, None) => batch.delete_in(&b, k.clone()),
                    };
                }
                db.write(batch).is_ok()
            }
            Step::Flush => db.flush().is_ok(),
            Step::DropB => db.drop_keyspace("b").is_ok() && db.keyspace("b").map(|k| b = k).is_ok(),
        };
        if !ok {
            assert!(fs.is_cut(), "step {i} failed with the power on");
            return (i, i + 1);
        }
    }
    (steps.len(), steps.len())
}

/// Power cut at every file operation of a keyspace workload: what recovers is the state after
/// some prefix of the steps (never half a batch across keyspaces, never a drop without the
/// writes before it), at least every step acknowledged with `sync_writes`, at least every
/// step before the last acknowledged drop or flush without it; and after the open no table
/// file is left on disk that no keyspace holds (a drop cut at any step leaks nothing).
#[test]
fn power_loss_during_cross_keyspace_batches_and_a_drop_recovers_a_point_in_time() {
    for sync in [true, false] {
        let steps = power_workload(7 + u64::from(sync), 40);
        let clean = PowerLossFs::new();
        let base = tempfile::tempdir().unwrap();
        let (done, _) = power_run(&base.path().join("db"), &clean, sync, &steps);
        assert_eq!(done, steps.len());
        let total = clean.ops();
        let mut cuts = 0;
        for n in (1..=total).step_by(common::scaled(1, 3)) {
            let dir = tempfile::tempdir().unwrap();
            let store = dir.path().join("db");
            let fs = PowerLossFs::new();
            fs.cut_at(n);
            let (acked, _) = power_run(&store, &fs, sync, &steps);
            if !fs.is_cut() {
                continue;
            }
            cuts += 1;
            // Without sync, a flush or the drop makes everything before it durable.
            let durable = if sync {
                acked
            } else {
                (0..acked)
                    .filter(|&i| matches!(steps[i], Step::Flush | Step::DropB))
                    .map(|i| i + 1)
                    .max()
                    .unwrap_or(0)
            };
            for tail in [UnsyncedTail::Dropped, UnsyncedTail::RandomPrefix] {
                let to = tempfile::tempdir().unwrap();
                fs.write_durable(&store, to.path(), tail, n).unwrap();
                let what = format!("sync={sync} cut at {n} of {total}, {tail:?}");
                // No compaction starts while the files are counted (one writes its output
                // before installing it).
                let quiet = tiny_options()
                    .with_l0_compaction_trigger(1_000)
                    .with_l0_slowdown_writes_trigger(1_500)
                    .with_l0_stop_writes_trigger(2_000)
                    .with_level1_max_bytes(1 << 40)
                    .with_idle_compaction_after(None);
                let db = Db::open(to.path(), quiet)
                    .unwrap_or_else(|e| panic!("{what}: open failed: {e}"));
                let found = contents(&db);
                let matched = (durable..=steps.len()).find(|&p| power_model(&steps, p) == found);
                assert!(
                    matched.is_some(),
                    "{what}: the recovered keyspaces are no state after {durable}.. of the \
                     steps ({acked} acknowledged): {found:?}"
                );
                // No table file is left that no keyspace holds: a dropped keyspace's, or one
                // a flush wrote before the cut, is removed by the open.
                let held: usize = db
                    .keyspace_names()
                    .iter()
                    .map(|n| {
                        db.keyspace(n)
                            .unwrap()
                            .levels()
                            .unwrap()
                            .iter()
                            .flatten()
                            .count()
                    })
                    .sum();
                assert_eq!(
                    files(to.path(), "sst"),
                    held,
                    "{what}: table files left over"
                );
                db.keyspace("a").unwrap().put("after", "restart").unwrap();
            }
        }
        assert!(cuts > 20, "only {cuts} cuts");
    }
}

/// Without `sync_writes`, a drop is durable when it returns, and so is every write made before
/// it: the power lost right after the drop keeps both (else the store would hold the drop and
/// lack an earlier write, a state that never was).
#[test]
fn a_drop_makes_the_writes_before_it_durable() {
    let fs = PowerLossFs::new();
    let dir = tempfile::tempdir().unwrap();
    let store = dir.path().join("db");
    let db = Db::open(&store, tiny_options().with_fs(Arc::new(fs.clone()))).unwrap();
    let a = db.keyspace("a").unwrap();
    db.keyspace("b").unwrap().put("x", "1").unwrap();
    a.put("before", "the drop").unwrap();
    db.put("before", "the drop").unwrap();
    assert!(db.drop_keyspace("b").unwrap());
    let to = tempfile::tempdir().unwrap();
    fs.write_durable(&store, to.path(), UnsyncedTail::Dropped, 1)
        .unwrap();
    drop(db);
    let restored = Db::open(to.path(), tiny_options()).unwrap();
    assert_eq!(
        restored.keyspace_names(),
        [DEFAULT_KEYSPACE, "a"].map(String::from)
    );
    assert_eq!(restored.get("before").unwrap(), Some(b"the drop".to_vec()));
    let a = restored.keyspace("a").unwrap();
    assert_eq!(a.get("before").unwrap(), Some(b"the drop".to_vec()));
}
