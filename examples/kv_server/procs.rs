//! The server's procedures in cluster mode (`lsm_bloom::replication::Procedures`): a
//! `Change` (`rmw.rs`) travels in the log as one call and is decided when its entry is
//! applied, identically on every node (`CallRmw`), its reply coming back as the answer.
//!
//! The bytes (a call's arguments and its answer; both only ever read by this server):
//! - arguments: u32 length + the replicated keyspace's name, then u8 change tag and its
//!   fields: keys and values as u32 length + bytes, integers as 8 bytes little-endian,
//!   floats as their IEEE bits, flags as one byte;
//! - answer: u8 tag, then `0` simple string / `1` error: u32 length + UTF-8; `2` integer:
//!   i64; `3` bulk: u32 length + bytes; `4` null.
//!
//! A call whose arguments do not decode writes nothing and answers an error naming what was
//! wrong (every node decodes alike, so every node answers alike).

use lsm_bloom::replication::{CallContext, Op, Procedures};
use lsm_bloom::KeyExpiry;

use super::combine::{plain_set, Written};
use super::resp::Reply;
use super::rmw::{Change, Cond, Found, Rmw, SetExpiry};
use super::store::{Space, Store, StoreResult};
use super::strings::{counter, is_counter};

/// The name of the server's one procedure.
pub const KV: &str = "kv";

/// The server's procedures: `KV` runs a `Change`.
#[derive(Debug)]
pub struct KvProcedures;

impl Procedures for KvProcedures {
    fn call(
        &self,
        name: &str,
        args: &[u8],
        ctx: &mut CallContext<'_>,
    ) -> lsm_bloom::Result<Vec<u8>> {
        if name != KV {
            return Ok(encode_reply(&Reply::err(format!(
                "unknown procedure {name:?}"
            ))));
        }
        let (keyspace, change) = match decode_call(args) {
            Ok(c) => c,
            Err(m) => return Ok(encode_reply(&Reply::err(format!("bad call: {m}")))),
        };
        let mut rmw = CallRmw {
            ctx,
            keyspace: &keyspace,
            failed: None,
        };
        let reply = change.run(&mut rmw);
        if let Some(e) = rmw.failed {
            return Err(e);
        }
        Ok(encode_reply(&reply.unwrap_or_else(|e| e)))
    }
}

/// A pipeline's run of plain SETs and counters (`combine.rs`) in database `index` of a
/// cluster: one call of a `Change::Run`, decided when applied, each command seeing the ones
/// before it; each command's reply. One call rather than one per command: with one per
/// INCR, `redis-benchmark -t incr -P 16` on 3 nodes ran 0.63-0.77x the SETs' rate.
pub fn run_pipeline(db: &Store, index: usize, cmds: Vec<Vec<Vec<u8>>>) -> Vec<Reply> {
    let n = cmds.len();
    let (c, keyspace) = match db.space_for_write(index) {
        Ok(Space::Cluster(c, keyspace)) => (c, keyspace),
        Ok(_) => return vec![Reply::err("internal: a cluster's run outside a cluster"); n],
        Err(e) => return vec![e; n],
    };
    let now = super::expire::now_ms();
    let mut changes = Vec::with_capacity(n);
    // Each command's reply when known now (a count's error), or its place in the run.
    let mut replies: Vec<Result<Reply, usize>> = Vec::with_capacity(n);
    for args in cmds {
        let change = if is_counter(&args) {
            let name = String::from_utf8_lossy(&args[0]).to_ascii_uppercase();
            match counter(&name, &args[1..]) {
                Some(Ok(change)) => change,
                Some(Err(e)) => {
                    replies.push(Ok(e));
                    continue;
                }
                None => {
                    replies.push(Ok(Reply::wrong_args(&name)));
                    continue;
                }
            }
        } else {
            let (key, state) = plain_set(args, now);
            let (value, expiry) = match state {
                Written::Put(value, KeyExpiry::At(at)) => (value, SetExpiry::At(at)),
                Written::Put(value, _) => (value, SetExpiry::Never),
                // Its expiry has passed: the change deletes the key.
                Written::Gone => (Vec::new(), SetExpiry::At(0)),
            };
            Change::Set {
                key,
                value,
                cond: Cond::Always,
                get: false,
                expiry,
                int: false,
            }
        };
        replies.push(Err(changes.len()));
        changes.push(change);
    }
    let mut answers = match c.call(&keyspace, &Change::Run(changes)) {
        Ok(Reply::Array(items)) => Ok(items),
        Ok(other) => Err(other),
        Err(e) => Err(e),
    };
    replies
        .into_iter()
        .map(|r| match (r, &mut answers) {
            (Ok(r), _) => r,
            (Err(_), Err(e)) => e.clone(),
            (Err(i), Ok(items)) => items.get_mut(i).map_or_else(
                || Reply::err("internal: a run came back short"),
                |r| std::mem::replace(r, Reply::Null),
            ),
        })
        .collect()
}

/// The log operation of `change` in `keyspace`: a call of `KV`, judged at this time.
pub fn call_op(keyspace: &str, change: &Change) -> Op {
    Op::Call {
        name: KV.into(),
        args: encode_call(keyspace, change),
        at: super::expire::now_ms().max(0) as u64,
    }
}

/// A change's view of one replicated keyspace while its entry is applied. A store failure
/// is kept, to fail the apply, and the change stopped with a placeholder error.
struct CallRmw<'c, 'a> {
    ctx: &'c mut CallContext<'a>,
    keyspace: &'c str,
    failed: Option<lsm_bloom::Error>,
}

impl CallRmw<'_, '_> {
    fn fail(&mut self, e: lsm_bloom::Error) -> Reply {
        let reply = Reply::err(e.to_string());
        self.failed = Some(e);
        reply
    }
}

impl Rmw for CallRmw<'_, '_> {
    fn get(&mut self, key: &[u8]) -> StoreResult<Found> {
        match self.ctx.get(self.keyspace, key) {
            Ok(found) => Ok(found.map(|s| (s.value, s.expires))),
            Err(e) => Err(self.fail(e)),
        }
    }

    fn exists(&mut self, key: &[u8]) -> StoreResult<bool> {
        Ok(self.get(key)?.is_some())
    }

    fn put(&mut self, key: &[u8], value: Vec<u8>, expires: Option<u64>) -> StoreResult<()> {
        match self.ctx.put(self.keyspace, key, &value, expires) {
            Ok(()) => Ok(()),
            Err(e) => Err(self.fail(e)),
        }
    }

    fn delete(&mut self, key: &[u8]) {
        self.ctx.delete(self.keyspace, key);
    }

    fn now_ms(&self) -> u64 {
        self.ctx.now_millis()
    }
}

const INCR_BY: u8 = 1;
const INCR_BY_FLOAT: u8 = 2;
const APPEND: u8 = 3;
const SET_RANGE: u8 = 4;
const GET_SET: u8 = 5;
const SET: u8 = 6;
const GET_DEL: u8 = 7;
const DEL: u8 = 8;
const MSET_NX: u8 = 9;
const RENAME: u8 = 10;
const RUN: u8 = 11;

fn put_bytes(out: &mut Vec<u8>, b: &[u8]) {
    out.extend_from_slice(&(b.len() as u32).to_le_bytes());
    out.extend_from_slice(b);
}

/// The arguments of a call of `change` in `keyspace`.
pub fn encode_call(keyspace: &str, change: &Change) -> Vec<u8> {
    let mut out = Vec::new();
    put_bytes(&mut out, keyspace.as_bytes());
    put_change(&mut out, change);
    out
}

fn put_change(out: &mut Vec<u8>, change: &Change) {
    match change {
        Change::IncrBy { key, by } => {
            out.push(INCR_BY);
            put_bytes(out, key);
            out.extend_from_slice(&by.to_le_bytes());
        }
        Change::IncrByFloat { key, by } => {
            out.push(INCR_BY_FLOAT);
            put_bytes(out, key);
            out.extend_from_slice(&by.to_bits().to_le_bytes());
        }
        Change::Append { key, value } => {
            out.push(APPEND);
            put_bytes(out, key);
            put_bytes(out, value);
        }
        Change::SetRange { key, offset, value } => {
            out.push(SET_RANGE);
            put_bytes(out, key);
            out.extend_from_slice(&offset.to_le_bytes());
            put_bytes(out, value);
        }
        Change::GetSet { key, value } => {
            out.push(GET_SET);
            put_bytes(out, key);
            put_bytes(out, value);
        }
        Change::Set {
            key,
            value,
            cond,
            get,
            expiry,
            int,
        } => {
            out.push(SET);
            put_bytes(out, key);
            put_bytes(out, value);
            out.push(match cond {
                Cond::Always => 0,
                Cond::Absent => 1,
                Cond::Present => 2,
            });
            let (kind, at) = match expiry {
                SetExpiry::Never => (0, 0),
                SetExpiry::At(at) => (1, *at),
                SetExpiry::Keep => (2, 0),
            };
            out.push(kind);
            out.extend_from_slice(&at.to_le_bytes());
            out.push(u8::from(*get));
            out.push(u8::from(*int));
        }
        Change::GetDel { key } => {
            out.push(GET_DEL);
            put_bytes(out, key);
        }
        Change::Del { keys } => {
            out.push(DEL);
            out.extend_from_slice(&(keys.len() as u32).to_le_bytes());
            for k in keys {
                put_bytes(out, k);
            }
        }
        Change::MSetNx { pairs } => {
            out.push(MSET_NX);
            out.extend_from_slice(&(pairs.len() as u32).to_le_bytes());
            for (k, v) in pairs {
                put_bytes(out, k);
                put_bytes(out, v);
            }
        }
        Change::Rename { from, to, nx } => {
            out.push(RENAME);
            put_bytes(out, from);
            put_bytes(out, to);
            out.push(u8::from(*nx));
        }
        Change::Run(changes) => {
            out.push(RUN);
            out.extend_from_slice(&(changes.len() as u32).to_le_bytes());
            for c in changes {
                put_change(out, c);
            }
        }
    }
}

/// Reads `encode_call`'s bytes; every length is checked against the bytes left.
struct Cursor<'a>(&'a [u8]);

impl Cursor<'_> {
    fn take(&mut self, n: usize) -> Result<&[u8], String> {
        if self.0.len() < n {
            return Err(format!("{n} bytes wanted, {} left", self.0.len()));
        }
        let (head, rest) = self.0.split_at(n);
        self.0 = rest;
        Ok(head)
    }
    fn u8(&mut self) -> Result<u8, String> {
        Ok(self.take(1)?[0])
    }
    fn u32(&mut self) -> Result<u32, String> {
        let b = self.take(4)?;
        Ok(u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
    }
    fn u64(&mut self) -> Result<u64, String> {
        let mut a = [0u8; 8];
        a.copy_from_slice(self.take(8)?);
        Ok(u64::from_le_bytes(a))
    }
    fn bytes(&mut self) -> Result<Vec<u8>, String> {
        let n = self.u32()? as usize;
        Ok(self.take(n)?.to_vec())
    }
    fn flag(&mut self) -> Result<bool, String> {
        match self.u8()? {
            0 => Ok(false),
            1 => Ok(true),
            b => Err(format!("flag byte {b}")),
        }
    }
}

/// The keyspace and change of a call's arguments.
pub fn decode_call(args: &[u8]) -> Result<(String, Change), String> {
    let mut c = Cursor(args);
    let keyspace =
        String::from_utf8(c.bytes()?).map_err(|_| "keyspace name not UTF-8".to_string())?;
    let change = get_change(&mut c, true)?;
    if !c.0.is_empty() {
        return Err("trailing bytes".into());
    }
    Ok((keyspace, change))
}

/// One change (`put_change`); a run only where `runs` allows one (not inside another).
fn get_change(c: &mut Cursor<'_>, runs: bool) -> Result<Change, String> {
    Ok(match c.u8()? {
        INCR_BY => Change::IncrBy {
            key: c.bytes()?,
            by: c.u64()? as i64,
        },
        INCR_BY_FLOAT => Change::IncrByFloat {
            key: c.bytes()?,
            by: f64::from_bits(c.u64()?),
        },
        APPEND => Change::Append {
            key: c.bytes()?,
            value: c.bytes()?,
        },
        SET_RANGE => Change::SetRange {
            key: c.bytes()?,
            offset: c.u64()?,
            value: c.bytes()?,
        },
        GET_SET => Change::GetSet {
            key: c.bytes()?,
            value: c.bytes()?,
        },
        SET => {
            let (key, value) = (c.bytes()?, c.bytes()?);
            let cond = match c.u8()? {
                0 => Cond::Always,
                1 => Cond::Absent,
                2 => Cond::Present,
                b => return Err(format!("SET condition {b}")),
            };
            let (kind, at) = (c.u8()?, c.u64()?);
            let expiry = match kind {
                0 => SetExpiry::Never,
                1 => SetExpiry::At(at),
                2 => SetExpiry::Keep,
                b => return Err(format!("SET expiry kind {b}")),
            };
            Change::Set {
                key,
                value,
                cond,
                expiry,
                get: c.flag()?,
                int: c.flag()?,
            }
        }
        GET_DEL => Change::GetDel { key: c.bytes()? },
        DEL => {
            let n = c.u32()?;
            // No capacity from the count: each key takes at least 4 bytes to decode.
            let mut keys = Vec::new();
            for _ in 0..n {
                keys.push(c.bytes()?);
            }
            Change::Del { keys }
        }
        MSET_NX => {
            let n = c.u32()?;
            let mut pairs = Vec::new();
            for _ in 0..n {
                pairs.push((c.bytes()?, c.bytes()?));
            }
            Change::MSetNx { pairs }
        }
        RENAME => Change::Rename {
            from: c.bytes()?,
            to: c.bytes()?,
            nx: c.flag()?,
        },
        RUN if runs => {
            let n = c.u32()?;
            // No capacity from the count: each change takes at least a byte to decode.
            let mut changes = Vec::new();
            for _ in 0..n {
                changes.push(get_change(c, false)?);
            }
            Change::Run(changes)
        }
        t => return Err(format!("change tag {t}")),
    })
}

/// A reply as a call's answer (the replies a `Change` gives).
pub fn encode_reply(r: &Reply) -> Vec<u8> {
    let mut out = Vec::new();
    match r {
        Reply::Simple(s) => {
            out.push(0);
            put_bytes(&mut out, s.as_bytes());
        }
        Reply::Error(s) => {
            out.push(1);
            put_bytes(&mut out, s.as_bytes());
        }
        Reply::Int(n) => {
            out.push(2);
            out.extend_from_slice(&n.to_le_bytes());
        }
        Reply::Bulk(b) => {
            out.push(3);
            put_bytes(&mut out, b);
        }
        Reply::Array(items) => {
            out.push(5);
            out.extend_from_slice(&(items.len() as u32).to_le_bytes());
            for r in items {
                out.extend_from_slice(&encode_reply(r));
            }
        }
        _ => out.push(4),
    }
    out
}

/// An answer as the reply to send; one that does not decode is an error reply.
pub fn decode_reply(b: &[u8]) -> Reply {
    let mut c = Cursor(b);
    match get_reply(&mut c, true) {
        Ok(r) if c.0.is_empty() => r,
        Ok(_) => Reply::err("internal: trailing bytes after a call's answer"),
        Err(e) => Reply::err(format!("internal: a call's answer: {e}")),
    }
}

/// One reply (`encode_reply`); an array only where `arrays` allows one (a run's).
fn get_reply(c: &mut Cursor<'_>, arrays: bool) -> Result<Reply, String> {
    let text = |c: &mut Cursor<'_>| -> Result<String, String> {
        String::from_utf8(c.bytes()?).map_err(|_| "not UTF-8".to_string())
    };
    Ok(match c.u8()? {
        0 => Reply::Simple(text(c)?),
        1 => Reply::Error(text(c)?),
        2 => Reply::Int(c.u64()? as i64),
        3 => Reply::Bulk(c.bytes()?),
        4 => Reply::Null,
        5 if arrays => {
            let n = c.u32()?;
            let mut items = Vec::new();
            for _ in 0..n {
                items.push(get_reply(c, false)?);
            }
            Reply::Array(items)
        }
        t => return Err(format!("answer tag {t}")),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

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
        for change in changes.into_iter().chain([run]) {
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
        ] {
            assert_eq!(decode_reply(&encode_reply(&r)), r);
        }
        assert!(matches!(decode_reply(&[9]), Reply::Error(_)));
    }
}
