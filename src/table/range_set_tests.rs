//! Tests of `range_set.rs`.

use super::*;

fn r(s: &str, end: End) -> DeletedRange {
    DeletedRange {
        start: s.as_bytes().to_vec(),
        end,
    }
}
fn before(k: &str) -> End {
    End::Before(k.as_bytes().to_vec())
}
fn through(k: &str) -> End {
    End::Through(k.as_bytes().to_vec())
}

/// The union answers exactly as the ranges it was built from, for keys around every
/// boundary.
#[test]
fn a_union_covers_exactly_the_keys_of_its_ranges() {
    let ranges = vec![
        r("m", before("p")),
        r("b", through("d")),
        r("c", before("f")),
        r("d\0", through("e")),
        r("x", End::Unbounded),
        r("q", before("q")), // empty
        r("f", before("g")), // touches "c".."f"
    ];
    let set = RangeSet::union(ranges.clone());
    assert_eq!(set.len(), 3, "{set:?}");
    let keys = [
        "", "a", "b", "b\0", "c", "d", "d\0", "e", "e\0", "f", "f\0", "g", "l", "m", "o", "p", "q",
        "w", "x", "x\0", "zzz",
    ];
    for k in keys {
        let want = ranges.iter().any(|r| r.covers(k.as_bytes()));
        assert_eq!(set.covers(k.as_bytes()), want, "key {k:?}");
    }
}

/// Splitting at a key keeps the keys through it on one side and the rest on the other.
#[test]
fn a_split_keeps_every_key_on_exactly_one_side() {
    let set = RangeSet::union(vec![
        r("b", through("d")),
        r("f", before("h")),
        r("k", End::Unbounded),
    ]);
    for at in ["a", "b", "c", "d", "e", "f", "g", "h", "k", "z"] {
        let mut low = set.clone();
        let high = low.split_after(at.as_bytes());
        for k in [
            "a", "b", "c", "c\0", "d", "e", "f", "g", "g\0", "h", "k", "q",
        ] {
            let k = k.as_bytes();
            assert_eq!(set.covers(k), low.covers(k) || high.covers(k), "{at} {k:?}");
            assert!(!(low.covers(k) && high.covers(k)), "{at} {k:?}");
            if low.covers(k) {
                assert!(k <= at.as_bytes());
            }
        }
    }
}

/// A table's block round-trips; damage is refused with a reason, never a panic.
#[test]
fn the_block_round_trips_and_refuses_what_is_not_a_sorted_union() {
    let set = RangeSet::union(vec![r("b", through("d")), r("k", through("k"))]);
    let bytes = set.encode().unwrap();
    assert_eq!(RangeSet::decode(&bytes).unwrap(), set);
    let open = RangeSet::union(vec![r("b", before("d"))]);
    assert!(open.encode().is_err());
    let overlapping = {
        let mut b = 2u32.to_le_bytes().to_vec();
        for (s, e) in [("b", "f"), ("c", "g")] {
            put_len_prefixed(&mut b, s.as_bytes(), "key").unwrap();
            put_len_prefixed(&mut b, e.as_bytes(), "key").unwrap();
        }
        b
    };
    assert!(RangeSet::decode(&overlapping)
        .unwrap_err()
        .contains("above"));
    let mut huge = bytes.clone();
    huge[..4].copy_from_slice(&u32::MAX.to_le_bytes());
    assert!(RangeSet::decode(&huge).unwrap_err().contains("cannot fit"));
    for cut in 0..bytes.len() {
        assert!(RangeSet::decode(&bytes[..cut]).is_err());
    }
}

/// Ranges whose starts share their first 8 bytes (and shorter ones, and zero bytes): the
/// search by prefix answers as a plain scan of the ranges.
#[test]
fn the_search_by_prefix_answers_as_a_plain_scan() {
    let mut ranges = Vec::new();
    let mut keys: Vec<Vec<u8>> = Vec::new();
    for (i, head) in [&b"tenant:7"[..], b"tenant:", b"t", b"tenant:8", b""]
        .iter()
        .enumerate()
    {
        for j in 0..12u8 {
            let start = [*head, &[j * 3, b':']].concat();
            let last = [*head, &[j * 3 + 1]].concat();
            keys.extend([start.clone(), last.clone(), [&last[..], b"\0"].concat()]);
            keys.push([*head, &[j * 3 + 2]].concat());
            let end = match (i + j as usize) % 3 {
                0 => End::Before([*head, &[j * 3 + 1]].concat()),
                1 => End::Through(last),
                _ => End::Through([*head, &[j * 3 + 1, 0]].concat()),
            };
            ranges.push(DeletedRange { start, end });
        }
    }
    let set = RangeSet::union(ranges.clone());
    for k in &keys {
        let want = ranges.iter().any(|r| r.covers(k));
        assert_eq!(set.covers(k), want, "{k:?}");
    }
    let mut cut = set.clone();
    let rest = cut.split_after(b"tenant:7");
    for k in &keys {
        assert_eq!(set.covers(k), cut.covers(k) || rest.covers(k), "{k:?}");
    }
}

/// Ranges whose first keys all share 10 bytes: keys shorter than those, a prefix of them,
/// below, above, and inside answer as a plain scan.
#[test]
fn a_prefix_every_range_shares_is_searched_past() {
    let k = |i: u64, tail: &str| format!("{i:015}{tail}").into_bytes();
    // More ranges than `STRIDE` several times over: the search goes through `top`.
    let ranges: Vec<DeletedRange> = (0..500)
        .map(|i| DeletedRange {
            start: k(i * 100 + 10, "0"),
            end: match i % 2 {
                0 => End::Before(k(i * 100 + 20, "0")),
                _ => End::Through(k(i * 100 + 20, "0")),
            },
        })
        .collect();
    let set = RangeSet::union(ranges.clone());
    assert_eq!(set.common, b"0000000000".to_vec());
    assert!(set.top.len() > 5);
    let mut keys: Vec<Vec<u8>> = ["", "0", "00000000", "000000000", "0000000000", "1", "/"]
        .iter()
        .map(|s| s.as_bytes().to_vec())
        .collect();
    for i in 0..52_000 {
        keys.extend([k(i, "0"), k(i, ""), k(i, "1")]);
    }
    keys.push(b"00000000000".to_vec());
    keys.push(b"0000000000099999".to_vec());
    for key in &keys {
        let want = ranges.iter().any(|r| r.covers(key));
        assert_eq!(set.covers(key), want, "{:?}", String::from_utf8_lossy(key));
    }
}

/// `holds` says yes exactly when every key of the span lies in one range.
#[test]
fn a_span_is_held_only_inside_one_range() {
    let set = RangeSet::union(vec![
        r("b", through("d")),
        r("f", before("h")),
        r("k", End::Unbounded),
    ]);
    for (lo, hi, want) in [
        ("b", "d", true),
        ("b", "d\0", false),
        ("c", "c", true),
        ("a", "c", false),
        ("d", "f", false),
        ("f", "g\0", true),
        ("f", "h", false),
        ("k", "zzzz", true),
        ("e", "e", false),
    ] {
        assert_eq!(set.holds(lo.as_bytes(), hi.as_bytes()), want, "{lo}..={hi}");
    }
}
