//! The mixed workload the fault and power-loss tests replay: writes (single puts, deletes,
//! range deletes and batches over 60 keys, values up to ~200 bytes), flushes and
//! compactions, from a seed.

use std::collections::BTreeMap;

use lsm_bloom::{Db, WriteBatch};

use super::Rng;

/// The expected contents of a store.
pub type Model = BTreeMap<Vec<u8>, Vec<u8>>;

/// One write of the workload, as (key, value-or-delete) pairs applied atomically, in order. A
/// deletion whose key ends in `*` deletes the range of keys that start with the rest
/// (`WriteBatch::delete_range`): `key01*` deletes `key010` to `key019`.
pub type Ops = Vec<(Vec<u8>, Option<Vec<u8>>)>;

/// The range a range-delete key (`key01*`) names: its prefix, and the prefix after it.
fn prefix_range(k: &[u8]) -> Option<(Vec<u8>, Vec<u8>)> {
    let prefix = k.strip_suffix(b"*")?;
    let mut end = prefix.to_vec();
    *end.last_mut()? += 1;
    Some((prefix.to_vec(), end))
}

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
            13..=20 => Step::Write(vec![(key(&mut rng), None)]),
            // A range delete of ten keys, alone or between two puts of one batch.
            21..=22 => {
                let range = format!("key0{}*", rng.below(6)).into_bytes();
                let mut ops = vec![(range, None)];
                if rng.chance(50) {
                    ops.insert(0, (key(&mut rng), Some(b"before".to_vec())));
                    ops.push((key(&mut rng), Some(b"after".to_vec())));
                }
                Step::Write(ops)
            }
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
        match (v, prefix_range(k)) {
            (None, Some((start, end))) => model.retain(|k, _| !(start <= *k && *k < end)),
            (Some(v), _) => {
                model.insert(k.clone(), v.clone());
            }
            (None, None) => {
                model.remove(k);
            }
        }
    }
}

/// One write as a `WriteBatch`.
pub fn batch(ops: &Ops) -> WriteBatch {
    let mut b = WriteBatch::new();
    for (k, v) in ops {
        match (v, prefix_range(k)) {
            (None, Some((start, end))) => b.delete_range(start..end),
            (Some(v), _) => b.put(k.clone(), v.clone()),
            (None, None) => b.delete(k.clone()),
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
