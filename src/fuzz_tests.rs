//! Decoder fuzzing: every decoder of an on-disk structure — filter block, range filter block, table footer,
//! index block, properties block, data block, compressed data block, WAL log, manifest, options record, whole table
//! files, and the RocksDB SST and MANIFEST readers of `inspect` — is fed mutated copies of valid inputs (bit flips, truncations, extensions, length fields set to
//! boundary and random values, random byte runs, random inputs) and must return a value or a
//! typed error, never panic. Half the inputs get their checksum recomputed after mutating, so
//! the parser behind the checksum is reached too.
//!
//! `cargo test` runs 20,000 inputs per structure; CI runs 1,000,000 per structure with
//! overflow checks on (`cargo test --profile fuzz --lib fuzz -- --ignored`, see `.ci/run`).

use std::panic::{catch_unwind, AssertUnwindSafe};

use crate::db::manifest::{self, ManifestData, TableMeta};
use crate::db::wal;
use crate::expiry::Now;
use crate::filter::{FilterBuilder, FilterKind, FilterPolicy, FilterReader};
use crate::table::decoders::{
    decode_entries, find, find_checked, open_block, put_entry, seal, seek, unseal, BlockCompressor,
    Index, RangeSet, Table,
};
use crate::table::{
    BlockHandle, Compression, Footer, Properties, TableBuilder, TableBuilderOptions,
};

struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n.max(1) as u64) as usize
    }
    fn bytes(&mut self, n: usize) -> Vec<u8> {
        (0..n).map(|_| self.next() as u8).collect()
    }
}

/// One mutated copy of `seed`.
fn mutate(rng: &mut Rng, seed: &[u8]) -> Vec<u8> {
    let mut b = seed.to_vec();
    for _ in 0..1 + rng.below(3) {
        let len = b.len();
        match rng.below(8) {
            0 | 1 if len > 0 => {
                for _ in 0..1 + rng.below(8) {
                    let i = rng.below(len);
                    b[i] ^= 1 << rng.below(8);
                }
            }
            2 => b.truncate(rng.below(len + 1)),
            3 => {
                let n = 1 + rng.below(64);
                let extra = rng.bytes(n);
                b.extend_from_slice(&extra);
            }
            4 | 5 if len >= 8 => {
                let interesting = [
                    0,
                    1,
                    len as u64,
                    len as u64 + 1,
                    len.saturating_sub(1) as u64,
                    u32::MAX as u64,
                    i32::MAX as u64,
                    u64::MAX,
                    1 << 31,
                    rng.next(),
                    rng.next() & 0xffff,
                ];
                let v = interesting[rng.below(interesting.len())];
                let at = rng.below(len - 7);
                if rng.below(2) == 0 {
                    b[at..at + 4].copy_from_slice(&(v as u32).to_le_bytes());
                } else {
                    b[at..at + 8].copy_from_slice(&v.to_le_bytes());
                }
            }
            6 if len > 0 => {
                let at = rng.below(len);
                let n = 1 + rng.below((len - at).min(32));
                let run = rng.bytes(n);
                b[at..at + n].copy_from_slice(&run);
            }
            _ => {
                let n = rng.below(2 * len + 16);
                b = rng.bytes(n);
            }
        }
    }
    b
}

/// A structure's valid seeds, how to recompute its checksum, and its decoder.
struct Target {
    name: &'static str,
    seeds: Vec<Vec<u8>>,
    reseal: fn(&mut Vec<u8>),
    /// Decodes; true when the input was accepted.
    decode: fn(&[u8]) -> bool,
}

fn reseal_trailing_crc(b: &mut Vec<u8>) {
    if b.len() >= 4 {
        let n = b.len() - 4;
        b.truncate(n);
        seal(b, 0);
    }
}

fn filter_target() -> Target {
    let mut seeds = Vec::new();
    for kind in [
        FilterKind::Standard,
        FilterKind::Blocked,
        FilterKind::Ribbon,
    ] {
        for n in [0usize, 1, 37, 300] {
            let mut b = FilterBuilder::new(FilterPolicy::bits_per_key(kind, 10.0)).unwrap();
            for i in 0..n {
                b.add_key(format!("key{i}").as_bytes());
            }
            seeds.push(b.finish());
        }
    }
    Target {
        name: "filter block",
        seeds,
        reseal: reseal_trailing_crc,
        decode: |b| {
            let Ok(r) = FilterReader::new(b) else {
                return false;
            };
            let _ = r.info();
            for i in 0..8 {
                let _ = r.may_contain(format!("key{i}").as_bytes());
                let _ = r.may_contain_hash(0x9E37_79B9_7F4A_7C15u64.wrapping_mul(i));
            }
            true
        },
    }
}

fn range_filter_target() -> Target {
    use crate::filter::{RangeFilterBuilder, RangeFilterReader, RangePolicy};
    use std::ops::Bound;
    let mut seeds = Vec::new();
    for (bits, max_range) in [(12.0, 32), (16.0, 1024), (3.0, 1)] {
        for n in [0usize, 1, 37, 300] {
            let policy = RangePolicy::bits_per_key(bits, max_range).expect("a valid policy");
            let mut b = RangeFilterBuilder::new(policy);
            for i in 0..n {
                b.add_key(format!("tenant/{:06}", i * 7919 % 1000).as_bytes());
            }
            seeds.push(b.finish());
        }
    }
    // A version 1 block (points of 8 bytes, the width byte reserved).
    let mut b = RangeFilterBuilder::new(RangePolicy::bits_per_key(12.0, 32).expect("a policy"));
    for i in 0..100u64 {
        b.add_key(&[&b"k"[..], &(i << 58).to_be_bytes()].concat());
    }
    let mut v1 = b.finish();
    (v1[4], v1[41]) = (1, 0);
    reseal_trailing_crc(&mut v1);
    seeds.push(v1);
    Target {
        name: "range filter block",
        seeds,
        reseal: reseal_trailing_crc,
        decode: |b| {
            let Ok(r) = RangeFilterReader::new(b) else {
                return false;
            };
            let _ = (r.expected_rate(32), r.bits_per_key(), r.memory());
            for i in 0..8u64 {
                let lo = format!("tenant/{:06}", i * 131);
                let hi = format!("tenant/{:06}", i * 131 + i * i);
                let _ = r.may_contain_range(
                    Bound::Included(lo.as_bytes()),
                    Bound::Excluded(hi.as_bytes()),
                );
                let _ = r.may_contain(&i.to_be_bytes());
            }
            let _ = r.may_contain_range(Bound::Unbounded, Bound::Included(b"tenant/"));
            true
        },
    }
}

fn footer_target() -> Target {
    let h = |offset, size| BlockHandle { offset, size };
    let f = |version| Footer {
        version,
        index: h(1000, 120),
        filter: h(500, 400),
        prefix_filter: h(900, 100),
        properties: h(1120, 90),
        range_filter: BlockHandle::default(),
    };
    let v4 = Footer {
        range_filter: h(400, 100),
        ..f(4)
    };
    let v1 = Footer {
        prefix_filter: BlockHandle::default(),
        ..f(1)
    };
    Target {
        name: "table footer",
        seeds: vec![v4.encode(), f(3).encode(), f(2).encode(), v1.encode()],
        reseal: |b| {
            // The CRC sits 8 bytes from the end and covers everything before it.
            if b.len() >= 8 {
                let at = b.len() - 8;
                let crc = crc32fast::hash(&b[..at]);
                b[at..at + 4].copy_from_slice(&crc.to_le_bytes());
            }
        },
        decode: |b| {
            let mut ok = false;
            for file_len in [0, 64, 1274, u64::MAX] {
                ok |= Footer::decode(b, file_len).is_ok();
            }
            ok
        },
    }
}

fn index_target() -> Target {
    let mut block = Vec::new();
    for i in 0..20u64 {
        crate::coding::put_len_prefixed(&mut block, format!("last{i:03}").as_bytes(), "k").unwrap();
        block.extend_from_slice(&(i * 100).to_le_bytes());
        block.extend_from_slice(&100u64.to_le_bytes());
    }
    seal(&mut block, 0);
    Target {
        name: "index block",
        seeds: vec![block],
        reseal: reseal_trailing_crc,
        decode: |b| {
            let small = Index::decode(b, 2000).is_ok();
            Index::decode(b, u64::MAX).is_ok() || small
        },
    }
}

fn properties_target() -> Target {
    let p = Properties {
        entries: 100,
        tombstones: 3,
        data_blocks: 4,
        data_bytes: 16000,
        raw_data_bytes: 31000,
        compression: Compression::Lz4,
        min_key: b"aaa".to_vec(),
        max_key: b"zzz".to_vec(),
        filter_kind: Some(FilterKind::Blocked),
        filter_bits_per_key: 10.0,
        level: 1,
        created_unix_ms: 1,
        writer: "lsm-bloom".into(),
        prefix_filter_kind: Some(FilterKind::Blocked),
        prefix_extractor: Some("delimiter:3a:1".into()),
        prefixes: 7,
        range_filter: None,
        expiring: 0,
        expiry_span: None,
        expiry_quantiles: Vec::new(),
        expiring_bytes: 0,
        range_deletes: 0,
        range_delete_block: (0, 0),
    };
    let ranged = Properties {
        range_filter: Some(crate::filter::RangePolicy::bits_per_key(12.0, 32).expect("policy")),
        ..p.clone()
    };
    let expiring = Properties {
        expiring: 5,
        expiry_span: Some((1_000, 2_000)),
        ..ranged.clone()
    };
    let deleting = Properties {
        range_deletes: 3,
        range_delete_block: (16_000, 60),
        ..expiring.clone()
    };
    let quantiled = Properties {
        expiry_quantiles: (0..15).map(|i| 1_000 + i * 60).collect(),
        expiring_bytes: 600,
        ..deleting.clone()
    };
    let plain = Properties {
        prefix_filter_kind: None,
        prefix_extractor: None,
        prefixes: 0,
        compression: Compression::None,
        raw_data_bytes: 15984,
        ..p.clone()
    };
    Target {
        name: "properties block",
        seeds: vec![
            quantiled.encode(7).unwrap(),
            deleting.encode(6).unwrap(),
            expiring.encode(5).unwrap(),
            ranged.encode(4).unwrap(),
            p.encode(3).unwrap(),
            plain.encode(2).unwrap(),
            plain.encode(1).unwrap(),
        ],
        reseal: reseal_trailing_crc,
        decode: |b| {
            let v1 = Properties::decode(b, 1).is_ok();
            let v2 = Properties::decode(b, 2).is_ok();
            let v4 = Properties::decode(b, 4).is_ok();
            let v5 = Properties::decode(b, 5).is_ok();
            let v6 = Properties::decode(b, 6).is_ok();
            let v7 = Properties::decode(b, 7).is_ok();
            Properties::decode(b, 3).is_ok() || v1 || v2 || v4 || v5 || v6 || v7
        },
    }
}

fn range_delete_block_target() -> Target {
    let set = RangeSet::union(
        (0..20u32)
            .map(|i| crate::table::DeletedRange {
                start: format!("key{:03}", i * 10).into_bytes(),
                end: crate::table::End::Through(format!("key{:03}", i * 10 + i % 7).into_bytes()),
            })
            .collect(),
    );
    let mut block = set.encode().unwrap();
    seal(&mut block, 0);
    Target {
        name: "range-delete block",
        seeds: vec![block],
        reseal: reseal_trailing_crc,
        decode: |b| unseal(b).is_ok_and(|p| RangeSet::decode(p).is_ok()),
    }
}

fn data_block_target() -> Target {
    let mut block = Vec::new();
    for i in 0..30 {
        let v = (i % 4 != 0).then(|| vec![b'v'; i]);
        // Every third put expires (format 5's entry with an expiry).
        let expiry = if i % 3 == 0 {
            1_000 + i as u64
        } else {
            crate::expiry::NEVER
        };
        put_entry(
            &mut block,
            format!("key{i:03}").as_bytes(),
            v.as_deref(),
            expiry,
        )
        .unwrap();
    }
    seal(&mut block, 0);
    Target {
        name: "data block",
        seeds: vec![block],
        reseal: reseal_trailing_crc,
        decode: |b| {
            // The point lookup's fast scan answers as the checked one on every input (a
            // mismatch panics, which the harness reports).
            for payload in [Some(b), unseal(b).ok()].into_iter().flatten() {
                for key in [
                    &b""[..],
                    b"key000",
                    b"key0075",
                    b"key029",
                    b"key003",
                    b"zzz",
                ] {
                    for now in [Now::never(), Now::fixed(1_010)] {
                        let (fast, checked) =
                            (find(payload, key, &now), find_checked(payload, key, &now));
                        assert_eq!(fast, checked, "{key:?}");
                    }
                    // A scan's seek stops inside the payload, or at its end.
                    let p = crate::coding::key_prefix(key);
                    for exclusive in [false, true] {
                        if let Ok(pos) = seek(payload, p, key, exclusive) {
                            assert!(pos <= payload.len());
                        }
                    }
                }
            }
            let raw = decode_entries(b).is_ok();
            unseal(b).is_ok_and(|payload| decode_entries(payload).is_ok()) || raw
        },
    }
}

fn wal_target() -> Target {
    let mut log = Vec::new();
    for n in 1..6u8 {
        let mut batch = wal::Batch::default();
        for i in 0..n {
            // Keyspace switches too: every other operation from the third batch on.
            let keyspace = if n > 2 { u32::from(i % 2) * 3 } else { 0 };
            let value = (i % 2 == 0).then(|| vec![n; i as usize * 7]);
            // Expiring puts too (operation tag 4): every third operation.
            let expiry = if i % 3 == 1 {
                5_000 + u64::from(n)
            } else {
                crate::expiry::NEVER
            };
            batch.part(keyspace).push(wal::Op {
                key: vec![i; 3],
                value,
                expiry,
            });
        }
        // Range deletes too (operation tag 5), with each kind of end.
        let end = match n % 3 {
            0 => crate::table::End::Before(vec![n, 9]),
            1 => crate::table::End::Through(vec![n, 9]),
            _ => crate::table::End::Unbounded,
        };
        let range = crate::table::DeletedRange {
            start: vec![n],
            end,
        };
        batch.push_range(u32::from(n % 2) * 3, range);
        log.extend_from_slice(&wal::encode_batch(&batch).unwrap());
    }
    Target {
        name: "WAL log",
        seeds: vec![log],
        reseal: |b| {
            // Recompute the CRC of every record whose length field stays inside the log.
            let mut pos = 0;
            while b.len() - pos >= wal::HEADER_LEN {
                let len = u32::from_le_bytes([b[pos], b[pos + 1], b[pos + 2], b[pos + 3]]);
                let end = pos + wal::HEADER_LEN + len as usize;
                if end > b.len() {
                    break;
                }
                let crc = crc32fast::hash(&b[pos + wal::HEADER_LEN..end]);
                b[pos + 4..pos + 8].copy_from_slice(&crc.to_le_bytes());
                pos = end;
            }
        },
        decode: |b| wal::scan(b).damage.is_none(),
    }
}

fn manifest_target() -> Target {
    let data = ManifestData {
        next_file: 40,
        log_number: 30,
        levels: vec![
            vec![
                TableMeta { id: 7, size: 4000 },
                TableMeta { id: 9, size: 10 },
            ],
            vec![],
            vec![TableMeta {
                id: 3,
                size: 1 << 40,
            }],
        ],
        ..ManifestData::default()
    };
    let with_keyspaces = ManifestData {
        keyspaces: vec![crate::db::manifest::KeyspaceMeta {
            id: 2,
            name: "users".into(),
            levels: vec![vec![TableMeta { id: 11, size: 77 }]],
        }],
        next_keyspace: 4,
        ..data.clone()
    };
    Target {
        name: "manifest",
        seeds: vec![
            manifest::encode(&data).unwrap(),
            manifest::encode(&with_keyspaces).unwrap(),
            manifest::encode(&ManifestData {
                expiring: true,
                ..with_keyspaces.clone()
            })
            .unwrap(),
            manifest::encode(&ManifestData::default()).unwrap(),
        ],
        reseal: |b| {
            if b.len() >= 16 {
                let crc = crc32fast::hash(&b[16..]);
                b[12..16].copy_from_slice(&crc.to_le_bytes());
            }
        },
        decode: |b| manifest::decode(std::path::Path::new("MANIFEST"), b).is_ok(),
    }
}

fn options_target() -> Target {
    use crate::db::stored_options::{self, StoredOptions};
    use crate::filter::{FilterKind, FilterPolicy};
    let per_level = crate::Options::default()
        .with_filters(Some(
            crate::Filters::fixed(FilterPolicy::default())
                .without_on(0)
                .with_level(2, Some(FilterPolicy::target_fpr(FilterKind::Ribbon, 0.01))),
        ))
        .with_prefix_filters(Some(crate::PrefixFilters::with(
            crate::PrefixExtractor::delimiter(b':', 2),
        )));
    let budget = crate::Options::default().with_filters(Some(crate::Filters::Budget(
        crate::FilterBudget::total_bytes(1 << 30),
    )));
    // A record with keyspaces' own settings (version 5), every field of one given.
    let mut with_keyspaces = StoredOptions::of(&budget);
    let own = crate::KeyspaceOptions::default()
        .with_filters(Some(crate::Filters::fixed(FilterPolicy::default())))
        .with_prefix_filters(Some(crate::PrefixFilters::with(
            crate::PrefixExtractor::fixed(4),
        )))
        .with_range_filters(Some(crate::RangeFilters::None))
        .with_compression(Some(crate::Compression::Lz4.into()))
        .with_block_size(Some(16 << 10))
        .with_memtable_size(Some(1 << 20));
    with_keyspaces.keyspaces = vec![
        stored_options::KeyspaceRecord::of(1, &own),
        stored_options::KeyspaceRecord::of(3, &crate::KeyspaceOptions::default()),
    ];
    let mut seeds: Vec<Vec<u8>> = [per_level, budget, crate::Options::default()]
        .iter()
        .map(|o| stored_options::encode(&StoredOptions::of(o)).unwrap())
        .collect();
    seeds.push(stored_options::encode(&with_keyspaces).unwrap());
    // Version 6: a keyspace with a default time to live, one given none.
    let ttl = |t| crate::KeyspaceOptions::default().with_default_ttl(Some(t));
    with_keyspaces.keyspaces = vec![
        stored_options::KeyspaceRecord::of(
            2,
            &ttl(crate::DefaultTtl::After(std::time::Duration::from_secs(90))),
        ),
        stored_options::KeyspaceRecord::of(4, &ttl(crate::DefaultTtl::Never)),
    ];
    seeds.push(stored_options::encode(&with_keyspaces).unwrap());
    Target {
        name: "options record",
        seeds,
        reseal: |b| {
            if b.len() >= 16 {
                let crc = crc32fast::hash(&b[16..]);
                b[12..16].copy_from_slice(&crc.to_le_bytes());
            }
        },
        decode: |b| stored_options::decode(std::path::Path::new("OPTIONS"), b).is_ok(),
    }
}

/// Runs `n` mutated inputs through `t`'s decoder; panics (naming the input) if it panics.
/// Returns how many were accepted.
fn run(t: &Target, n: usize, seed: u64) -> usize {
    let mut rng = Rng(seed | 1);
    let mut accepted = 0;
    for i in 0..n {
        let base = &t.seeds[i % t.seeds.len()];
        let mut input = mutate(&mut rng, base);
        if rng.below(2) == 0 {
            (t.reseal)(&mut input);
        }
        match catch_unwind(AssertUnwindSafe(|| (t.decode)(&input))) {
            Ok(ok) => accepted += usize::from(ok),
            Err(_) => panic!(
                "{}: decoder panicked on input {i} ({} bytes): {:02x?}",
                t.name,
                input.len(),
                input
            ),
        }
    }
    accepted
}

/// Files of `fixtures/rocksdb-11.8.1/<under>` (written by RocksDB) whose names pass `filter`.
fn rocksdb_fixtures(under: &str, filter: impl Fn(&str) -> bool) -> Vec<Vec<u8>> {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("fixtures/rocksdb-11.8.1")
        .join(under);
    let mut files: Vec<_> = std::fs::read_dir(dir)
        .expect("fixtures/rocksdb-11.8.1")
        .map(|e| e.expect("fixture entry").path())
        .filter(|p| p.file_name().is_some_and(|n| filter(&n.to_string_lossy())))
        .collect();
    files.sort();
    files
        .iter()
        .map(|p| std::fs::read(p).expect("fixture"))
        .collect()
}

/// RocksDB SSTs: footer, metaindex and properties blocks, and the filter blocks they name.
fn rocksdb_sst_target() -> Target {
    Target {
        name: "RocksDB SST",
        seeds: rocksdb_fixtures("", |n| n.ends_with(".sst"))
            .into_iter()
            .chain(rocksdb_fixtures("../rocksdb-11.8.1-partitioned", |n| {
                n.ends_with(".sst")
            }))
            .collect(),
        // The blocks' checksums recomputed, so mutations reach the decoders behind them.
        reseal: |b| crate::inspect::rocksdb_sst::tests::reseal(b),
        decode: |b| crate::inspect::rocksdb_sst::read_table("f.sst", b).is_ok(),
    }
}

/// RocksDB MANIFESTs: log records and version edits.
fn rocksdb_manifest_target() -> Target {
    Target {
        name: "RocksDB MANIFEST",
        seeds: rocksdb_fixtures("db", |n| n.starts_with("MANIFEST-")),
        reseal: |_| {},
        decode: |b| {
            crate::inspect::rocksdb_dir::log_records(b)
                .and_then(|r| crate::inspect::rocksdb_dir::live_files(&r))
                .is_ok()
        },
    }
}

/// Format-3 data blocks, LZ4 (and zstd in a build with it): the trailer, the length
/// bound and the decompressor, then the entries.
fn compressed_block_target() -> Target {
    let mut raw = Vec::new();
    for i in 0..60 {
        let v = (i % 5 != 0).then(|| format!("value {i} and some repeated text").into_bytes());
        put_entry(
            &mut raw,
            format!("key{i:03}").as_bytes(),
            v.as_deref(),
            crate::expiry::NEVER,
        )
        .unwrap();
    }
    let mut seeds = Vec::new();
    for codec in [Compression::Lz4, Compression::Zstd(3), Compression::None] {
        if let Ok(mut c) = BlockCompressor::new(codec) {
            let mut out = Vec::new();
            c.seal(&raw, &mut out).unwrap();
            seeds.push(out);
        }
    }
    Target {
        name: "compressed data block",
        seeds,
        reseal: reseal_trailing_crc,
        decode: |b| {
            let mut ok = false;
            for codec in [Compression::Lz4, Compression::Zstd(3)] {
                for max_raw in [64, 1 << 20] {
                    if let Ok(p) = open_block(b.to_vec(), codec, max_raw) {
                        ok |= decode_entries(&p).is_ok();
                    }
                }
            }
            ok
        },
    }
}

/// The replication layer's encodings (FORMAT.md §7, §8): log entries, votes, memberships,
/// RPC messages, the handshake's hello, a write session, and a snapshot pack's header.
#[cfg(feature = "replication")]
fn replication_targets() -> Vec<Target> {
    use crate::replication::fuzz_seeds as r;
    vec![
        Target {
            name: "raft log entry",
            seeds: r::entries(),
            reseal: |_| {},
            decode: |b| crate::replication::codec::decode_entry(b).is_ok(),
        },
        Target {
            name: "raft vote and log id",
            seeds: r::votes(),
            reseal: |_| {},
            decode: |b| {
                crate::replication::codec::decode_vote(b).is_ok()
                    | crate::replication::codec::decode_opt_log_id(b).is_ok()
            },
        },
        Target {
            name: "raft membership",
            seeds: r::memberships(),
            reseal: |_| {},
            decode: |b| crate::replication::codec::decode_stored_membership(b).is_ok(),
        },
        Target {
            name: "raft RPC message",
            seeds: r::wire_messages(),
            reseal: |_| {},
            decode: |b| {
                crate::replication::wire::decode_request(b).is_ok()
                    | crate::replication::wire::decode_response(b).is_ok()
            },
        },
        Target {
            name: "raft handshake hello",
            seeds: r::hellos(),
            reseal: |_| {},
            decode: |b| {
                use crate::replication::tcp::hello::{decode, Side};
                decode(b, Side::Caller, "prod").is_ok() | decode(b, Side::Server, "prod").is_ok()
            },
        },
        Target {
            name: "state machine write session",
            seeds: crate::replication::state_machine::sessions::seed_records(),
            reseal: |_| {},
            decode: |b| crate::replication::state_machine::sessions::decode(b).is_ok(),
        },
        Target {
            name: "snapshot pack header",
            seeds: r::pack_headers(),
            reseal: r::reseal_pack_header,
            decode: |b| crate::replication::snapshot::read_header(&mut &b[..]).is_ok(),
        },
    ]
}

fn targets() -> Vec<Target> {
    #[cfg(feature = "replication")]
    let more = replication_targets();
    #[cfg(not(feature = "replication"))]
    let more = Vec::new();
    more.into_iter().chain(base_targets()).collect()
}

fn base_targets() -> Vec<Target> {
    vec![
        rocksdb_sst_target(),
        rocksdb_manifest_target(),
        filter_target(),
        range_filter_target(),
        footer_target(),
        index_target(),
        properties_target(),
        range_delete_block_target(),
        data_block_target(),
        compressed_block_target(),
        wal_target(),
        manifest_target(),
        options_target(),
    ]
}

/// Whole table files: open, then every lookup and a full scan, on mutated copies of a table.
fn fuzz_table_files(n: usize) {
    let dir = tempfile::tempdir().unwrap();
    let good = dir.path().join("good.sst");
    let mut b = TableBuilder::create(
        &good,
        TableBuilderOptions {
            block_size: 256,
            filter: Some(FilterPolicy::default()),
            level: 1,
            prefix_extractor: Some(crate::PrefixExtractor::fixed(5)),
            whole_key_filter: true,
            compression: Compression::Lz4,
            ..TableBuilderOptions::default()
        },
    )
    .unwrap();
    for i in 0..200 {
        b.add(format!("key{i:04}").as_bytes(), Some(&[b'v'; 20]))
            .unwrap();
    }
    b.finish().unwrap();
    let seed = std::fs::read(&good).unwrap();
    let path = dir.path().join("mutated.sst");
    let mut rng = Rng(0xF00D);
    for i in 0..n {
        let input = mutate(&mut rng, &seed);
        std::fs::write(&path, &input).unwrap();
        let outcome = catch_unwind(AssertUnwindSafe(|| {
            if let Ok(t) = Table::open(&path, 1) {
                let t = std::sync::Arc::new(t);
                let mut stats = Default::default();
                // Fresh per input: every mutated file is table 1.
                let cache = crate::table::BlockCache::new(1 << 20).map(std::sync::Arc::new);
                for k in ["key0000", "key0100", "key0199", "nope"] {
                    let _ = t.get(k.as_bytes(), &mut stats, None);
                    let _ = t.get(k.as_bytes(), &mut stats, cache.as_deref());
                    let rule = crate::PrefixExtractor::fixed(5);
                    if let Some(p) = rule.prefix(k.as_bytes()) {
                        let _ = t.check_prefix(rule, p, crate::filter::hash_key(p));
                    }
                }
                for e in t.iter(std::ops::Bound::Unbounded) {
                    if e.is_err() {
                        break;
                    }
                }
                // Scans' cursors, both ways, over the whole table and a range inside it.
                use crate::table::{Cursor, Direction, KeyRange, TableCursor};
                use std::ops::Bound;
                let inside = KeyRange::new(
                    Bound::Excluded(b"key0050".to_vec()),
                    Bound::Included(b"key0150".to_vec()),
                );
                for range in [KeyRange::all(), inside] {
                    let range = std::sync::Arc::new(range);
                    for dir in [Direction::Forward, Direction::Backward] {
                        let Ok(mut c) =
                            TableCursor::new(t.clone(), cache.clone(), range.clone(), dir)
                        else {
                            continue;
                        };
                        while c.key().is_some() && c.step().is_ok() {}
                    }
                }
            }
        }));
        assert!(outcome.is_ok(), "table file {i} panicked: {input:02x?}");
    }
}

#[test]
fn decoders_never_panic_on_mutated_input() {
    for (i, t) in targets().iter().enumerate() {
        let accepted = run(
            t,
            crate::test_counts::scaled(20_000, 5_000),
            1000 + i as u64,
        );
        // Some mutations (a flip in a key byte, then a recomputed checksum) still decode: the
        // inputs reach the parser behind the checksum, not just the checksum.
        assert!(accepted > 0, "{}: no mutated input decoded", t.name);
    }
    fuzz_table_files(crate::test_counts::scaled(2_000, 500));
}

#[test]
#[ignore = "10^6 inputs per structure: run by .ci/run with --profile fuzz"]
fn decoders_never_panic_on_a_million_mutated_inputs_each() {
    const N: usize = 1_000_000;
    for (i, t) in targets().iter().enumerate() {
        let start = std::time::Instant::now();
        let accepted = run(t, N, 7 + i as u64);
        println!(
            "{}: {N} mutated inputs, no panic: {accepted} decoded, {} typed errors ({:.1?})",
            t.name,
            N - accepted,
            start.elapsed()
        );
    }
    let start = std::time::Instant::now();
    fuzz_table_files(100_000);
    println!(
        "table file: 100000 mutated files, no panic ({:.1?})",
        start.elapsed()
    );
}
