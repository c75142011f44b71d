//! `--workload keyspaces`: many collections in one store — ours' keyspaces, RocksDB's column
//! families, fjall's keyspaces — loaded with the same keys, in two parts:
//!
//! - **Absent gets over 8 keyspaces of skewed sizes and lookup rates.** `--keys` keys spread
//!   over keyspaces `r0..r7` by `SIZES` (r0 the largest), and gets of absent keys spread by
//!   `LOOKUPS` (the small keyspaces looked up most: sessions beside an archive). Every engine
//!   is loaded, then `--ops` untimed absent gets warm it up (and teach ours the lookup rates),
//!   then every engine is fully compacted (every filter rebuilt; ours' split of its budget
//!   follows the lookups only as filters are rebuilt), then the timed rounds. Ours runs twice:
//!   `lsm-bloom`, the keyspaces sharing one budget of `--ours-budget` (default 10) bits per
//!   key of `--keys`, as a total of bytes (the peers' filter memory), split by lookups;
//!   `lsm-bloom/even`, each keyspace given its share of that total by keys as a budget of its
//!   own, so planned apart — the same memory split evenly. Printed beside
//!   the rates: the wasted reads (filter false positives) per absent get of both, and their
//!   filter bytes.
//! - **Writes of batches across 4 keyspaces** (`w0..w3`): each batch puts one fresh key in
//!   each, atomically (ours `WriteBatch::put_in`, RocksDB `WriteBatch::put_cf`, fjall
//!   `Database::batch`), `--ops / 4` batches per round and thread count, without fsync.
//!
//! Engines configured alike as in `main.rs` (each RocksDB column family and fjall keyspace with
//! the options `open_rocks` and `open_fjall` give their one), or at their defaults with
//! `--defaults`; RocksDB and fjall with Bloom filters of 10 bits per key. Rounds interleave
//! the engines (each round starting with the next), medians of `--rounds`, at each of
//! `--threads`.

use lsm_bloom::{Db, FilterBudget, FilterKind, Filters, KeyspaceOptions, WriteBatch};
use rocksdb::statistics::Ticker;

use crate::{engines, key, median, mix, timed_parallel, value, Args, ABSENT};

/// Share of the keys in each read keyspace.
const SIZES: [f64; 8] = [0.35, 0.20, 0.15, 0.10, 0.08, 0.06, 0.04, 0.02];
/// Share of the absent gets going to each read keyspace.
const LOOKUPS: [f64; 8] = [0.02, 0.03, 0.05, 0.05, 0.10, 0.15, 0.20, 0.40];
/// Keyspaces a write batch spans.
const SPAN: usize = 4;

/// An engine with named collections: 8 to read (`r0..r7`), 4 to write batches across.
trait Spaces: Sync {
    fn name(&self) -> &'static str;
    fn put(&self, space: usize, k: &[u8], v: &[u8]);
    fn get(&self, space: usize, k: &[u8]) -> bool;
    /// Puts `k` with `v` in each write keyspace, as one atomic batch.
    fn batch(&self, k: &[u8], v: &[u8]);
    fn settle(&self);
    fn compact_all(&self);
    /// Filter false positives so far (wasted reads), where the engine counts them.
    fn wasted(&self) -> Option<u64>;
    /// Filter bytes of the read keyspaces, where the engine reports them.
    fn filter_bytes(&self) -> Option<u64> {
        None
    }
}

struct Ours {
    name: &'static str,
    db: Db,
    read: Vec<lsm_bloom::Keyspace>,
    write: Vec<lsm_bloom::Keyspace>,
}

impl Ours {
    /// Ours in `dir`, its filters a budget of `--ours-budget` bits per key of `--keys` in
    /// all, in bytes (so the same memory as the peers' Bloom filters, whatever the planner
    /// reserves for level 0); `even`: each read keyspace given its share by keys as a budget
    /// of its own.
    fn open(dir: &std::path::Path, args: &Args, even: bool) -> Ours {
        let bits = args.ours_budget.unwrap_or(10.0);
        let total = (bits * args.keys as f64 / 8.0) as u64;
        let budget = |bytes: u64| {
            Filters::Budget(FilterBudget::total_bytes(bytes).with_kind(FilterKind::Blocked))
        };
        let db = Db::open(
            dir,
            engines::ours_options(args).with_filters(Some(budget(total))),
        )
        .expect("open lsm-bloom");
        let read = (0..8)
            .map(|i| {
                let part = (total as f64 * SIZES[i]) as u64;
                let own = KeyspaceOptions::default().with_filters(even.then(|| budget(part)));
                db.create_keyspace(&format!("r{i}"), own).expect("keyspace")
            })
            .collect();
        let write = (0..SPAN)
            .map(|i| db.keyspace(&format!("w{i}")).expect("keyspace"))
            .collect();
        let name = if even { "lsm-bloom/even" } else { "lsm-bloom" };
        Ours {
            name,
            db,
            read,
            write,
        }
    }
}

impl Spaces for Ours {
    fn name(&self) -> &'static str {
        self.name
    }
    fn put(&self, space: usize, k: &[u8], v: &[u8]) {
        self.read[space].put(k, v).expect("put");
    }
    fn get(&self, space: usize, k: &[u8]) -> bool {
        self.read[space].get(k).expect("get").is_some()
    }
    fn batch(&self, k: &[u8], v: &[u8]) {
        let mut b = WriteBatch::new();
        for ks in &self.write {
            b.put_in(ks, k, v);
        }
        self.db.write(b).expect("write");
    }
    fn settle(&self) {
        self.db.flush().expect("flush");
        self.db.wait_for_compactions().expect("compactions");
    }
    fn compact_all(&self) {
        self.db.compact().expect("compact");
    }
    fn wasted(&self) -> Option<u64> {
        let t = self.db.stats().total;
        Some(t.filter_positive - t.filter_true_positive)
    }
    fn filter_bytes(&self) -> Option<u64> {
        let names: Vec<String> = (0..8).map(|i| format!("r{i}")).collect();
        let stats = self.db.stats();
        Some(
            stats
                .keyspaces
                .iter()
                .filter(|k| names.contains(&k.name))
                .map(|k| k.filter_bytes)
                .sum(),
        )
    }
}

/// RocksDB with a column family per keyspace. The database is leaked for the run, so that its
/// column family handles (which borrow it) can be kept instead of looked up by name per
/// operation.
struct Rocks {
    db: &'static rocksdb::DB,
    opts: rocksdb::Options,
    read: Vec<&'static rocksdb::ColumnFamily>,
    write: Vec<&'static rocksdb::ColumnFamily>,
}

impl Rocks {
    fn open(dir: &std::path::Path, args: &Args) -> Rocks {
        let mut opts = engines::rocks_options(args, |_, _| {});
        opts.create_missing_column_families(true);
        let names: Vec<String> = (0..8)
            .map(|i| format!("r{i}"))
            .chain((0..SPAN).map(|i| format!("w{i}")))
            .collect();
        let cfs = names
            .iter()
            .map(|n| rocksdb::ColumnFamilyDescriptor::new(n, opts.clone()));
        let db = rocksdb::DB::open_cf_descriptors(&opts, dir, cfs).expect("open rocksdb");
        let db: &'static rocksdb::DB = Box::leak(Box::new(db));
        let handle = |n: &String| db.cf_handle(n).expect("column family");
        Rocks {
            db,
            opts,
            read: names[..8].iter().map(handle).collect(),
            write: names[8..].iter().map(handle).collect(),
        }
    }
}

impl Spaces for Rocks {
    fn name(&self) -> &'static str {
        "rocksdb"
    }
    fn put(&self, space: usize, k: &[u8], v: &[u8]) {
        self.db.put_cf(self.read[space], k, v).expect("put");
    }
    fn get(&self, space: usize, k: &[u8]) -> bool {
        self.db
            .get_pinned_cf(self.read[space], k)
            .expect("get")
            .is_some()
    }
    fn batch(&self, k: &[u8], v: &[u8]) {
        let mut b = rocksdb::WriteBatch::default();
        for cf in &self.write {
            b.put_cf(*cf, k, v);
        }
        self.db.write(b).expect("write");
    }
    fn settle(&self) {
        for cf in self.read.iter().chain(&self.write) {
            self.db.flush_cf(*cf).expect("flush");
        }
        let busy = |p: &str| self.db.property_int_value(p).ok().flatten().unwrap_or(0);
        while busy("rocksdb.compaction-pending")
            + busy("rocksdb.num-running-compactions")
            + busy("rocksdb.num-running-flushes")
            > 0
        {
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
    }
    fn compact_all(&self) {
        for cf in self.read.iter().chain(&self.write) {
            self.db.compact_range_cf(*cf, None::<&[u8]>, None::<&[u8]>);
        }
        self.settle();
    }
    fn wasted(&self) -> Option<u64> {
        // Counted only while statistics are on, which the timed phases leave off.
        let t = |x| self.opts.get_ticker_count(x);
        Some(t(Ticker::BloomFilterFullPositive) - t(Ticker::BloomFilterFullTruePositive))
    }
}

struct Fjall {
    db: fjall::Database,
    read: Vec<fjall::Keyspace>,
    write: Vec<fjall::Keyspace>,
}

impl Fjall {
    fn open(dir: &std::path::Path, args: &Args) -> Fjall {
        let one = engines::open_fjall(dir, args); // opens the database and its options
        let open = |n: String| {
            one.db
                .keyspace(&n, || engines::fjall_keyspace_options(args))
                .expect("fjall keyspace")
        };
        Fjall {
            read: (0..8).map(|i| open(format!("r{i}"))).collect(),
            write: (0..SPAN).map(|i| open(format!("w{i}"))).collect(),
            db: one.db,
        }
    }
}

impl Spaces for Fjall {
    fn name(&self) -> &'static str {
        "fjall"
    }
    fn put(&self, space: usize, k: &[u8], v: &[u8]) {
        self.read[space].insert(k, v).expect("put");
    }
    fn get(&self, space: usize, k: &[u8]) -> bool {
        self.read[space].get(k).expect("get").is_some()
    }
    fn batch(&self, k: &[u8], v: &[u8]) {
        let mut b = self.db.batch();
        for ks in &self.write {
            b.insert(ks, k, v);
        }
        b.commit().expect("commit");
    }
    fn settle(&self) {
        for ks in self.read.iter().chain(&self.write) {
            ks.rotate_memtable_and_wait().expect("flush");
        }
        let mut quiet = 0;
        while quiet < 6 {
            std::thread::sleep(std::time::Duration::from_millis(50));
            if self.db.outstanding_flushes() == 0 && self.db.active_compactions() == 0 {
                quiet += 1;
            } else {
                quiet = 0;
            }
        }
    }
    fn compact_all(&self) {
        for ks in self.read.iter().chain(&self.write) {
            ks.major_compact().expect("compact");
        }
        self.settle();
    }
    fn wasted(&self) -> Option<u64> {
        None
    }
}

/// The read keyspace of draw `x` under shares `shares`.
fn pick(x: u64, shares: &[f64; 8]) -> usize {
    let u = (x >> 11) as f64 / (1u64 << 53) as f64;
    let mut acc = 0.0;
    for (i, s) in shares.iter().enumerate() {
        acc += s;
        if u < acc {
            return i;
        }
    }
    7
}

/// `n` absent gets: (keyspace, key), keyspaces drawn by `LOOKUPS`.
fn absent_gets(n: u64, seed: u64) -> Vec<(usize, [u8; 16])> {
    (0..n)
        .map(|i| {
            let x = mix(i ^ (seed << 48));
            (pick(mix(x ^ 0xA5), &LOOKUPS), key(ABSENT + x % (1 << 40)))
        })
        .collect()
}

/// Runs the keyspaces workload and prints its tables.
pub fn run(args: &Args) {
    let dirs: Vec<_> = (0..4)
        .map(|_| tempfile::tempdir().expect("tempdir"))
        .collect();
    let ours = Ours::open(dirs[0].path(), args, false);
    let even = Ours::open(dirs[1].path(), args, true);
    let rocks = Rocks::open(dirs[2].path(), args);
    let fjall = Fjall::open(dirs[3].path(), args);
    let engines: [&dyn Spaces; 4] = [&ours, &even, &rocks, &fjall];
    eprintln!(
        "keyspaces workload: {} keys over 8 keyspaces (shares {SIZES:?}), absent gets by {LOOKUPS:?}; batches across {SPAN} keyspaces; {}; {} ops per phase, {} rounds, threads {:?}",
        args.keys,
        if args.defaults { "each engine at its defaults" } else { "configured alike" },
        args.ops,
        args.rounds,
        args.threads
    );
    // Load: key number i goes to the keyspace `SIZES` draws for it.
    for e in engines {
        let t = std::time::Instant::now();
        let mut v = Vec::with_capacity(args.value_size);
        for i in 0..args.keys {
            value(args, i, &mut v);
            e.put(pick(mix(i ^ 0x51), &SIZES), &key(i), &v);
        }
        e.settle();
        eprintln!(
            "{:>14}: loaded in {:.1} s",
            e.name(),
            t.elapsed().as_secs_f64()
        );
    }
    let warm = absent_gets(args.ops, 99);
    for e in engines {
        for (space, k) in &warm {
            assert!(!e.get(*space, k));
        }
        e.compact_all();
    }
    println!("\nabsent gets over 8 keyspaces (after a warm-up and a full compaction), gets/s, median of {} rounds:", args.rounds);
    println!("| threads | lsm-bloom | lsm-bloom/even | rocksdb | fjall | ours / best peer | ours / even |");
    println!("|---|---|---|---|---|---|---|");
    for &threads in &args.threads {
        let mut rates = vec![Vec::new(); engines.len()];
        for round in 0..args.rounds {
            let gets = absent_gets(args.ops, round as u64 + 1);
            for j in 0..engines.len() {
                let i = (round + j) % engines.len();
                let e = engines[i];
                let secs = timed_parallel(&gets, threads, |part| {
                    for (space, k) in part {
                        assert!(!e.get(*space, k), "{}: absent key found", e.name());
                    }
                });
                rates[i].push(gets.len() as f64 / secs);
            }
        }
        let m: Vec<f64> = rates.into_iter().map(median).collect();
        println!(
            "| {threads} | {:.0} | {:.0} | {:.0} | {:.0} | {:.2} | {:.2} |",
            m[0],
            m[1],
            m[2],
            m[3],
            m[0] / m[2].max(m[3]),
            m[0] / m[1]
        );
    }
    // Wasted reads, counted on one more untimed pass.
    let gets = absent_gets(args.ops, 1_000);
    rocks
        .opts
        .set_statistics_level(rocksdb::statistics::StatsLevel::ExceptDetailedTimers);
    println!("\nwasted reads (filter false positives) per absent get, and filter bytes of the 8 keyspaces:");
    let mut per_get = Vec::new();
    for e in engines {
        let before = e.wasted();
        for (space, k) in &gets {
            assert!(!e.get(*space, k));
        }
        let wasted = before
            .zip(e.wasted())
            .map(|(a, b)| (b - a) as f64 / gets.len() as f64);
        per_get.push(wasted);
        println!(
            "  {:>14}: {} wasted reads per get, {} filter bytes",
            e.name(),
            wasted.map_or("-".into(), |w| format!("{w:.5}")),
            e.filter_bytes().map_or("-".into(), |b| b.to_string())
        );
    }
    rocks
        .opts
        .set_statistics_level(rocksdb::statistics::StatsLevel::DisableAll);
    if let (Some(shared), Some(split)) = (per_get[0], per_get[1]) {
        println!(
            "  shared budget vs even split: {:.0}% fewer wasted reads (goal: at least 30%)",
            100.0 * (1.0 - shared / split.max(1e-12))
        );
    }
    for s in ours
        .db
        .stats()
        .keyspaces
        .iter()
        .filter(|k| k.name.starts_with('r'))
    {
        println!(
            "  lsm-bloom {}: {} entries, {:.0} recent lookups, {} filter bytes ({:.2} bits/key)",
            s.name,
            s.entries,
            s.recent_lookups,
            s.filter_bytes,
            s.filter_bytes as f64 * 8.0 / s.entries.max(1) as f64
        );
    }
    // Batches across keyspaces: fresh keys per round and thread count.
    println!("\nbatches across {SPAN} keyspaces (one key each, atomic, no fsync), batches/s, median of {} rounds:", args.rounds);
    println!("| threads | lsm-bloom | rocksdb | fjall | ours / best peer |");
    println!("|---|---|---|---|---|");
    let writers: [&dyn Spaces; 3] = [&ours, &rocks, &fjall];
    let n = (args.ops / SPAN as u64).max(1);
    let mut next = 2 * ABSENT;
    for &threads in &args.threads {
        let mut rates = vec![Vec::new(); writers.len()];
        for round in 0..args.rounds {
            let ids: Vec<u64> = (next..next + n).collect();
            next += n;
            for j in 0..writers.len() {
                let i = (round + j) % writers.len();
                let e = writers[i];
                let secs = timed_parallel(&ids, threads, |part| {
                    let mut v = Vec::with_capacity(args.value_size);
                    for &id in part {
                        value(args, id, &mut v);
                        e.batch(&key(id), &v);
                    }
                });
                rates[i].push(n as f64 / secs);
            }
        }
        let m: Vec<f64> = rates.into_iter().map(median).collect();
        println!(
            "| {threads} | {:.0} | {:.0} | {:.0} | {:.2} |",
            m[0],
            m[1],
            m[2],
            m[0] / m[1].max(m[2])
        );
    }
}
