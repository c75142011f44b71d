//! The bytes of a kv_server call (`procs.rs`), read only by kv_server itself (FORMAT.md
//! §7.5):
//! - arguments: u32 length + the replicated keyspace's name, then u8 change tag and its
//!   fields: keys and values as u32 length + bytes, integers as 8 bytes little-endian,
//!   floats as their IEEE bits, flags as one byte; a run (tag 11) is u32 count and that many
//!   changes, an EXEC (tag 18) u32 count and that many watched keys (key, then its 128-bit
//!   fingerprint, low half first), u32 count and that many changes; neither holds a run or
//!   an EXEC;
//! - answer: u8 tag, then `0` simple string / `1` error: u32 length + UTF-8; `2` integer:
//!   i64; `3` bulk: u32 length + bytes; `4` null; `5` an array: u32 count and that many
//!   answers, none an array; `6` a null array (an EXEC that ran nothing); `7` a boolean:
//!   one byte, 0 or 1;
//! - a Bloom filter change (tag 19): `bloom::encode_change`;
//! - a cluster's MOVE or COPY (tag 20, never inside a run or an EXEC): the key, the
//!   destination key, the destination database's keyspace name, each u32 length + bytes,
//!   then u8 `0` MOVE, `1` COPY, `2` COPY … REPLACE (`transfer.rs`).
//!
//! Decoding checks every length and count against the bytes left, and refuses unknown tags
//! and trailing bytes. A call whose arguments do not decode writes nothing and answers an
//! error naming what was wrong (every node decodes alike, so every node answers alike).

use super::expire::Unit;
use super::resp::Reply;
use super::rmw::{Change, Cond, ExpireFlags, GetExOpt, Pairs, SetExpiry};
use super::transfer::How;

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
const EXPIRE: u8 = 12;
const PERSIST: u8 = 13;
const GET_EX: u8 = 14;
const GET: u8 = 15;
const EXISTS: u8 = 16;
const MSET: u8 = 17;
const EXEC: u8 = 18;
const BLOOM: u8 = 19;
const TRANSFER: u8 = 20;

pub fn put_bytes(out: &mut Vec<u8>, b: &[u8]) {
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
            put_keys(out, keys);
        }
        Change::MSetNx { pairs } => {
            out.push(MSET_NX);
            put_pairs(out, pairs);
        }
        Change::Rename { from, to, nx } => {
            out.push(RENAME);
            put_bytes(out, from);
            put_bytes(out, to);
            out.push(u8::from(*nx));
        }
        Change::Expire { key, at, flags } => {
            out.push(EXPIRE);
            put_bytes(out, key);
            out.extend_from_slice(&at.to_le_bytes());
            let bits = [flags.nx, flags.xx, flags.gt, flags.lt];
            out.push(bits.iter().rev().fold(0, |b, &f| (b << 1) | u8::from(f)));
        }
        Change::Persist { key } => {
            out.push(PERSIST);
            put_bytes(out, key);
        }
        Change::GetEx { key, opt } => {
            out.push(GET_EX);
            put_bytes(out, key);
            match opt {
                GetExOpt::Keep => out.push(0),
                GetExOpt::Persist => out.push(1),
                GetExOpt::Given(unit, v) => {
                    out.push(2);
                    out.push(match unit {
                        Unit::Ex => 0,
                        Unit::Px => 1,
                        Unit::ExAt => 2,
                        Unit::PxAt => 3,
                    });
                    put_bytes(out, v);
                }
            }
        }
        Change::Get { key } => {
            out.push(GET);
            put_bytes(out, key);
        }
        Change::Exists { keys } => {
            out.push(EXISTS);
            put_keys(out, keys);
        }
        Change::MSet { pairs } => {
            out.push(MSET);
            put_pairs(out, pairs);
        }
        Change::Exec { watched, commands } => {
            out.push(EXEC);
            out.extend_from_slice(&(watched.len() as u32).to_le_bytes());
            for (k, f) in watched {
                put_bytes(out, k);
                out.extend_from_slice(&f.to_le_bytes());
            }
            out.extend_from_slice(&(commands.len() as u32).to_le_bytes());
            for c in commands {
                put_change(out, c);
            }
        }
        Change::Bf(bf) => {
            out.push(BLOOM);
            bf.encode(out);
        }
        Change::Transfer {
            key,
            to_key,
            to,
            how,
        } => {
            out.push(TRANSFER);
            put_bytes(out, key);
            put_bytes(out, to_key);
            put_bytes(out, to.as_bytes());
            out.push(match how {
                How::Move => 0,
                How::Copy { replace: false } => 1,
                How::Copy { replace: true } => 2,
            });
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

fn put_keys(out: &mut Vec<u8>, keys: &[Vec<u8>]) {
    out.extend_from_slice(&(keys.len() as u32).to_le_bytes());
    for k in keys {
        put_bytes(out, k);
    }
}

fn put_pairs(out: &mut Vec<u8>, pairs: &Pairs) {
    out.extend_from_slice(&(pairs.len() as u32).to_le_bytes());
    for (k, v) in pairs {
        put_bytes(out, k);
        put_bytes(out, v);
    }
}

/// `put_keys`'s keys. No capacity from the count: each key takes at least 4 bytes to decode.
fn get_keys(c: &mut Cursor<'_>) -> Result<Vec<Vec<u8>>, String> {
    let n = c.u32()?;
    let mut keys = Vec::new();
    for _ in 0..n {
        keys.push(c.bytes()?);
    }
    Ok(keys)
}

fn get_pairs(c: &mut Cursor<'_>) -> Result<Pairs, String> {
    let n = c.u32()?;
    let mut pairs = Vec::new();
    for _ in 0..n {
        pairs.push((c.bytes()?, c.bytes()?));
    }
    Ok(pairs)
}

/// Reads `encode_call`'s bytes; every length is checked against the bytes left.
pub struct Cursor<'a>(pub &'a [u8]);

impl Cursor<'_> {
    fn take(&mut self, n: usize) -> Result<&[u8], String> {
        if self.0.len() < n {
            return Err(format!("{n} bytes wanted, {} left", self.0.len()));
        }
        let (head, rest) = self.0.split_at(n);
        self.0 = rest;
        Ok(head)
    }
    pub fn u8(&mut self) -> Result<u8, String> {
        Ok(self.take(1)?[0])
    }
    pub fn u32(&mut self) -> Result<u32, String> {
        let b = self.take(4)?;
        Ok(u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
    }
    pub fn u64(&mut self) -> Result<u64, String> {
        let mut a = [0u8; 8];
        a.copy_from_slice(self.take(8)?);
        Ok(u64::from_le_bytes(a))
    }
    pub fn bytes(&mut self) -> Result<Vec<u8>, String> {
        let n = self.u32()? as usize;
        Ok(self.take(n)?.to_vec())
    }
    pub fn flag(&mut self) -> Result<bool, String> {
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
        DEL => Change::Del { keys: get_keys(c)? },
        MSET_NX => Change::MSetNx {
            pairs: get_pairs(c)?,
        },
        GET => Change::Get { key: c.bytes()? },
        EXISTS => Change::Exists { keys: get_keys(c)? },
        MSET => Change::MSet {
            pairs: get_pairs(c)?,
        },
        EXEC if runs => {
            let n = c.u32()?;
            // No capacity from a count: each item takes at least a byte to decode.
            let mut watched = Vec::new();
            for _ in 0..n {
                let k = c.bytes()?;
                let lo = c.u64()?;
                let hi = c.u64()?;
                watched.push((k, u128::from(lo) | (u128::from(hi) << 64)));
            }
            let n = c.u32()?;
            let mut commands = Vec::new();
            for _ in 0..n {
                commands.push(get_change(c, false)?);
            }
            Change::Exec { watched, commands }
        }
        RENAME => Change::Rename {
            from: c.bytes()?,
            to: c.bytes()?,
            nx: c.flag()?,
        },
        EXPIRE => {
            let (key, at, bits) = (c.bytes()?, c.u64()? as i64, c.u8()?);
            if bits > 0b1111 {
                return Err(format!("EXPIRE flags {bits:#x}"));
            }
            let bit = |i: u8| bits & (1 << i) != 0;
            Change::Expire {
                key,
                at,
                flags: ExpireFlags {
                    nx: bit(0),
                    xx: bit(1),
                    gt: bit(2),
                    lt: bit(3),
                },
            }
        }
        PERSIST => Change::Persist { key: c.bytes()? },
        GET_EX => {
            let key = c.bytes()?;
            let opt = match c.u8()? {
                0 => GetExOpt::Keep,
                1 => GetExOpt::Persist,
                2 => {
                    let unit = match c.u8()? {
                        0 => Unit::Ex,
                        1 => Unit::Px,
                        2 => Unit::ExAt,
                        3 => Unit::PxAt,
                        u => return Err(format!("GETEX unit {u}")),
                    };
                    GetExOpt::Given(unit, c.bytes()?)
                }
                k => return Err(format!("GETEX option {k}")),
            };
            Change::GetEx { key, opt }
        }
        RUN if runs => {
            let n = c.u32()?;
            // No capacity from the count: each change takes at least a byte to decode.
            let mut changes = Vec::new();
            for _ in 0..n {
                changes.push(get_change(c, false)?);
            }
            Change::Run(changes)
        }
        BLOOM => Change::Bf(super::bloom::BfChange::decode(c)?),
        TRANSFER if runs => Change::Transfer {
            key: c.bytes()?,
            to_key: c.bytes()?,
            to: String::from_utf8(c.bytes()?).map_err(|_| "MOVE's keyspace not UTF-8")?,
            how: match c.u8()? {
                0 => How::Move,
                1 => How::Copy { replace: false },
                2 => How::Copy { replace: true },
                b => return Err(format!("MOVE or COPY kind {b}")),
            },
        },
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
        Reply::NullArray => out.push(6),
        Reply::Bool(b) => {
            out.push(7);
            out.push(u8::from(*b));
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
        6 => Reply::NullArray,
        7 => Reply::Bool(c.flag()?),
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
#[path = "call_codec_tests.rs"]
mod tests;
