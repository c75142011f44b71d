//! Unit tests of `wal.rs`.

use super::*;
use crate::fs::{Fault, FaultyFs, StdFs};

/// A batch of `n` operations on the default keyspace, and from `n = 4` two more on
/// keyspace `n`.
fn ops(n: u8) -> Batch {
    let mut b = Batch::default();
    for i in 0..n {
        let value = (i % 3 != 0).then(|| vec![i; i as usize]);
        b.part(0).push((vec![i], value));
    }
    if n >= 4 {
        b.part(u32::from(n))
            .extend([(vec![n, 1], None), (vec![n, 2], Some(vec![2]))]);
    }
    b
}

#[test]
fn keyspace_switches_round_trip_and_bad_ones_are_refused() {
    let mut b = Batch::default();
    b.part(9).push((b"a".to_vec(), Some(b"1".to_vec())));
    b.part(0).push((b"b".to_vec(), None));
    b.part(9).push((b"a".to_vec(), None));
    b.part(u32::MAX).push((b"c".to_vec(), Some(Vec::new())));
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
    assert_eq!(d.default, vec![(b"y".to_vec(), None)]);
    assert_eq!(d.spaces, vec![(5, vec![(b"x".to_vec(), None)])]);
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

#[test]
fn a_predecessor_round_trips_and_nothing_else_decodes_as_one() {
    let p = Predecessor {
        id: 77,
        len: 1 << 40,
    };
    let record = encode_predecessor(p);
    assert_eq!(record.len(), HEADER_LEN + PAYLOAD_LEN);
    let payload = &record[HEADER_LEN..];
    assert_eq!(
        u32::from_le_bytes([record[4], record[5], record[6], record[7]]),
        crc32fast::hash(payload)
    );
    assert_eq!(decode_predecessor(payload), Some(p));
    assert_eq!(decode_predecessor(&payload[..PAYLOAD_LEN - 1]), None, "cut");
    let mut other_tag = payload.to_vec();
    other_tag[4] = 1;
    assert_eq!(decode_predecessor(&other_tag), None, "a put's tag");
    let mut counted = payload.to_vec();
    counted[0] = 1;
    assert_eq!(decode_predecessor(&counted), None, "a count of 1");
    assert_eq!(
        decode_predecessor(&0u32.to_le_bytes()),
        None,
        "an empty batch"
    );
}

#[test]
fn scan_reads_a_predecessor_only_as_a_log_s_first_record() {
    let p = Predecessor { id: 3, len: 4096 };
    let mut batch = Batch::default();
    batch.part(0).push((b"k".to_vec(), Some(b"v".to_vec())));
    let batch = encode_batch(&batch).unwrap();
    let mut log = encode_predecessor(p);
    log.extend_from_slice(&batch);
    let s = scan(&log);
    assert_eq!(s.predecessor, Some(p));
    assert_eq!(s.batches.len(), 1, "the predecessor is not a batch");
    assert!(s.damage.is_none());
    assert_eq!(s.intact_len, log.len() as u64);
    // Anywhere else it is damage: replay stops at it.
    let mut later = batch.clone();
    later.extend_from_slice(&encode_predecessor(p));
    let s = scan(&later);
    assert_eq!((s.predecessor, s.batches.len()), (None, 1));
    let d = s.damage.expect("a predecessor after a batch is damage");
    assert_eq!(d.offset, batch.len());
    assert_eq!(s.intact_len, batch.len() as u64);
}
