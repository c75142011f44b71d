//! The bytes the replication layer stores: log entries, the vote, log ids and memberships,
//! as FORMAT.md §7 lays them out (little-endian, lengths before bytes). openraft's own
//! types are not written with serde, so the format stays this crate's, documented and
//! independent of how a later openraft derives its serialisation.
//!
//! Decoding validates the structure: every count and length is checked against the bytes
//! left (so work and memory are bounded by the input), tags and flags against their values,
//! and trailing bytes are refused. A decode error names what was wrong. Sizes are not held to
//! the store's limits here: the log must read back whatever it stored, and a request over
//! them is refused where it is applied (`Request::validate`).

use std::collections::{BTreeMap, BTreeSet};

use openraft::vote::RaftLeaderId;
use openraft::{BasicNode, EntryPayload};

use super::{
    CommittedLeaderId, Entry, LogId, Membership, Op, Part, Request, StoredMembership, Vote, WriteId,
};
use crate::coding::Cursor;

/// Payload tags of an entry (FORMAT.md §7.4).
const BLANK: u8 = 0;
const NORMAL: u8 = 1;
const MEMBERSHIP: u8 = 2;
/// A request with parts (merged or forwarded writes, with ids); layout version 2.
const PARTS: u8 = 3;
/// Operation tags of a request.
const PUT: u8 = 1;
const DELETE: u8 = 2;
/// Keyspace operations; layout version 3.
const PUT_IN: u8 = 3;
const DELETE_IN: u8 = 4;
const CLEAR: u8 = 5;
const SWAP: u8 = 6;
/// A put with an expiry; layout version 4.
const PUT_UNTIL: u8 = 7;
/// A range delete; layout version 5.
const DELETE_RANGE: u8 = 8;
/// A procedure call (`Op::Call`); layout version 6.
const CALL: u8 = 9;

/// Longest node address accepted.
pub(crate) const MAX_ADDR: usize = 1024;

/// The largest term a vote or log id may carry (2^48). openraft adds one to a term at each
/// election, and a term of `u64::MAX` taken from a peer made every node's next election
/// overflow and panic, for good (the vote is durable). A real cluster electing a leader
/// every millisecond reaches 2^48 in about 8,900 years, so a larger term is malformed.
pub(crate) const MAX_TERM: u64 = 1 << 48;
/// The largest log index a log id may carry (2^62): a node appending 10^9 entries a second
/// reaches it in 146 years; openraft adds to indexes, so values near `u64::MAX` are refused.
pub(crate) const MAX_INDEX: u64 = 1 << 62;

fn check_term(term: u64, what: &str) -> DecodeResult<u64> {
    if term > MAX_TERM {
        return Err(format!("{what} term {term} (at most 2^48)"));
    }
    Ok(term)
}

/// The layout version of a node's two stores (FORMAT.md §7): 2 added entries with parts
/// (payload tag 3) and the state machine's write sessions; 3 keyspace operations (tags 3 to
/// 6) and the state machine's keyspace map; 4 puts with an expiry (tag 7, and the store
/// formats that carry expiries); 5 range deletes (tag 8, and the store formats that carry
/// them); 6 procedure calls (tag 9). A store of an older version is read as it is, and
/// marked 6 when opened, as this build may add them.
pub(crate) const LAYOUT_VERSION: u32 = 6;
/// The key each store keeps its layout version under.
const LAYOUT_KEY: &[u8] = b"m/format";

/// Checks a store's layout version (`what` names the store in an error), and writes this
/// build's (synced) into a new store or one of an older version.
pub(crate) fn check_layout(db: &crate::Db, what: &str) -> crate::Result<()> {
    let v = db.get(LAYOUT_KEY)?;
    let current = LAYOUT_VERSION.to_le_bytes();
    match v.as_deref() {
        Some(v) if v == current => Ok(()),
        None | Some([1, 0, 0, 0] | [2, 0, 0, 0] | [3, 0, 0, 0] | [4, 0, 0, 0] | [5, 0, 0, 0]) => {
            let mut b = crate::WriteBatch::new();
            b.put(LAYOUT_KEY, current);
            db.write_opt(b, crate::WriteOptions { sync: true })
        }
        Some(v) => Err(crate::Error::Corruption {
            path: db.path().to_path_buf(),
            reason: format!("{what} layout version {v:?} (this build reads 1 to {LAYOUT_VERSION})"),
        }),
    }
}

/// A decode failure: what was being decoded and what was wrong.
pub(crate) type DecodeResult<T> = std::result::Result<T, String>;

pub(crate) fn put_u32(out: &mut Vec<u8>, n: usize) {
    // Counts and lengths here are bounded far below 2^32 by the store's limits
    // (MAX_BATCH_SIZE, MAX_ADDR, node counts); saturating keeps the encoder total.
    out.extend_from_slice(&u32::try_from(n).unwrap_or(u32::MAX).to_le_bytes());
}

pub(crate) fn put_bytes(out: &mut Vec<u8>, b: &[u8]) {
    put_u32(out, b.len());
    out.extend_from_slice(b);
}

/// Appends a log id: term, leader node, index (24 bytes).
pub(crate) fn put_log_id(out: &mut Vec<u8>, id: &LogId) {
    out.extend_from_slice(&id.leader_id.term.to_le_bytes());
    out.extend_from_slice(&id.leader_id.node_id.to_le_bytes());
    out.extend_from_slice(&id.index.to_le_bytes());
}

pub(crate) fn get_log_id(c: &mut Cursor<'_>) -> DecodeResult<LogId> {
    let term = check_term(c.u64()?, "log id")?;
    let node_id = c.u64()?;
    let index = c.u64()?;
    if index > MAX_INDEX {
        return Err(format!("log id index {index} (at most 2^62)"));
    }
    Ok(LogId::new(CommittedLeaderId::new(term, node_id), index))
}

/// Appends an optional log id: a presence byte (0 or 1), then the id.
pub(crate) fn put_opt_log_id(out: &mut Vec<u8>, id: Option<&LogId>) {
    match id {
        None => out.push(0),
        Some(id) => {
            out.push(1);
            put_log_id(out, id);
        }
    }
}

pub(crate) fn get_opt_log_id(c: &mut Cursor<'_>) -> DecodeResult<Option<LogId>> {
    match c.u8()? {
        0 => Ok(None),
        1 => Ok(Some(get_log_id(c)?)),
        t => Err(format!("log id presence byte {t} (not 0 or 1)")),
    }
}

/// The vote: term, node, committed (17 bytes).
pub(crate) fn encode_vote(v: &Vote) -> Vec<u8> {
    let mut out = Vec::with_capacity(17);
    out.extend_from_slice(&v.leader_id.term.to_le_bytes());
    out.extend_from_slice(&v.leader_id.node_id.to_le_bytes());
    out.push(u8::from(v.committed));
    out
}

pub(crate) fn decode_vote(b: &[u8]) -> DecodeResult<Vote> {
    let mut c = Cursor::new(b);
    let term = check_term(c.u64()?, "vote")?;
    let node = c.u64()?;
    let committed = match c.u8()? {
        0 => false,
        1 => true,
        t => return Err(format!("vote committed byte {t} (not 0 or 1)")),
    };
    finish(&c, "vote")?;
    let mut v = Vote::new(term, node);
    v.committed = committed;
    Ok(v)
}

fn put_membership(out: &mut Vec<u8>, m: &Membership) {
    let configs = m.get_joint_config();
    put_u32(out, configs.len());
    for config in configs {
        put_u32(out, config.len());
        for id in config {
            out.extend_from_slice(&id.to_le_bytes());
        }
    }
    let nodes: Vec<_> = m.nodes().collect();
    put_u32(out, nodes.len());
    for (id, node) in nodes {
        out.extend_from_slice(&id.to_le_bytes());
        put_bytes(out, node.addr.as_bytes());
    }
}

fn get_membership(c: &mut Cursor<'_>) -> DecodeResult<Membership> {
    let n_configs = c.u32()?;
    if n_configs == 0 || n_configs > 2 {
        return Err(format!(
            "membership with {n_configs} configs (1, or 2 while joint)"
        ));
    }
    let mut configs = Vec::new();
    for _ in 0..n_configs {
        let n = c.u32()?;
        let mut set = BTreeSet::new();
        for _ in 0..n {
            set.insert(c.u64()?);
        }
        configs.push(set);
    }
    let n_nodes = c.u32()?;
    let mut nodes = BTreeMap::new();
    for _ in 0..n_nodes {
        let id = c.u64()?;
        let addr = c.len_prefixed()?;
        if addr.len() > MAX_ADDR {
            return Err(format!(
                "node {id}'s address is {} bytes (at most {MAX_ADDR})",
                addr.len()
            ));
        }
        let addr =
            std::str::from_utf8(addr).map_err(|_| format!("node {id}'s address is not UTF-8"))?;
        if nodes
            .insert(
                id,
                BasicNode {
                    addr: addr.to_owned(),
                },
            )
            .is_some()
        {
            return Err(format!("node {id} listed twice in a membership"));
        }
    }
    for id in configs.iter().flatten() {
        if !nodes.contains_key(id) {
            return Err(format!("voter {id} has no node entry in its membership"));
        }
    }
    Membership::new(configs, nodes).map_err(|e| format!("membership: {e}"))
}

/// A stored membership: the optional log id that set it, then the membership.
pub(crate) fn encode_stored_membership(m: &StoredMembership) -> Vec<u8> {
    let mut out = Vec::new();
    put_opt_log_id(&mut out, m.log_id().as_ref());
    put_membership(&mut out, m.membership());
    out
}

pub(crate) fn decode_stored_membership(b: &[u8]) -> DecodeResult<StoredMembership> {
    let mut c = Cursor::new(b);
    let id = get_opt_log_id(&mut c)?;
    let m = get_membership(&mut c)?;
    finish(&c, "membership")?;
    Ok(StoredMembership::new(id, m))
}

pub(crate) fn put_request(out: &mut Vec<u8>, r: &Request) {
    put_u32(out, r.ops.len());
    for op in &r.ops {
        match op {
            Op::Put { key, value } => {
                out.push(PUT);
                put_bytes(out, key);
                put_bytes(out, value);
            }
            Op::Delete { key } => {
                out.push(DELETE);
                put_bytes(out, key);
            }
            Op::PutIn {
                keyspace,
                key,
                value,
            } => {
                out.push(PUT_IN);
                put_bytes(out, keyspace.as_bytes());
                put_bytes(out, key);
                put_bytes(out, value);
            }
            Op::DeleteIn { keyspace, key } => {
                out.push(DELETE_IN);
                put_bytes(out, keyspace.as_bytes());
                put_bytes(out, key);
            }
            Op::Clear { keyspace } => {
                out.push(CLEAR);
                put_bytes(out, keyspace.as_bytes());
            }
            Op::Swap { a, b } => {
                out.push(SWAP);
                put_bytes(out, a.as_bytes());
                put_bytes(out, b.as_bytes());
            }
            Op::PutUntil {
                keyspace,
                key,
                value,
                at,
            } => {
                out.push(PUT_UNTIL);
                put_bytes(out, keyspace.as_bytes());
                put_bytes(out, key);
                put_bytes(out, value);
                out.extend_from_slice(&at.to_le_bytes());
            }
            Op::DeleteRange {
                keyspace,
                start,
                end,
            } => {
                out.push(DELETE_RANGE);
                put_bytes(out, keyspace.as_bytes());
                put_bound(out, start);
                put_bound(out, end);
            }
            Op::Call { name, args, at } => {
                out.push(CALL);
                put_bytes(out, name.as_bytes());
                put_bytes(out, args);
                out.extend_from_slice(&at.to_le_bytes());
            }
        }
    }
}

/// A range bound: u8 `0` unbounded, or `1` included / `2` excluded and a key.
fn put_bound(out: &mut Vec<u8>, b: &std::ops::Bound<Vec<u8>>) {
    use std::ops::Bound;
    match b {
        Bound::Unbounded => out.push(0),
        Bound::Included(k) => {
            out.push(1);
            put_bytes(out, k);
        }
        Bound::Excluded(k) => {
            out.push(2);
            put_bytes(out, k);
        }
    }
}

fn get_bound(c: &mut Cursor<'_>) -> DecodeResult<std::ops::Bound<Vec<u8>>> {
    use std::ops::Bound;
    Ok(match c.u8()? {
        0 => Bound::Unbounded,
        1 => Bound::Included(get_key(c)?),
        2 => Bound::Excluded(get_key(c)?),
        k => return Err(format!("range bound kind {k} (not 0 to 2)")),
    })
}

/// A keyspace name: u32 length (at most `MAX_REPLICATED_KEYSPACE_NAME`), UTF-8 bytes.
fn get_name(c: &mut Cursor<'_>) -> DecodeResult<String> {
    let b = c.len_prefixed()?;
    if b.len() > crate::replication::MAX_REPLICATED_KEYSPACE_NAME {
        return Err(format!("keyspace name of {} bytes (at most 255)", b.len()));
    }
    String::from_utf8(b.to_vec()).map_err(|_| "keyspace name is not UTF-8".to_string())
}

fn get_key(c: &mut Cursor<'_>) -> DecodeResult<Vec<u8>> {
    Ok(c.len_prefixed()?.to_vec())
}

/// A put in a keyspace: its name, key and value.
fn get_put_in(c: &mut Cursor<'_>) -> DecodeResult<(String, Vec<u8>, Vec<u8>)> {
    let keyspace = get_name(c)?;
    let key = get_key(c)?;
    Ok((keyspace, key, c.len_prefixed()?.to_vec()))
}

pub(crate) fn get_request(c: &mut Cursor<'_>) -> DecodeResult<Request> {
    let n = c.u32()?;
    let mut ops = Vec::new();
    for i in 0..n {
        ops.push(match c.u8()? {
            PUT => {
                let key = get_key(c)?;
                let value = c.len_prefixed()?.to_vec();
                Op::Put { key, value }
            }
            DELETE => Op::Delete { key: get_key(c)? },
            PUT_IN => {
                let (keyspace, key, value) = get_put_in(c)?;
                Op::PutIn {
                    keyspace,
                    key,
                    value,
                }
            }
            DELETE_IN => {
                let keyspace = get_name(c)?;
                Op::DeleteIn {
                    keyspace,
                    key: get_key(c)?,
                }
            }
            CLEAR => Op::Clear {
                keyspace: get_name(c)?,
            },
            SWAP => {
                let a = get_name(c)?;
                Op::Swap { a, b: get_name(c)? }
            }
            PUT_UNTIL => {
                let (keyspace, key, value) = get_put_in(c)?;
                Op::PutUntil {
                    keyspace,
                    key,
                    value,
                    at: c.u64()?,
                }
            }
            DELETE_RANGE => {
                let keyspace = get_name(c)?;
                let start = get_bound(c)?;
                Op::DeleteRange {
                    keyspace,
                    start,
                    end: get_bound(c)?,
                }
            }
            CALL => {
                let name = get_name(c)?;
                let args = c.len_prefixed()?.to_vec();
                Op::Call {
                    name,
                    args,
                    at: c.u64()?,
                }
            }
            t => return Err(format!("operation {i} has tag {t} (not 1 to 9)")),
        });
    }
    Ok(Request::new(ops))
}

/// A request with its parts: u32 count, each part u8 `0` or `1` + a write id, then u32 ops;
/// then the request.
pub(crate) fn put_parted(out: &mut Vec<u8>, r: &Request) {
    put_u32(out, r.parts.len());
    for p in &r.parts {
        match &p.id {
            None => out.push(0),
            Some(id) => {
                out.push(1);
                out.extend_from_slice(&id.session.to_le_bytes());
                out.extend_from_slice(&id.seq.to_le_bytes());
                out.extend_from_slice(&id.settled_below.to_le_bytes());
            }
        }
        out.extend_from_slice(&p.ops.to_le_bytes());
    }
    put_request(out, r);
}

pub(crate) fn get_parted(c: &mut Cursor<'_>) -> DecodeResult<Request> {
    let n = c.u32()?;
    let mut parts = Vec::new();
    for i in 0..n {
        let id = match c.u8()? {
            0 => None,
            1 => Some(WriteId {
                session: c.u64()?,
                seq: c.u64()?,
                settled_below: c.u64()?,
            }),
            t => return Err(format!("part {i} has id flag {t} (not 0 or 1)")),
        };
        parts.push(Part { id, ops: c.u32()? });
    }
    let mut r = get_request(c)?;
    r.parts = parts;
    r.check_parts()?;
    Ok(r)
}

/// A log entry: its log id, a payload tag, the payload.
pub(crate) fn encode_entry(e: &Entry) -> Vec<u8> {
    let mut out = Vec::with_capacity(size_hint(e));
    put_entry(&mut out, e);
    out
}

/// `encode_entry` appended to `out` (no buffer of its own: an entry may hold 63 MiB).
pub(crate) fn put_entry(out: &mut Vec<u8>, e: &Entry) {
    put_log_id(out, &e.log_id);
    match &e.payload {
        EntryPayload::Blank => out.push(BLANK),
        EntryPayload::Normal(r) if r.parts.is_empty() => {
            out.push(NORMAL);
            put_request(out, r);
        }
        EntryPayload::Normal(r) => {
            out.push(PARTS);
            put_parted(out, r);
        }
        EntryPayload::Membership(m) => {
            out.push(MEMBERSHIP);
            put_membership(out, m);
        }
    }
}

/// About the encoded size of `e`: exact for requests, a guess for memberships.
pub(crate) fn size_hint(e: &Entry) -> usize {
    25 + match &e.payload {
        EntryPayload::Blank => 0,
        EntryPayload::Normal(r) => 8 + r.size(),
        EntryPayload::Membership(_) => 256,
    }
}

pub(crate) fn decode_entry(b: &[u8]) -> DecodeResult<Entry> {
    let mut c = Cursor::new(b);
    let log_id = get_log_id(&mut c)?;
    let payload = match c.u8()? {
        BLANK => EntryPayload::Blank,
        NORMAL => EntryPayload::Normal(get_request(&mut c)?),
        MEMBERSHIP => EntryPayload::Membership(get_membership(&mut c)?),
        PARTS => EntryPayload::Normal(get_parted(&mut c)?),
        t => return Err(format!("entry payload tag {t} (not 0 to 3)")),
    };
    finish(&c, "entry")?;
    Ok(Entry { log_id, payload })
}

/// An optional log id on its own (the committed and purged marks).
pub(crate) fn encode_opt_log_id(id: Option<&LogId>) -> Vec<u8> {
    let mut out = Vec::with_capacity(25);
    put_opt_log_id(&mut out, id);
    out
}

pub(crate) fn decode_opt_log_id(b: &[u8]) -> DecodeResult<Option<LogId>> {
    let mut c = Cursor::new(b);
    let id = get_opt_log_id(&mut c)?;
    finish(&c, "log id")?;
    Ok(id)
}

fn finish(c: &Cursor<'_>, what: &str) -> DecodeResult<()> {
    if c.is_empty() {
        Ok(())
    } else {
        Err(format!("trailing bytes after the {what}"))
    }
}

#[cfg(test)]
#[path = "codec_tests.rs"]
mod tests;
