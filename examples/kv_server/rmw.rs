//! Read-modify-write and conditional commands as values (`Change`), run against an `Rmw`:
//! the same code decides them on a single server and in a cluster.
//!
//! On a single server a change runs under the exclusive side of `Writes` (`values.rs`) over
//! the session's database (`SpaceRmw`), and its writes go as one batch. In a cluster it goes
//! into the log as one call (`Op::Call`, `procs.rs`) and runs when the entry is applied, on
//! every node alike, against the replicated data as the log leaves it: so `SET NX` has one
//! winner and every `INCR` counts once, whichever nodes the clients talk to.
//!
//! A change's reads see its own earlier writes (a run's commands see the ones before them),
//! and it decides only from its arguments, its reads and `Rmw::now_ms`.

use super::expire::{expire_ms, Unit};
use super::resp::Reply;
#[cfg(feature = "replication")]
use super::store::Space;
use super::store::StoreResult;
use super::strings::{format_float, not_an_integer, too_long, MAX_STRING};

/// Keys and values, in order.
pub type Pairs = Vec<(Vec<u8>, Vec<u8>)>;

use super::bloom::header_key;
use super::rmw_view::Place;
pub use super::rmw_view::{Rmw, SpaceRmw};

/// What `SET` does when the key exists or not.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Cond {
    Always,
    /// `NX`: only if absent.
    Absent,
    /// `XX`: only if present.
    Present,
}

/// The expiry a `SET` gives its value.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SetExpiry {
    Never,
    /// Until this time (ms since the epoch): a time already past deletes the key.
    At(u64),
    /// `KEEPTTL`: the key's own.
    Keep,
}

/// EXPIRE's NX, XX, GT and LT.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ExpireFlags {
    pub nx: bool,
    pub xx: bool,
    pub gt: bool,
    pub lt: bool,
}

impl ExpireFlags {
    /// Whether the flags refuse a new expiry `at` over `cur` (-1: none).
    fn refuse(self, cur: i64, at: i64) -> bool {
        (self.nx && cur != -1)
            || (self.xx && cur == -1)
            || (self.gt && (cur == -1 || at <= cur))
            || (self.lt && cur != -1 && at >= cur)
    }
}

/// What GETEX does to the expiry.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum GetExOpt {
    Keep,
    Persist,
    /// EX, PX, EXAT or PXAT with its argument, checked once the key is found (Redis answers
    /// nil for a missing key before it looks at the value).
    Given(Unit, Vec<u8>),
}

/// A read-modify-write or conditional command of one database, its arguments parsed.
#[derive(Clone, Debug, PartialEq)]
pub enum Change {
    /// INCR, DECR, INCRBY, DECRBY.
    IncrBy {
        key: Vec<u8>,
        by: i64,
    },
    IncrByFloat {
        key: Vec<u8>,
        by: f64,
    },
    Append {
        key: Vec<u8>,
        value: Vec<u8>,
    },
    SetRange {
        key: Vec<u8>,
        offset: u64,
        value: Vec<u8>,
    },
    /// GETSET (the new value has no expiry).
    GetSet {
        key: Vec<u8>,
        value: Vec<u8>,
    },
    /// SET with NX, XX, GET or KEEPTTL, and SETNX (`int`: answers 1 or 0).
    Set {
        key: Vec<u8>,
        value: Vec<u8>,
        cond: Cond,
        get: bool,
        expiry: SetExpiry,
        int: bool,
    },
    GetDel {
        key: Vec<u8>,
    },
    /// DEL: counts the distinct keys removed.
    Del {
        keys: Vec<Vec<u8>>,
    },
    MSetNx {
        pairs: Pairs,
    },
    /// RENAME, and RENAMENX (`nx`).
    Rename {
        from: Vec<u8>,
        to: Vec<u8>,
        nx: bool,
    },
    /// EXPIRE and its kin: the key's expiry set to `at` (ms since the epoch; past: the key
    /// deleted) unless a flag refuses it.
    Expire {
        key: Vec<u8>,
        at: i64,
        flags: ExpireFlags,
    },
    /// PERSIST.
    Persist {
        key: Vec<u8>,
    },
    /// GETEX: the value, its expiry changed as `opt` says.
    GetEx {
        key: Vec<u8>,
        opt: GetExOpt,
    },
    /// GET (in a cluster's EXEC).
    Get {
        key: Vec<u8>,
    },
    /// EXISTS: counts every argument that exists (`EXISTS k k` is 2).
    Exists {
        keys: Vec<Vec<u8>>,
    },
    MSet {
        pairs: Pairs,
    },
    /// A cluster's EXEC: nothing, answered with a null array, if a watched key's
    /// fingerprint (`changes::fingerprint`) is not what WATCH saw; else the commands in
    /// order, each seeing the ones before it, their replies in one array.
    #[cfg_attr(
        not(feature = "replication"),
        expect(
            dead_code,
            reason = "a single server's EXEC runs its commands in multi.rs"
        )
    )]
    Exec {
        watched: Vec<(Vec<u8>, u128)>,
        commands: Vec<Change>,
    },
    /// A pipeline's run of changes, in order, each seeing the ones before it: their replies
    /// as an array (one call for a run of counters and SETs in a cluster: `procs.rs`).
    #[cfg_attr(
        not(feature = "replication"),
        expect(
            dead_code,
            reason = "a single server runs a pipeline's counters in combine.rs"
        )
    )]
    Run(Vec<Change>),
    /// A write to a Bloom filter (`bloom.rs`).
    Bf(super::bloom::BfChange),
    /// A cluster's MOVE or COPY of `key` from the call's database to `to_key` in that of
    /// the keyspace `to`: a call of its own, run by `transfer.rs` (it sees two databases; a
    /// change sees one).
    #[cfg_attr(
        not(feature = "replication"),
        expect(dead_code, reason = "a single server's MOVE and COPY run a LocalPair")
    )]
    Transfer {
        key: Vec<u8>,
        to_key: Vec<u8>,
        to: String,
        how: super::transfer::How,
    },
}

/// Whether a SET under `cond` writes, the key existing or not.
pub fn set_writes(cond: Cond, existed: bool) -> bool {
    match cond {
        Cond::Always => true,
        Cond::Absent => !existed,
        Cond::Present => existed,
    }
}

/// INCRBY's new value of `old` (absent: 0), or its error.
pub fn incremented(old: Option<&[u8]>, by: i64) -> Result<i64, Reply> {
    let old = match old {
        None => 0,
        Some(v) => super::expire::parse_int(v).ok_or_else(not_an_integer)?,
    };
    old.checked_add(by)
        .ok_or_else(|| Reply::err("increment or decrement would overflow"))
}

impl Change {
    /// Decides the change against `rmw`: its writes made there, its reply answered. A store
    /// failure is the error.
    pub fn run(self, rmw: &mut dyn Rmw) -> StoreResult<Reply> {
        Ok(match self {
            Change::IncrBy { key, by } => {
                let found = rmw.get(&key)?;
                let (old, expires) = split(found);
                match incremented(old.as_deref(), by) {
                    Err(e) => e,
                    Ok(new) => {
                        rmw.put(&key, new.to_string().into_bytes(), expires)?;
                        Reply::Int(new)
                    }
                }
            }
            Change::IncrByFloat { key, by } => {
                let (old, expires) = split(rmw.get(&key)?);
                let old = match old {
                    None => 0.0,
                    Some(v) => match super::strings::parse_float(&v) {
                        Some(x) => x,
                        None => return Ok(Reply::err("value is not a valid float")),
                    },
                };
                let new = old + by;
                if !new.is_finite() {
                    return Ok(Reply::err("increment would produce NaN or Infinity"));
                }
                let text = format_float(new).into_bytes();
                rmw.put(&key, text.clone(), expires)?;
                Reply::Bulk(text)
            }
            Change::Append { key, value } => {
                let (old, expires) = split(rmw.get(&key)?);
                let mut old = old.unwrap_or_default();
                if old.len() + value.len() > MAX_STRING {
                    return Ok(too_long());
                }
                old.extend_from_slice(&value);
                let len = old.len() as i64;
                rmw.put(&key, old, expires)?;
                Reply::Int(len)
            }
            Change::SetRange { key, offset, value } => {
                let (old, expires) = split(rmw.get(&key)?);
                let mut old = old.unwrap_or_default();
                if value.is_empty() {
                    return Ok(Reply::Int(old.len() as i64));
                }
                if offset.saturating_add(value.len() as u64) > MAX_STRING as u64 {
                    return Ok(too_long());
                }
                let (at, end) = (offset as usize, offset as usize + value.len());
                if old.len() < end {
                    old.resize(end, 0);
                }
                old[at..end].copy_from_slice(&value);
                let len = old.len() as i64;
                rmw.put(&key, old, expires)?;
                Reply::Int(len)
            }
            Change::GetSet { key, value } => {
                let old = rmw.get(&key)?;
                rmw.put(&key, value, None)?;
                old.map_or(Reply::Null, |(v, _)| Reply::Bulk(v))
            }
            Change::Set {
                key,
                value,
                cond,
                get,
                expiry,
                int,
            } => {
                let old = match get || expiry == SetExpiry::Keep {
                    true => rmw.get(&key)?,
                    false if cond == Cond::Always => None,
                    false => rmw.exists(&key)?.then(|| (Vec::new(), None)),
                };
                let write = set_writes(cond, old.is_some());
                if write {
                    let expires = match expiry {
                        SetExpiry::Never => None,
                        SetExpiry::At(at) => Some(at),
                        SetExpiry::Keep => old.as_ref().and_then(|(_, e)| *e),
                    };
                    match expires {
                        Some(at) if at <= rmw.now_ms() => rmw.delete(&key)?,
                        expires => rmw.put(&key, value, expires)?,
                    }
                }
                match (int, get, old) {
                    (true, _, _) => Reply::Int(i64::from(write)),
                    (false, true, Some((v, _))) => Reply::Bulk(v),
                    (false, true, None) => Reply::Null,
                    (false, false, _) if write => Reply::ok(),
                    (false, false, _) => Reply::Null,
                }
            }
            Change::GetDel { key } => match rmw.get(&key)? {
                None => Reply::Null,
                Some((v, _)) => {
                    rmw.delete(&key)?;
                    Reply::Bulk(v)
                }
            },
            Change::Del { mut keys } => {
                keys.sort();
                keys.dedup();
                let mut gone = Vec::new();
                for k in keys {
                    if rmw.exists(&k)? {
                        gone.push(k);
                    }
                }
                for k in &gone {
                    rmw.delete(k)?;
                }
                Reply::Int(gone.len() as i64)
            }
            Change::MSetNx { pairs } => {
                for (k, _) in &pairs {
                    if rmw.exists(k)? {
                        return Ok(Reply::Int(0));
                    }
                }
                for (k, v) in pairs {
                    rmw.put(&k, v, None)?;
                }
                Reply::Int(1)
            }
            Change::Expire { key, at, flags } => {
                let Some((place, value, expires)) = rmw.locate(&key)? else {
                    return Ok(Reply::Int(0));
                };
                let cur = expires.map_or(-1, |e| i64::try_from(e).unwrap_or(i64::MAX));
                if flags.refuse(cur, at) {
                    return Ok(Reply::Int(0));
                }
                match u64::try_from(at) {
                    Ok(at) if at > rmw.now_ms() => rmw.put_at(place, &key, value, Some(at))?,
                    _ => rmw.delete(&key)?,
                }
                Reply::Int(1)
            }
            Change::Persist { key } => match rmw.locate(&key)? {
                Some((place, value, Some(_))) => {
                    rmw.put_at(place, &key, value, None)?;
                    Reply::Int(1)
                }
                _ => Reply::Int(0),
            },
            Change::GetEx { key, opt } => {
                let Some((value, expires)) = rmw.get(&key)? else {
                    return Ok(Reply::Null);
                };
                match opt {
                    GetExOpt::Keep => {}
                    GetExOpt::Persist if expires.is_none() => {}
                    GetExOpt::Persist => rmw.put(&key, value.clone(), None)?,
                    GetExOpt::Given(unit, v) => {
                        let now = i64::try_from(rmw.now_ms()).unwrap_or(i64::MAX);
                        let at = match expire_ms(unit, &v, "getex", now) {
                            Ok(at) => at,
                            Err(e) => return Ok(e),
                        };
                        let absolute = matches!(unit, Unit::ExAt | Unit::PxAt);
                        match absolute && at <= now {
                            true => rmw.delete(&key)?,
                            false => rmw.put(&key, value.clone(), Some(at as u64))?,
                        }
                    }
                }
                Reply::Bulk(value)
            }
            Change::Get { key } => rmw.get(&key)?.map_or(Reply::Null, |(v, _)| Reply::Bulk(v)),
            Change::Exists { keys } => {
                let mut n = 0;
                for k in &keys {
                    n += i64::from(rmw.exists(k)?);
                }
                Reply::Int(n)
            }
            Change::MSet { pairs } => {
                for (k, v) in pairs {
                    rmw.put(&k, v, None)?;
                }
                Reply::ok()
            }
            Change::Exec { watched, commands } => {
                for (k, seen) in &watched {
                    if super::changes::fingerprint(&rmw.locate(k)?) != *seen {
                        return Ok(Reply::NullArray);
                    }
                }
                let mut replies = Vec::with_capacity(commands.len());
                for c in commands {
                    replies.push(c.run(rmw)?);
                }
                Reply::Array(replies)
            }
            Change::Bf(bf) => bf.run(rmw)?,
            Change::Transfer { .. } => {
                Reply::err("internal: MOVE and COPY run as calls of their own")
            }
            Change::Run(changes) => {
                let mut replies = Vec::with_capacity(changes.len());
                for c in changes {
                    replies.push(c.run(rmw)?);
                }
                Reply::Array(replies)
            }
            Change::Rename { from, to, nx } => {
                let Some((place, value, expires)) = rmw.locate(&from)? else {
                    return Ok(Reply::err("no such key"));
                };
                if from == to {
                    return Ok(if nx { Reply::Int(0) } else { Reply::ok() });
                }
                if nx && rmw.exists(&to)? {
                    return Ok(Reply::Int(0));
                }
                match place {
                    // The header moves; the items, keyed by its generation, stay.
                    Place::Filters => rmw.write(Place::Filters, &header_key(&from), None)?,
                    Place::Values => rmw.delete(&from)?,
                }
                rmw.delete(&to)?;
                rmw.put_at(place, &to, value, expires)?;
                if nx {
                    Reply::Int(1)
                } else {
                    Reply::ok()
                }
            }
        })
    }
}

/// A read's value and expiry, apart.
fn split(found: Option<(Vec<u8>, Option<u64>)>) -> (Option<Vec<u8>>, Option<u64>) {
    match found {
        None => (None, None),
        Some((v, e)) => (Some(v), e),
    }
}

impl super::values::Values<'_> {
    /// Decides `change` in the session's database and answers its reply: in a cluster as one
    /// replicated call (`procs.rs`), unless the server was told to decide on the receiving
    /// node (`Cluster::decide_locally`, the tests' negative control); on a single server under
    /// the exclusive write order, its writes as one batch.
    pub fn run_change(&self, change: Change) -> Reply {
        let run = || -> StoreResult<Reply> {
            // A change that writes only what exists makes no keyspace for an empty database.
            let space = match change {
                Change::Del { .. }
                | Change::GetDel { .. }
                | Change::Rename { .. }
                | Change::Expire { .. }
                | Change::Persist { .. }
                | Change::GetEx { .. } => self.db.space(self.index)?,
                _ => self.db.space_for_write(self.index)?,
            };
            #[cfg(feature = "replication")]
            if let Space::Cluster(c, name) = &space {
                if !c.decide_locally {
                    return c.call(name, &change);
                }
            }
            let _w = self.writes.exclusive();
            let now = super::expire::now_ms().max(0) as u64;
            let mut rmw = SpaceRmw::new(&space, now);
            let reply = change.run(&mut rmw)?;
            rmw.finish()?;
            Ok(reply)
        };
        run().unwrap_or_else(|e| e)
    }

    /// Whether this session's changes go into the log as calls (cluster mode), rather than
    /// being decided here.
    pub fn changes_are_calls(&self) -> bool {
        match self.db {
            #[cfg(feature = "replication")]
            super::store::Store::Cluster(c, _) => !c.decide_locally,
            _ => false,
        }
    }
}
