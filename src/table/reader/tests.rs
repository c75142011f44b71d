use super::*;
use crate::table::{TableBuilder, TableBuilderOptions};

/// The prefix-first index search agrees with a plain search over the keys, for keys
/// shorter than, equal to and longer than 8 bytes, with shared prefixes and zero bytes.
#[test]
fn block_search_by_prefix_matches_the_plain_search() {
    let mut keys: Vec<Vec<u8>> = Vec::new();
    for a in [
        &b""[..],
        b"\0",
        b"a",
        b"a\0",
        b"ab",
        b"abcdefgh",
        b"abcdefgh\0",
        b"abcdefghi",
    ] {
        for i in 0..40u8 {
            let mut k = a.to_vec();
            k.push(i);
            keys.push(k.clone());
            k.extend_from_slice(b"12345678");
            keys.push(k);
        }
    }
    keys.sort();
    keys.dedup();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("t.sst");
    let opts = TableBuilderOptions {
        block_size: 64,
        filter: None,
        level: 0,
        ..TableBuilderOptions::default()
    };
    let mut b = TableBuilder::create(&path, opts).unwrap();
    for k in &keys {
        b.add(k, Some(b"v")).unwrap();
    }
    b.finish().unwrap();
    let t = Table::open(&path, 1).unwrap();
    assert!(t.index.len() > 50);
    let mut probes = keys.clone();
    probes.extend(keys.iter().map(|k| [k.as_slice(), b"\0"].concat()));
    probes.extend(keys.iter().map(|k| k[..k.len() - 1].to_vec()));
    probes.push(vec![0xff; 12]);
    probes.push(Vec::new());
    for k in &probes {
        let plain = (0..t.index.len())
            .position(|i| t.index.last_key(i).is_some_and(|l| l >= k.as_slice()))
            .unwrap_or(t.index.len());
        assert_eq!(t.block_for(k), plain, "{k:?}");
        let (min, max) = (t.min_key(), t.max_key());
        assert_eq!(
            t.covers(k),
            min <= k.as_slice() && k.as_slice() <= max,
            "{k:?}"
        );
        assert_eq!(t.ends_before(k), max < k.as_slice(), "{k:?}");
    }
    let mut stats = TableReadStats::default();
    for k in &keys {
        assert_eq!(
            t.get(k, &mut stats, None).unwrap(),
            Some(Some(b"v".to_vec()))
        );
    }
}

/// A block read once is not kept; read again soon after, it is cached; the third read
/// hits. Every read answers the same, cached or not.
#[test]
fn a_block_is_cached_on_its_second_miss() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("t.sst");
    let opts = TableBuilderOptions {
        block_size: 256,
        ..TableBuilderOptions::default()
    };
    let mut b = TableBuilder::create(&path, opts).unwrap();
    let keys: Vec<Vec<u8>> = (0..400u32)
        .map(|i| format!("k{i:05}").into_bytes())
        .collect();
    for k in &keys {
        b.add(k, Some(k)).unwrap();
    }
    b.finish().unwrap();
    let t = Table::open(&path, 1).unwrap();
    let cache = BlockCache::new(1 << 20).unwrap();
    // One key per block: the last of each.
    let lasts: Vec<&Vec<u8>> = keys
        .iter()
        .filter(|k| t.block_for(k) != t.block_for(&[k.as_slice(), b"\0"].concat()))
        .collect();
    assert!(lasts.len() > 20, "{} blocks", lasts.len());
    for (round, (reads, hits)) in [(1, 0), (1, 0), (0, 1)].into_iter().enumerate() {
        for k in &lasts {
            let mut stats = TableReadStats::default();
            let found = t.get(k, &mut stats, Some(&cache)).unwrap();
            assert_eq!(found, Some(Some(k.to_vec())));
            assert_eq!(
                (stats.blocks, stats.cache_hits),
                (reads, hits),
                "round {round}"
            );
        }
        if round == 0 {
            assert_eq!(cache.bytes(), 0, "blocks read once were kept");
        }
    }
}

/// One level's tables in `dir`, table n holding keys `{prefix}{k:03}` for k in
/// `ranges[n]`.
fn level_of(dir: &std::path::Path, ranges: &[(u32, u32)], prefix: &str) -> Vec<Arc<Table>> {
    ranges
        .iter()
        .enumerate()
        .map(|(n, &(lo, hi))| {
            let path = dir.join(format!("{n}.sst"));
            let mut b = TableBuilder::create(&path, TableBuilderOptions::default()).unwrap();
            for k in lo..=hi {
                b.add(format!("{prefix}{k:03}").as_bytes(), Some(b"v"))
                    .unwrap();
            }
            b.finish().unwrap();
            Arc::new(Table::open(&path, n as u64).unwrap())
        })
        .collect()
}

/// `in_level` finds the table whose range holds the key, and none for keys in the gaps
/// between tables, before the first or after the last.
#[test]
fn in_level_finds_the_one_table_whose_range_holds_the_key() {
    let dir = tempfile::tempdir().unwrap();
    let ranges = [(10u32, 19u32), (30, 39), (40, 49)];
    let tables = level_of(dir.path(), &ranges, "k");
    let prefixes: Vec<u64> = tables.iter().map(|t| t.max_prefix()).collect();
    for k in 0..60u32 {
        let key = format!("k{k:03}");
        let want = ranges.iter().position(|&(lo, hi)| lo <= k && k <= hi);
        let got = Table::in_level(&tables, key.as_bytes()).map(|t| t.id() as usize);
        assert_eq!(got, want, "{key}");
        let by = Table::in_level_by(&tables, &prefixes, key.as_bytes());
        assert_eq!(by.map(|t| t.id() as usize), want, "{key} by prefixes");
    }
    assert!(Table::in_level(&[], b"k010").is_none());
    assert!(Table::in_level_by(&[], &[], b"k010").is_none());
}

/// `in_level_by` agrees with `in_level` when several tables' keys share their first 8
/// bytes (ties on the prefix array), for keys before, inside, between and after them.
#[test]
fn in_level_by_resolves_prefix_ties_as_in_level() {
    let dir = tempfile::tempdir().unwrap();
    let ranges = [(10u32, 19u32), (30, 39), (40, 49), (70, 79)];
    let tables = level_of(dir.path(), &ranges, "samepfx:");
    let prefixes: Vec<u64> = tables.iter().map(|t| t.max_prefix()).collect();
    assert!(
        prefixes.windows(2).all(|w| w[0] == w[1]),
        "all tables tie on the prefix"
    );
    let mut keys: Vec<Vec<u8>> = (0..90u32)
        .map(|k| format!("samepfx:{k:03}").into_bytes())
        .collect();
    keys.extend(
        [
            &b"samepfx"[..],
            b"samepfx:",
            b"samepfx:0",
            b"samepfy",
            b"a",
            b"",
        ]
        .map(<[u8]>::to_vec),
    );
    for key in keys {
        let want = Table::in_level(&tables, &key).map(|t| t.id());
        let got = Table::in_level_by(&tables, &prefixes, &key).map(|t| t.id());
        assert_eq!(got, want, "{key:?}");
    }
}

/// Deleted ranges: a set of ranges.
fn ranges(spans: &[(&str, &str)]) -> crate::table::RangeSet {
    crate::table::RangeSet::union(
        spans
            .iter()
            .map(|(s, e)| crate::table::DeletedRange {
                start: s.as_bytes().to_vec(),
                end: crate::table::End::Through(e.as_bytes().to_vec()),
            })
            .collect(),
    )
}

/// A table carries its deleted ranges through a reopen; its key range bounds them too, and
/// a table of ranges alone (no entry) holds its ranges' span.
#[test]
fn deleted_ranges_round_trip_and_widen_the_key_range() {
    let dir = tempfile::tempdir().unwrap();
    for (name, keys, spans, min, max) in [
        (
            "both.sst",
            &["c", "m"][..],
            &[("a", "b"), ("n", "q")][..],
            "a",
            "q",
        ),
        ("inside.sst", &["a", "z"][..], &[("c", "d")][..], "a", "z"),
        (
            "alone.sst",
            &[][..],
            &[("f", "h"), ("j", "j")][..],
            "f",
            "j",
        ),
    ] {
        let path = dir.path().join(name);
        let mut b = TableBuilder::create(&path, TableBuilderOptions::default()).unwrap();
        for k in keys {
            b.add(k.as_bytes(), Some(b"v")).unwrap();
        }
        b.set_range_deletes(ranges(spans)).unwrap();
        let props = b.finish().unwrap();
        assert_eq!(props.range_deletes, spans.len() as u64, "{name}");
        let t = Table::open(&path, 1).unwrap();
        assert_eq!(t.range_deletes(), &ranges(spans), "{name}");
        assert_eq!((t.min_key(), t.max_key()), (min.as_bytes(), max.as_bytes()));
        for (s, e) in spans {
            assert!(t.covers(s.as_bytes()) && t.covers(e.as_bytes()), "{name}");
            assert!(t.range_deletes().covers(s.as_bytes()), "{name}");
        }
        for k in keys {
            let mut reads = TableReadStats::default();
            let got = t.get(k.as_bytes(), &mut reads, None).unwrap();
            assert_eq!(got, Some(Some(b"v".to_vec())), "{name}");
            assert!(!t.range_deletes().covers(k.as_bytes()), "{name}");
        }
        assert_eq!(t.properties().expire_whole_by(), None);
    }
}

/// A table of an older format cannot carry deleted ranges, nor an open end.
#[test]
fn deleted_ranges_need_format_6_and_ends_through_a_key() {
    let dir = tempfile::tempdir().unwrap();
    let opts = TableBuilderOptions {
        format_version: 5,
        ..TableBuilderOptions::default()
    };
    let mut b = TableBuilder::create(&dir.path().join("5.sst"), opts).unwrap();
    let err = b.set_range_deletes(ranges(&[("a", "b")])).unwrap_err();
    assert!(err.to_string().contains("version 6"), "{err}");
    let mut b =
        TableBuilder::create(&dir.path().join("6.sst"), TableBuilderOptions::default()).unwrap();
    let open = crate::table::RangeSet::union(vec![crate::table::DeletedRange {
        start: b"a".to_vec(),
        end: crate::table::End::Unbounded,
    }]);
    assert!(b.set_range_deletes(open).is_err());
}

/// Every byte of the range-delete block is checked: any flip refuses the table (a table read
/// without its ranges would show deleted keys), never a panic.
#[test]
fn a_damaged_range_delete_block_refuses_the_table() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("t.sst");
    let mut b = TableBuilder::create(&path, TableBuilderOptions::default()).unwrap();
    b.add(b"k", Some(b"v")).unwrap();
    b.set_range_deletes(ranges(&[("a", "b"), ("x", "y")]))
        .unwrap();
    let props = b.finish().unwrap();
    let (offset, size) = props.range_delete_block;
    let good = std::fs::read(&path).unwrap();
    for i in offset..offset + size {
        let mut bad = good.clone();
        bad[i as usize] ^= 0x10;
        std::fs::write(&path, &bad).unwrap();
        let err = Table::open(&path, 1).unwrap_err();
        assert!(
            err.to_string().contains("range-delete block"),
            "byte {i}: {err}"
        );
    }
}
