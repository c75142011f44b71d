//! The `INFO [section ...]` text: server version, the store's filter and storage statistics,
//! replication, and Redis's per-database `# Keyspace` lines. With sections named, only those
//! (case-insensitive; `all`, `everything` and `default` name every one), as Redis does.

use super::store::Store;
use std::sync::atomic::{AtomicUsize, Ordering};

use super::commands::REDIS_VERSION;

/// Whether section `name` is asked for by `args` (none: every section).
fn asked(args: &[Vec<u8>], name: &str) -> bool {
    args.is_empty()
        || args.iter().any(|a| {
            a.eq_ignore_ascii_case(name.as_bytes())
                || [&b"all"[..], b"everything", b"default"]
                    .iter()
                    .any(|w| a.eq_ignore_ascii_case(w))
        })
}

pub fn info(
    db: &Store,
    args: &[Vec<u8>],
    request_bytes: &AtomicUsize,
    output_bytes: &AtomicUsize,
) -> String {
    let mut text = String::new();
    if ["server", "stats", "filters", "storage"]
        .iter()
        .any(|s| asked(args, s))
    {
        let all = stats(db, request_bytes, output_bytes);
        for (name, body) in all {
            if asked(args, name) {
                text += &body;
            }
        }
    }
    if asked(args, "replication") {
        text += "\r\n# Replication\r\n";
        text += &db.replication_info();
    }
    if asked(args, "keyspace") {
        // Redis's per-database line, for databases with keys; `keys` is
        // `Keyspace::approximate_len` and `expires` `approximate_expiring_len`, upper bounds
        // taken without reading a table (`DBSIZE` counts exactly); `avg_ttl` is sampled.
        text += "\r\n# Keyspace\r\n";
        let now = super::expire::now_ms();
        for n in 0..db.databases() {
            let Ok(space) = db.space(n) else { continue };
            if let Some(keys) = space.approximate_len().filter(|&k| k > 0) {
                let expires = space.approximate_expiring_len().unwrap_or(0).min(keys);
                let avg = match expires {
                    0 => 0,
                    _ => avg_ttl(&space, now, n as u64),
                };
                text += &format!("db{n}:keys={keys},expires={expires},avg_ttl={avg}\r\n");
            }
        }
    }
    text
}

/// Keys `avg_ttl` reads the expiry of.
const AVG_TTL_SAMPLE: usize = 32;

/// Redis's `avg_ttl`, estimated as Redis does, from a sample: the mean milliseconds left of
/// the keys with an expiry among up to `AVG_TTL_SAMPLE` keys from a point of the database
/// drawn from the clock and `salt` on (wrapping to its start); 0 when none has one. Each key
/// costs a scan step and a lookup of its expiry; errors leave the estimate 0.
fn avg_ttl(space: &super::store::Space<'_>, now: i64, salt: u64) -> u64 {
    let mut x = (now as u64 ^ salt.rotate_left(32)).wrapping_mul(0x9E37_79B9_7F4A_7C15);
    x ^= x >> 29;
    let from = x.to_be_bytes().to_vec();
    let after = space.scan(from.clone(), std::ops::Bound::Unbounded);
    let before = space.scan(Vec::new(), std::ops::Bound::Excluded(from));
    let (Ok(after), Ok(before)) = (after, before) else {
        return 0;
    };
    let (mut sum, mut with) = (0u128, 0u128);
    for entry in after.chain(before).take(AVG_TTL_SAMPLE) {
        let Ok((key, _)) = entry else { return 0 };
        if let Ok(lsm_bloom::KeyExpiry::At(at)) = space.expiry_of(&key) {
            sum += u128::from(at.saturating_sub(now.max(0) as u64));
            with += 1;
        }
    }
    sum.checked_div(with).map_or(0, |avg| avg as u64)
}

/// The sections from the store's statistics, each with its name.
fn stats(
    db: &Store,
    request_bytes: &AtomicUsize,
    output_bytes: &AtomicUsize,
) -> [(&'static str, String); 4] {
    let s = db.stats();
    let t = &s.total;
    // Tables and filters of every keyspace (`s.total`'s are the default keyspace's; its
    // counters are the whole store's).
    let all = |f: fn(&lsm_bloom::KeyspaceStats) -> u64| s.keyspaces.iter().map(f).sum::<u64>();
    let (tables, table_bytes) = (all(|k| k.tables), all(|k| k.table_bytes));
    let filter_bytes = all(|k| k.filter_bytes);
    let mut server = format!(
        "# Server\r\nredis_version:{REDIS_VERSION}\r\nlsm_bloom_version:{}\r\n",
        env!("CARGO_PKG_VERSION")
    );
    server += &format!(
        "request_budget_used:{}\r\noutput_budget_used:{}\r\n",
        request_bytes.load(Ordering::Relaxed),
        output_bytes.load(Ordering::Relaxed)
    );
    // Expired keys as the store reclaims them: counted when a compaction takes them off the
    // disk (`DbStats::expired_entries_dropped`), not when they expire — reads hide them from
    // that moment on without writing anything.
    let expired = format!(
        "\r\n# Stats\r\nexpired_keys:{}\r\nexpired_tables_dropped:{}\r\n",
        s.expired_entries_dropped, s.expired_tables_dropped
    );
    let mut filters = "\r\n# Filters\r\n".to_string();
    filters += &format!(
        "gets:{}\r\nfilter_checks:{}\r\nfilter_useful:{}\r\nfilter_positive:{}\r\nfilter_true_positive:{}\r\nobserved_fpr:{:.6}\r\nexpected_fpr_sum:{:.6}\r\nfilter_bytes:{}\r\nfilter_validation_failures:{}\r\ndata_block_reads:{}\r\nbytes_read:{}\r\ntables_probed:{}\r\n",
        s.gets, t.filter_checks, t.filter_useful, t.filter_positive, t.filter_true_positive, t.observed_fpr(), t.expected_fpr_sum,
        filter_bytes, s.filter_validation_failures, t.data_block_reads, t.bytes_read, s.tables_probed
    );
    filters += &format!(
        "prefix_scans:{}\r\nprefix_checks:{}\r\nprefix_useful:{}\r\nprefix_unfiltered:{}\r\nprefix_filter_bytes:{}\r\nscan_block_reads:{}\r\n",
        s.prefix_scans, t.prefix_checks, t.prefix_useful, t.prefix_unfiltered, t.prefix_filter_bytes, t.scan_block_reads
    );
    let mut storage = format!(
        "\r\n# Storage\r\ntables:{}\r\ntable_bytes:{}\r\nblock_cache_hits:{}\r\nblock_cache_misses:{}\r\nblock_cache_bytes:{}\r\nblock_cache_capacity:{}\r\nflushes:{}\r\ncompactions:{}\r\nread_only_error:{}\r\n",
        tables,
        table_bytes,
        s.block_cache_hits,
        s.block_cache_misses,
        s.block_cache_bytes,
        s.block_cache_capacity,
        s.flushes,
        s.compactions,
        s.read_only_error.as_deref().unwrap_or("none").replace(['\r', '\n'], " ")
    );
    for l in s.levels.iter().filter(|l| l.tables > 0) {
        storage += &format!(
            "level{}:tables={},filter_checks={},filter_useful={}\r\n",
            l.level.unwrap_or(0),
            l.tables,
            l.filter_checks,
            l.filter_useful
        );
    }
    [
        ("server", server),
        ("stats", expired),
        ("filters", filters),
        ("storage", storage),
    ]
}
