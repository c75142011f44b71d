//! A long scan holds memory bounded by a block per source, not by its range: a scan over
//! 1 GiB of values (1 GiB in tables, ~190 MiB of it also written again into the memtable)
//! read forward and backward, with the process's resident memory sampled as it goes.
//!
//! Ignored in the plain `cargo test` (1.2 GiB written, slow in a debug build); `.ci/run` runs
//! it in release: `cargo test --release --test db_scan_memory -- --ignored`.

use lsm_bloom::{Compression, Db, Options};

const VALUE: usize = 64 << 10;
const KEYS: u64 = 16_384; // 1 GiB of values
const REWRITTEN: u64 = 3_000; // ~190 MiB of them again, in the memtable

fn key(i: u64) -> Vec<u8> {
    format!("key{i:06}").into_bytes()
}

/// Resident bytes of this process (`/proc/self/statm`), after the allocator has handed its
/// free memory back: a copy made later then shows as growth instead of landing in pages the
/// load left behind.
fn resident() -> u64 {
    // SAFETY: `malloc_trim` only releases free heap memory; it takes no pointers.
    unsafe { libc::malloc_trim(0) };
    resident_now()
}

/// Resident bytes now (`/proc/self/statm`).
fn resident_now() -> u64 {
    let statm = std::fs::read_to_string("/proc/self/statm").unwrap();
    let pages: u64 = statm.split_whitespace().nth(1).unwrap().parse().unwrap();
    pages * 4096
}

#[test]
#[ignore = "writes 1.2 GiB: run in release (.ci/run)"]
fn a_scan_over_a_gibibyte_holds_bounded_memory() {
    let dir = tempfile::tempdir().unwrap();
    let opts = Options::default()
        .with_memtable_size(512 << 20)
        .with_block_cache_bytes(8 << 20)
        .with_compression(Some(Compression::Lz4.into()))
        .with_filters(Some(lsm_bloom::Filters::fixed(
            lsm_bloom::FilterPolicy::default(),
        )));
    let db = Db::open(dir.path(), opts).unwrap();
    let value = |i: u64, round: u8| {
        let mut v = vec![round; VALUE];
        v[..8].copy_from_slice(&i.to_le_bytes());
        v
    };
    for i in 0..KEYS {
        db.put(key(i), value(i, 1)).unwrap();
    }
    db.flush().unwrap();
    db.wait_for_compactions().unwrap();
    // Every fifth key, written again: the memtable holds these newer versions.
    for i in (0..KEYS).step_by((KEYS / REWRITTEN) as usize) {
        db.put(key(i), value(i, 2)).unwrap();
    }
    let rewritten = |i: u64| i.is_multiple_of(KEYS / REWRITTEN);
    for backward in [false, true] {
        let before = resident();
        let mut peak = before;
        let mut it = db.scan::<&[u8], _>(..).unwrap();
        let mut bytes = 0u64;
        let mut n = 0u64;
        loop {
            let item = if backward { it.next_back() } else { it.next() };
            let Some(item) = item else { break };
            let (k, v) = item.unwrap();
            let i = if backward { KEYS - 1 - n } else { n };
            assert_eq!(k, key(i));
            assert_eq!(v[..8], i.to_le_bytes());
            assert_eq!(v[8], if rewritten(i) { 2 } else { 1 }, "key {i}");
            bytes += v.len() as u64;
            n += 1;
            if n.is_multiple_of(256) {
                peak = peak.max(resident_now());
            }
        }
        assert_eq!(n, KEYS);
        assert!(bytes >= 1 << 30);
        let grew = peak.saturating_sub(before);
        println!(
            "backward {backward}: {} MiB scanned, resident {} MiB before, grew {} MiB at most",
            bytes >> 20,
            before >> 20,
            grew >> 20
        );
        // The block cache (8 MiB), a block per source and the allocator's slack: far below
        // the ~190 MiB the memtable's part of the range alone would take if copied.
        assert!(
            grew < 48 << 20,
            "resident memory grew by {} MiB",
            grew >> 20
        );
    }
}
