//! Valid encodings of each replication structure, for the decoder fuzzing in
//! `crate::fuzz_tests`.

use std::collections::{BTreeMap, BTreeSet};

use openraft::raft::{AppendEntriesRequest, AppendEntriesResponse, VoteRequest, VoteResponse};
use openraft::vote::RaftLeaderId;
use openraft::EntryPayload;

use super::wire::{self, Response, Segment, SnapshotChunk};
use super::{
    codec, snapshot, BasicNode, CommittedLeaderId, Entry, LogId, Membership, Op, Part, Request,
    StoredMembership, Vote, WriteId,
};

fn membership(n: u64) -> Membership {
    let nodes: BTreeMap<u64, BasicNode> = (1..=n + 1)
        .map(|i| (i, BasicNode::new(format!("10.0.0.{i}:7000"))))
        .collect();
    let voters: BTreeSet<u64> = (1..=n).collect();
    if n > 2 {
        Membership::new(vec![voters.clone(), (2..=n + 1).collect()], nodes)
    } else {
        Membership::new(vec![voters], nodes)
    }
    .unwrap_or_else(|e| panic!("seed membership: {e}"))
}

fn id(term: u64, index: u64) -> LogId {
    LogId::new(CommittedLeaderId::new(term, 2), index)
}

pub(crate) fn entries() -> Vec<Vec<u8>> {
    let mut out = Vec::new();
    for i in 0..4u64 {
        let payload = match i {
            0 => EntryPayload::Blank,
            1 | 2 => EntryPayload::Normal(Request {
                ops: (0..i * 3)
                    .map(|j| {
                        if j % 2 == 0 {
                            Op::Put {
                                key: vec![j as u8; j as usize],
                                value: vec![7; 10 * j as usize],
                            }
                        } else if j % 3 == 0 {
                            Op::Delete {
                                key: vec![j as u8; 3],
                            }
                        } else if i == 1 {
                            Op::PutIn {
                                keyspace: "db3".into(),
                                key: vec![j as u8; 2],
                                value: vec![5; 4],
                            }
                        } else if j % 5 == 0 {
                            Op::PutUntil {
                                keyspace: "db1".into(),
                                key: vec![j as u8; 2],
                                value: vec![6; 3],
                                at: 1_700_000_000_000 + j,
                            }
                        } else if j == 1 && i == 3 {
                            Op::Call {
                                name: "set".into(),
                                args: vec![j as u8; 4],
                                at: 1_700_000_000_000 + j,
                            }
                        } else if j % 7 == 0 {
                            Op::DeleteRange {
                                keyspace: "db2".into(),
                                start: std::ops::Bound::Included(vec![j as u8]),
                                end: std::ops::Bound::Unbounded,
                            }
                        } else {
                            Op::Swap {
                                a: "a".into(),
                                b: String::new(),
                            }
                        }
                    })
                    .collect(),
                // The second has parts: a write without an id, then a forwarded one.
                parts: if i == 2 {
                    vec![
                        Part { id: None, ops: 2 },
                        Part {
                            id: Some(WriteId {
                                session: 77,
                                seq: 5,
                                settled_below: 3,
                            }),
                            ops: 4,
                        },
                    ]
                } else {
                    Vec::new()
                },
            }),
            _ => EntryPayload::Membership(membership(3)),
        };
        out.push(codec::encode_entry(&Entry {
            log_id: id(i + 1, i * 10),
            payload,
        }));
    }
    out
}

pub(crate) fn votes() -> Vec<Vec<u8>> {
    let mut v = Vote::new(7, 3);
    let a = codec::encode_vote(&v);
    v.committed = true;
    vec![
        a,
        codec::encode_vote(&v),
        codec::encode_opt_log_id(Some(&id(3, 99))),
        codec::encode_opt_log_id(None),
    ]
}

pub(crate) fn memberships() -> Vec<Vec<u8>> {
    (1..4)
        .map(|n| {
            codec::encode_stored_membership(&StoredMembership::new(Some(id(n, n)), membership(n)))
        })
        .collect()
}

/// Hello payloads (FORMAT.md §8, the handshake), both sides, short and long cluster ids.
pub(crate) fn hellos() -> Vec<Vec<u8>> {
    use super::tcp::hello::{encode, Side};
    let mut out = Vec::new();
    for (side, cluster, node) in [
        (Side::Caller, "prod", 1),
        (Side::Server, "prod", 3),
        (Side::Caller, "p", u64::MAX),
        (Side::Server, &"x".repeat(64)[..], 7),
    ] {
        out.push(encode(side, cluster, node)[wire::FRAME_HEADER..].to_vec());
    }
    out
}

pub(crate) fn pack_headers() -> Vec<Vec<u8>> {
    (1..3)
        .map(|n| {
            snapshot::encode_header(&snapshot::Meta {
                last_log_id: Some(id(n, 40 * n)),
                last_membership: StoredMembership::new(Some(id(n, n)), membership(n)),
                snapshot_id: format!("{n}-2-{}-1234", 40 * n),
            })
        })
        .collect()
}

/// Recomputes the meta CRC of a mutated header whose meta length still fits.
#[expect(
    clippy::ptr_arg,
    reason = "the signature of every fuzz target's reseal"
)]
pub(crate) fn reseal_pack_header(b: &mut Vec<u8>) {
    if b.len() < 16 {
        return;
    }
    let n = u32::from_le_bytes([b[12], b[13], b[14], b[15]]) as usize;
    if let Some(end) = 16usize.checked_add(n).filter(|e| e + 4 <= b.len()) {
        let crc = crc32fast::hash(&b[16..end]);
        b[end..end + 4].copy_from_slice(&crc.to_le_bytes());
    }
}

/// One payload of every request and response kind; the first is an append of several
/// entries.
pub(crate) fn wire_messages() -> Vec<Vec<u8>> {
    let decoded: Vec<Entry> = entries()
        .iter()
        .map(|b| codec::decode_entry(b).unwrap_or_else(|e| panic!("seed: {e}")))
        .collect();
    let vote = Vote::new(4, 2);
    let meta = snapshot::Meta {
        last_log_id: Some(id(3, 40)),
        last_membership: StoredMembership::new(Some(id(1, 1)), membership(3)),
        snapshot_id: "3-2-40-99".into(),
    };
    let seg = |o| Segment {
        id: "3-2-40-99".into(),
        offset: o,
    };
    let mut out = vec![
        wire::encode_append(
            &AppendEntriesRequest {
                vote,
                prev_log_id: Some(id(1, 0)),
                entries: decoded,
                leader_commit: Some(id(1, 0)),
            },
            wire::MAX_FRAME,
        )
        .0,
        wire::encode_vote_request(&VoteRequest {
            vote,
            last_log_id: Some(id(3, 40)),
            leadership_transfer: false,
        }),
        wire::encode_snapshot(&SnapshotChunk {
            vote,
            meta,
            offset: 1 << 20,
            data: vec![9; 100],
            done: false,
        }),
    ];
    out.push(wire::encode_forward(&Request {
        ops: vec![
            Op::Put {
                key: b"k".to_vec(),
                value: b"v".to_vec(),
            },
            Op::Delete { key: b"d".to_vec() },
        ],
        parts: vec![Part {
            id: Some(WriteId {
                session: 1,
                seq: 2,
                settled_below: 0,
            }),
            ops: 2,
        }],
    }));
    out.push(wire::encode_read_index());
    out.push(wire::encode_stream());
    for r in [
        Response::Append(AppendEntriesResponse::Success),
        Response::Append(AppendEntriesResponse::PartialSuccess(Some(id(3, 7)))),
        Response::Append(AppendEntriesResponse::Conflict),
        Response::Append(AppendEntriesResponse::HigherVote(vote)),
        Response::Vote(VoteResponse {
            vote,
            vote_granted: true,
            last_log_id: None,
        }),
        Response::Snapshot(vote),
        Response::SnapshotMismatch {
            expect: seg(0),
            got: seg(4096),
        },
        Response::Failed("shutting down".into()),
        Response::Forwarded(Vec::new()),
        Response::Forwarded(vec![Some(b"1".to_vec()), None, Some(Vec::new())]),
        Response::ReadIndex(Some(id(3, 41))),
        Response::NotLeader(Some((2, "127.0.0.1:7002".into()))),
        Response::NotLeader(None),
    ] {
        out.push(wire::encode_response(&r));
    }
    out
}
