//! Read-modify-write commands on string values, with Redis's replies and errors: INCR, DECR,
//! INCRBY, DECRBY, INCRBYFLOAT, APPEND, GETSET, SETRANGE, GETRANGE, MSETNX, COPY, RENAME and
//! RENAMENX. Each reads and then writes under the exclusive side of `Writes` (`values.rs`), so
//! it is atomic with respect to every other write of this server; a changed value keeps its
//! key's expiry where Redis keeps it (INCR and its kin, APPEND, SETRANGE) and loses it where
//! Redis does (GETSET). In cluster mode, as for SETNX, the atomicity is among one node's
//! clients (docs/kv-server.md).
//!
//! INCRBYFLOAT computes in `f64` where Redis uses `long double`, and prints as Redis does
//! (`%.17Lf` with the trailing zeros cut): sums of values exact in binary answer the same,
//! others may differ in the last digits (0.1 + 0.2).

use lsm_bloom::KeyExpiry;

use super::changes::change_of;
use super::expire::parse_int;
use super::resp::{Out, Proto, Reply};
use super::store::{Space, StoreResult};
use super::transfer::How;
use super::values::Values;

/// The largest value a command here makes (Redis's `proto-max-bulk-len` is 512 MB; the
/// store's values are at most this).
pub const MAX_STRING: usize = lsm_bloom::db::MAX_VALUE_SIZE;

pub fn not_an_integer() -> Reply {
    Reply::err("value is not an integer or out of range")
}

pub fn too_long() -> Reply {
    Reply::err("string exceeds maximum allowed size (proto-max-bulk-len)")
}

/// This module's commands that are changes (`changes::change_of`).
const CHANGES: [&str; 11] = [
    "INCR",
    "DECR",
    "INCRBY",
    "DECRBY",
    "INCRBYFLOAT",
    "APPEND",
    "GETSET",
    "SETRANGE",
    "MSETNX",
    "RENAME",
    "RENAMENX",
];

impl Values<'_> {
    /// Runs `cmd` if it is one of this module's, its reply put in `out`; false if not.
    pub fn run_strings(
        &self,
        cmd: &str,
        rest: &mut [Vec<u8>],
        out: &mut impl Out,
        proto: Proto,
    ) -> bool {
        if CHANGES.contains(&cmd) {
            let reply = match change_of(cmd, rest) {
                Some(change) => change.map_or_else(|e| e, |c| self.run_change(c)),
                None => Reply::wrong_args(cmd),
            };
            out.reply(&reply, proto);
            return true;
        }
        let reply = match (cmd, &mut *rest) {
            ("GETRANGE", [k, start, end]) => self.getrange(k, start, end),
            ("COPY", [from, to, opts @ ..]) => self.copy(from, to, opts),
            ("GETRANGE" | "COPY", _) => Reply::wrong_args(cmd),
            _ => return false,
        };
        out.reply(&reply, proto);
        true
    }

    /// `k`'s value and expiry in `space` (read under the exclusive write order).
    pub fn read(space: &Space<'_>, k: &[u8]) -> StoreResult<Option<(Vec<u8>, KeyExpiry)>> {
        let Some(v) = space.get_with(k, <[u8]>::to_vec)? else {
            return Ok(None);
        };
        // A database none of whose keys carries an expiry needs no look for one: the look
        // reads like a one-key scan, whose view of a memtable being written was a tenth of
        // the server's time under `redis-benchmark -t incr` (arc-swap paying every thread's
        // debt as each new view was stored).
        if space.approximate_expiring_len() == Some(0) {
            return Ok(Some((v, KeyExpiry::Never)));
        }
        Ok(Some((v, space.expiry_of(k)?)))
    }
    /// GETRANGE, with Redis's reading of negative and out-of-range offsets.
    fn getrange(&self, k: &[u8], start: &[u8], end: &[u8]) -> Reply {
        let (Some(mut start), Some(mut end)) = (parse_int(start), parse_int(end)) else {
            return not_an_integer();
        };
        let space = match self.db.space(self.index) {
            Ok(s) => s,
            Err(e) => return e,
        };
        if start < 0 && end < 0 && start > end {
            return Reply::Bulk(Vec::new());
        }
        let cut = |v: &[u8]| {
            let len = v.len() as i64;
            if start < 0 {
                start += len;
            }
            if end < 0 {
                end += len;
            }
            start = start.max(0);
            end = end.max(0).min(len - 1);
            match start > end || len == 0 {
                true => Vec::new(),
                false => v[start as usize..=end as usize].to_vec(),
            }
        };
        match space.get_with(k, cut) {
            Ok(Some(found)) => Reply::Bulk(found),
            Ok(None) => match Values::is_filter(&space, k) {
                Ok(true) => super::rmw_view::wrong_type(),
                Ok(false) => Reply::Bulk(Vec::new()),
                Err(e) => e,
            },
            Err(e) => e,
        }
    }

    /// COPY src dst [DB n] [REPLACE]: 1 if copied (with its expiry), else 0.
    fn copy(&self, from: &[u8], to: &[u8], opts: &[Vec<u8>]) -> Reply {
        let (mut db, mut replace) = (self.index, false);
        let mut i = 0;
        while i < opts.len() {
            let opt = opts[i].to_ascii_uppercase();
            if opt == b"REPLACE" {
                replace = true;
            } else if opt == b"DB" && i + 1 < opts.len() {
                i += 1;
                db = match parse_int(&opts[i]) {
                    None => return not_an_integer(),
                    Some(n) if n < 0 || n as u64 >= self.db.databases() as u64 => {
                        return Reply::err("DB index is out of range")
                    }
                    Some(n) => n as usize,
                };
            } else {
                return Reply::err("syntax error");
            }
            i += 1;
        }
        if db == self.index && from == to {
            return Reply::err("source and destination objects are the same");
        }
        self.transfer(from, to, db, How::Copy { replace })
    }
}

/// True when `args` is INCR, DECR, INCRBY or DECRBY with its number of arguments: such
/// commands of one pipeline run together, with its plain SETs (`combine.rs`).
pub fn is_counter(args: &[Vec<u8>]) -> bool {
    let is = |name: &str| args[0].eq_ignore_ascii_case(name.as_bytes());
    match args.len() {
        2 => is("INCR") || is("DECR"),
        3 => is("INCRBY") || is("DECRBY"),
        _ => false,
    }
}

/// Redis's `string2ld`: a float with nothing around it (no space), not NaN.
pub fn parse_float(b: &[u8]) -> Option<f64> {
    let s = std::str::from_utf8(b).ok()?;
    if s.is_empty() || s.len() > 5 * 1024 || s.starts_with(|c: char| c.is_ascii_whitespace()) {
        return None;
    }
    s.parse::<f64>().ok().filter(|x| !x.is_nan())
}

/// Redis's `ld2string` in its human mode: 17 digits after the point, trailing zeros (and a
/// bare point) cut, "-0" as "0".
pub fn format_float(x: f64) -> String {
    let mut s = format!("{x:.17}");
    if s.contains('.') {
        while s.ends_with('0') {
            s.pop();
        }
        if s.ends_with('.') {
            s.pop();
        }
    }
    if s == "-0" {
        s = "0".into();
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn floats_print_as_redis_prints_them() {
        assert_eq!(format_float(10.5), "10.5");
        assert_eq!(format_float(3.0), "3");
        assert_eq!(format_float(-0.0), "0");
        assert_eq!(format_float(5.0e3), "5000");
        assert_eq!(parse_float(b" 1"), None);
        assert_eq!(parse_float(b"1e3"), Some(1000.0));
        assert_eq!(parse_float(b"nan"), None);
        assert_eq!(parse_float(b""), None);
    }
}
