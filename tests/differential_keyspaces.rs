//! Differential test of keyspaces against RocksDB's column families (feature `rocksdb`): the
//! same random operations — puts, deletes, gets, multi_gets and scans both ways in any of four
//! keyspaces, batches across them, snapshots read across them after later writes, flushes,
//! compactions, reopens, and a keyspace dropped and created again (empty) — applied to ours
//! (`Db::keyspace`, `WriteBatch::put_in`) and to RocksDB (`put_cf`, `WriteBatch::put_cf`,
//! `drop_cf` / `create_cf`), every answer compared. The keyspaces have settings of their own
//! (prefix filters, LZ4 with small blocks, fixed filters) beside the default, under a small
//! shared filter budget. On divergence: the seed, the failing step and the last operations.

mod common;

use common::{tiny_options, Rng};
use lsm_bloom::{
    Compression, Db, FilterPolicy, Filters, KeyspaceOptions, PrefixExtractor, PrefixFilters,
    WriteBatch,
};
use rocksdb::{IteratorMode, Options as RocksOptions, WriteBatch as RocksBatch, DB};

/// The keyspaces, the default first; RocksDB's column families of the same names.
const NAMES: [&str; 4] = ["default", "prefixed", "packed", "fixed"];

type Write = (usize, Vec<u8>, Option<Vec<u8>>);

#[derive(Debug, Clone)]
enum Op {
    Put(usize, Vec<u8>, Vec<u8>),
    Delete(usize, Vec<u8>),
    Get(usize, Vec<u8>),
    MultiGet(usize, Vec<Vec<u8>>),
    /// One atomic batch, its writes in any keyspaces.
    Batch(Vec<Write>),
    /// `[from, to)` forward, or `[from, to]` backward.
    Scan(usize, Vec<u8>, Vec<u8>, bool),
    /// Snapshots of both, then these writes, then every keyspace's `[from, to)` read at the
    /// snapshots: they must see none of the writes.
    Snapshot(Vec<u8>, Vec<u8>, Vec<Write>),
    Flush,
    Compact,
    Reopen,
    /// The keyspace dropped and created again, empty (not the default).
    Recreate(usize),
}

fn gen(rng: &mut Rng, step: usize) -> Op {
    let key = |rng: &mut Rng| format!("k{:03}", rng.below(200)).into_bytes();
    let space = |rng: &mut Rng| rng.below(NAMES.len() as u64) as usize;
    let value = |rng: &mut Rng| {
        let mut v = format!("v{step}:").into_bytes();
        v.resize(v.len() + rng.below(40) as usize, b'.');
        v
    };
    let writes = |rng: &mut Rng, most: u64| -> Vec<Write> {
        (0..rng.below(most) + 1)
            .map(|_| (space(rng), key(rng), (!rng.chance(30)).then(|| value(rng))))
            .collect()
    };
    let range = |rng: &mut Rng| {
        let (a, b) = (key(rng), key(rng));
        (a.clone().min(b.clone()), a.max(b))
    };
    match rng.below(1000) {
        0..=299 => Op::Put(space(rng), key(rng), value(rng)),
        300..=399 => Op::Delete(space(rng), key(rng)),
        400..=649 => Op::Get(space(rng), key(rng)),
        650..=679 => Op::MultiGet(
            space(rng),
            (0..1 + rng.below(50)).map(|_| key(rng)).collect(),
        ),
        680..=819 => Op::Batch(writes(rng, 8)),
        820..=899 => {
            let (a, b) = range(rng);
            Op::Scan(space(rng), a, b, rng.chance(50))
        }
        900..=939 => {
            let (a, b) = range(rng);
            Op::Snapshot(a, b, writes(rng, 12))
        }
        940..=969 => Op::Flush,
        970..=984 => Op::Compact,
        985..=992 => Op::Reopen,
        _ => Op::Recreate(1 + rng.below(NAMES.len() as u64 - 1) as usize),
    }
}

/// Each keyspace's own settings (index 0, the default, has the store's).
fn settings(i: usize) -> KeyspaceOptions {
    match i {
        1 => KeyspaceOptions::default()
            .with_prefix_filters(Some(PrefixFilters::only(PrefixExtractor::fixed(3)))),
        2 => KeyspaceOptions::default()
            .with_compression(Some(Compression::Lz4.into()))
            .with_block_size(Some(128)),
        3 => KeyspaceOptions::default().with_filters(Some(Filters::fixed(FilterPolicy::default()))),
        _ => KeyspaceOptions::default(),
    }
}

struct Engines {
    ours: Option<Db>,
    rocks: Option<DB>,
    ours_dir: tempfile::TempDir,
    rocks_dir: tempfile::TempDir,
}

fn rocks_options() -> RocksOptions {
    let mut o = RocksOptions::default();
    o.create_if_missing(true);
    o.create_missing_column_families(true);
    o.set_write_buffer_size(8 * 1024);
    o
}

fn open_ours(dir: &std::path::Path) -> Db {
    let opts = tiny_options().with_filters(Some(Filters::Budget(
        lsm_bloom::FilterBudget::total_bytes(4096),
    )));
    let db = Db::open(dir, opts).unwrap();
    for (i, name) in NAMES.iter().enumerate().skip(1) {
        db.create_keyspace(name, settings(i)).unwrap();
    }
    db
}

fn open_rocks(dir: &std::path::Path) -> DB {
    DB::open_cf(&rocks_options(), dir, NAMES).unwrap()
}

fn lossy(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

impl Engines {
    /// Applies `op` to both; the difference, if any.
    fn apply(&mut self, op: &Op) -> Option<String> {
        let (ours, rocks) = (self.ours.as_ref().unwrap(), self.rocks.as_ref().unwrap());
        let ks = |i: usize| ours.keyspace(NAMES[i]).unwrap();
        let cf = |i: usize| rocks.cf_handle(NAMES[i]).unwrap();
        let write = |ob: &mut WriteBatch, rb: &mut RocksBatch, (i, k, v): &Write| match v {
            Some(v) => {
                ob.put_in(&ks(*i), k.clone(), v.clone());
                rb.put_cf(cf(*i), k, v);
            }
            None => {
                ob.delete_in(&ks(*i), k.clone());
                rb.delete_cf(cf(*i), k);
            }
        };
        match op {
            Op::Put(i, k, v) => {
                ks(*i).put(k, v).unwrap();
                rocks.put_cf(cf(*i), k, v).unwrap();
            }
            Op::Delete(i, k) => {
                ks(*i).delete(k).unwrap();
                rocks.delete_cf(cf(*i), k).unwrap();
            }
            Op::Get(i, k) => {
                let (a, b) = (ks(*i).get(k).unwrap(), rocks.get_cf(cf(*i), k).unwrap());
                if a != b {
                    return Some(format!(
                        "get {}/{}: ours {a:?}, rocksdb {b:?}",
                        NAMES[*i],
                        lossy(k)
                    ));
                }
            }
            Op::MultiGet(i, keys) => {
                let a = ks(*i).multi_get(keys);
                let b = rocks.multi_get_cf(keys.iter().map(|k| (cf(*i), k)));
                for ((k, a), b) in keys.iter().zip(a).zip(b) {
                    let (a, b) = (a.unwrap(), b.unwrap());
                    if a != b {
                        return Some(format!(
                            "multi_get {}/{}: ours {a:?}, rocksdb {b:?}",
                            NAMES[*i],
                            lossy(k)
                        ));
                    }
                }
            }
            Op::Batch(writes) => {
                let (mut ob, mut rb) = (WriteBatch::new(), RocksBatch::default());
                for w in writes {
                    write(&mut ob, &mut rb, w);
                }
                ours.write(ob).unwrap();
                rocks.write(rb).unwrap();
            }
            Op::Scan(i, from, to, back) => {
                let a: Vec<(Vec<u8>, Vec<u8>)> = if *back {
                    let it = ks(*i).scan(from.clone()..=to.clone()).unwrap();
                    it.rev().map(Result::unwrap).collect()
                } else {
                    let it = ks(*i).scan(from.clone()..to.clone()).unwrap();
                    it.map(Result::unwrap).collect()
                };
                let b: Vec<(Vec<u8>, Vec<u8>)> = if *back {
                    let mode = IteratorMode::From(to, rocksdb::Direction::Reverse);
                    rocks
                        .iterator_cf(cf(*i), mode)
                        .map(Result::unwrap)
                        .take_while(|(k, _)| k.as_ref() >= from.as_slice())
                        .map(|(k, v)| (k.to_vec(), v.to_vec()))
                        .collect()
                } else {
                    let mode = IteratorMode::From(from, rocksdb::Direction::Forward);
                    rocks
                        .iterator_cf(cf(*i), mode)
                        .map(Result::unwrap)
                        .take_while(|(k, _)| k.as_ref() < to.as_slice())
                        .map(|(k, v)| (k.to_vec(), v.to_vec()))
                        .collect()
                };
                if a != b {
                    return Some(format!(
                        "scan {}/{}..{} (backward: {back}): ours {} entries, rocksdb {}",
                        NAMES[*i],
                        lossy(from),
                        lossy(to),
                        a.len(),
                        b.len()
                    ));
                }
            }
            Op::Snapshot(from, to, writes) => {
                let (snap, rsnap) = (ours.snapshot(), rocks.snapshot());
                let (mut ob, mut rb) = (WriteBatch::new(), RocksBatch::default());
                for w in writes {
                    write(&mut ob, &mut rb, w);
                }
                ours.write(ob).unwrap();
                rocks.write(rb).unwrap();
                for (i, name) in NAMES.iter().enumerate() {
                    let handle = ks(i);
                    let view = snap.keyspace(&handle).unwrap();
                    let a: Vec<(Vec<u8>, Vec<u8>)> = view
                        .scan(from.clone()..to.clone())
                        .unwrap()
                        .map(Result::unwrap)
                        .collect();
                    let mode = IteratorMode::From(from, rocksdb::Direction::Forward);
                    let b: Vec<(Vec<u8>, Vec<u8>)> = rsnap
                        .iterator_cf(cf(i), mode)
                        .map(Result::unwrap)
                        .take_while(|(k, _)| k.as_ref() < to.as_slice())
                        .map(|(k, v)| (k.to_vec(), v.to_vec()))
                        .collect();
                    if a != b {
                        return Some(format!(
                            "snapshot scan {}/{}..{}: ours {} entries, rocksdb {}",
                            name,
                            lossy(from),
                            lossy(to),
                            a.len(),
                            b.len()
                        ));
                    }
                }
            }
            Op::Flush => {
                ours.flush().unwrap();
                for i in 0..NAMES.len() {
                    rocks.flush_cf(cf(i)).unwrap();
                }
            }
            Op::Compact => {
                ours.compact().unwrap();
                for i in 0..NAMES.len() {
                    rocks.compact_range_cf(cf(i), None::<&[u8]>, None::<&[u8]>);
                }
            }
            Op::Reopen => {
                self.ours.take().unwrap().close().unwrap();
                drop(self.rocks.take());
                self.ours = Some(open_ours(self.ours_dir.path()));
                self.rocks = Some(open_rocks(self.rocks_dir.path()));
            }
            Op::Recreate(i) => {
                let name = NAMES[*i];
                assert!(ours.drop_keyspace(name).unwrap());
                ours.create_keyspace(name, settings(*i)).unwrap();
                let rocks = self.rocks.as_mut().unwrap();
                rocks.drop_cf(name).unwrap();
                rocks.create_cf(name, &rocks_options()).unwrap();
            }
        }
        None
    }
}

fn run_seed(seed: u64, steps: usize) {
    let mut rng = Rng::new(seed);
    let (ours_dir, rocks_dir) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let mut engines = Engines {
        ours: Some(open_ours(ours_dir.path())),
        rocks: Some(open_rocks(rocks_dir.path())),
        ours_dir,
        rocks_dir,
    };
    common::differential_run(
        seed,
        steps,
        |step| gen(&mut rng, step),
        |op| engines.apply(op),
    );
}

#[test]
fn keyspaces_answer_as_rocksdb_column_families() {
    for seed in 1..=5 {
        run_seed(seed, common::scaled(8_000, 2_000));
    }
}
