//! Quickstart: what the filters save.
//!
//! `cargo run --release --example quickstart [-- PATH]`
//!
//! Opens a database (in a temporary directory unless PATH is given), writes 1,000,000 keys so
//! that tables sit on several levels, then runs 100,000 lookups of present keys and 100,000 of
//! absent keys (same shape, never written) and prints what the filters saved. The filters
//! follow a budget of 10 bits/key on average (`Options::filter_budget`), and the quickstart
//! prints how the store allocated it per level.

use std::time::Instant;

use lsm_bloom::{Db, DbStats, FilterBudget, Filters, Options};

const KEYS: u64 = 1_000_000;
const LOOKUPS: u64 = 100_000;

/// A well-mixed 64-bit number from `i`, so keys arrive in random order.
fn mix(mut x: u64) -> u64 {
    x = (x ^ (x >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    x ^ (x >> 31)
}

fn present(i: u64) -> String {
    format!("user:{:016x}", mix(i))
}

fn absent(i: u64) -> String {
    format!("user:{:016x}", mix(i + (1 << 40)))
}

fn delta(a: &DbStats, b: &DbStats) -> (u64, u64, u64, u64, u64) {
    (
        b.tables_probed - a.tables_probed,
        b.total.filter_useful - a.total.filter_useful,
        b.total.data_block_reads - a.total.data_block_reads,
        b.total.filter_checks - a.total.filter_checks,
        b.total.filter_true_positive - a.total.filter_true_positive,
    )
}

/// One table: per level, what its tables hold and what the budget allows them.
fn print_levels(s: &DbStats) {
    let planned = |level: usize| {
        s.filter_budget
            .as_ref()
            .and_then(|a| a.levels.iter().find(|l| l.level == level))
    };
    println!("\nwhere the keys are and what their filters cost:");
    println!(
        "{:>5}  {:>6}  {:>9}  {:>8}  {:>7}  {:>10}  {:>12}  {:>14}",
        "level",
        "tables",
        "keys",
        "data MiB",
        "filter",
        "filter KiB",
        "bits per key",
        "budget allows"
    );
    for l in &s.levels {
        let level = l.level.unwrap_or(0);
        let plan = planned(level);
        if l.tables == 0 && plan.is_none_or(|p| p.keys == 0 && level > 0) {
            continue;
        }
        let kind = plan.and_then(|p| p.kind).map_or("none", |k| k.name());
        let now = if l.filter_keys == 0 {
            "-".to_string()
        } else {
            format!("{:.1}", l.filter_bits_per_key())
        };
        let allows = plan.map_or("-".to_string(), |p| format!("{:.1}", p.bits_per_key));
        println!(
            "{:>5}  {:>6}  {:>9}  {:>8.1}  {:>7}  {:>10.1}  {:>12}  {:>14}",
            level,
            l.tables,
            l.filter_keys,
            l.table_bytes as f64 / 1048576.0,
            kind,
            l.filter_bytes as f64 / 1024.0,
            now,
            allows
        );
    }
    let Some(a) = &s.filter_budget else {
        return;
    };
    let keys = s.total.filter_keys.max(1) as f64;
    println!(
        "filters hold {:.0} KiB ({:.1} bits per key); the budget allows {:.0} KiB for these keys \
         and the level-0 tables to come.",
        a.filter_bytes as f64 / 1024.0,
        a.filter_bytes as f64 * 8.0 / keys,
        a.budget_bytes as f64 / 1024.0
    );
    println!(
        "\"bits per key\": what each level's tables got when they were written. \"budget \
         allows\": what a table\nwritten there now gets. Every absent lookup asks each level \
         once, so a bit per key on a small\nlevel costs little memory and saves as many \
         wasted reads as on a big one: small levels get more.\nCompactions rewrite older \
         tables at the new allowance. \"filter\": the kind new tables there get."
    );
}

fn main() -> lsm_bloom::Result<()> {
    let temp;
    let path = match std::env::args().nth(1) {
        Some(p) => std::path::PathBuf::from(p),
        None => {
            temp = tempfile::tempdir()
                .map_err(|e| lsm_bloom::Error::io("creating a temporary directory", e))?;
            temp.path().to_path_buf()
        }
    };
    let opts = Options::default()
        .with_memtable_size(4 << 20)
        .with_target_file_size(4 << 20)
        .with_level1_max_bytes(16 << 20)
        .with_filters(Some(Filters::Budget(FilterBudget::bits_per_key(10.0))));
    println!("lsm-bloom quickstart: database in {}", path.display());
    println!(
        "filters: a budget of 10 bits per key on average, planned per level (blocked Bloom \
         filters on the upper levels, Ribbon on the largest)"
    );
    let db = Db::open(&path, opts)?;

    let t = Instant::now();
    let value = [b'v'; 48];
    for i in 0..KEYS {
        db.put(present(i), value)?;
    }
    db.flush()?;
    db.wait_for_compactions()?;
    let load = t.elapsed();
    let s = db.stats();
    println!(
        "\nwrote {KEYS} keys in {:.1} s ({:.0} puts/s)",
        load.as_secs_f64(),
        KEYS as f64 / load.as_secs_f64()
    );
    print_levels(&s);

    let before = db.stats();
    let t = Instant::now();
    for i in 0..LOOKUPS {
        let k = mix(i ^ 0xABCD) % KEYS;
        assert!(db.get(present(k))?.is_some(), "present key {k} not found");
    }
    let present_time = t.elapsed();
    let mid = db.stats();
    let t = Instant::now();
    for i in 0..LOOKUPS {
        assert!(db.get(absent(i))?.is_none(), "absent key {i} found");
    }
    let absent_time = t.elapsed();
    let after = db.stats();

    let (p_probed, _, p_reads, _, _) = delta(&before, &mid);
    let (a_probed, a_useful, a_reads, a_checks, a_tp) = delta(&mid, &after);
    let per = |x: u64| x as f64 / LOOKUPS as f64;
    println!("\n{LOOKUPS} present-key gets: {:.0} gets/s, {:.3} data-block reads per get, {:.2} tables in range per get", LOOKUPS as f64 / present_time.as_secs_f64(), per(p_reads), per(p_probed));
    println!(
        "{LOOKUPS} absent-key gets:  {:.0} gets/s",
        LOOKUPS as f64 / absent_time.as_secs_f64()
    );
    println!("  tables whose key range held the key: {a_probed} ({:.2} per get) — without filters, each is a data-block read", per(a_probed));
    println!(
        "  tables skipped by their filter:      {a_useful} ({:.2}%)",
        a_useful as f64 * 100.0 / a_probed.max(1) as f64
    );
    println!(
        "  data-block reads:                    {a_reads} ({:.4} per get)",
        per(a_reads)
    );
    println!(
        "  disk reads saved:                    {} of {a_probed} ({:.2}%)",
        a_probed - a_reads,
        (a_probed - a_reads) as f64 * 100.0 / a_probed.max(1) as f64
    );
    let observed = (a_checks - a_useful - a_tp) as f64 / (a_checks - a_tp).max(1) as f64;
    let expected_per_check = after
        .levels
        .iter()
        .filter(|l| l.tables > 0)
        .map(|l| l.expected_fpr_sum)
        .sum::<f64>()
        / after.total.tables.max(1) as f64;
    println!(
        "  observed FPR: {:.3}%   expected FPR (mean over tables): {:.3}%",
        observed * 100.0,
        expected_per_check * 100.0
    );
    db.close()
}
