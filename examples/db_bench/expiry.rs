//! `--workload expiry`: how soon expired data leaves our disk, and what expiry costs reads.
//! Parts 1–3 are ours alone: RocksDB's TTL (`DBWithTTL`, or its `ttl` option) keeps one time
//! to live per database and reads the wall clock, so it can take neither per-key expiries nor
//! an hour simulated on a `ManualClock`; part 4 runs part 1's stream into it on a compressed
//! wall clock (docs/expiry.md).
//!
//! 1. **The bound.** `--keys` puts (16-byte keys, `--value-size` values), each expiring a
//!    uniformly drawn time up to an hour after its write, written in 60 steps over an hour of
//!    a `ManualClock`; then an hour more with no writes. After each simulated minute the
//!    background gets a moment of real time to look (its idle wake-up, every 100 ms here
//!    instead of every second, so that an hour takes minutes) and finishes what is due
//!    (`wait_for_compactions`), and the sample counts
//!    the key and value bytes of the keys still live (the model's) and those of the table
//!    entries expired at the clock's reading (every table read through): expired data on disk
//!    ÷ live data, the most it reached, and compaction bytes written ÷ bytes put. Run at the
//!    defaults (`expired_reclaim_after` 10 minutes, `expired_share_to_reclaim` one half,
//!    `expired_ratio_to_reclaim` 0.05) and with a tight bound (1 minute, a tenth).
//! 2. **Tables expired whole.** Half the keys written without an expiry (the lower half of the
//!    key space), half (the upper) expiring at once; compacted, then the clock moved past their expiry with the
//!    background asleep: absent gets over the store holding the expired tables (each skipped
//!    unread, `expired_skips`) against the same store with them dropped whole by its
//!    background (the live tables unchanged), and against it fully compacted (the live tables
//!    rewritten, their filters given the bits the expired tables' filters held). The three
//!    stores are built anew each round (where a store lands in memory moves its rate) and
//!    take turns in blocks of the round's keys.
//! 3. **Live keys with an expiry.** Present and absent gets on a store whose every key has an
//!    expiry far off against one whose keys have none, written alike.
//! 4. **RocksDB's TTL on part 1's stream**, its hour compressed into a minute of wall clock
//!    (`expiry_rocks.rs`): its write amplification and table bytes beside ours.
//!
//! Rounds interleave the compared stores; each figure is the median of `--rounds` at each of
//! `--threads`.

use std::sync::Arc;
use std::time::{Duration, UNIX_EPOCH};

use lsm_bloom::{Clock, Db, ManualClock, Options, WriteBatch};

use crate::{key, median, mix, ours_options, timed_parallel, value, Args};

/// The clock's reading when a run starts (ms since the epoch).
const T0: u64 = 1_700_000_000_000;
const MINUTE: u64 = 60_000;

fn at(ms: u64) -> std::time::SystemTime {
    UNIX_EPOCH + Duration::from_millis(ms)
}

pub(crate) fn run(args: &Args) {
    let part = |n: u8| args.expiry_parts.is_empty() || args.expiry_parts.contains(&n);
    if part(1) {
        bound(args, "defaults (10 min, 1/2, 5% store-wide)", None);
        bound(
            args,
            "tight (1 min, 1/10)",
            Some((Duration::from_secs(60), 0.1)),
        );
    }
    if part(2) {
        expired_tables(args);
    }
    if part(3) {
        live_with_expiry(args);
    }
    if part(4) {
        crate::expiry_rocks::run(args);
    }
}

/// Key and value bytes of the table entries expired at `now`, over every table of `db`.
fn expired_on_disk(db: &Db, now: u64) -> u64 {
    let mut bytes = 0;
    for t in db.levels().iter().flatten() {
        for e in t.iter(std::ops::Bound::Unbounded) {
            let e = e.expect("table entry");
            if e.expiry.is_some_and(|x| x <= now) {
                bytes += (e.key.len() + e.value.map_or(0, |v| v.len())) as u64;
            }
        }
    }
    bytes
}

/// Part 1 with the store's reclaim settings, or `tight` ones (age bound, share).
fn bound(args: &Args, label: &str, tight: Option<(Duration, f64)>) {
    let dir = tempfile::tempdir().expect("tempdir");
    let clock = Arc::new(ManualClock::new(T0));
    let mut opts = ours_options(args)
        .with_clock(clock.clone())
        .with_idle_compaction_after(Some(Duration::from_millis(100)));
    if let Some((age, share)) = tight {
        opts = opts
            .with_expired_reclaim_after(Some(age))
            .with_expired_share_to_reclaim(Some(share));
    }
    let db = Db::open(dir.path(), opts).expect("open");
    let steps = 60u64;
    let per_step = args.keys / steps;
    let entry = 16 + args.value_size as u64;
    // Each key's expiry, by key number.
    let mut expiries = Vec::with_capacity(args.keys as usize);
    let mut v = Vec::new();
    let (mut worst, mut worst_at) = (0.0f64, 0);
    println!(
        "expiry bound, {label}: {} keys over an hour, TTLs up to an hour",
        args.keys
    );
    println!("  minute | live MiB | expired on disk MiB | expired / live | tables");
    for minute in 0..2 * steps {
        let now = clock.now_millis();
        if minute < steps {
            let mut b = WriteBatch::new();
            for i in minute * per_step..(minute + 1) * per_step {
                let expiry = now + mix(i ^ 0xe) % (60 * MINUTE) + 1;
                expiries.push(expiry);
                value(args, i, &mut v);
                b.put_with_expiry(key(i), v.as_slice(), at(expiry));
                if b.len() >= 1000 {
                    db.write(std::mem::take(&mut b)).expect("write");
                }
            }
            db.write(b).expect("write");
        }
        clock.advance(Duration::from_millis(MINUTE));
        // The background's idle wake-up looks at the new time; then its work is let finish.
        std::thread::sleep(Duration::from_millis(150));
        db.wait_for_compactions().expect("compactions");
        let now = clock.now_millis();
        let live = expiries.iter().filter(|&&x| x > now).count() as u64 * entry;
        let expired = expired_on_disk(&db, now);
        let ratio = expired as f64 / live.max(1) as f64;
        if live > 0 && ratio > worst {
            (worst, worst_at) = (ratio, minute + 1);
        }
        if (minute + 1) % 10 == 0 || minute + 1 == steps + 1 {
            let tables: u64 = db.stats().levels.iter().map(|l| l.tables).sum();
            let ratio = match live {
                0 => "-".to_string(),
                _ => format!("{ratio:.3}"),
            };
            println!(
                "  {:>6} | {:>8.1} | {:>19.1} | {ratio:>14} | {tables}",
                minute + 1,
                live as f64 / (1 << 20) as f64,
                expired as f64 / (1 << 20) as f64,
            );
        }
    }
    let s = db.stats();
    let put = args.keys * entry;
    println!(
        "  worst expired / live {worst:.3} (minute {worst_at}); compaction bytes written / bytes \
         put {:.2}; expired puts reclaimed {}, tables dropped whole {}",
        s.compaction_bytes_written as f64 / put as f64,
        s.expired_entries_dropped,
        s.expired_tables_dropped
    );
}

/// Key number `i` in the upper half of the key space (`high`) or the lower.
fn in_half(i: u64, high: bool) -> [u8; 16] {
    let mut k = key(i);
    k[0] = (k[0] & 0x7f) | if high { 0x80 } else { 0 };
    k
}

/// Keys `0..n` put, in the upper half of the key space when they have an `expiry` (ms),
/// else in the lower (`in_half`); `split` false: as `key` draws them.
fn fill(db: &Db, args: &Args, n: u64, expiry: Option<u64>, split: bool) {
    let mut v = Vec::new();
    let mut b = WriteBatch::new();
    for i in 0..n {
        value(args, i, &mut v);
        let k = match split {
            true => in_half(i, expiry.is_some()),
            false => key(i),
        };
        match expiry {
            Some(x) => b.put_with_expiry(k, v.as_slice(), at(x)),
            None => b.put(k, v.as_slice()),
        };
        if b.len() >= 1000 {
            db.write(std::mem::take(&mut b)).expect("write");
        }
    }
    db.write(b).expect("write");
}

/// Gets of `keys` on `threads` threads: keys per second. Each answer is checked.
fn gets(db: &Db, keys: &[([u8; 16], bool)], threads: usize) -> f64 {
    let secs = timed_parallel(keys, threads, |part| {
        for (k, present) in part {
            assert_eq!(db.get(k).expect("get").is_some(), *present);
        }
    });
    keys.len() as f64 / secs
}

/// Gets of `keys` on each of `stores` in turn, a block of them at a time (each block's turns
/// starting with the next store), on `threads` threads: each store's keys per second over all
/// its blocks. Taking turns in blocks of a few tens of milliseconds, the stores share this
/// machine's drift, which moves a rate more from one second to the next than the stores
/// differ.
fn gets_alternating(stores: &[Db], keys: &[([u8; 16], bool)], threads: usize) -> Vec<f64> {
    const BLOCKS: usize = 20;
    let mut secs = vec![0.0; stores.len()];
    for (b, block) in keys.chunks(keys.len().div_ceil(BLOCKS).max(1)).enumerate() {
        for k in 0..stores.len() {
            let s = (b + k) % stores.len();
            secs[s] += block.len() as f64 / gets(&stores[s], block, threads);
        }
    }
    secs.iter().map(|t| keys.len() as f64 / t).collect()
}

/// `n` absent keys (numbers from 2^40, drawn by `seed`).
fn absent(n: u64, seed: u64) -> Vec<([u8; 16], bool)> {
    (0..n)
        .map(|i| (key(crate::ABSENT + mix(i ^ (seed << 32))), false))
        .collect()
}

/// Part 2: see the module comment.
fn expired_tables(args: &Args) {
    // Per thread count: held, dropped, compacted.
    let mut rates = vec![[Vec::new(), Vec::new(), Vec::new()]; args.threads.len()];
    let mut skips = 0;
    // Per store: filter positives (all false: every key is absent), gets, filter bytes.
    let mut filtered = [(0u64, 0u64, 0u64); 3];
    // Fresh stores each round: where a store's tables and filters land in memory moves its
    // rate by up to ±10% here, the same way in every round it serves, so stores built once
    // would compare that luck; built anew, each round draws it again.
    for round in 0..args.rounds as u64 {
        let (stores, dirs) = expired_stores(args, round == 0);
        let keys = absent(args.ops, round + 1);
        for (t, &threads) in args.threads.iter().enumerate() {
            let each = gets_alternating(&stores, &keys, threads);
            for (s, rate) in each.into_iter().enumerate() {
                rates[t][s].push(rate);
            }
        }
        skips += stores[0]
            .stats()
            .levels
            .iter()
            .map(|l| l.expired_skips)
            .sum::<u64>();
        for (f, db) in filtered.iter_mut().zip(&stores) {
            let st = db.stats();
            *f = (
                f.0 + st.total.filter_positive,
                f.1 + st.gets,
                st.total.filter_bytes,
            );
        }
        drop(stores); // closed before their directories go
        drop(dirs);
    }
    for (t, &threads) in args.threads.iter().enumerate() {
        let [h, d, c] = &rates[t];
        // Ratios within a round (its stores measured one after another), then their median:
        // this machine's rate drifts between rounds more than the stores differ.
        let ratio = |a: &[f64], b: &[f64]| median(a.iter().zip(b).map(|(x, y)| x / y).collect());
        println!(
            "  {threads} thread(s): held {:.0} gets/s, dropped {:.0}, compacted {:.0} (medians); \
             held / dropped {:.3}, held / compacted {:.3} (medians of the rounds' ratios)",
            median(h.clone()),
            median(d.clone()),
            median(c.clone()),
            ratio(h, d),
            ratio(h, c)
        );
    }
    println!("  held stores: {skips} table reads passed over as expired");
    let fp = |(p, g, _): (u64, u64, u64)| p as f64 / g.max(1) as f64;
    println!(
        "  filter false positives per get: held {:.5}, dropped {:.5}, compacted {:.5}; filter \
         bytes (last round) {} / {} / {}",
        fp(filtered[0]),
        fp(filtered[1]),
        fp(filtered[2]),
        filtered[0].2,
        filtered[1].2,
        filtered[2].2
    );
}

/// Part 2's three stores (held, dropped, compacted) and their directories; `report`: print
/// their table counts.
fn expired_stores(args: &Args, report: bool) -> (Vec<Db>, Vec<tempfile::TempDir>) {
    let dirs: Vec<_> = (0..3)
        .map(|_| tempfile::tempdir().expect("tempdir"))
        .collect();
    let clock = Arc::new(ManualClock::new(T0));
    // No idle wake-up: nothing drops the expired tables until told to.
    let opts = ours_options(args)
        .with_clock(clock.clone())
        .with_idle_compaction_after(None);
    let half = args.keys / 2;
    let stores: Vec<Db> = dirs
        .iter()
        .map(|d| {
            let db = Db::open(d.path(), opts.clone()).expect("open");
            fill(&db, args, half, None, true);
            fill(&db, args, half, Some(T0 + MINUTE), true);
            db.compact().expect("compact");
            db
        })
        .collect();
    clock.set(T0 + MINUTE);
    // Store 0 sees the time pass (a scan reads the clock; so would the background's next
    // wake-up, which would drop the tables too) and holds its expired tables. Store 1's
    // background drops them whole (woken by `wait_for_compactions`): its live tables are
    // store 0's. Store 2 is compacted: its live tables are rewritten too, their filters
    // sized for the live keys alone (the budget no longer shared with the expired ones).
    let _ = stores[0].iter().next();
    stores[1].wait_for_compactions().expect("settle");
    stores[2].compact().expect("compact");
    if report {
        let tables = |db: &Db| db.stats().levels.iter().map(|l| l.tables).sum::<u64>();
        println!(
            "absent gets, half the tables expired whole: {} tables (held) against {} (dropped: \
             {} expired tables dropped whole) and {} (compacted); new stores each round",
            tables(&stores[0]),
            tables(&stores[1]),
            stores[1].stats().expired_tables_dropped,
            tables(&stores[2])
        );
    }
    (stores, dirs)
}

/// Part 3: see the module comment.
fn live_with_expiry(args: &Args) {
    let (a, b) = (
        tempfile::tempdir().expect("tempdir"),
        tempfile::tempdir().expect("tempdir"),
    );
    let far = T0 + 365 * 24 * 60 * MINUTE;
    let stores: Vec<Db> = [(&a, Some(far)), (&b, None)]
        .iter()
        .map(|(d, expiry)| {
            let opts: Options = ours_options(args).with_clock(Arc::new(ManualClock::new(T0)));
            let db = Db::open(d.path(), opts).expect("open");
            fill(&db, args, args.keys, *expiry, false);
            db.compact().expect("compact");
            db
        })
        .collect();
    println!("gets of live keys with an expiry against the same keys without one");
    for &threads in &args.threads {
        for (what, present) in [("present", true), ("absent", false)] {
            let (mut with, mut without) = (Vec::new(), Vec::new());
            for round in 0..args.rounds as u64 {
                let keys: Vec<([u8; 16], bool)> = match present {
                    true => (0..args.ops)
                        .map(|i| (key(mix(i ^ (round << 40)) % args.keys), true))
                        .collect(),
                    false => absent(args.ops, round + 100),
                };
                with.push(gets(&stores[0], &keys, threads));
                without.push(gets(&stores[1], &keys, threads));
            }
            let (w, o) = (median(with), median(without));
            println!(
                "  {threads} thread(s), {what}: with {w:.0} gets/s, without {o:.0} gets/s, with / \
                 without {:.3}",
                w / o
            );
        }
    }
}
