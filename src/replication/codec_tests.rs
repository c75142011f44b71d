//! Unit tests of `codec.rs`.

use super::*;

fn membership() -> Membership {
    let nodes: BTreeMap<u64, BasicNode> = (1..=4)
        .map(|i| (i, BasicNode::new(format!("127.0.0.1:{}", 7000 + i))))
        .collect();
    Membership::new(vec![BTreeSet::from([1, 2, 3])], nodes).unwrap()
}

fn entries() -> Vec<Entry> {
    let id = |i| LogId::new(CommittedLeaderId::new(3, 2), i);
    vec![
        Entry {
            log_id: id(1),
            payload: EntryPayload::Blank,
        },
        Entry {
            log_id: id(2),
            payload: EntryPayload::Normal(Request::new(vec![
                Op::Put {
                    key: b"k".to_vec(),
                    value: vec![7; 300],
                },
                Op::Delete { key: vec![] },
            ])),
        },
        Entry {
            log_id: id(3),
            payload: EntryPayload::Membership(membership()),
        },
        Entry {
            log_id: id(4),
            payload: EntryPayload::Normal(parted()),
        },
        Entry {
            log_id: id(5),
            payload: EntryPayload::Normal(Request::new(keyspace_ops())),
        },
    ]
}

/// One of each keyspace operation (layout version 3), names empty, long and not ASCII, and
/// puts with an expiry (version 4), at the ends of its range.
fn keyspace_ops() -> Vec<Op> {
    vec![
        Op::PutUntil {
            keyspace: String::new(),
            key: b"e".to_vec(),
            value: b"soon".to_vec(),
            at: 1_700_000_000_123,
        },
        Op::PutUntil {
            keyspace: "db1".into(),
            key: vec![],
            value: vec![],
            at: u64::MAX,
        },
        Op::PutUntil {
            keyspace: "db2".into(),
            key: b"z".to_vec(),
            value: vec![1],
            at: 0,
        },
        Op::PutIn {
            keyspace: "users".into(),
            key: b"u1".to_vec(),
            value: b"ada".to_vec(),
        },
        Op::DeleteIn {
            keyspace: String::new(),
            key: b"x".to_vec(),
        },
        Op::Clear {
            keyspace: "é".repeat(127),
        },
        Op::Swap {
            a: "db3".into(),
            b: "db0".into(),
        },
        Op::DeleteRange {
            keyspace: String::new(),
            start: std::ops::Bound::Included(b"a".to_vec()),
            end: std::ops::Bound::Excluded(b"m".to_vec()),
        },
        Op::DeleteRange {
            keyspace: "db4".into(),
            start: std::ops::Bound::Excluded(vec![]),
            end: std::ops::Bound::Unbounded,
        },
        Op::Call {
            name: "incrby".into(),
            args: b"\x00counter\x05".to_vec(),
            at: 1_700_000_000_123,
        },
        Op::Call {
            name: String::new(),
            args: Vec::new(),
            at: u64::MAX,
        },
    ]
}

/// A range delete (layout version 5): each bound's kind is checked, and its keys count
/// against the key limit as a key does.
#[test]
fn range_deletes_carry_checked_bounds() {
    use std::ops::Bound;
    let op = Op::DeleteRange {
        keyspace: "k".into(),
        start: Bound::Unbounded,
        end: Bound::Included(b"z".to_vec()),
    };
    let mut b = Vec::new();
    put_request(&mut b, &Request::new(vec![op.clone()]));
    let decode = |b: &[u8]| get_request(&mut crate::coding::Cursor::new(b));
    assert_eq!(decode(&b).unwrap().ops, [op]);
    // The start's kind byte follows u32 count, tag, u32 name length and the name.
    let at = 4 + 1 + 4 + 1;
    assert_eq!(b[at], 0);
    b[at] = 3;
    let e = decode(&b).unwrap_err();
    assert!(e.contains("range bound kind 3"), "{e}");
    let long = Request::new(vec![Op::DeleteRange {
        keyspace: String::new(),
        start: Bound::Included(vec![0; crate::replication::MAX_REPLICATED_KEY_SIZE + 1]),
        end: Bound::Unbounded,
    }]);
    let e = long.validate().unwrap_err();
    assert!(e.contains("key of"), "{e}");
}

/// A keyspace name is at most 255 bytes of UTF-8: longer or not UTF-8 is refused by the
/// decoder, and a longer one by `Request::validate` before it is ever encoded.
#[test]
fn keyspace_names_are_bounded_and_utf8() {
    let encode = |op: Op| {
        let mut out = Vec::new();
        put_request(&mut out, &Request::new(vec![op]));
        out
    };
    let long = "n".repeat(256);
    let e = Request::new(vec![Op::Clear {
        keyspace: long.clone(),
    }])
    .validate()
    .unwrap_err();
    assert!(e.contains("keyspace name of 256 bytes"), "{e}");
    let decode = |b: &[u8]| get_request(&mut crate::coding::Cursor::new(b));
    let e = decode(&encode(Op::Clear { keyspace: long })).unwrap_err();
    assert!(e.contains("keyspace name of 256 bytes"), "{e}");
    let mut bad = encode(Op::Clear {
        keyspace: "ab".into(),
    });
    let n = bad.len();
    bad[n - 1] = 0xff;
    assert!(decode(&bad).unwrap_err().contains("not UTF-8"));
    for op in keyspace_ops() {
        let b = encode(op.clone());
        assert_eq!(decode(&b).unwrap().ops, [op]);
    }
}

/// Two merged writes, the second forwarded with an id.
fn parted() -> Request {
    Request {
        ops: vec![
            Op::Delete { key: b"a".to_vec() },
            Op::Put {
                key: b"b".to_vec(),
                value: b"v".to_vec(),
            },
            Op::Delete { key: b"c".to_vec() },
        ],
        parts: vec![
            Part { id: None, ops: 1 },
            Part {
                id: Some(WriteId {
                    session: 0xfeed,
                    seq: 9,
                    settled_below: 4,
                }),
                ops: 2,
            },
        ],
    }
}

#[test]
fn parts_must_count_the_operations() {
    let mut r = parted();
    r.parts[1].ops = 3;
    let mut b = Vec::new();
    put_parted(&mut b, &r);
    let err = get_parted(&mut Cursor::new(&b)).unwrap_err();
    assert!(err.contains("parts count 4"), "{err}");
    assert!(r.validate().unwrap_err().contains("parts count 4"));
    r.parts[1].ops = 2;
    assert!(r.validate().is_ok());
    let ws: Vec<_> = r
        .writes()
        .map(|(id, ops)| (id.map(|i| i.seq), ops.len()))
        .collect();
    assert_eq!(ws, [(None, 1), (Some(9), 2)]);
    assert_eq!(Request::new(r.ops.clone()).writes().count(), 1);
}

#[test]
fn entries_votes_and_memberships_round_trip() {
    for e in entries() {
        assert_eq!(decode_entry(&encode_entry(&e)).unwrap(), e);
    }
    let mut v = Vote::new(9, 2);
    v.committed = true;
    assert_eq!(decode_vote(&encode_vote(&v)).unwrap(), v);
    let sm = StoredMembership::new(
        Some(LogId::new(CommittedLeaderId::new(1, 1), 5)),
        membership(),
    );
    assert_eq!(
        decode_stored_membership(&encode_stored_membership(&sm)).unwrap(),
        sm
    );
    let id = LogId::new(CommittedLeaderId::new(1, 1), 5);
    assert_eq!(
        decode_opt_log_id(&encode_opt_log_id(Some(&id))).unwrap(),
        Some(id)
    );
    assert_eq!(decode_opt_log_id(&encode_opt_log_id(None)).unwrap(), None);
}

/// Every truncation and every single-byte change of a valid encoding decodes to an error
/// or to some entry, never a panic; truncations are always errors.
#[test]
fn damaged_entries_are_errors_not_panics() {
    for e in entries() {
        let b = encode_entry(&e);
        for n in 0..b.len() {
            assert!(decode_entry(&b[..n]).is_err(), "truncated to {n} decoded");
        }
        for i in 0..b.len() {
            for x in [0x00, 0x01, 0x7f, 0x80, 0xff] {
                let mut d = b.clone();
                d[i] ^= x;
                let _ = decode_entry(&d);
            }
        }
        let mut long = b.clone();
        long.push(0);
        assert!(decode_entry(&long).unwrap_err().contains("trailing"));
    }
}

#[test]
fn a_membership_naming_a_voter_without_a_node_is_refused() {
    let mut out = Vec::new();
    put_u32(&mut out, 1);
    put_u32(&mut out, 1);
    out.extend_from_slice(&5u64.to_le_bytes());
    put_u32(&mut out, 0);
    let err = get_membership(&mut Cursor::new(&out)).unwrap_err();
    assert!(err.contains("voter 5"), "{err}");
}

/// A term past 2^48 or an index past 2^62 is malformed wherever it appears (a vote, a
/// log id): openraft adds to both, and a peer's `u64::MAX` term made every node panic.
#[test]
fn terms_and_indexes_out_of_range_are_refused() {
    let v = Vote::new(MAX_TERM, 2);
    assert_eq!(decode_vote(&encode_vote(&v)).unwrap(), v);
    for term in [MAX_TERM + 1, u64::MAX] {
        let err = decode_vote(&encode_vote(&Vote::new(term, 2))).unwrap_err();
        assert!(err.contains("vote term"), "{err}");
        let id = LogId::new(CommittedLeaderId::new(term, 1), 5);
        let err = decode_opt_log_id(&encode_opt_log_id(Some(&id))).unwrap_err();
        assert!(err.contains("log id term"), "{err}");
    }
    let id = LogId::new(CommittedLeaderId::new(3, 1), MAX_INDEX);
    assert_eq!(
        decode_opt_log_id(&encode_opt_log_id(Some(&id))).unwrap(),
        Some(id)
    );
    let id = LogId::new(CommittedLeaderId::new(3, 1), u64::MAX);
    let err = decode_opt_log_id(&encode_opt_log_id(Some(&id))).unwrap_err();
    assert!(err.contains("index"), "{err}");
}
