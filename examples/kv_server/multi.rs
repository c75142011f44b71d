//! MULTI, EXEC, DISCARD, WATCH and UNWATCH, with Redis's replies.
//!
//! Between MULTI and EXEC a command is checked as Redis checks it before queuing (known, and
//! given a number of arguments its arity allows) and answered `+QUEUED`, or answered with the
//! error and the transaction marked, so that EXEC answers `-EXECABORT` and runs nothing. EXEC
//! takes the server's exclusive write order (`values::Writes::hold`), so no other client's
//! write comes between its commands, then runs them in order and answers their replies in one
//! array; their own errors (a bad option, a value that is not an integer) are their replies,
//! as in Redis.
//!
//! WATCH starts a store transaction (`lsm_bloom::Transaction`) per call and reads each key in
//! it. EXEC, holding the exclusive order, asks each whether a key it read has been written
//! since (`Transaction::validate`): a put, a delete, a range delete, an expiry that passed, a
//! database flushed. If one has, EXEC runs nothing and answers a null array. The check reads
//! memtables only; if the writes since a WATCH are no longer all in memory (a flush wrote them
//! out under a heavy write load), EXEC takes that as a change too: the client retries, as
//! after any aborted EXEC. In cluster mode a transaction is one call in the log instead
//! (`multi_cluster.rs`).

use super::commands::{Server, Session};
use super::resp::{Out, Reply};
use super::store::Space;

/// A session's transaction state.
#[derive(Default)]
pub struct Multi {
    /// The commands queued since MULTI (`None`: not in MULTI).
    queued: Option<Vec<Vec<Vec<u8>>>>,
    /// A command was refused while queuing: EXEC answers EXECABORT.
    dirty: bool,
    /// Bytes of the commands queued (arguments, and `QUEUED_OVERHEAD` each): once parsed,
    /// they are no longer charged to the input budget, so they are held to `MAX_QUEUED`.
    queued_bytes: usize,
    /// One store transaction per WATCH call, each holding its keys' reads.
    watches: Vec<lsm_bloom::Transaction>,
    /// In cluster mode, each watched key's database, key and fingerprint
    /// (`multi_cluster.rs`).
    pub cluster_watches: Vec<(usize, Vec<u8>, u128)>,
}

impl Multi {
    /// Whether commands are being queued (between MULTI and EXEC or DISCARD): none then runs
    /// at once, not even a pipeline's SETs (`values::is_batchable`).
    pub fn queuing(&self) -> bool {
        self.queued.is_some()
    }
}

/// Bytes of queued commands a session may hold (a client that never sends EXEC must not make
/// the server hold unbounded memory); past it the command is refused and EXEC answers
/// EXECABORT, as after any refused command.
const MAX_QUEUED: usize = 64 << 20;

/// Bytes counted per argument of a queued command on top of its own.
const QUEUED_OVERHEAD: usize = 64;

/// WATCH calls a session may have open at once: each holds a store snapshot (its memtables
/// and tables) until EXEC, DISCARD or UNWATCH.
const MAX_WATCHES: usize = 1024;

/// Redis's arity of each command this server knows: positive, exactly that many words
/// (the name included); negative, at least that many.
fn arity(cmd: &str) -> Option<i64> {
    Some(match cmd {
        "GET" | "GETDEL" | "STRLEN" | "TYPE" | "TTL" | "PTTL" | "EXPIRETIME" | "PEXPIRETIME"
        | "PERSIST" | "INCR" | "DECR" | "ECHO" | "SELECT" => 2,
        "SETNX" | "MOVE" | "INCRBY" | "DECRBY" | "INCRBYFLOAT" | "APPEND" | "GETSET" | "RENAME"
        | "RENAMENX" | "SWAPDB" => 3,
        "SETEX" | "PSETEX" | "SETRANGE" | "GETRANGE" => 4,
        "DBSIZE" | "MULTI" | "EXEC" | "DISCARD" | "UNWATCH" => 1,
        "SET" | "MSET" | "MSETNX" | "EXPIRE" | "PEXPIRE" | "EXPIREAT" | "PEXPIREAT" | "COPY" => -3,
        "DEL" | "EXISTS" | "MGET" | "GETEX" | "SCAN" | "WATCH" | "CONFIG" | "CLIENT" | "AUTH"
        | "CLUSTER" => -2,
        "PING" | "FLUSHDB" | "FLUSHALL" | "INFO" | "COMMAND" | "HELLO" | "QUIT" => -1,
        _ => return None,
    })
}

impl Server {
    /// Runs `cmd` if it is a transaction command, or queues it if `s` is in MULTI: the reply
    /// put in `out`, and `Some` of whether the connection stays open; `None` if `cmd` is to
    /// run as usual.
    pub fn run_multi(
        &self,
        s: &mut Session,
        cmd: &str,
        args: &mut Vec<Vec<u8>>,
        out: &mut impl Out,
    ) -> std::io::Result<Option<bool>> {
        let proto = s.proto;
        let in_multi = s.multi.queued.is_some();
        let reply = match cmd {
            "MULTI" if args.len() == 1 => match in_multi {
                true => Reply::err("MULTI calls can not be nested"),
                false => {
                    s.multi.queued = Some(Vec::new());
                    Reply::ok()
                }
            },
            "DISCARD" if args.len() == 1 => match in_multi {
                false => Reply::err("DISCARD without MULTI"),
                true => {
                    s.multi = Multi::default();
                    Reply::ok()
                }
            },
            "EXEC" if args.len() == 1 => match in_multi {
                false => Reply::err("EXEC without MULTI"),
                true => return self.exec(s, out).map(Some),
            },
            "WATCH" if args.len() >= 2 => match in_multi {
                true => Reply::err("WATCH inside MULTI is not allowed"),
                false => self.watch(s, &args[1..]),
            },
            "UNWATCH" if args.len() == 1 && !in_multi => {
                s.multi.watches.clear();
                s.multi.cluster_watches.clear();
                Reply::ok()
            }
            "QUIT" => return Ok(None),
            // A transaction command with a number of arguments its arity refuses.
            "MULTI" | "EXEC" | "DISCARD" | "WATCH" | "UNWATCH" if !in_multi || cmd != "UNWATCH" => {
                s.multi.dirty |= in_multi;
                Reply::wrong_args(cmd)
            }
            _ if in_multi => match arity(cmd) {
                None => {
                    s.multi.dirty = true;
                    super::commands::unknown(args)
                }
                Some(a) if (a > 0 && args.len() as i64 != a) || (args.len() as i64) < -a => {
                    s.multi.dirty = true;
                    Reply::wrong_args(cmd)
                }
                #[cfg(feature = "replication")]
                Some(_)
                    if self.cluster_transactions(s.db) && !super::multi_cluster::queueable(cmd) =>
                {
                    s.multi.dirty = true;
                    Reply::err(format!(
                        "{cmd} is not supported inside MULTI in cluster mode (docs/kv-server.md)"
                    ))
                }
                Some(_) => {
                    let bytes: usize = args.iter().map(|a| a.len() + QUEUED_OVERHEAD).sum();
                    if s.multi.queued_bytes + bytes > MAX_QUEUED {
                        s.multi.dirty = true;
                        Reply::err(format!(
                            "the transaction's queued commands would pass {} MiB",
                            MAX_QUEUED >> 20
                        ))
                    } else {
                        s.multi.queued_bytes += bytes;
                        if let Some(q) = s.multi.queued.as_mut() {
                            q.push(std::mem::take(args));
                        }
                        Reply::Simple("QUEUED".into())
                    }
                }
            },
            _ => return Ok(None),
        };
        out.reply(&reply, proto);
        Ok(Some(true))
    }

    /// WATCH `keys` of the session's database: read in a new store transaction.
    fn watch(&self, s: &mut Session, keys: &[Vec<u8>]) -> Reply {
        if s.multi.watches.len() >= MAX_WATCHES {
            return Reply::err(format!(
                "more than {MAX_WATCHES} WATCH calls open (UNWATCH, EXEC or DISCARD ends them)"
            ));
        }
        #[cfg(feature = "replication")]
        if self.cluster_transactions(s.db) {
            return self.watch_cluster(&mut s.multi, s.db, keys);
        }
        let space = match self.db.space_for_write(s.db) {
            Ok(space) => space,
            Err(e) => return e,
        };
        let Space::Local(d, ks) = &space else {
            return Reply::err("WATCH is not supported on a node deciding on its own");
        };
        let mut tx = d.store().transaction();
        for k in keys {
            if let Err(e) = tx.get_in(ks, k) {
                return Reply::err(e.to_string());
            }
        }
        s.multi.watches.push(tx);
        Reply::ok()
    }

    /// EXEC: the queued commands run under the exclusive write order, their replies in one
    /// array; EXECABORT after a refused command; a null array if a watched key changed.
    fn exec(&self, s: &mut Session, out: &mut impl Out) -> std::io::Result<bool> {
        let multi = std::mem::take(&mut s.multi);
        let proto = s.proto;
        if multi.dirty {
            out.reply(
                &Reply::Error("EXECABORT Transaction discarded because of previous errors.".into()),
                proto,
            );
            return Ok(true);
        }
        let mut multi = multi;
        let queued = multi.queued.take().unwrap_or_default();
        #[cfg(feature = "replication")]
        if self.cluster_transactions(s.db) {
            out.reply(&self.exec_cluster(s.db, multi, queued), proto);
            return Ok(true);
        }
        let _order = self.writes.hold();
        if multi.watches.iter().any(|tx| tx.validate().is_err()) {
            out.reply(&Reply::NullArray, proto);
            return Ok(true);
        }
        if !out.array(queued.len()) {
            return Ok(true);
        }
        let mut open = true;
        for args in queued {
            open &= self.execute(s, args, out)?;
        }
        Ok(open)
    }
}
