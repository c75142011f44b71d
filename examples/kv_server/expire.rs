//! Keys that expire, as Redis has them: SET's EX|PX|EXAT|PXAT|KEEPTTL (parsed here for
//! `values.rs`), SETEX, PSETEX, GETEX, EXPIRE, PEXPIRE, EXPIREAT, PEXPIREAT (with
//! NX|XX|GT|LT), TTL, PTTL, EXPIRETIME, PEXPIRETIME and PERSIST.
//!
//! A key's expiry is the store's (`Db::put_with_expiry`, `expiry_of`, docs/expiry.md): an
//! expired key is absent to every command, exactly when it expires. A command that changes an
//! expiry but not the value (EXPIRE, PERSIST, GETEX, SET KEEPTTL) rewrites the value with the
//! new expiry under the exclusive write lock (`values::Writes`), so no other write comes in
//! between. An expiry already passed deletes the key, as Redis does. Replies and errors are
//! Redis 7's, byte for byte (`tests/kv_server_expiry.rs` sends the same commands to
//! redis-server). In cluster mode the node that takes the command turns a relative time into
//! an absolute one by its clock, and the replicated write carries that (`Op::PutUntil`), so
//! every node expires the key at the same moment by its own clock; a read (after its read
//! barrier) answers by the clock of the node that serves it.

use std::time::{SystemTime, UNIX_EPOCH};

use lsm_bloom::KeyExpiry;

use super::changes::change_of;
use super::resp::{Out, Proto, Reply};
use super::store::{Space, StoreResult};
use super::values::Values;

/// How an expiry option counts (Redis's `UNIT_SECONDS` / `UNIT_MILLISECONDS`, relative or
/// absolute).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Unit {
    /// EX: seconds from now.
    Ex,
    /// PX: milliseconds from now.
    Px,
    /// EXAT: a Unix time in seconds.
    ExAt,
    /// PXAT: a Unix time in milliseconds.
    PxAt,
}

/// The unit an expiry option names (EX, PX, EXAT or PXAT, any case).
pub fn unit_of(opt: &[u8]) -> Option<Unit> {
    match opt.to_ascii_uppercase().as_slice() {
        b"EX" => Some(Unit::Ex),
        b"PX" => Some(Unit::Px),
        b"EXAT" => Some(Unit::ExAt),
        b"PXAT" => Some(Unit::PxAt),
        _ => None,
    }
}

/// What SET's or GETEX's options say of the expiry.
#[derive(Clone, PartialEq, Eq)]
pub enum ExpireOpt {
    /// None given: SET removes any expiry, GETEX leaves it.
    Unset,
    /// KEEPTTL (SET): the key keeps the expiry it has.
    Keep,
    /// PERSIST (GETEX): the expiry is removed.
    Persist,
    /// EX, PX, EXAT or PXAT with its argument, not yet checked.
    Given(Unit, Vec<u8>),
}

/// The options of SET (`set`: NX, XX, GET allowed) or GETEX, as Redis's
/// `parseExtendedStringArgumentsOrReply` takes them: each option may repeat, but the expiry
/// options exclude each other (`-ERR syntax error`).
pub struct SetOpts {
    pub nx: bool,
    pub xx: bool,
    pub get: bool,
    pub expire: ExpireOpt,
}

pub fn parse_opts(opts: &[Vec<u8>], set: bool) -> Result<SetOpts, Reply> {
    let mut o = SetOpts {
        nx: false,
        xx: false,
        get: false,
        expire: ExpireOpt::Unset,
    };
    let mut i = 0;
    while i < opts.len() {
        let opt = opts[i].to_ascii_uppercase();
        let next = opts.get(i + 1);
        let unit = unit_of(&opt);
        // An expiry option is refused beside another kind of expiry option; the same one
        // may repeat (the last value counts).
        let other_expiry = |kind: &ExpireOpt| match (&o.expire, kind) {
            (ExpireOpt::Unset, _)
            | (ExpireOpt::Keep, ExpireOpt::Keep)
            | (ExpireOpt::Persist, ExpireOpt::Persist) => false,
            (ExpireOpt::Given(a, _), ExpireOpt::Given(b, _)) => a != b,
            _ => true,
        };
        let given = |u: Unit| ExpireOpt::Given(u, Vec::new());
        match (opt.as_slice(), unit, next) {
            (b"NX", ..) if set && !o.xx => o.nx = true,
            (b"XX", ..) if set && !o.nx => o.xx = true,
            (b"GET", ..) if set => o.get = true,
            (b"KEEPTTL", ..) if set && !other_expiry(&ExpireOpt::Keep) => {
                o.expire = ExpireOpt::Keep;
            }
            (b"PERSIST", ..) if !set && !other_expiry(&ExpireOpt::Persist) => {
                o.expire = ExpireOpt::Persist;
            }
            (_, Some(u), Some(v)) if !other_expiry(&given(u)) => {
                o.expire = ExpireOpt::Given(u, v.clone());
                i += 1;
            }
            _ => return Err(Reply::err("syntax error")),
        }
        i += 1;
    }
    Ok(o)
}

/// Milliseconds since the Unix epoch now (the store's clock is the system's).
pub fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
}

/// Redis's `string2ll`: a decimal integer with an optional `-`, no `+`, no leading zeros, no
/// spaces, in range.
pub fn parse_int(b: &[u8]) -> Option<i64> {
    let s = std::str::from_utf8(b).ok()?;
    let digits = s.strip_prefix('-').unwrap_or(s);
    let canonical = match digits.as_bytes() {
        [b'0'] => s == "0",
        [b'1'..=b'9', rest @ ..] => rest.iter().all(u8::is_ascii_digit),
        _ => false,
    };
    canonical.then(|| s.parse().ok()).flatten()
}

fn not_an_integer() -> Reply {
    Reply::err("value is not an integer or out of range")
}

pub fn invalid_expire(cmd: &str) -> Reply {
    Reply::err(format!(
        "invalid expire time in '{}' command",
        cmd.to_ascii_lowercase()
    ))
}

/// Redis's `getExpireMillisecondsOrReply`: the absolute expiry in ms of SET's or GETEX's
/// option; a value ≤ 0, or one that overflows, is refused.
pub fn expire_ms(unit: Unit, v: &[u8], cmd: &str, now: i64) -> Result<i64, Reply> {
    let n = parse_int(v).ok_or_else(not_an_integer)?;
    let seconds = matches!(unit, Unit::Ex | Unit::ExAt);
    if n <= 0 || (seconds && n > i64::MAX / 1000) {
        return Err(invalid_expire(cmd));
    }
    let ms = if seconds { n * 1000 } else { n };
    let ms = match unit {
        Unit::Ex | Unit::Px => ms.checked_add(now).ok_or_else(|| invalid_expire(cmd))?,
        Unit::ExAt | Unit::PxAt => ms,
    };
    Ok(ms)
}

/// A key's expiry as Redis reports it: -2 absent, -1 none, else ms since the epoch.
fn current(space: &Space<'_>, k: &[u8]) -> StoreResult<i64> {
    let mut expiry = space.expiry_of(k)?;
    if expiry == KeyExpiry::Absent {
        // A filter's expiry is its header's.
        let filters = space.filters(false)?;
        if !matches!(filters, Space::Unmade) {
            expiry = filters.expiry_of(&super::bloom::header_key(k))?;
        }
    }
    Ok(match expiry {
        KeyExpiry::Absent => -2,
        KeyExpiry::Never => -1,
        KeyExpiry::At(ms) => i64::try_from(ms).unwrap_or(i64::MAX),
    })
}

impl Values<'_> {
    /// Runs `cmd` if it is one of this module's (not SET), its reply put in `out`; false if
    /// it is not one.
    pub fn run_expiry(
        &self,
        cmd: &str,
        rest: &mut [Vec<u8>],
        out: &mut impl Out,
        proto: Proto,
    ) -> bool {
        let reply = match (cmd, &mut *rest) {
            ("SETEX" | "PSETEX", [k, t, v]) => {
                let unit = if cmd == "SETEX" { Unit::Ex } else { Unit::Px };
                let v = std::mem::take(v);
                let opts = SetOpts {
                    nx: false,
                    xx: false,
                    get: false,
                    expire: ExpireOpt::Given(unit, t.clone()),
                };
                self.set_with(k, v, opts, false, cmd, out, proto);
                return true;
            }
            ("GETEX" | "EXPIRE" | "PEXPIRE" | "EXPIREAT" | "PEXPIREAT" | "PERSIST", rest) => {
                match change_of(cmd, rest) {
                    Some(change) => change.map_or_else(|e| e, |c| self.run_change(c)),
                    None => Reply::wrong_args(cmd),
                }
            }
            ("TTL" | "PTTL" | "EXPIRETIME" | "PEXPIRETIME", [k]) => self.ttl(cmd, k),
            ("SETEX" | "PSETEX" | "TTL" | "PTTL" | "EXPIRETIME" | "PEXPIRETIME", _) => {
                Reply::wrong_args(cmd)
            }
            _ => return false,
        };
        out.reply(&reply, proto);
        true
    }

    /// TTL, PTTL, EXPIRETIME, PEXPIRETIME (Redis's `ttlGenericCommand`): -2 absent, -1 no
    /// expiry; a TTL in seconds rounds to the nearest.
    fn ttl(&self, cmd: &str, k: &[u8]) -> Reply {
        let run = || -> StoreResult<i64> {
            let space = self.db.space(self.index)?;
            let at = current(&space, k)?;
            if at < 0 {
                return Ok(at);
            }
            let (ms, absolute) = match cmd {
                "TTL" => (false, false),
                "PTTL" => (true, false),
                "EXPIRETIME" => (false, true),
                _ => (true, true),
            };
            let t = if absolute { at } else { (at - now_ms()).max(0) };
            Ok(if ms { t } else { (t + 500) / 1000 })
        };
        run().map_or_else(|e| e, Reply::Int)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn integers_parse_as_redis_parses_them() {
        for (s, want) in [
            ("0", Some(0)),
            ("10", Some(10)),
            ("-7", Some(-7)),
            ("9223372036854775807", Some(i64::MAX)),
            ("-9223372036854775808", Some(i64::MIN)),
            ("9223372036854775808", None),
            ("+1", None),
            ("01", None),
            ("-0", None),
            ("", None),
            ("-", None),
            (" 1", None),
            ("1.5", None),
        ] {
            assert_eq!(parse_int(s.as_bytes()), want, "{s:?}");
        }
    }

    #[test]
    fn expiry_options_exclude_each_other_but_may_repeat() {
        let opts =
            |s: &str| -> Vec<Vec<u8>> { s.split(' ').map(|w| w.as_bytes().to_vec()).collect() };
        assert!(parse_opts(&opts("EX 1 EX 2"), true).is_ok());
        assert!(parse_opts(&opts("KEEPTTL KEEPTTL"), true).is_ok());
        assert!(parse_opts(&opts("PERSIST PERSIST"), false).is_ok());
        assert!(parse_opts(&opts("EX 1 PX 2"), true).is_err());
        assert!(parse_opts(&opts("KEEPTTL EX 2"), true).is_err());
        assert!(parse_opts(&opts("NX XX"), true).is_err());
        assert!(parse_opts(&opts("PERSIST"), true).is_err(), "GETEX only");
        assert!(parse_opts(&opts("GET"), false).is_err(), "SET only");
        assert!(parse_opts(&opts("EX"), true).is_err(), "no value");
        let o = parse_opts(&opts("nx get pxat 5"), true).unwrap();
        assert!(o.nx && o.get && o.expire == ExpireOpt::Given(Unit::PxAt, b"5".to_vec()));
        assert_eq!(expire_ms(Unit::Ex, b"2", "set", 1_000).ok(), Some(3_000));
        assert!(expire_ms(Unit::PxAt, b"0", "set", 1_000).is_err());
        assert!(expire_ms(Unit::Ex, b"9223372036854775", "set", 1_000).is_err());
    }
}
