//! Commands on stored values: GET, SET [NX|XX] [GET] [EX|PX|EXAT|PXAT|KEEPTTL] (expiries:
//! `expire.rs`), SETNX, GETDEL, STRLEN, TYPE, DEL, EXISTS, MGET, MSET, MOVE, and a pipeline's
//! plain SETs committed together. Each acts on the
//! session's database, resolved once per command (`Store::space`).
//!
//! Memory: a reply that carries a stored value is encoded into the connection's output
//! straight from where the store lends it (`Db::get_with`), and the output charges the shared
//! output budget before it copies a byte (`resp::Out`): a value is never copied before its size
//! is charged, whatever its size. A command that needs only whether a key exists, or how long
//! its value is, copies nothing. MGET writes its reply as it goes, each key read on its own, so
//! it holds at most one value at a time. Writes move their arguments into the batch.
//!
//! Writes go through `Writes`: a plain write (`SET`, `MSET`) holds it shared, a
//! read-then-write (`SETNX`, `SET NX|XX|GET`, `GETDEL`, `DEL` and its count, `MOVE`) exclusive, so a
//! conditional write is atomic with respect to every other write while plain writes do not
//! queue behind each other twice (the store already orders them).

use std::sync::{RwLock, RwLockReadGuard, RwLockWriteGuard};

use lsm_bloom::KeyExpiry;

use super::bloom;
use super::changes::set_change;
use super::expire;
use super::resp::{Out, Proto, Reply};
use super::rmw::{set_writes, Change, Cond, SetExpiry};
use super::rmw_view::wrong_type;
use super::store::{Space, Store, StoreResult};
use super::transfer::{transfer, How, LocalPair};

/// Orders conditional writes against all others (see the module docs), and combines
/// connections' runs of counters (`combine.rs`).
#[derive(Default)]
pub struct Writes {
    order: RwLock<()>,
    /// Runs of counters waiting to be applied together.
    pub combiner: super::combine::Combiner,
}

/// A place in the write order: exclusive, shared, or already held exclusive by this thread
/// (an EXEC's commands: `multi.rs`).
pub enum Order<'a> {
    Exclusive(#[expect(dead_code, reason = "held for its drop")] RwLockWriteGuard<'a, ()>),
    Shared(#[expect(dead_code, reason = "held for its drop")] RwLockReadGuard<'a, ()>),
    Held,
}

thread_local! {
    /// This thread holds the exclusive order for an EXEC (`Writes::hold`).
    static HELD: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// The exclusive order held by an EXEC for its commands, which take it again as `Held`.
pub struct Holding<'a>(#[expect(dead_code, reason = "held for its drop")] RwLockWriteGuard<'a, ()>);

impl Drop for Holding<'_> {
    fn drop(&mut self) {
        HELD.with(|h| h.set(false));
    }
}

impl Writes {
    /// Held by a read-then-write: no other write runs in between.
    pub fn exclusive(&self) -> Order<'_> {
        match HELD.with(std::cell::Cell::get) {
            true => Order::Held,
            false => Order::Exclusive(self.order.write().unwrap_or_else(|p| p.into_inner())),
        }
    }

    /// Held by a plain write: excludes read-then-writes only.
    pub fn plain(&self) -> Order<'_> {
        match HELD.with(std::cell::Cell::get) {
            true => Order::Held,
            false => Order::Shared(self.order.read().unwrap_or_else(|p| p.into_inner())),
        }
    }

    /// The exclusive order for an EXEC: its commands' own `exclusive` and `plain` are then
    /// `Held` on this thread until the `Holding` is dropped.
    pub fn hold(&self) -> Holding<'_> {
        let guard = self.order.write().unwrap_or_else(|p| p.into_inner());
        HELD.with(|h| h.set(true));
        Holding(guard)
    }
}

/// The store, its write order and the session's database, as the value commands use them.
pub struct Values<'a> {
    pub db: &'a Store,
    pub writes: &'a Writes,
    /// The session's database (`SELECT`).
    pub index: usize,
}

/// A store's failure is already the reply to send (`store::StoreResult`).
fn db_err(e: Reply) -> Reply {
    e
}

impl Values<'_> {
    /// The session's database to read, or `None` with the error put in `out`.
    fn space(&self, out: &mut impl Out, proto: Proto) -> Option<Space<'_>> {
        answer(self.db.space(self.index), out, proto)
    }

    /// The session's database to write (its keyspace made if it has none), or `None` with
    /// the error put in `out`.
    fn space_for_write(&self, out: &mut impl Out, proto: Proto) -> Option<Space<'_>> {
        answer(self.db.space_for_write(self.index), out, proto)
    }

    /// Runs `cmd` (upper case) with arguments `rest` if it is a value command, its reply put
    /// in `out`; false if it is not one.
    pub fn run(
        &self,
        cmd: &str,
        rest: &mut [Vec<u8>],
        out: &mut impl Out,
        proto: Proto,
    ) -> std::io::Result<bool> {
        if self.run_expiry(cmd, rest, out, proto)
            || self.run_strings(cmd, rest, out, proto)
            || self.run_bloom(cmd, rest, out, proto)
        {
            return Ok(true);
        }
        match (cmd, rest) {
            ("GET", [k]) => self.get(k, out, proto),
            ("GETDEL", [k]) => self.getdel(k, out, proto),
            ("STRLEN", [k]) => {
                let Some(space) = self.space(out, proto) else {
                    return Ok(true);
                };
                let reply = match space.get_with(k, <[u8]>::len) {
                    Ok(Some(len)) => Reply::Int(len as i64),
                    Ok(None) => {
                        super::bloom_commands::or_filter(&space, k, Reply::Int(0), wrong_type())
                    }
                    Err(e) => db_err(e),
                };
                out.reply(&reply, proto);
            }
            ("TYPE", [k]) => {
                let Some(space) = self.space(out, proto) else {
                    return Ok(true);
                };
                let name = |n: &str| Reply::Simple(n.into());
                let reply = match space.get_with(k, |_| ()) {
                    Ok(Some(())) => name("string"),
                    Ok(None) => super::bloom_commands::or_filter(
                        &space,
                        k,
                        name("none"),
                        name(bloom::TYPE_NAME),
                    ),
                    Err(e) => db_err(e),
                };
                out.reply(&reply, proto);
            }
            ("SET", [k, v, opts @ ..]) => {
                let v = std::mem::take(v);
                self.set(k, v, opts, false, out, proto);
            }
            ("SETNX", [k, v]) => {
                let v = std::mem::take(v);
                self.set(k, v, &[], true, out, proto);
            }
            ("DEL", keys) if !keys.is_empty() => self.del_or_exists(true, keys, out, proto),
            ("EXISTS", keys) if !keys.is_empty() => self.del_or_exists(false, keys, out, proto),
            ("MGET", keys) if !keys.is_empty() => self.mget(keys, out, proto)?,
            ("MSET", pairs) if !pairs.is_empty() && pairs.len().is_multiple_of(2) => {
                let Some(space) = self.space_for_write(out, proto) else {
                    return Ok(true);
                };
                let mut batch = space.batch();
                for pair in pairs.chunks_exact_mut(2) {
                    let (k, v) = (std::mem::take(&mut pair[0]), std::mem::take(&mut pair[1]));
                    space.put(&mut batch, k, v);
                }
                let _w = self.writes.plain();
                let reply = space.write(batch).map_or_else(db_err, |()| Reply::ok());
                out.reply(&reply, proto);
            }
            ("MOVE", [k, to]) => {
                let reply = self.move_key(k, to);
                out.reply(&reply, proto);
            }
            (
                "GET" | "GETDEL" | "STRLEN" | "TYPE" | "SET" | "SETNX" | "DEL" | "EXISTS" | "MGET"
                | "MSET" | "MOVE",
                _,
            ) => {
                out.reply(&Reply::wrong_args(cmd), proto);
            }
            _ => return Ok(false),
        }
        Ok(true)
    }

    /// `GET k`: the value, lent by the store and charged before it is copied into `out`.
    fn get(&self, k: &[u8], out: &mut impl Out, proto: Proto) {
        let Some(space) = self.space(out, proto) else {
            return;
        };
        match space.get_with(k, |v| out.bulk(v)) {
            Ok(Some(_)) => {} // put in `out`, or refused (`out` knows)
            Ok(None) => {
                out.reply(
                    &super::bloom_commands::or_filter(&space, k, Reply::Null, wrong_type()),
                    proto,
                );
            }
            Err(e) => {
                out.reply(&db_err(e), proto);
            }
        }
    }

    /// `GETDEL k`: the value, then the key deleted; if the delete fails, its error replaces
    /// the value.
    fn getdel(&self, k: &[u8], out: &mut impl Out, proto: Proto) {
        if self.changes_are_calls() {
            let reply = self.run_change(Change::GetDel { key: k.to_vec() });
            out.reply(&reply, proto);
            return;
        }
        let Some(space) = self.space(out, proto) else {
            return;
        };
        let _w = self.writes.exclusive();
        let mark = out.mark();
        match space.get_with(k, |v| out.bulk(v)) {
            Ok(Some(true)) => {
                let mut b = space.batch();
                space.delete_string(&mut b, k.to_vec());
                if let Err(e) = space.write(b) {
                    out.undo(mark);
                    out.reply(&db_err(e), proto);
                }
            }
            Ok(Some(false)) => {} // refused: nothing deleted
            Ok(None) => {
                out.reply(
                    &super::bloom_commands::or_filter(&space, k, Reply::Null, wrong_type()),
                    proto,
                );
            }
            Err(e) => {
                out.reply(&db_err(e), proto);
            }
        }
    }

    /// `SET key value [NX|XX] [GET] [EX|PX|EXAT|PXAT t|KEEPTTL]`, and `SETNX` (`nx_int`: reply
    /// 1 or 0).
    fn set(
        &self,
        k: &[u8],
        v: Vec<u8>,
        opts: &[Vec<u8>],
        nx_int: bool,
        out: &mut impl Out,
        proto: Proto,
    ) {
        match expire::parse_opts(opts, true) {
            Ok(mut o) => {
                o.nx |= nx_int;
                self.set_with(k, v, o, nx_int, "SET", out, proto);
            }
            Err(e) => {
                out.reply(&e, proto);
            }
        }
    }

    /// SET with its options parsed (also SETEX and PSETEX, `cmd` naming the command in
    /// errors), in Redis's order (`setGenericCommand`): the expiry checked, the old value read
    /// (GET), NX or XX applied, the value written with its expiry. With GET the old value is
    /// put in `out` as it is read; a failed write replaces it with the error.
    #[expect(
        clippy::too_many_arguments,
        reason = "SET's parts, as Redis passes them"
    )]
    pub fn set_with(
        &self,
        k: &[u8],
        v: Vec<u8>,
        o: expire::SetOpts,
        nx_int: bool,
        cmd: &str,
        out: &mut impl Out,
        proto: Proto,
    ) {
        let change = match set_change(k, v, &o, nx_int, cmd) {
            Ok(change) => change,
            Err(e) => {
                out.reply(&e, proto);
                return;
            }
        };
        let Change::Set {
            cond, get, expiry, ..
        } = &change
        else {
            return;
        };
        let (cond, keep) = (*cond, *expiry == SetExpiry::Keep);
        let at = match expiry {
            SetExpiry::At(at) => Some(*at),
            SetExpiry::Never | SetExpiry::Keep => None,
        };
        let conditional = cond != Cond::Always || *get || keep;
        // Decided as a change (`rmw.rs`), but a single server's SET … GET: that one puts the
        // old value into `out` straight from the store, below.
        if conditional && (!*get || self.changes_are_calls() || self.has_filters()) {
            out.reply(&self.run_change(change), proto);
            return;
        }
        let Change::Set { value: v, .. } = change else {
            return;
        };
        let Some(space) = self.space_for_write(out, proto) else {
            return;
        };
        let _exclusive = conditional.then(|| self.writes.exclusive());
        let _shared = (!conditional).then(|| self.writes.plain());
        let mark = out.mark();
        let existed = if conditional {
            let found = if o.get {
                space.get_with(k, |old| out.bulk(old))
            } else {
                space.get_with(k, |_| true)
            };
            match found {
                Ok(Some(false)) => return, // refused
                Ok(found) => found.is_some(),
                Err(e) => {
                    out.reply(&db_err(e), proto);
                    return;
                }
            }
        } else {
            false
        };
        let write = set_writes(cond, existed);
        if write {
            let kept = match keep {
                true => space.expiry_of(k).map(|e| match e {
                    KeyExpiry::At(ms) => Some(ms),
                    KeyExpiry::Absent | KeyExpiry::Never => None,
                }),
                false => Ok(at),
            };
            let mut batch = space.batch();
            let now = expire::now_ms().max(0) as u64;
            match kept {
                Ok(None) => space.put(&mut batch, k.to_vec(), v),
                Ok(Some(at)) if at <= now => space.delete_string(&mut batch, k.to_vec()),
                Ok(Some(at)) => space.put_string_until(&mut batch, k.to_vec(), v, at),
                Err(e) => {
                    out.undo(mark);
                    out.reply(&db_err(e), proto);
                    return;
                }
            }
            if let Err(e) = space.write(batch) {
                out.undo(mark);
                out.reply(&db_err(e), proto);
                return;
            }
        }
        let reply = match (nx_int, o.get, write) {
            (true, _, w) => Reply::Int(i64::from(w)),
            (false, true, _) if existed => return, // the old value is the reply, already out
            (false, true, _) => Reply::Null,
            (false, false, true) => Reply::ok(),
            (false, false, false) => Reply::Null,
        };
        out.reply(&reply, proto);
    }

    /// `DEL` counts distinct keys removed (`DEL k k` is 1, as in Redis); `EXISTS` counts
    /// every argument that exists (`EXISTS k k` is 2). Values are not copied.
    fn del_or_exists(&self, del: bool, keys: &[Vec<u8>], out: &mut impl Out, proto: Proto) {
        if del {
            let reply = self.run_change(Change::Del {
                keys: keys.to_vec(),
            });
            out.reply(&reply, proto);
            return;
        }
        let Some(space) = self.space(out, proto) else {
            return;
        };
        let mut count = 0;
        for k in keys {
            match space.get_with(k, |_| ()) {
                Ok(Some(())) => count += 1,
                Ok(None) => match Values::is_filter(&space, k) {
                    Ok(found) => count += i64::from(found),
                    Err(e) => {
                        out.reply(&db_err(e), proto);
                        return;
                    }
                },
                Err(e) => {
                    out.reply(&db_err(e), proto);
                    return;
                }
            }
        }
        out.reply(&Reply::Int(count), proto);
    }

    /// `MGET k…`: written as it is made, one value at a time, each charged before it is
    /// copied; a key whose read fails gets an error in its place (the header is already out).
    /// Each key is read on its own, not all at one point in time: holding one snapshot while
    /// a slow client takes a long reply would keep the store's replaced memtables and tables.
    fn mget(&self, keys: &[Vec<u8>], out: &mut impl Out, proto: Proto) -> std::io::Result<()> {
        let Some(space) = self.space(out, proto) else {
            return Ok(());
        };
        if !out.array(keys.len()) {
            return Ok(());
        }
        for k in keys {
            match space.get_with(k, |v| out.bulk(v)) {
                Ok(Some(true)) => {}
                Ok(Some(false)) => return Ok(()), // refused
                Ok(None) => {
                    out.reply(&Reply::Null, proto);
                }
                Err(e) => {
                    out.reply(&db_err(e), proto);
                }
            }
            out.gathered()?;
        }
        Ok(())
    }
}

/// `MOVE key db`'s checks and answer: 1 if `key` moved from the session's database to `to`,
/// 0 if it is not in the session's database or already in `to`. The delete and the put are
/// one batch (one call in a cluster): the key is in one database or the other, never both
/// or neither.
impl Values<'_> {
    fn move_key(&self, k: &[u8], to: &[u8]) -> Reply {
        let to = match std::str::from_utf8(to)
            .ok()
            .and_then(|t| t.parse::<i64>().ok())
        {
            Some(t) if t >= 0 && (t as u64) < self.db.databases() as u64 => t as usize,
            Some(_) => return Reply::err("DB index is out of range"),
            None => return Reply::err("value is not an integer or out of range"),
        };
        if to == self.index {
            return Reply::err("source and destination objects are the same");
        }
        self.transfer(k, k, to, How::Move)
    }

    /// `MOVE` or `COPY` of `key` from the session's database to `to_key` in database `to`
    /// (`transfer.rs`): on a single server under the exclusive write order, its writes one
    /// batch; in a cluster one call decided in the log.
    pub fn transfer(&self, key: &[u8], to_key: &[u8], to: usize, how: How) -> Reply {
        #[cfg(feature = "replication")]
        if let (Ok(Space::Cluster(c, from)), Ok(Space::Cluster(_, to))) =
            (self.db.space(self.index), self.db.space(to))
        {
            let change = super::rmw::Change::Transfer {
                key: key.to_vec(),
                to_key: to_key.to_vec(),
                to,
                how,
            };
            return c.call(&from, &change).unwrap_or_else(|e| e);
        }
        let run = || -> StoreResult<Reply> {
            let from = self.db.space(self.index)?;
            let _w = self.writes.exclusive();
            let dest = match to == self.index {
                true => None,
                false => Some(self.db.space_for_write(to)?),
            };
            let now = super::expire::now_ms().max(0) as u64;
            let mut pair = LocalPair::new(&from, dest.as_ref(), now);
            let reply = transfer(&mut pair, key, to_key, how)?;
            pair.finish()?;
            Ok(reply)
        };
        run().unwrap_or_else(|e| e)
    }
}

/// `r`'s space, or `None` with its error put in `out`.
fn answer<'a>(r: StoreResult<Space<'a>>, out: &mut impl Out, proto: Proto) -> Option<Space<'a>> {
    r.map_err(|e| out.reply(&e, proto)).ok()
}

/// True when `args` is a plain `SET key value` (`is_plain_set`) or a counter command
/// (`strings::is_counter`) a session that `authed` may run: such requests in one pipeline are
/// committed together (`Values::set_many`).
pub fn is_batchable(authed: bool, args: &[Vec<u8>]) -> bool {
    is_plain_set(authed, args) || (authed && super::strings::is_counter(args))
}

/// True when `args` is a plain `SET key value` a session that `authed` may run.
pub fn is_plain_set(authed: bool, args: &[Vec<u8>]) -> bool {
    // A valid expiry option (EX, PX, EXAT or PXAT) may follow: it cannot fail either.
    let expiry_ok = match args {
        [_, _, _] => true,
        [_, _, _, unit, t] => expire::unit_of(unit)
            .is_some_and(|u| expire::expire_ms(u, t, "set", expire::now_ms()).is_ok()),
        _ => false,
    };
    authed
        && expiry_ok
        && args[0].eq_ignore_ascii_case(b"SET")
        // One that the store would refuse runs alone, so its error is its own.
        && args[1].len() <= lsm_bloom::db::MAX_KEY_SIZE
        && args[2].len() <= lsm_bloom::db::MAX_VALUE_SIZE
}
