//! `--workload transactions`: uncontended optimistic transactions of one read and one write
//! (docs/transactions.md), against RocksDB's `OptimisticTransactionDB` (the read taken with
//! `get_for_update`, so that its commit checks it, as ours and fjall's check every read) and
//! fjall's `OptimisticTxDatabase`.
//!
//! `--keys` keys are loaded into each engine (as configured for the other workloads, or each
//! at its defaults with `--defaults`); then each transaction reads one random loaded key and
//! writes another (a new 100-byte value), and commits. With `--keys` in the millions, two of
//! the threads' transactions almost never touch the same key; a conflict is retried and
//! counted. Rounds interleave the engines, each round starting with the next; each figure is
//! the median of `--rounds` at each of `--threads`. Plain writes of the same keys (one put
//! each) are timed beside them, ours only, for what the transaction adds.

use std::path::Path;

use lsm_bloom::{Db, Error};

use crate::engines::{fjall_keyspace_options, ours_options, rocks_options};
use crate::{key, median, mix, timed_parallel, value, Args};

type RocksTx = rocksdb::OptimisticTransactionDB<rocksdb::MultiThreaded>;

struct FjallTx {
    db: fjall::OptimisticTxDatabase,
    ks: fjall::OptimisticTxKeyspace,
}

fn open_fjall_tx(dir: &Path, args: &Args) -> FjallTx {
    let builder = fjall::OptimisticTxDatabase::builder(dir);
    let builder = match args.defaults {
        true => builder,
        false => builder.cache_size(args.block_cache_mib << 20),
    };
    let db = builder.open().expect("open fjall");
    let ks = db
        .keyspace("bench", || fjall_keyspace_options(args))
        .expect("fjall keyspace");
    FjallTx { db, ks }
}

/// Keys `0..n` with `value`s, in batches of 1,000 through `put`.
fn load(args: &Args, mut put: impl FnMut(&[([u8; 16], Vec<u8>)])) {
    let mut batch = Vec::with_capacity(1000);
    for i in 0..args.keys {
        let mut v = Vec::new();
        value(args, i, &mut v);
        batch.push((key(i), v));
        if batch.len() == 1000 {
            put(&batch);
            batch.clear();
        }
    }
    put(&batch);
}

pub(crate) fn run(args: &Args) {
    let dirs: Vec<_> = (0..3)
        .map(|_| tempfile::tempdir().expect("tempdir"))
        .collect();
    let ours = Db::open(dirs[0].path(), ours_options(args)).expect("open");
    load(args, |kvs| {
        let mut b = lsm_bloom::WriteBatch::new();
        for (k, v) in kvs {
            b.put(k.as_slice(), v.as_slice());
        }
        ours.write(b).expect("write");
    });
    let rocks =
        RocksTx::open(&rocks_options(args, |_, _| {}), dirs[1].path()).expect("open rocksdb");
    load(args, |kvs| {
        let mut b = rocksdb::WriteBatchWithTransaction::<true>::default();
        for (k, v) in kvs {
            b.put(k, v);
        }
        rocks.write(b).expect("write");
    });
    let fjall = open_fjall_tx(dirs[2].path(), args);
    load(args, |kvs| {
        let mut tx = fjall.db.write_tx().expect("tx");
        for (k, v) in kvs {
            tx.insert(&fjall.ks, k.as_slice(), v.as_slice());
        }
        tx.commit().expect("commit").expect("no conflict");
    });
    println!(
        "transactions of one read and one write, uncontended ({} keys loaded)",
        args.keys
    );
    let payload = vec![7u8; 100];
    for &threads in &args.threads {
        let mut rates = [Vec::new(), Vec::new(), Vec::new(), Vec::new()];
        let mut retried = [0u64; 3];
        for round in 0..args.rounds as u64 {
            let ops: Vec<([u8; 16], [u8; 16])> = (0..args.ops)
                .map(|i| {
                    let x = mix(i ^ (round << 40) ^ ((threads as u64) << 50));
                    (key(x % args.keys), key(mix(x) % args.keys))
                })
                .collect();
            for k in 0..4 {
                let engine = (round as usize + k) % 4;
                let (rate, retries) = match engine {
                    0 => run_ours(&ours, &ops, threads, &payload),
                    1 => run_rocks(&rocks, &ops, threads, &payload),
                    2 => run_fjall(&fjall, &ops, threads, &payload),
                    _ => (plain_puts(&ours, &ops, threads, &payload), 0),
                };
                rates[engine].push(rate);
                if engine < 3 {
                    retried[engine] += retries;
                }
            }
        }
        let [o, r, f, p] = rates.map(median);
        println!(
            "  {threads} thread(s): ours {o:.0} tx/s, RocksDB {r:.0}, fjall {f:.0}; ours / best \
             peer {:.2}; retried on conflict {} / {} / {}; ours' plain puts {p:.0}/s (tx / put \
             {:.2})",
            o / r.max(f),
            retried[0],
            retried[1],
            retried[2],
            o / p
        );
    }
}

/// Transactions per second and conflicts retried: ours.
fn run_ours(db: &Db, ops: &[([u8; 16], [u8; 16])], threads: usize, v: &[u8]) -> (f64, u64) {
    let retries = std::sync::atomic::AtomicU64::new(0);
    let secs = timed_parallel(ops, threads, |part| {
        for (r, w) in part {
            loop {
                let mut tx = db.transaction();
                assert!(tx.get(r).expect("get").is_some());
                tx.put(w.as_slice(), v).expect("put");
                match tx.commit() {
                    Ok(()) => break,
                    Err(Error::Conflict { .. }) => {
                        retries.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                    }
                    Err(e) => panic!("{e}"),
                }
            }
        }
    });
    (ops.len() as f64 / secs, retries.into_inner())
}

/// The same through RocksDB's optimistic transactions (`Busy` on a conflict).
fn run_rocks(db: &RocksTx, ops: &[([u8; 16], [u8; 16])], threads: usize, v: &[u8]) -> (f64, u64) {
    let retries = std::sync::atomic::AtomicU64::new(0);
    let secs = timed_parallel(ops, threads, |part| {
        for (r, w) in part {
            loop {
                let tx = db.transaction();
                assert!(tx.get_for_update(r, true).expect("get").is_some());
                tx.put(w, v).expect("put");
                match tx.commit() {
                    Ok(()) => break,
                    Err(e) if e.kind() == rocksdb::ErrorKind::Busy => {
                        retries.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                    }
                    Err(e) => panic!("{e}"),
                }
            }
        }
    });
    (ops.len() as f64 / secs, retries.into_inner())
}

/// The same through fjall's optimistic transactions.
fn run_fjall(db: &FjallTx, ops: &[([u8; 16], [u8; 16])], threads: usize, v: &[u8]) -> (f64, u64) {
    use fjall::Readable;
    let retries = std::sync::atomic::AtomicU64::new(0);
    let secs = timed_parallel(ops, threads, |part| {
        for (r, w) in part {
            loop {
                let mut tx = db.db.write_tx().expect("tx");
                assert!(tx.get(&db.ks, r).expect("get").is_some());
                tx.insert(&db.ks, w.as_slice(), v);
                match tx.commit().expect("commit") {
                    Ok(()) => break,
                    Err(_) => {
                        retries.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                    }
                }
            }
        }
    });
    (ops.len() as f64 / secs, retries.into_inner())
}

/// Plain puts of the transactions' writes, ours: what a transaction adds to its write.
fn plain_puts(db: &Db, ops: &[([u8; 16], [u8; 16])], threads: usize, v: &[u8]) -> f64 {
    let secs = timed_parallel(ops, threads, |part| {
        for (_, w) in part {
            db.put(w, v).expect("put");
        }
    });
    ops.len() as f64 / secs
}
