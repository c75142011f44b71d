//! The numbered databases' commands: `SELECT n`, `FLUSHDB [ASYNC|SYNC]`,
//! `FLUSHALL [ASYNC|SYNC]`, `SWAPDB a b`, `DBSIZE` (how they map onto keyspaces:
//! `databases.rs`). `MOVE`, a read-then-write, is `values.rs`'s.

use super::commands::Session;
use super::resp::Reply;
use super::store::{Store, StoreResult};

/// A database index argument, checked against the databases served; the error replies are
/// Redis's (`not_integer` for one that is not a number).
fn index(db: &Store, arg: &[u8], not_integer: &str) -> Result<usize, Reply> {
    match std::str::from_utf8(arg)
        .ok()
        .and_then(|a| a.parse::<i64>().ok())
    {
        Some(n) if n >= 0 && (n as u64) < db.databases() as u64 => Ok(n as usize),
        Some(_) => Err(Reply::err("DB index is out of range")),
        None => Err(Reply::err(not_integer)),
    }
}

const NOT_INTEGER: &str = "value is not an integer or out of range";

/// Whether the flush runs in the background: `ASYNC`, or `SYNC` / nothing (the default, as
/// Redis's `lazyfree-lazy-user-flush no`).
fn flush_mode(args: &[Vec<u8>], cmd: &str) -> Result<bool, Reply> {
    match args {
        [] => Ok(false),
        [m] if m.eq_ignore_ascii_case(b"ASYNC") => Ok(true),
        [m] if m.eq_ignore_ascii_case(b"SYNC") => Ok(false),
        [_] => Err(Reply::err("syntax error")),
        _ => Err(Reply::wrong_args(cmd)),
    }
}

/// Runs `cmd` (upper case) for session `s` if it is one of this module's; `None` if not.
pub fn run(db: &Store, s: &mut Session, cmd: &str, args: &[Vec<u8>]) -> Option<Reply> {
    let done = |r: StoreResult<()>| r.map_or_else(|e| e, |()| Reply::ok());
    let reply = match (cmd, args) {
        ("SELECT", [n]) => match index(db, n, NOT_INTEGER) {
            Ok(n) => {
                s.db = n;
                Reply::ok()
            }
            Err(e) => e,
        },
        ("FLUSHDB", _) => match flush_mode(args, "flushdb") {
            Ok(background) => done(db.flush(&[s.db], background)),
            Err(e) => e,
        },
        ("FLUSHALL", _) => match flush_mode(args, "flushall") {
            Ok(background) => {
                let all: Vec<usize> = (0..db.databases()).collect();
                done(db.flush(&all, background))
            }
            Err(e) => e,
        },
        ("SWAPDB", [a, b]) => match (
            index(db, a, "invalid first DB index"),
            index(db, b, "invalid second DB index"),
        ) {
            (Ok(a), Ok(b)) => done(db.swap(a, b)),
            (Err(e), _) | (_, Err(e)) => e,
        },
        ("DBSIZE", []) => match db
            .space(s.db)
            .and_then(|space| Ok(space.size()? + super::values::Values::filter_count(&space)?))
        {
            Ok(n) => Reply::Int(i64::try_from(n).unwrap_or(i64::MAX)),
            Err(e) => e,
        },
        ("SELECT" | "SWAPDB" | "DBSIZE", _) => Reply::wrong_args(cmd),
        _ => return None,
    };
    Some(reply)
}
