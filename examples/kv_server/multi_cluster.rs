//! MULTI, EXEC and WATCH in cluster mode: a transaction is one call in the log.
//!
//! WATCH reads each key after a read barrier and keeps its fingerprint (`changes::
//! fingerprint`: a 128-bit hash of its value and expiry, 0 when absent). EXEC sends its queued
//! commands, each as its change (`changes::change_of`), with the watched keys' fingerprints as
//! one `Change::Exec`: when the entry is applied, on every node alike, a fingerprint that no
//! longer matches makes it run nothing (a null array); else its commands run in order, no
//! other write between them, anywhere in the cluster.
//!
//! Differences from Redis, said in docs/kv-server.md: a watched key written back to the value
//! and expiry it had (or deleted and written again) does not abort the EXEC; only commands
//! that are changes may be queued (GET, SET and its kin, DEL, EXISTS, MSET, the counters, the
//! string edits, RENAME, the expiry commands): another is refused while queuing, so EXEC
//! answers EXECABORT; and a transaction watches keys of the database it runs in.

use super::changes::{change_of, fingerprint};
use super::commands::Server;
use super::multi::Multi;
use super::procs::fill;
use super::resp::Reply;
use super::rmw::{Change, Rmw, SpaceRmw};
use super::store::StoreResult;

/// Keys a session may have watched at once in cluster mode (each kept until EXEC, DISCARD or
/// UNWATCH, with its fingerprint), and their bytes: a client that never sends EXEC must not
/// make the server hold unbounded memory.
pub const MAX_WATCHED_KEYS: usize = 65_536;
pub const MAX_WATCHED_BYTES: usize = 16 << 20;

/// Whether `cmd` may be queued in a cluster transaction (it is a change: `change_of`).
pub fn queueable(cmd: &str) -> bool {
    matches!(
        cmd,
        "GET"
            | "GETDEL"
            | "SET"
            | "SETNX"
            | "SETEX"
            | "PSETEX"
            | "DEL"
            | "EXISTS"
            | "MSET"
            | "MSETNX"
            | "INCR"
            | "DECR"
            | "INCRBY"
            | "DECRBY"
            | "INCRBYFLOAT"
            | "APPEND"
            | "GETSET"
            | "SETRANGE"
            | "RENAME"
            | "RENAMENX"
            | "EXPIRE"
            | "PEXPIRE"
            | "EXPIREAT"
            | "PEXPIREAT"
            | "PERSIST"
            | "GETEX"
    )
}

impl Server {
    /// Whether this server's transactions are calls in a cluster's log (`Values::
    /// changes_are_calls`).
    pub fn cluster_transactions(&self, db: usize) -> bool {
        self.values_of(db).changes_are_calls()
    }

    /// WATCH `keys` of database `db`: each read after a read barrier, its fingerprint kept.
    pub fn watch_cluster(&self, multi: &mut Multi, db: usize, keys: &[Vec<u8>]) -> Reply {
        let bytes = |keys: &mut dyn Iterator<Item = &Vec<u8>>| keys.map(Vec::len).sum::<usize>();
        let held = bytes(&mut multi.cluster_watches.iter().map(|(_, k, _)| k));
        if multi.cluster_watches.len() + keys.len() > MAX_WATCHED_KEYS
            || held + bytes(&mut keys.iter()) > MAX_WATCHED_BYTES
        {
            return Reply::err(format!(
                "more than {MAX_WATCHED_KEYS} keys or {} MiB of keys watched (UNWATCH, EXEC or \
                 DISCARD ends them)",
                MAX_WATCHED_BYTES >> 20
            ));
        }
        let read = || -> StoreResult<Vec<(usize, Vec<u8>, u128)>> {
            let space = self.db.space(db)?;
            let mut rmw = SpaceRmw::new(&space, 0);
            let mut seen = Vec::with_capacity(keys.len());
            for k in keys {
                seen.push((db, k.clone(), fingerprint(&rmw.locate(k)?)));
            }
            Ok(seen)
        };
        match read() {
            Ok(seen) => {
                multi.cluster_watches.extend(seen);
                Reply::ok()
            }
            Err(e) => e,
        }
    }

    /// EXEC of `queued` in database `db` with `multi`'s watches: one call, its reply.
    pub fn exec_cluster(&self, db: usize, multi: Multi, queued: Vec<Vec<Vec<u8>>>) -> Reply {
        if multi.cluster_watches.iter().any(|(d, ..)| *d != db) {
            return Reply::err(
                "a cluster transaction watches keys of the database it runs in only \
                 (WATCH was sent in another)",
            );
        }
        let watched = multi
            .cluster_watches
            .into_iter()
            .map(|(_, k, f)| (k, f))
            .collect();
        let mut commands = Vec::with_capacity(queued.len());
        // Each command's reply when known now (its own error), or its place in the call.
        let mut slots: Vec<Result<Reply, usize>> = Vec::with_capacity(queued.len());
        for mut args in queued {
            let cmd = String::from_utf8_lossy(&args[0]).to_ascii_uppercase();
            match change_of(&cmd, &mut args[1..]) {
                Some(Ok(c)) => {
                    slots.push(Err(commands.len()));
                    commands.push(c);
                }
                Some(Err(e)) => slots.push(Ok(e)),
                None => slots.push(Ok(Reply::wrong_args(&cmd))),
            }
        }
        let reply = self
            .values_of(db)
            .run_change(Change::Exec { watched, commands });
        match reply {
            Reply::Array(items) => Reply::Array(fill(slots, items)),
            other => other,
        }
    }
}
