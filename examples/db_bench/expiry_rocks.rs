//! `--workload expiry`, part 4: part 1's stream into RocksDB's TTL, for its write
//! amplification and the expired bytes it keeps beside ours. RocksDB keeps one time to live
//! per database and reads the wall clock, so the hour is compressed, a wall-clock second
//! standing for a minute: the same puts (keys, values, order) in 60 steps, one a second, into
//! `DB::open_with_ttl` with a time to live of 60 s (the stream's longest, an hour: no key may
//! leave before its own expiry) and the `ttl` option at 60 s (files older than that are
//! compacted, so expired data goes without new writes), then 60 s with no writes. Each 10 s
//! it samples the table bytes (`rocksdb.total-sst-files-size`) against the key and value bytes
//! of the keys live by their own expiries, scaled as the clock is; at the end, compaction
//! bytes written (`rocksdb.compact.write.bytes`) ÷ bytes put, the figure part 1 prints for
//! ours.

use std::time::{Duration, Instant};

use rocksdb::statistics::{StatsLevel, Ticker};

use crate::engines::rocks_options;
use crate::{key, mix, value, Args};

/// The compressed hour, and the database's time to live.
const SECS: u64 = 60;

pub(crate) fn run(args: &Args) {
    let dir = tempfile::tempdir().expect("tempdir");
    let opts = rocks_options(args, |o, _| o.set_ttl(SECS));
    opts.set_statistics_level(StatsLevel::ExceptDetailedTimers);
    let db = rocksdb::DB::open_with_ttl(&opts, dir.path(), Duration::from_secs(SECS))
        .expect("open rocksdb with a ttl");
    let per_step = args.keys / SECS;
    let entry = 16 + args.value_size as u64;
    // Each key's expiry as part 1 draws it, in ms after the stream's start, a minute a second.
    let mut expiries = Vec::with_capacity(args.keys as usize);
    let mut v = Vec::new();
    println!(
        "expiry bound, rocksdb DBWithTTL (ttl and the ttl option {SECS} s; a second for a \
         minute): {} keys",
        args.keys
    );
    println!("  second | live MiB | table MiB | tables / live | behind the clock (ms)");
    let start = Instant::now();
    for second in 0..2 * SECS {
        if second < SECS {
            let mut b = rocksdb::WriteBatch::default();
            for i in second * per_step..(second + 1) * per_step {
                expiries.push(second * 1000 + mix(i ^ 0xe) % (SECS * 1000) + 1);
                value(args, i, &mut v);
                b.put(key(i), &v);
                if b.len() >= 1000 {
                    db.write(std::mem::take(&mut b)).expect("write");
                }
            }
            db.write(b).expect("write");
        }
        let due = Duration::from_secs(second + 1);
        let behind = start.elapsed().saturating_sub(due).as_millis();
        std::thread::sleep(due.saturating_sub(start.elapsed()));
        if (second + 1) % 10 == 0 {
            let now = (second + 1) * 1000;
            let live = expiries.iter().filter(|&&x| x > now).count() as u64 * entry;
            let tables = db
                .property_int_value("rocksdb.total-sst-files-size")
                .expect("property")
                .unwrap_or(0);
            let ratio = match live {
                0 => "-".to_string(),
                _ => format!("{:.3}", tables as f64 / live as f64),
            };
            println!(
                "  {:>6} | {:>8.1} | {:>9.1} | {ratio:>13} | {behind}",
                second + 1,
                live as f64 / (1 << 20) as f64,
                tables as f64 / (1 << 20) as f64,
            );
        }
    }
    let written = opts.get_ticker_count(Ticker::CompactWriteBytes);
    println!(
        "  compaction bytes written / bytes put {:.2}",
        written as f64 / (args.keys * entry) as f64
    );
}
