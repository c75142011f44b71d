//! Unit tests of `wire.rs`.

use super::*;
use crate::replication::fuzz_seeds;

#[test]
fn a_forward_frame_is_its_payload_framed() {
    use crate::replication::{Op, Part, WriteId};
    let r = crate::replication::Request {
        ops: vec![Op::Put {
            key: b"k".to_vec(),
            value: vec![3; 1000],
        }],
        parts: vec![Part {
            id: Some(WriteId {
                session: 4,
                seq: 5,
                settled_below: 2,
            }),
            ops: 1,
        }],
    };
    assert_eq!(forward_frame(&r), frame(&encode_forward(&r)));
    match decode_request(&encode_forward(&r)) {
        Ok(Request::Forward(back)) => assert_eq!(back, r),
        _ => panic!("a forwarded write did not decode as one"),
    }
}

#[test]
fn every_message_round_trips() {
    for p in fuzz_seeds::wire_messages() {
        let req = decode_request(&p).ok().map(|r| match r {
            Request::Append(a) => encode_append(&a, MAX_FRAME).0,
            Request::Vote(v) => encode_vote_request(&v),
            Request::Snapshot(s) => encode_snapshot(&s),
            Request::Forward(r) => encode_forward(&r),
            Request::ReadIndex => encode_read_index(),
            Request::Stream => encode_stream(),
        });
        let resp = decode_response(&p).ok().map(|r| encode_response(&r));
        assert_eq!(
            req.or(resp).as_deref(),
            Some(&p[..]),
            "{:02x?}",
            &p[..p.len().min(16)]
        );
    }
}

#[test]
fn a_large_append_is_cut_to_the_frame_and_keeps_at_least_one_entry() {
    let seeds = fuzz_seeds::wire_messages();
    let Ok(Request::Append(a)) = decode_request(&seeds[0]) else {
        panic!("the first seed is an append")
    };
    assert!(a.entries.len() > 1);
    let (_, all) = encode_append(&a, MAX_FRAME);
    assert_eq!(all, a.entries.len());
    let (p, one) = encode_append(&a, 10);
    assert_eq!(one, 1);
    let Ok(Request::Append(cut)) = decode_request(&p) else {
        panic!("decodes")
    };
    assert_eq!(cut.entries.len(), 1);
}

#[test]
fn frames_over_the_limit_are_refused_by_their_header() {
    let mut h = [0u8; FRAME_HEADER];
    h[..4].copy_from_slice(&(MAX_FRAME as u32 + 1).to_le_bytes());
    assert!(frame_header(&h).unwrap_err().contains("at most"));
    h[..4].copy_from_slice(&(MAX_FRAME as u32).to_le_bytes());
    assert!(frame_header(&h).is_ok());
}
