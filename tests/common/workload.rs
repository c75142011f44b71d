//! The mixed workload the fault and power-loss tests replay: writes (single puts, deletes and
//! batches over 60 keys, values up to ~200 bytes), flushes and compactions, from a seed.

use std::collections::BTreeMap;

use lsm_bloom::{Db, WriteBatch};

use super::Rng;

/// The expected contents of a store.
pub type Model = BTreeMap<Vec<u8>, Vec<u8>>;

/// One write of the workload, as (key, value-or-delete) pairs applied atomically.
pub type Ops = Vec<(Vec<u8>, Option<Vec<u8>>)>;

/// One step of the workload.
pub enum Step {
    /// A write batch.
    Write(Ops),
    /// `Db::flush`.
    Flush,
    /// `Db::compact`.
    Compact,
}

/// `len` steps from `seed`: 2% flushes, 1% compactions (second half), the rest writes.
pub fn workload(seed: u64, len: usize) -> Vec<Step> {
    let mut rng = Rng::new(seed);
    let key = |rng: &mut Rng| format!("key{:03}", rng.below(60)).into_bytes();
    (0..len)
        .map(|i| match rng.below(100) {
            0..=1 => Step::Flush,
            2 if i > len / 2 => Step::Compact,
            3..=12 => Step::Write(
                (0..1 + rng.below(6))
                    .map(|_| {
                        let k = key(&mut rng);
                        let v = (!rng.chance(20)).then(|| vec![b'b'; rng.below(150) as usize]);
                        (k, v)
                    })
                    .collect(),
            ),
            13..=22 => Step::Write(vec![(key(&mut rng), None)]),
            _ => {
                let k = key(&mut rng);
                let v = format!("v{i}-{}", "x".repeat(rng.below(200) as usize));
                Step::Write(vec![(k, Some(v.into_bytes()))])
            }
        })
        .collect()
}

/// Applies one write to the model.
pub fn apply(model: &mut Model, ops: &Ops) {
    for (k, v) in ops {
        match v {
            Some(v) => model.insert(k.clone(), v.clone()),
            None => model.remove(k),
        };
    }
}

/// One write as a `WriteBatch`.
pub fn batch(ops: &Ops) -> WriteBatch {
    let mut b = WriteBatch::new();
    for (k, v) in ops {
        match v {
            Some(v) => b.put(k.clone(), v.clone()),
            None => b.delete(k.clone()),
        };
    }
    b
}

/// Runs one step on `db` and, for a write, on `model`.
pub fn run_step(db: &Db, model: &mut Model, step: Step) {
    match step {
        Step::Write(ops) => {
            db.write(batch(&ops)).unwrap();
            apply(model, &ops);
        }
        Step::Flush => db.flush().unwrap(),
        Step::Compact => db.compact().unwrap(),
    }
}
