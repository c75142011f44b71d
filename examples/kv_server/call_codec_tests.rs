//! Tests of a call's bytes (`call_codec.rs`).

use super::*;
use crate::bloom::{BfChange, Params};

/// Every change survives its encoding, and every cut or extended encoding is refused
/// with a reason, never a panic.
#[test]
fn calls_round_trip_and_damaged_ones_are_refused() {
    let changes = [
        Change::IncrBy {
            key: b"c".to_vec(),
            by: -7,
        },
        Change::IncrByFloat {
            key: b"f".to_vec(),
            by: 0.5,
        },
        Change::Append {
            key: b"a".to_vec(),
            value: b"xy".to_vec(),
        },
        Change::SetRange {
            key: b"r".to_vec(),
            offset: 3,
            value: b"z".to_vec(),
        },
        Change::GetSet {
            key: b"g".to_vec(),
            value: Vec::new(),
        },
        Change::Set {
            key: b"s".to_vec(),
            value: b"v".to_vec(),
            cond: Cond::Absent,
            get: true,
            expiry: SetExpiry::At(1_700_000_000_000),
            int: false,
        },
        Change::GetDel { key: b"d".to_vec() },
        Change::Del {
            keys: vec![b"x".to_vec(), b"y".to_vec()],
        },
        Change::MSetNx {
            pairs: vec![(b"k".to_vec(), b"v".to_vec())],
        },
        Change::Rename {
            from: b"a".to_vec(),
            to: b"b".to_vec(),
            nx: true,
        },
        Change::Expire {
            key: b"e".to_vec(),
            at: -5,
            flags: ExpireFlags {
                nx: false,
                xx: true,
                gt: false,
                lt: true,
            },
        },
        Change::Persist { key: b"p".to_vec() },
        Change::GetEx {
            key: b"g".to_vec(),
            opt: GetExOpt::Given(Unit::PxAt, b"17".to_vec()),
        },
        Change::GetEx {
            key: b"g".to_vec(),
            opt: GetExOpt::Persist,
        },
        Change::Bf(BfChange::Reserve {
            key: b"bf".to_vec(),
            params: Params {
                error_rate: 0.001,
                capacity: 1 << 30,
                expansion: 0,
            },
        }),
        Change::Bf(BfChange::Add {
            key: b"bf".to_vec(),
            items: vec![b"i".to_vec(), Vec::new()],
            create: Some(crate::bloom::DEFAULTS),
            many: true,
        }),
        Change::Bf(BfChange::Add {
            key: b"bf".to_vec(),
            items: vec![b"j".to_vec()],
            create: None,
            many: false,
        }),
        Change::Bf(BfChange::Sweep),
    ];
    let run = Change::Run(changes.to_vec());
    let nested = Change::Run(vec![run.clone()]);
    let mut b = Vec::new();
    put_bytes(&mut b, b"");
    put_change(&mut b, &nested);
    assert!(
        decode_call(&b).unwrap_err().contains("change tag 11"),
        "a run in a run"
    );
    let moved = Change::Transfer {
        key: b"k".to_vec(),
        to_key: b"k2".to_vec(),
        to: "db5".to_string(),
        how: crate::transfer::How::Copy { replace: true },
    };
    let mut b = Vec::new();
    put_bytes(&mut b, b"");
    put_change(&mut b, &Change::Run(vec![moved.clone()]));
    assert!(
        decode_call(&b).unwrap_err().contains("change tag 20"),
        "a MOVE in a run"
    );
    for change in changes.into_iter().chain([run, moved]) {
        let b = encode_call("db3", &change);
        assert_eq!(decode_call(&b), Ok(("db3".to_string(), change.clone())));
        for n in 0..b.len() {
            assert!(decode_call(&b[..n]).is_err(), "{change:?} cut to {n}");
        }
        let mut long = b.clone();
        long.push(0);
        assert!(decode_call(&long).is_err());
    }
    for r in [
        Reply::ok(),
        Reply::err("x"),
        Reply::Int(-3),
        Reply::Bulk(b"v".to_vec()),
        Reply::Null,
        Reply::Bool(true),
        Reply::Bool(false),
    ] {
        assert_eq!(decode_reply(&encode_reply(&r)), r);
    }
    // Parameters out of RedisBloom's bounds are refused as they are decoded.
    let bad = Change::Bf(BfChange::Reserve {
        key: b"bf".to_vec(),
        params: Params {
            error_rate: 1.5,
            capacity: 10,
            expansion: 2,
        },
    });
    let e = decode_call(&encode_call("", &bad)).unwrap_err();
    assert!(e.contains("error rate 1.5"), "{e}");
    assert!(matches!(decode_reply(&[9]), Reply::Error(_)));
}

/// Mutated encodings (bytes flipped, lengths and counts among them) decode or are
/// refused, never panic, and never take more memory than their size allows.
#[test]
fn mutated_calls_and_answers_never_panic() {
    let run = Change::Run(vec![
        Change::IncrBy {
            key: b"c".to_vec(),
            by: 1,
        },
        Change::Del {
            keys: vec![b"x".to_vec(); 3],
        },
        Change::Bf(BfChange::Add {
            key: b"bf".to_vec(),
            items: vec![b"i".to_vec(); 3],
            create: Some(crate::bloom::DEFAULTS),
            many: true,
        }),
    ]);
    let call = encode_call("", &run);
    let moved = encode_call(
        "db1",
        &Change::Transfer {
            key: b"k".to_vec(),
            to_key: b"k".to_vec(),
            to: "db2".to_string(),
            how: crate::transfer::How::Move,
        },
    );
    let answer = encode_reply(&Reply::Array(vec![
        Reply::Bulk(b"v".to_vec()),
        Reply::Null,
        Reply::Bool(true),
    ]));
    let mut x = 0x9e37_79b9_7f4a_7c15u64;
    let mut next = move || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x
    };
    for _ in 0..100_000 {
        let (mut c, mut a) = (call.clone(), answer.clone());
        for _ in 0..1 + next() % 3 {
            let i = (next() % c.len() as u64) as usize;
            c[i] = next() as u8;
            let i = (next() % a.len() as u64) as usize;
            a[i] = next() as u8;
        }
        let _ = decode_call(&c);
        let _ = decode_reply(&a);
        let mut m = moved.clone();
        let i = (next() % m.len() as u64) as usize;
        m[i] = next() as u8;
        let _ = decode_call(&m);
    }
}
