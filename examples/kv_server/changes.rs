//! Commands as changes (`rmw.rs`): each command that a change can decide, its arguments
//! parsed and checked as Redis checks them before it reads. The command handlers run these
//! changes one at a time; a cluster's EXEC sends its whole queue as one (`multi_cluster.rs`).

use super::expire::{self, parse_int, ExpireOpt, SetOpts};
use super::resp::Reply;
use super::rmw::{Change, Cond, ExpireFlags, GetExOpt, SetExpiry};
use super::rmw_view::{Located, Place};
use super::strings::{not_an_integer, parse_float};

/// SET's change (SETNX's with `nx_int`; SETEX's and PSETEX's, `cmd` naming them in errors),
/// its options parsed: the expiry checked now, before anything is read, as Redis does.
pub fn set_change(
    k: &[u8],
    value: Vec<u8>,
    o: &SetOpts,
    nx_int: bool,
    cmd: &str,
) -> Result<Change, Reply> {
    let expiry = match &o.expire {
        ExpireOpt::Given(unit, t) => {
            SetExpiry::At(expire::expire_ms(*unit, t, cmd, expire::now_ms())?.max(0) as u64)
        }
        ExpireOpt::Keep => SetExpiry::Keep,
        ExpireOpt::Unset | ExpireOpt::Persist => SetExpiry::Never,
    };
    let cond = match (o.nx || nx_int, o.xx) {
        (true, _) => Cond::Absent,
        (false, true) => Cond::Present,
        (false, false) => Cond::Always,
    };
    Ok(Change::Set {
        key: k.to_vec(),
        value,
        cond,
        get: o.get,
        expiry,
        int: nx_int,
    })
}

/// EXPIRE and its kin (Redis's `expireGenericCommand`): the flags and the time checked, the
/// time made absolute by this node's clock.
pub fn expire_change(cmd: &str, k: &[u8], t: &[u8], flags: &[Vec<u8>]) -> Result<Change, Reply> {
    let mut f = ExpireFlags::default();
    for flag in flags {
        match flag.to_ascii_uppercase().as_slice() {
            b"NX" => f.nx = true,
            b"XX" => f.xx = true,
            b"GT" => f.gt = true,
            b"LT" => f.lt = true,
            _ => {
                let flag = String::from_utf8_lossy(flag);
                return Err(Reply::err(format!("Unsupported option {flag}")));
            }
        }
    }
    if f.nx && (f.xx || f.gt || f.lt) {
        return Err(Reply::err(
            "NX and XX, GT or LT options at the same time are not compatible",
        ));
    }
    if f.gt && f.lt {
        return Err(Reply::err(
            "GT and LT options at the same time are not compatible",
        ));
    }
    let invalid = || expire::invalid_expire(cmd);
    let mut when = parse_int(t).ok_or_else(not_an_integer)?;
    if matches!(cmd, "EXPIRE" | "EXPIREAT") {
        if !(i64::MIN / 1000..=i64::MAX / 1000).contains(&when) {
            return Err(invalid());
        }
        when *= 1000;
    }
    let base = match cmd {
        "EXPIRE" | "PEXPIRE" => expire::now_ms(),
        _ => 0,
    };
    let at = when.checked_add(base).ok_or_else(invalid)?;
    Ok(Change::Expire {
        key: k.to_vec(),
        at,
        flags: f,
    })
}

/// The change of command `cmd` (upper case) with arguments `rest`, or its error; `None` when
/// `cmd` is no change with that many arguments (the caller answers it otherwise).
pub fn change_of(cmd: &str, rest: &mut [Vec<u8>]) -> Option<Result<Change, Reply>> {
    if let Some(c) = counter(cmd, rest) {
        return Some(c);
    }
    let take = |v: &mut Vec<u8>| std::mem::take(v);
    Some(match (cmd, rest) {
        ("GET", [k]) => Ok(Change::Get { key: k.to_vec() }),
        ("GETDEL", [k]) => Ok(Change::GetDel { key: k.to_vec() }),
        ("SET", [k, v, opts @ ..]) => {
            expire::parse_opts(opts, true).and_then(|o| set_change(k, take(v), &o, false, "SET"))
        }
        ("SETNX", [k, v]) => set_change(k, take(v), &no_opts(ExpireOpt::Unset), true, "SET"),
        ("SETEX" | "PSETEX", [k, t, v]) => {
            let unit = match cmd {
                "SETEX" => expire::Unit::Ex,
                _ => expire::Unit::Px,
            };
            let o = no_opts(ExpireOpt::Given(unit, t.clone()));
            set_change(k, take(v), &o, false, cmd)
        }
        ("DEL", keys) if !keys.is_empty() => Ok(Change::Del {
            keys: keys.to_vec(),
        }),
        ("EXISTS", keys) if !keys.is_empty() => Ok(Change::Exists {
            keys: keys.to_vec(),
        }),
        ("MSET" | "MSETNX", pairs) if !pairs.is_empty() && pairs.len().is_multiple_of(2) => {
            let pairs = pairs
                .chunks_exact_mut(2)
                .map(|p| (take(&mut p[0]), take(&mut p[1])))
                .collect();
            Ok(match cmd {
                "MSET" => Change::MSet { pairs },
                _ => Change::MSetNx { pairs },
            })
        }
        ("INCRBYFLOAT", [k, n]) => match parse_float(n) {
            None => Err(Reply::err("value is not a valid float")),
            Some(by) => Ok(Change::IncrByFloat {
                key: k.to_vec(),
                by,
            }),
        },
        ("APPEND", [k, v]) => Ok(Change::Append {
            key: k.to_vec(),
            value: take(v),
        }),
        ("GETSET", [k, v]) => Ok(Change::GetSet {
            key: k.to_vec(),
            value: take(v),
        }),
        ("SETRANGE", [k, offset, v]) => match parse_int(offset) {
            None => Err(not_an_integer()),
            Some(o) if o < 0 => Err(Reply::err("offset is out of range")),
            Some(o) => Ok(Change::SetRange {
                key: k.to_vec(),
                offset: o as u64,
                value: take(v),
            }),
        },
        ("RENAME" | "RENAMENX", [from, to]) => Ok(Change::Rename {
            from: from.to_vec(),
            to: to.to_vec(),
            nx: cmd == "RENAMENX",
        }),
        ("EXPIRE" | "PEXPIRE" | "EXPIREAT" | "PEXPIREAT", [k, t, flags @ ..]) => {
            expire_change(cmd, k, t, flags)
        }
        ("PERSIST", [k]) => Ok(Change::Persist { key: k.to_vec() }),
        ("GETEX", [k, opts @ ..]) => expire::parse_opts(opts, false).map(|o| Change::GetEx {
            key: k.to_vec(),
            opt: match o.expire {
                ExpireOpt::Unset | ExpireOpt::Keep => GetExOpt::Keep,
                ExpireOpt::Persist => GetExOpt::Persist,
                ExpireOpt::Given(unit, v) => GetExOpt::Given(unit, v),
            },
        }),
        _ => return None,
    })
}

/// The change of counter command `cmd` (upper case) with arguments `rest`, or its error
/// (a count that is not an integer); `None` when it is not a counter command with its
/// number of arguments.
pub fn counter(cmd: &str, rest: &[Vec<u8>]) -> Option<Result<Change, Reply>> {
    let incr = |k: &[u8], by: i64| {
        Ok(Change::IncrBy {
            key: k.to_vec(),
            by,
        })
    };
    Some(match (cmd, rest) {
        ("INCR", [k]) => incr(k, 1),
        ("DECR", [k]) => incr(k, -1),
        ("INCRBY", [k, n]) => match parse_int(n) {
            None => Err(not_an_integer()),
            Some(n) => incr(k, n),
        },
        ("DECRBY", [k, n]) => match parse_int(n) {
            None => Err(not_an_integer()),
            Some(i64::MIN) => Err(Reply::err("decrement would overflow")),
            Some(n) => incr(k, -n),
        },
        _ => return None,
    })
}

/// Options with only an expiry.
fn no_opts(expire: ExpireOpt) -> SetOpts {
    SetOpts {
        nx: false,
        xx: false,
        get: false,
        expire,
    }
}

/// What a cluster's WATCH keeps of a key: 0 if absent, else a 128-bit XXH3 of its value (a
/// filter's header, marked apart) and expiry (stable across builds, so every node compares
/// alike). An EXEC whose watched keys' fingerprints changed runs nothing.
pub fn fingerprint(found: &Located) -> u128 {
    match found {
        None => 0,
        Some((place, value, expires)) => {
            let mut h = xxhash_rust::xxh3::Xxh3::new();
            if *place == Place::Filters {
                h.update(b"bloom filter header\0");
            }
            h.update(value);
            h.update(&expires.unwrap_or(0).to_le_bytes());
            h.update(&[u8::from(expires.is_some())]);
            h.digest128().max(1)
        }
    }
}
