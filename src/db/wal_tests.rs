//! Tests of `wal.rs`.
use super::*;
use crate::fs::{Fault, FaultyFs, StdFs};

/// A batch of `n` operations on the default keyspace, and from `n = 4` two more on
/// keyspace `n`.
fn ops(n: u8) -> Batch {
    let mut b = Batch::default();
    for i in 0..n {
        let value = (i % 3 != 0).then(|| vec![i; i as usize]);
        b.part(0).push((vec![i], value).into());
    }
    if n >= 4 {
        b.part(u32::from(n)).extend([
            (vec![n, 1], None).into(),
            (vec![n, 2], Some(vec![2])).into(),
        ]);
    }
    b
}

#[test]
fn expiring_puts_round_trip_and_bad_expiries_are_refused() {
    let mut b = Batch::default();
    b.part(0).push(Op {
        key: b"e".to_vec(),
        value: Some(b"x".to_vec()),
        expiry: 1_234,
    });
    b.part(7).push((b"f".to_vec(), None).into());
    let record = encode_batch(&b).unwrap();
    let payload = &record[HEADER_LEN..];
    assert_eq!(decode_batch(payload), Some(b.clone()));
    let put = op_encoded_len(1, Some(1), 1_234);
    assert_eq!(put, op_encoded_len(1, Some(1), NEVER) + 8);
    assert_eq!(
        payload.len(),
        BATCH_HEADER_LEN + put + KEYSPACE_SWITCH_LEN + 6
    );
    // The expiry follows the value: 0 and NEVER are not stored expiries.
    let at = BATCH_HEADER_LEN + put - 8;
    for bad in [0, NEVER] {
        let mut p = payload.to_vec();
        p[at..at + 8].copy_from_slice(&bad.to_le_bytes());
        assert_eq!(decode_batch(&p), None, "expiry {bad}");
    }
    // A deletion carries no expiry, whatever the operation says.
    let mut d = Batch::default();
    d.part(0).push(Op {
        key: b"g".to_vec(),
        value: None,
        expiry: 5,
    });
    let payload = encode_batch(&d).unwrap()[HEADER_LEN..].to_vec();
    assert_eq!(payload[BATCH_HEADER_LEN], TAG_DELETE);
    assert_eq!(decode_batch(&payload).unwrap().default[0].expiry, NEVER);
}

#[test]
fn keyspace_switches_round_trip_and_bad_ones_are_refused() {
    let mut b = Batch::default();
    b.part(9).push((b"a".to_vec(), Some(b"1".to_vec())).into());
    b.part(0).push((b"b".to_vec(), None).into());
    b.part(9).push((b"a".to_vec(), None).into());
    b.part(u32::MAX)
        .push((b"c".to_vec(), Some(Vec::new())).into());
    let record = encode_batch(&b).unwrap();
    let payload = &record[HEADER_LEN..];
    assert_eq!(decode_batch(payload), Some(b.clone()));
    assert_eq!(b.len(), 4);
    // The count names 4 operations: with one fewer the bytes run over, with one more
    // they run out; a switch cut short, or one at the end, is refused.
    for count in [3u32, 5] {
        let mut p = payload.to_vec();
        p[..4].copy_from_slice(&count.to_le_bytes());
        assert_eq!(decode_batch(&p), None, "count {count}");
    }
    let mut p = payload.to_vec();
    p.extend([TAG_KEYSPACE, 1, 0]);
    assert_eq!(decode_batch(&p), None, "switch cut short");
    let mut p = payload.to_vec();
    p.extend([TAG_KEYSPACE, 1, 0, 0, 0]);
    assert_eq!(decode_batch(&p), None, "switch after the last operation");
    // A switch back to the default keyspace, written by hand, decodes into its part.
    let mut p = 2u32.to_le_bytes().to_vec();
    p.extend([TAG_KEYSPACE, 5, 0, 0, 0, TAG_DELETE, 1, 0, 0, 0, b'x']);
    p.extend([TAG_KEYSPACE, 0, 0, 0, 0, TAG_DELETE, 1, 0, 0, 0, b'y']);
    let d = decode_batch(&p).unwrap();
    assert_eq!(d.default, vec![Op::from((b"y".to_vec(), None))]);
    assert_eq!(d.spaces, vec![(5, vec![Op::from((b"x".to_vec(), None))])]);
}

#[test]
fn scan_recovers_every_record_and_classifies_damage() {
    let dir = tempfile::tempdir().unwrap();
    let mut w = WalWriter::create(&StdFs, dir.path(), 1).unwrap();
    for n in 1..=5 {
        w.append(&encode_batch(&ops(n)).unwrap(), false).unwrap();
    }
    let full = std::fs::read(wal_path(dir.path(), 1)).unwrap();
    let s = scan(&full);
    assert_eq!(s.batches.len(), 5);
    assert_eq!(s.batches[4], ops(5));
    assert_eq!(s.damage, None);
    // Every truncation keeps exactly the records that are whole, and is a torn tail.
    let ends: Vec<usize> = (1..=5)
        .map(|n| (1..=n).map(|i| encode_batch(&ops(i)).unwrap().len()).sum())
        .collect();
    for len in 0..full.len() {
        let s = scan(&full[..len]);
        assert_eq!(s.batches.len(), ends.iter().filter(|&&e| e <= len).count());
        assert!(s.damage.is_none_or(|d| d.torn_tail), "len {len}");
    }
    // A flipped byte in the last record drops only that record: a torn tail.
    let mut bad = full.clone();
    let last = bad.len() - 1;
    bad[last] ^= 1;
    let s = scan(&bad);
    assert_eq!(s.batches.len(), 4);
    assert!(s.damage.unwrap().torn_tail);
    // A flipped byte in the first record, with whole records after it: damage in the middle.
    let mut bad = full.clone();
    bad[HEADER_LEN + 2] ^= 1;
    let s = scan(&bad);
    assert_eq!(s.batches.len(), 0);
    let d = s.damage.unwrap();
    assert!(
        !d.torn_tail && d.offset == 0 && d.reason.contains("checksum"),
        "{d:?}"
    );
    assert_eq!(d.later_records, Some(4));
    // A first record whose length field points past the end of the file: it looks cut
    // off, but the four records after it are intact, so it is not a torn tail.
    let mut bad = full.clone();
    bad[1] ^= 0x80;
    let d = scan(&bad).damage.unwrap();
    assert!(!d.torn_tail && d.later_records == Some(4), "{d:?}");
    // Zeros after the last record (a file extended but never written) are a torn tail.
    let mut zeros = full.clone();
    zeros.extend_from_slice(&[0u8; 100]);
    let s = scan(&zeros);
    assert_eq!(s.batches.len(), 5);
    assert!(s.damage.unwrap().torn_tail);
}

/// The search for intact records after damage checksums at most 4 × the log plus 1 MiB:
/// 8 MiB in which every offset claims a 1 MiB record would take ~8 TiB of checksumming
/// unbounded; here it stops, and the damage is not taken for a torn tail.
#[test]
fn the_search_after_damage_is_bounded_by_the_log_size() {
    let mut log = encode_batch(&ops(1)).unwrap();
    log[HEADER_LEN + 1] ^= 1; // the first record's checksum fails
    log.extend((0..(8 << 20) / 4).flat_map(|_| [0u8, 0, 0x10, 0]));
    let d = scan(&log).damage.unwrap();
    assert_eq!(d.later_records, None);
    assert!(!d.torn_tail);
}

#[test]
fn a_failed_append_is_cut_back_and_later_appends_stay_readable() {
    let dir = tempfile::tempdir().unwrap();
    let fs = FaultyFs::new();
    let mut w = WalWriter::create(&fs, dir.path(), 1).unwrap(); // ops 1-2
    w.append(&encode_batch(&ops(2)).unwrap(), false).unwrap(); // op 3
    fs.fail_once(4, Fault::PartialWrite);
    assert!(w.append(&encode_batch(&ops(7)).unwrap(), false).is_err()); // op 4, cut back
    w.append(&encode_batch(&ops(3)).unwrap(), false).unwrap();
    let s = scan(&std::fs::read(wal_path(dir.path(), 1)).unwrap());
    assert_eq!(s.batches, vec![ops(2), ops(3)]);
    assert_eq!(s.damage, None);
}
