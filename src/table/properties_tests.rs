//! Tests of `properties.rs`.
use super::*;

fn properties(prefix: bool) -> Properties {
    Properties {
        entries: 3,
        tombstones: 1,
        data_blocks: 1,
        data_bytes: 99,
        raw_data_bytes: 180,
        compression: Compression::Lz4,
        min_key: b"a".to_vec(),
        max_key: b"z".to_vec(),
        filter_kind: Some(FilterKind::Blocked),
        filter_bits_per_key: 9.5,
        level: 2,
        created_unix_ms: 7,
        writer: "w".into(),
        prefix_filter_kind: prefix.then_some(FilterKind::Ribbon),
        prefix_extractor: prefix.then(|| "fixed:4".to_string()),
        prefixes: if prefix { 2 } else { 0 },
        range_filter: None,
        expiring: 0,
        expiry_span: None,
        expiry_quantiles: Vec::new(),
        expiring_bytes: 0,
        range_deletes: 0,
        range_delete_block: (0, 0),
    }
}

#[test]
fn properties_round_trip_in_every_version() {
    for prefix in [false, true] {
        let p = properties(prefix);
        let b = p.encode(3).unwrap();
        assert_eq!(Properties::decode(&b, 3).unwrap(), p);
        for len in 0..b.len() {
            assert!(Properties::decode(&b[..len], 3).is_err());
        }
        // Version 2 has no compression fields: a raw table's derive from its blocks.
        assert!(p.encode(2).is_err());
        let raw = Properties {
            compression: Compression::None,
            raw_data_bytes: 95,
            ..p.clone()
        };
        assert_eq!(Properties::decode(&raw.encode(2).unwrap(), 2).unwrap(), raw);
        assert_eq!(prefix, raw.encode(1).is_err());
    }
    // A v1 block ends after the writer.
    let v1 = Properties {
        compression: Compression::None,
        raw_data_bytes: 95,
        ..properties(false)
    };
    let b = v1.encode(1).unwrap();
    assert_eq!(Properties::decode(&b, 1).unwrap(), v1);
    assert!(Properties::decode(&b, 2).is_err());
}

#[test]
fn range_filter_properties_round_trip_in_format_4_only() {
    let p = Properties {
        range_filter: Some(RangePolicy::bits_per_key(14.5, 32).unwrap()),
        ..properties(true)
    };
    let b = p.encode(4).unwrap();
    assert_eq!(Properties::decode(&b, 4).unwrap(), p);
    for len in 0..b.len() {
        assert!(Properties::decode(&b[..len], 4).is_err());
    }
    assert!(p.encode(3).is_err(), "format 3 has no range filter field");
    let none = properties(true);
    assert_eq!(
        Properties::decode(&none.encode(4).unwrap(), 4).unwrap(),
        none
    );
    // A v3 block read as v4 lacks the range filter fields.
    assert!(Properties::decode(&none.encode(3).unwrap(), 4).is_err());
    // The tail is kind u8, bits f64, range u64, then the CRC.
    let tail = |kind: u8, bits: f64, range: u64| {
        let mut raw = unseal(&none.encode(4).unwrap()).unwrap().to_vec();
        raw.truncate(raw.len() - 17);
        raw.push(kind);
        raw.extend_from_slice(&bits.to_le_bytes());
        raw.extend_from_slice(&range.to_le_bytes());
        seal(&mut raw, 0);
        Properties::decode(&raw, 4)
    };
    assert!(tail(1, 12.0, 32).is_ok());
    for (kind, bits, range) in [
        (0, 12.0, 0),
        (0, 0.0, 5),
        (2, 12.0, 32),
        (1, 2.0, 32),
        (1, 12.0, 0),
    ] {
        let err = tail(kind, bits, range).unwrap_err();
        assert!(err.contains("range filter"), "{kind} {bits} {range}: {err}");
    }
}

/// Checks the three `u64` fields format `version` added, which `with` sets: they round-trip,
/// and a cut block and the older format refuse them; then, written over the fields of a
/// block without them, each of `bad` is refused with an error naming `what`, and `good` is
/// taken.
fn last_three_u64s(version: u32, with: Properties, good: [u64; 3], bad: &[[u64; 3]], what: &str) {
    let b = with.encode(version).unwrap();
    assert_eq!(Properties::decode(&b, version).unwrap(), with);
    for len in 0..b.len() {
        assert!(Properties::decode(&b[..len], version).is_err());
    }
    assert!(
        with.encode(version - 1).is_err(),
        "format {} lacks {what}",
        version - 1
    );
    let none = properties(true);
    let plain = none.encode(version).unwrap();
    assert_eq!(Properties::decode(&plain, version).unwrap(), none);
    let older = none.encode(version - 1).unwrap();
    assert!(Properties::decode(&older, version).is_err());
    // The fields end the block, before the CRC.
    let tail = |fields: [u64; 3]| {
        let mut raw = unseal(&plain).unwrap().to_vec();
        raw.truncate(raw.len() - 24);
        for v in fields {
            raw.extend_from_slice(&v.to_le_bytes());
        }
        seal(&mut raw, 0);
        Properties::decode(&raw, version)
    };
    assert!(tail(good).is_ok());
    for &fields in bad {
        let err = tail(fields).unwrap_err();
        assert!(err.contains(what), "{fields:?}: {err}");
    }
}

/// Expiring, earliest, latest. 3 entries, 1 a tombstone: at most 2 expiring puts.
#[test]
fn expiry_properties_round_trip_in_format_5_only() {
    let p = Properties {
        expiring: 2,
        expiry_span: Some((10, 20)),
        ..properties(true)
    };
    let bad = [[3, 1, 2], [0, 1, 2], [1, 0, 2], [1, 3, 2], [1, 2, u64::MAX]];
    last_three_u64s(5, p, [2, 5, 5], &bad, "expiry");
}

/// Ranges, offset, size (at least 8 bytes per range, plus 8).
#[test]
fn range_delete_properties_round_trip_in_format_6_only() {
    let p = Properties {
        range_deletes: 2,
        range_delete_block: (100, 30),
        ..properties(true)
    };
    let bad = [[1, 0, 0], [0, 5, 12], [3, 9, 24], [u64::MAX, 0, u64::MAX]];
    last_three_u64s(6, p, [2, 9, 24], &bad, "range delete");
}

/// Format 7 adds the expiring puts' bytes (at most the raw data bytes, 180 here) and the expiry
/// quantiles: a count (15 with expiring puts, else 0) and the points, in order and inside the
/// expiry span; format 6 writes none and reads none.
#[test]
fn expiry_quantiles_round_trip_in_format_7_only() {
    let q: Vec<u64> = (0..15).map(|i| 10 + i / 2).collect();
    let p = Properties {
        expiring: 2,
        expiry_span: Some((10, 20)),
        expiry_quantiles: q.clone(),
        expiring_bytes: 150,
        ..properties(true)
    };
    let b = p.encode(7).unwrap();
    assert_eq!(Properties::decode(&b, 7).unwrap(), p);
    for len in 0..b.len() {
        assert!(Properties::decode(&b[..len], 7).is_err());
    }
    let v6 = Properties::decode(&p.encode(6).unwrap(), 6).unwrap();
    assert_eq!((v6.expiry_quantiles, v6.expiring_bytes), (Vec::new(), 0));
    assert!(
        Properties::decode(&b, 6).is_err(),
        "trailing bytes in format 6"
    );
    let none = properties(true);
    assert_eq!(
        Properties::decode(&none.encode(7).unwrap(), 7).unwrap(),
        none
    );
    // Refused: a wrong count, points out of order or outside the span, and points for a
    // table with no expiring put.
    let mut reversed = q.clone();
    reversed.swap(0, 14);
    let mut late = q.clone();
    late[14] = 21;
    for (with, what) in [
        (
            Properties {
                expiry_quantiles: q[..14].to_vec(),
                ..p.clone()
            },
            "expiry quantiles",
        ),
        (
            Properties {
                expiry_quantiles: reversed,
                ..p.clone()
            },
            "out of order",
        ),
        (
            Properties {
                expiry_quantiles: late,
                ..p.clone()
            },
            "outside",
        ),
        (
            Properties {
                expiry_quantiles: vec![0; 15],
                ..none.clone()
            },
            "expiry quantiles",
        ),
    ] {
        let err = Properties::decode(&with.encode(7).unwrap(), 7).unwrap_err();
        assert!(err.contains(what), "{err}");
    }
}

#[test]
fn properties_with_impossible_compression_fields_are_refused() {
    for (compression, raw) in [
        (Compression::Lz4, 99 * 255 + 1),
        (Compression::None, 100),
        (Compression::Zstd(0), 10),
        (Compression::Zstd(23), 10),
    ] {
        let p = Properties {
            compression,
            raw_data_bytes: raw,
            ..properties(false)
        };
        assert!(
            Properties::decode(&p.encode(3).unwrap(), 3).is_err(),
            "{compression} {raw}"
        );
    }
}

#[test]
fn properties_with_disagreeing_prefix_fields_are_refused() {
    for (kind, rule, prefixes) in [
        (Some(FilterKind::Blocked), None, 1),
        (None, Some("fixed:4"), 0),
        (None, None, 1),
        (Some(FilterKind::Blocked), Some("fixed:4"), 4),
    ] {
        let p = Properties {
            prefix_filter_kind: kind,
            prefix_extractor: rule.map(str::to_string),
            prefixes,
            ..properties(false)
        };
        let err = Properties::decode(&p.encode(3).unwrap(), 3).unwrap_err();
        assert!(
            err.contains("prefix") || err.contains("inconsistent"),
            "{err}"
        );
    }
}
