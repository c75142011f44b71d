//! What the filter-budget examples (`filter_budget`, `range_budget`) share: their keys, the
//! load that leaves stores loaded alike in the same shape, and the model of expected wasted
//! reads from the filters a store holds.

use lsm_bloom::table::{FilterState, Table};
use lsm_bloom::{Db, WriteBatch};

/// Keys per flush: well under one memtable (the default 8 MiB holds ~60,000 of these entries
/// by its size estimate), so each flush writes exactly one level-0 table.
pub const CHUNK: u64 = 50_000;

pub fn mix(mut x: u64) -> u64 {
    x = (x ^ (x >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    x ^ (x >> 31)
}

/// 16 random-looking bytes for number `i` of stream `stream` (0 = stored keys).
pub fn key(stream: u64, i: u64) -> [u8; 16] {
    let a = mix(i ^ stream.wrapping_mul(0x9E37_79B9_7F4A_7C15));
    let b = mix(a ^ 0x5851_F42D_4C95_7F2D);
    let mut k = [0u8; 16];
    k[..8].copy_from_slice(&a.to_be_bytes());
    k[8..].copy_from_slice(&b.to_be_bytes());
    k
}

/// Writes keys `0..keys` of `stream` (32-byte values) in batches of 1,000, flushing and
/// waiting for compactions after every `CHUNK` keys and at the end, so every store gets the
/// same flushes and compactions (left to background timing, twins ended with 3 level-0
/// tables and none).
pub fn load(db: &Db, stream: u64, keys: u64) -> lsm_bloom::Result<()> {
    let mut batch = WriteBatch::new();
    for i in 0..keys {
        batch.put(key(stream, i), [b'v'; 32]);
        if (i + 1) % 1000 == 0 {
            db.write(std::mem::take(&mut batch))?;
        }
        if (i + 1) % CHUNK == 0 {
            db.flush()?;
            db.wait_for_compactions()?;
        }
    }
    if !batch.is_empty() {
        db.write(batch)?;
    }
    db.flush()?;
    db.wait_for_compactions()
}

/// Expected wasted reads per query from each table's rate (`rate`): every level-0 table's, and
/// per deeper level its tables' mean (a query probes one table there).
pub fn model(db: &Db, rate: impl Fn(&Table) -> f64) -> f64 {
    db.levels()
        .iter()
        .enumerate()
        .filter(|(_, ts)| !ts.is_empty())
        .map(|(level, ts)| {
            let sum: f64 = ts.iter().map(|t| rate(t)).sum();
            if level == 0 {
                sum
            } else {
                sum / ts.len() as f64
            }
        })
        .sum()
}

/// A table's point filter's expected false-positive rate (1 without a valid filter).
pub fn point_rate(t: &Table) -> f64 {
    match t.filter() {
        FilterState::Valid(f) => {
            let h = f.header();
            h.kind.expected_fpr(h.m, h.n, h.k)
        }
        _ => 1.0,
    }
}

pub fn median(v: &[f64]) -> f64 {
    let mut v = v.to_vec();
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}
