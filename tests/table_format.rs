//! Frozen table files (FORMAT.md §3): every released table format version stays readable.
//!
//! `fixtures/table-v1/` was written by the table format 1 writer, `fixtures/table-v2/` by the
//! format 2 writer (prefix filters), `fixtures/table-v3/` by the format 3 writer (per-block
//! compression; `raw-aligned-blocked.sst` by the later one that pads uncompressed blocks to
//! pages), `fixtures/table-v4/` by the format 4 writer (range filters), `fixtures/table-v5/`
//! by the format 5 writer (entries that expire), `fixtures/table-v6/` by the format 6 writer
//! (deleted ranges), `fixtures/table-v7/` by the format 7 writer (expiry quantiles); none is
//! ever regenerated.
//! Each fixture holds the keys of `fixtures/filter-v1/keys.txt` sorted, value `v<i>` for the
//! i-th key, every 7th key a tombstone; from format 5, every fifth put expires (`expiry_of`);
//! from format 6 the table also carries `deleted_ranges`.

use std::path::{Path, PathBuf};

use lsm_bloom::filter::hash_key;
use lsm_bloom::filter::FilterKind;
use std::ops::Bound::Included;

use lsm_bloom::filter::RangePolicy;
use lsm_bloom::table::{DeletedRange, End, RangeSet};
use lsm_bloom::table::{FilterState, Table, TableBuilder, TableBuilderOptions, TableReadStats};
use lsm_bloom::table::{PrefixCheck, RangeCheck, RangeFilterState};
use lsm_bloom::{Compression, FilterPolicy, PrefixExtractor};

fn fixture_dir(version: u32) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join(format!("fixtures/table-v{version}"))
}

/// The fixtures' entries: sorted keys, `None` for a tombstone.
fn entries() -> Vec<(Vec<u8>, Option<Vec<u8>>)> {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("fixtures/filter-v1/keys.txt");
    let text = std::fs::read_to_string(path).expect("fixtures/filter-v1/keys.txt");
    let mut keys: Vec<Vec<u8>> = text.lines().map(|l| l.as_bytes().to_vec()).collect();
    keys.sort();
    keys.dedup();
    keys.into_iter()
        .enumerate()
        .map(|(i, k)| (k, (i % 7 != 3).then(|| format!("v{i}").into_bytes())))
        .collect()
}

/// The expiry the format 5 fixture gives the i-th entry: every fifth put's, 1000 + i ms past
/// the epoch.
fn expiry_of(i: usize, v: &Option<Vec<u8>>) -> Option<u64> {
    (v.is_some() && i % 5 == 1).then_some(1_000 + i as u64)
}

/// The deleted ranges the format 6 fixtures carry: five ranges over the keys, and one past the
/// last key.
fn deleted_ranges() -> RangeSet {
    let keys: Vec<Vec<u8>> = entries().into_iter().map(|(k, _)| k).collect();
    let mut ranges: Vec<DeletedRange> = (0..5)
        .map(|j| DeletedRange {
            start: keys[100 * j + 1].clone(),
            end: End::Through(keys[100 * j + 1 + j].clone()),
        })
        .collect();
    let last = keys.last().unwrap();
    ranges.push(DeletedRange {
        start: lsm_bloom::table::successor(last),
        end: End::Through([last.as_slice(), b"zz"].concat()),
    });
    RangeSet::union(ranges)
}

/// Writes a missing fixture when `LSM_BLOOM_WRITE_MISSING_FIXTURES` is set (never overwrites),
/// in table format `version` (from 5, with `expiry_of`'s expiries).
fn fixture_path(version: u32, name: &str, opts: TableBuilderOptions) -> PathBuf {
    let opts = opts.with_format_version(version);
    let path = fixture_dir(version).join(name);
    if !path.exists() {
        assert!(
            std::env::var_os("LSM_BLOOM_WRITE_MISSING_FIXTURES").is_some(),
            "missing fixture {}",
            path.display()
        );
        std::fs::create_dir_all(fixture_dir(version)).unwrap();
        let mut b = TableBuilder::create(&path, opts).unwrap();
        for (i, (k, v)) in entries().into_iter().enumerate() {
            let expiry = expiry_of(i, &v).filter(|_| version >= 5);
            b.add_with_expiry(&k, v.as_deref(), expiry).unwrap();
        }
        if version >= 6 {
            b.set_range_deletes(deleted_ranges()).unwrap();
        }
        b.finish().unwrap();
    }
    path
}

fn options(filter: Option<FilterPolicy>) -> TableBuilderOptions {
    TableBuilderOptions::default()
        .with_block_size(512)
        .with_filter(filter)
        .with_level(1)
}

/// Opens `path` and checks every entry by point lookup and by a full scan.
fn check_table(path: &Path) -> Table {
    let t = Table::open(path, 1).unwrap();
    let want = entries();
    let mut stats = TableReadStats::default();
    for (k, v) in &want {
        assert_eq!(t.get(k, &mut stats, None).unwrap(), Some(v.clone()));
    }
    let t = std::sync::Arc::new(t);
    let scanned: Vec<(Vec<u8>, Option<Vec<u8>>)> = t
        .iter(std::ops::Bound::Unbounded)
        .map(|e| e.map(|e| (e.key, e.value)).unwrap())
        .collect();
    assert_eq!(scanned, want);
    let p = t.properties();
    assert_eq!(p.entries, want.len() as u64);
    assert_eq!(
        p.tombstones,
        want.iter().filter(|(_, v)| v.is_none()).count() as u64
    );
    assert_eq!(p.level, 1);
    std::sync::Arc::into_inner(t).unwrap()
}

#[test]
fn table_v1_fixtures_still_read() {
    let blocked = check_table(&fixture_path(
        1,
        "blocked-10bpk.sst",
        options(Some(FilterPolicy::bits_per_key(FilterKind::Blocked, 10.0))),
    ));
    assert_eq!(blocked.properties().filter_kind, Some(FilterKind::Blocked));
    let FilterState::Valid(f) = blocked.filter() else {
        panic!("v1 fixture's filter not valid: {:?}", blocked.filter());
    };
    for (k, _) in entries() {
        assert!(f.may_contain(&k));
    }
    let plain = check_table(&fixture_path(1, "no-filter.sst", options(None)));
    assert!(matches!(plain.filter(), FilterState::None));
    assert_eq!(plain.properties().filter_kind, None);
    for t in [&blocked, &plain] {
        assert_eq!(t.format_version(), 1);
        assert!(matches!(t.prefix_filter(), FilterState::None));
        assert_eq!(t.properties().prefix_extractor, None);
        let rule = PrefixExtractor::fixed(7);
        assert_eq!(
            t.check_prefix(rule, b"user:70", hash_key(b"user:70")),
            PrefixCheck::Unfiltered
        );
    }
}

/// A format 2 table with a prefix filter under `rule`: every key's prefix passes it, the
/// recorded rule and count are right, and another rule gets `Unfiltered`.
fn check_prefix_table(t: &Table, rule: PrefixExtractor, kind: FilterKind, version: u32) {
    assert_eq!(t.format_version(), version);
    let p = t.properties();
    assert_eq!(p.prefix_extractor.as_deref(), Some(rule.id().as_str()));
    assert_eq!(p.prefix_filter_kind, Some(kind));
    let mut prefixes: Vec<Vec<u8>> = entries()
        .iter()
        .filter_map(|(k, _)| rule.prefix(k).map(<[u8]>::to_vec))
        .collect();
    prefixes.dedup();
    assert_eq!(p.prefixes, prefixes.len() as u64);
    assert!(matches!(t.prefix_filter(), FilterState::Valid(_)));
    for q in &prefixes {
        assert_eq!(t.check_prefix(rule, q, hash_key(q)), PrefixCheck::Maybe);
        let other = PrefixExtractor::fixed(q.len() as u32 + 1);
        assert_eq!(
            t.check_prefix(other, q, hash_key(q)),
            PrefixCheck::Unfiltered
        );
    }
    let absent = (0..1000)
        .map(|i| format!("nope{i:04}:"))
        .filter(|q| {
            t.check_prefix(rule, q.as_bytes(), hash_key(q.as_bytes())) == PrefixCheck::Absent
        })
        .count();
    assert!(absent > 900, "{absent} of 1000 absent prefixes excluded");
}

#[test]
fn table_v2_fixtures_read_with_their_prefix_filters() {
    let fixed = PrefixExtractor::fixed(7);
    let both = check_table(&fixture_path(
        2,
        "blocked-prefix-fixed7.sst",
        options(Some(FilterPolicy::bits_per_key(FilterKind::Blocked, 10.0)))
            .with_prefix_extractor(Some(fixed)),
    ));
    check_prefix_table(&both, fixed, FilterKind::Blocked, 2);
    assert!(matches!(both.filter(), FilterState::Valid(_)));
    assert_eq!(both.properties().filter_kind, Some(FilterKind::Blocked));

    let delimiter = PrefixExtractor::delimiter(b':', 2);
    let only = check_table(&fixture_path(
        2,
        "ribbon-prefix-only-delim2.sst",
        options(Some(FilterPolicy::target_fpr(FilterKind::Ribbon, 0.01)))
            .with_prefix_extractor(Some(delimiter))
            .with_whole_key_filter(false),
    ));
    check_prefix_table(&only, delimiter, FilterKind::Ribbon, 2);
    assert!(matches!(only.filter(), FilterState::None));
    assert_eq!(only.properties().filter_kind, None);

    let plain = check_table(&fixture_path(2, "no-filter.sst", options(None)));
    assert_eq!(plain.format_version(), 2);
    assert!(matches!(plain.filter(), FilterState::None));
    assert!(matches!(plain.prefix_filter(), FilterState::None));
}

/// Format 3 tables (per-block compression): an LZ4 table whose blocks shrank, and a raw one;
/// both read every entry, and the recorded byte counts match the file.
#[test]
fn table_v3_fixtures_read_compressed_and_raw_blocks() {
    let lz4 = check_table(&fixture_path(
        3,
        "lz4-blocked-prefix-fixed7.sst",
        options(Some(FilterPolicy::bits_per_key(FilterKind::Blocked, 10.0)))
            .with_prefix_extractor(Some(PrefixExtractor::fixed(7)))
            .with_compression(Compression::Lz4),
    ));
    check_prefix_table(&lz4, PrefixExtractor::fixed(7), FilterKind::Blocked, 3);
    let p = lz4.properties();
    assert_eq!(p.compression, Compression::Lz4);
    assert!(
        p.raw_data_bytes > p.data_bytes + p.data_bytes / 4,
        "{} raw bytes in {} on disk",
        p.raw_data_bytes,
        p.data_bytes
    );
    let plain = check_table(&fixture_path(3, "no-filter.sst", options(None)));
    assert_eq!(plain.format_version(), 3);
    let p = plain.properties();
    assert_eq!(p.compression, Compression::None);
    // Each raw block's trailer is a type byte and a CRC.
    assert_eq!(p.raw_data_bytes + 5 * p.data_blocks, p.data_bytes);
}

/// A format 3 table written with alignment padding between its uncompressed blocks (FORMAT.md
/// §3): read by its handles across the gaps, no block straddling a 4 KiB page it need not.
#[test]
fn table_v3_aligned_fixture_reads_across_its_padding() {
    let t = check_table(&fixture_path(
        3,
        "raw-aligned-blocked.sst",
        options(Some(FilterPolicy::bits_per_key(FilterKind::Blocked, 10.0))),
    ));
    assert_eq!(t.format_version(), 3);
    assert!(matches!(t.filter(), FilterState::Valid(_)));
    let (mut gaps, mut end, mut stored) = (0, 0, 0);
    for h in t.data_block_handles() {
        assert!(h.offset >= end, "{h:?} overlaps the block before");
        assert_eq!(
            h.offset / 4096,
            (h.offset + h.size - 1) / 4096,
            "{h:?} straddles"
        );
        gaps += u64::from(h.offset > end);
        end = h.offset + h.size;
        stored += h.size;
    }
    assert!(gaps > 0, "no padding in the fixture");
    let p = t.properties();
    assert_eq!(p.data_bytes, end, "the data area ends with the last block");
    assert_eq!(p.raw_data_bytes + 5 * p.data_blocks, stored);
}

/// A format 4 table's range filter: every key's own range and every range around a key is
/// "maybe", nearly every short empty range right after a key is "empty", and the recorded
/// policy is the one it was written with.
fn check_range_table(t: &Table, policy: RangePolicy) {
    assert_eq!(t.format_version(), 4);
    assert_eq!(t.properties().range_filter, Some(policy));
    let RangeFilterState::Valid(f) = t.range_filter() else {
        panic!(
            "v4 fixture's range filter not valid: {:?}",
            t.range_filter()
        );
    };
    assert_eq!(f.keys(), t.properties().entries);
    assert_eq!(f.prefix(), b"user:");
    let point = |k: &[u8]| u64::from_be_bytes(k[5..13].try_into().unwrap());
    let at = |p: u64| [&b"user:"[..], &p.to_be_bytes()].concat();
    let (mut empty, mut asked) = (0, 0);
    for (k, _) in entries() {
        let p = point(&k);
        let (lo, hi) = (at(p - 5), at(p + 5));
        assert_ne!(t.check_range(Included(&k), Included(&k)), RangeCheck::Empty);
        assert_ne!(
            t.check_range(Included(&lo), Included(&hi)),
            RangeCheck::Empty
        );
        let (lo, hi) = (at(p + 1), at(p + 20));
        asked += 1;
        empty += usize::from(t.check_range(Included(&lo), Included(&hi)) == RangeCheck::Empty);
    }
    assert!(
        empty * 100 >= asked * 95,
        "{empty} of {asked} empty ranges excluded"
    );
}

/// Format 4 tables (range filters): one beside a blocked filter, one compressed beside a
/// prefix filter; both read every entry and answer ranges.
#[test]
fn table_v4_fixtures_read_with_their_range_filters() {
    let r12 = RangePolicy::bits_per_key(12.0, 32).unwrap();
    let blocked = check_table(&fixture_path(
        4,
        "blocked-range12.sst",
        options(Some(FilterPolicy::bits_per_key(FilterKind::Blocked, 10.0)))
            .with_range_filter(Some(r12)),
    ));
    check_range_table(&blocked, r12);
    assert!(matches!(blocked.filter(), FilterState::Valid(_)));
    let r16 = RangePolicy::bits_per_key(16.0, 32).unwrap();
    let lz4 = check_table(&fixture_path(
        4,
        "lz4-range16-prefix-fixed7.sst",
        options(Some(FilterPolicy::bits_per_key(FilterKind::Ribbon, 10.0)))
            .with_prefix_extractor(Some(PrefixExtractor::fixed(7)))
            .with_compression(Compression::Lz4)
            .with_range_filter(Some(r16)),
    ));
    check_range_table(&lz4, r16);
    check_prefix_table(&lz4, PrefixExtractor::fixed(7), FilterKind::Ribbon, 4);
    assert_eq!(lz4.properties().compression, Compression::Lz4);
    // Older formats have none.
    let v3 = check_table(&fixture_path(3, "no-filter.sst", options(None)));
    assert!(matches!(v3.range_filter(), RangeFilterState::None));
    assert_eq!(
        v3.check_range(Included(b"user:"), Included(b"user:")),
        RangeCheck::Unfiltered
    );
}

/// Format 5 tables (expiring entries): a raw one and a compressed one; every entry reads as
/// written, with its expiry, and the properties count them.
#[test]
fn table_v5_fixtures_read_with_their_expiries() {
    let want = entries();
    for (name, opts) in [
        (
            "blocked-expiring.sst",
            options(Some(FilterPolicy::bits_per_key(FilterKind::Blocked, 10.0))),
        ),
        (
            "lz4-expiring.sst",
            options(None).with_compression(Compression::Lz4),
        ),
    ] {
        let t = check_table(&fixture_path(5, name, opts));
        assert_eq!(t.format_version(), 5);
        let t = std::sync::Arc::new(t);
        let expiries: Vec<Option<u64>> = t
            .iter(std::ops::Bound::Unbounded)
            .map(|e| e.unwrap().expiry)
            .collect();
        let model: Vec<Option<u64>> = want
            .iter()
            .enumerate()
            .map(|(i, (_, v))| expiry_of(i, v))
            .collect();
        assert_eq!(expiries, model, "{name}");
        let expiring: Vec<u64> = model.iter().flatten().copied().collect();
        let p = t.properties();
        assert_eq!(p.expiring, expiring.len() as u64, "{name}");
        let span = (
            *expiring.iter().min().unwrap(),
            *expiring.iter().max().unwrap(),
        );
        assert_eq!(p.expiry_span, Some(span), "{name}");
    }
    // Older formats hold none, and refuse to.
    let v4 = check_table(&fixture_path(4, "blocked-range12.sst", options(None)));
    assert_eq!(
        (v4.properties().expiring, v4.properties().expiry_span),
        (0, None)
    );
    let dir = tempfile::tempdir().unwrap();
    let mut b = TableBuilder::create(
        &dir.path().join("v4.sst"),
        options(None).with_format_version(4),
    )
    .unwrap();
    let e = b.add_with_expiry(b"k", Some(b"v"), Some(5)).unwrap_err();
    assert!(e.to_string().contains("version 5"), "{e}");
}

/// The format 6 fixtures carry their deleted ranges, which widen the key range past the last
/// key, and otherwise read as format 5 (`expiry_of`'s expiries included).
#[test]
fn table_v6_fixtures_read_with_their_deleted_ranges() {
    let keys: Vec<Vec<u8>> = entries().into_iter().map(|(k, _)| k).collect();
    let ranges = deleted_ranges();
    for (name, opts) in [
        (
            "ribbon-deleting.sst",
            options(Some(FilterPolicy::bits_per_key(FilterKind::Ribbon, 10.0))),
        ),
        (
            "lz4-deleting.sst",
            options(None).with_compression(Compression::Lz4),
        ),
    ] {
        let t = check_table(&fixture_path(6, name, opts));
        assert_eq!(t.format_version(), 6);
        assert_eq!(t.range_deletes(), &ranges, "{name}");
        assert_eq!(t.properties().range_deletes, 6, "{name}");
        assert_eq!(t.min_key(), keys[0].as_slice());
        let End::Through(last) = &ranges.ranges()[5].end else {
            panic!("{name}: the last range is open");
        };
        assert_eq!(t.max_key(), last.as_slice(), "{name}");
        assert!(t.range_deletes().covers(&keys[402]), "{name}");
        assert!(!t.range_deletes().covers(&keys[0]), "{name}");
        assert_eq!(t.properties().expire_whole_by(), None, "{name}");
        let t = std::sync::Arc::new(t);
        let expiries: Vec<Option<u64>> = t
            .iter(std::ops::Bound::Unbounded)
            .map(|e| e.unwrap().expiry)
            .collect();
        let model: Vec<Option<u64>> = entries()
            .iter()
            .enumerate()
            .map(|(i, (_, v))| expiry_of(i, v))
            .collect();
        assert_eq!(expiries, model, "{name}");
    }
    // Format 5 holds none.
    let v5 = check_table(&fixture_path(5, "lz4-expiring.sst", options(None)));
    assert!(v5.range_deletes().is_empty());
    assert_eq!(v5.properties().range_deletes, 0);
}

/// The format 7 fixtures carry, besides what format 6 does, the expiries at ranks k/16 of
/// their expiring puts (all of them sampled: fewer than the sample's 1,024).
#[test]
fn table_v7_fixtures_read_with_their_expiry_quantiles() {
    let mut expiring: Vec<u64> = entries()
        .iter()
        .enumerate()
        .filter_map(|(i, (_, v))| expiry_of(i, v))
        .collect();
    expiring.sort_unstable();
    let n = expiring.len();
    let want: Vec<u64> = (1..=15).map(|k| expiring[k * n / 16]).collect();
    for (name, opts) in [
        (
            "blocked-quantiles.sst",
            options(Some(FilterPolicy::bits_per_key(FilterKind::Blocked, 10.0))),
        ),
        (
            "lz4-quantiles.sst",
            options(None).with_compression(Compression::Lz4),
        ),
    ] {
        let t = check_table(&fixture_path(7, name, opts));
        assert_eq!(t.format_version(), 7);
        let p = t.properties();
        assert_eq!(p.expiry_quantiles, want, "{name}");
        assert_eq!(p.expiring, n as u64, "{name}");
        let bytes: u64 = entries()
            .iter()
            .enumerate()
            .filter(|(i, (_, v))| expiry_of(*i, v).is_some())
            .map(|(_, (k, v))| (k.len() + v.as_ref().map_or(0, Vec::len)) as u64)
            .sum();
        assert_eq!(p.expiring_bytes, bytes, "{name}");
        assert_eq!(t.range_deletes(), &deleted_ranges(), "{name}");
        // Half the puts have expired at the median: the estimate says about that much of their
        // share of the bytes.
        let of_table = p.expiring_bytes as f64 / p.raw_data_bytes as f64;
        let share = p.expired_share(want[7]) / of_table;
        assert!((share - 0.5).abs() < 0.07, "{name}: {share}");
    }
    // Format 6 holds none.
    let v6 = check_table(&fixture_path(6, "lz4-deleting.sst", options(None)));
    assert!(v6.properties().expiry_quantiles.is_empty());
}

/// The builder writes older formats on request, and they read as such.
#[test]
fn the_builder_writes_every_format_version_and_refuses_what_one_cannot_hold() {
    let dir = tempfile::tempdir().unwrap();
    for version in 1..=7 {
        let path = dir.path().join(format!("v{version}.sst"));
        let mut b = TableBuilder::create(
            &path,
            options(Some(FilterPolicy::default())).with_format_version(version),
        )
        .unwrap();
        for (k, v) in entries() {
            b.add(&k, v.as_deref()).unwrap();
        }
        b.finish().unwrap();
        assert_eq!(check_table(&path).format_version(), version);
    }
    for (version, opts) in [
        (2, options(None).with_compression(Compression::Lz4)),
        (
            1,
            options(Some(FilterPolicy::default()))
                .with_prefix_extractor(Some(PrefixExtractor::fixed(3))),
        ),
        (
            3,
            options(None).with_range_filter(Some(RangePolicy::bits_per_key(12.0, 32).unwrap())),
        ),
        (8, options(None)),
        (0, options(None)),
    ] {
        let opts = opts.with_format_version(version);
        let e = TableBuilder::create(&dir.path().join("x.sst"), opts)
            .map(|_| ())
            .unwrap_err();
        assert!(e.to_string().contains(&format!("version {version}")), "{e}");
    }
}
