//! A pipeline's runs of plain SETs, committed as one write batch (`Values::set_many`), and
//! runs of plain SETs and counter commands (INCR, DECR, INCRBY, DECRBY), taken together from
//! every connection that has one waiting, and applied under the exclusive write order
//! (`values::Writes`) as one write batch.
//!
//! A counter reads and then writes, so it runs under the exclusive side of `Writes`, as SETNX
//! does; one exclusive section per pipeline put 50 connections of `redis-benchmark -t incr
//! -P 16` in a queue on that lock, each handing it over with a futex wake-up (INCR at 115 k/s
//! against SET's 800 k/s; the server's threads were busy 38% of the time). So a connection
//! with such a run queues it here; the first to find no combiner running becomes it, takes
//! every run queued, and applies them in queue order under one exclusive section: each
//! command sees the ones before it (a key's value as the runs so far left it), every key
//! written is written once, as the runs left it, in one batch, and each connection gets its
//! replies back. This is the store's group commit (`src/db/write.rs`) one level up. A
//! command's own error (a value that is not an integer, an overflow) is its reply; a failed
//! write is the reply of every command that wrote.

use std::collections::HashMap;
use std::sync::{Mutex, MutexGuard};
use std::thread::Thread;

use lsm_bloom::KeyExpiry;

use super::changes::counter;
use super::expire;
use super::resp::{Out, Proto, Reply};
use super::rmw::{incremented, Change, Cond, SetExpiry};
use super::store::{Space, Store, StoreResult};
use super::strings::{is_counter, not_an_integer};
use super::values::{Values, Writes};

/// One connection's run, waiting for a combiner.
pub struct Run {
    ticket: u64,
    /// The session's database.
    index: usize,
    cmds: Vec<Vec<Vec<u8>>>,
    thread: Thread,
}

/// Runs waiting, and the replies of runs applied but not yet collected.
#[derive(Default)]
pub struct Combiner(Mutex<Queue>);

#[derive(Default)]
struct Queue {
    next: u64,
    pending: Vec<Run>,
    done: HashMap<u64, Vec<Reply>>,
    active: bool,
}

impl Combiner {
    fn lock(&self) -> MutexGuard<'_, Queue> {
        self.0.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// Hands every run of a combiner's turn its replies (an error for each command if the
/// combiner unwinds, so that no connection waits for ever), and wakes them.
struct Turn<'a> {
    combiner: &'a Combiner,
    runs: Vec<(u64, usize, Thread)>,
    replies: Option<Vec<Vec<Reply>>>,
}

impl Drop for Turn<'_> {
    fn drop(&mut self) {
        let mut q = self.combiner.lock();
        let mut replies = self.replies.take().map(Vec::into_iter);
        for (ticket, n, _) in &self.runs {
            let r = match replies.as_mut().and_then(Iterator::next) {
                Some(r) => r,
                None => vec![Reply::err("internal: the combined run failed"); *n],
            };
            q.done.insert(*ticket, r);
        }
        q.active = false;
        let next = q.pending.first().map(|r| r.thread.clone());
        drop(q);
        let me = std::thread::current().id();
        for (_, _, t) in self.runs.iter().filter(|(_, _, t)| t.id() != me) {
            t.unpark();
        }
        if let Some(t) = next {
            t.unpark();
        }
    }
}

impl Values<'_> {
    /// Runs the plain SETs of one pipeline (`values::is_plain_set`: with or without an
    /// expiry; `sets` is emptied) as one write batch (one log append, one memtable update
    /// visible at once), in their order (a later SET of a key wins, as it would one by one).
    /// Redis runs a pipeline's commands one after the other with no other client's in between
    /// only if nothing else arrives; committing them together is one of the orders a client
    /// could observe. The reply, `+OK` or the error, is for each of them. A run that also
    /// holds counter commands (`strings::is_counter`) is combined with other connections'
    /// (`run_combined`).
    pub fn set_many(&self, sets: &mut Vec<Vec<Vec<u8>>>, out: &mut impl Out, proto: Proto) {
        if sets.is_empty() {
            return;
        }
        if sets.iter().any(|a| is_counter(a)) {
            let cmds = std::mem::take(sets);
            let replies = match self.changes_are_calls() {
                #[cfg(feature = "replication")]
                true => super::procs::run_pipeline(self.db, self.index, cmds),
                // A counter on a filter's name must answer WRONGTYPE: one change each.
                _ if self.has_filters() => {
                    let now = expire::now_ms();
                    let run = |args| match pipeline_change(args, now) {
                        Ok(change) => self.run_change(change),
                        Err(e) => e,
                    };
                    cmds.into_iter().map(run).collect()
                }
                _ => self.run_combined(cmds),
            };
            for r in replies {
                if !out.reply(&r, proto) {
                    return;
                }
            }
            return;
        }
        let n = sets.len();
        let space = match self.db.space_for_write(self.index) {
            Ok(space) => space,
            Err(e) => {
                sets.clear();
                for _ in 0..n {
                    if !out.reply(&e, proto) {
                        return;
                    }
                }
                return;
            }
        };
        let mut batch = space.batch();
        let now = expire::now_ms();
        for args in sets.drain(..) {
            match plain_set(args, now) {
                (k, Written::Put(v, KeyExpiry::At(at))) => {
                    space.put_string_until(&mut batch, k, v, at)
                }
                (k, Written::Put(v, _)) => space.put(&mut batch, k, v),
                (k, Written::Gone) => space.delete_string(&mut batch, k),
            }
        }
        let _shared = self.writes.plain();
        let reply = match space.write(batch) {
            Ok(()) => Reply::ok(),
            Err(e) => e,
        };
        for _ in 0..n {
            if !out.reply(&reply, proto) {
                return;
            }
        }
    }

    /// The replies of `cmds`, a pipeline's run of plain SETs and counters, applied in a
    /// combined turn (see the module comment).
    pub fn run_combined(&self, cmds: Vec<Vec<Vec<u8>>>) -> Vec<Reply> {
        let combiner = &self.writes.combiner;
        let mut q = combiner.lock();
        let ticket = q.next;
        q.next += 1;
        q.pending.push(Run {
            ticket,
            index: self.index,
            cmds,
            thread: std::thread::current(),
        });
        loop {
            if let Some(r) = q.done.remove(&ticket) {
                return r;
            }
            if !q.active {
                q.active = true;
                let mut runs = std::mem::take(&mut q.pending);
                drop(q);
                let mut turn = Turn {
                    combiner,
                    runs: runs
                        .iter()
                        .map(|r| (r.ticket, r.cmds.len(), r.thread.clone()))
                        .collect(),
                    replies: None,
                };
                turn.replies = Some(apply(self.db, self.writes, &mut runs));
                drop(turn);
                q = combiner.lock();
                continue;
            }
            drop(q);
            std::thread::park();
            q = combiner.lock();
        }
    }
}

/// A key's state within a turn: what its runs wrote last.
pub enum Written {
    Put(Vec<u8>, KeyExpiry),
    Gone,
}

/// Applies `runs` in order under the exclusive write order: each run's replies.
fn apply(db: &Store, writes: &Writes, runs: &mut [Run]) -> Vec<Vec<Reply>> {
    let _w = writes.exclusive();
    let now = expire::now_ms();
    let mut spaces: Vec<(usize, StoreResult<Space<'_>>)> = Vec::new();
    let mut written: HashMap<(usize, Vec<u8>), Written> = HashMap::new();
    // Each reply, and whether its command wrote (a failed batch replaces those).
    let mut replies: Vec<Vec<(Reply, bool)>> = Vec::with_capacity(runs.len());
    for run in runs.iter_mut() {
        if !spaces.iter().any(|(i, _)| *i == run.index) {
            spaces.push((run.index, db.space_for_write(run.index)));
        }
        let space = match spaces.iter().find(|(i, _)| *i == run.index) {
            Some((_, Ok(space))) => space,
            Some((_, Err(e))) => {
                replies.push(vec![(e.clone(), false); run.cmds.len()]);
                continue;
            }
            None => continue,
        };
        let mut out = Vec::with_capacity(run.cmds.len());
        for args in run.cmds.drain(..) {
            out.push(one(space, run.index, args, now, &mut written));
        }
        replies.push(out);
    }
    let failed = match spaces.iter().find_map(|(_, s)| s.as_ref().ok()) {
        Some(any) if !written.is_empty() => {
            let mut batch = any.batch();
            for ((index, k), state) in written {
                let Some((_, Ok(space))) = spaces.iter().find(|(i, _)| *i == index) else {
                    continue;
                };
                match state {
                    Written::Put(v, KeyExpiry::At(at)) => {
                        space.put_string_until(&mut batch, k, v, at)
                    }
                    Written::Put(v, _) => space.put(&mut batch, k, v),
                    Written::Gone => space.delete_string(&mut batch, k),
                }
            }
            any.write(batch).err()
        }
        _ => None,
    };
    replies
        .into_iter()
        .map(|run| {
            run.into_iter()
                .map(|(reply, wrote)| match (&failed, wrote) {
                    (Some(e), true) => e.clone(),
                    _ => reply,
                })
                .collect()
        })
        .collect()
}

/// A plain SET's key, and what it leaves there (`values::is_plain_set` lets only a valid
/// expiry through): the value, until its expiry, or nothing if that has passed.
/// A pipelined plain SET or counter (`is_batchable`) as a change; a counter's error.
pub fn pipeline_change(args: Vec<Vec<u8>>, now: i64) -> Result<Change, Reply> {
    if is_counter(&args) {
        let name = String::from_utf8_lossy(&args[0]).to_ascii_uppercase();
        return match counter(&name, &args[1..]) {
            Some(result) => result,
            None => Err(Reply::wrong_args(&name)),
        };
    }
    let (key, state) = plain_set(args, now);
    let (value, expiry) = match state {
        Written::Put(value, KeyExpiry::At(at)) => (value, SetExpiry::At(at)),
        Written::Put(value, _) => (value, SetExpiry::Never),
        // Its expiry has passed: the change deletes the key.
        Written::Gone => (Vec::new(), SetExpiry::At(0)),
    };
    Ok(Change::Set {
        key,
        value,
        cond: Cond::Always,
        get: false,
        expiry,
        int: false,
    })
}

pub fn plain_set(mut args: Vec<Vec<u8>>, now: i64) -> (Vec<u8>, Written) {
    let expiry = (args.len() == 5).then(|| (args.pop(), args.pop()));
    let v = args.pop().unwrap_or_default();
    let k = args.pop().unwrap_or_default();
    let at = expiry.map(|(t, unit)| {
        let unit = unit.as_deref().and_then(expire::unit_of);
        let at = unit
            .zip(t)
            .map(|(u, t)| expire::expire_ms(u, &t, "set", now));
        at.and_then(Result::ok).unwrap_or(0)
    });
    let state = match at {
        None => Written::Put(v, KeyExpiry::Never),
        Some(at) if at <= now => Written::Gone,
        Some(at) => Written::Put(v, KeyExpiry::At(at as u64)),
    };
    (k, state)
}

/// One command of a run in database `index` (`space`): its reply and whether it wrote.
fn one(
    space: &Space<'_>,
    index: usize,
    args: Vec<Vec<u8>>,
    now: i64,
    written: &mut HashMap<(usize, Vec<u8>), Written>,
) -> (Reply, bool) {
    if !is_counter(&args) {
        let (k, state) = plain_set(args, now);
        written.insert((index, k), state);
        return (Reply::ok(), true);
    }
    let name = String::from_utf8_lossy(&args[0]).to_ascii_uppercase();
    let (key, by) = match counter(&name, &args[1..]) {
        Some(Ok(Change::IncrBy { key, by })) => (key, by),
        Some(Err(e)) => return (e, false),
        _ => return (not_an_integer(), false),
    };
    let key = (index, key);
    let current = match written.get(&key) {
        Some(Written::Put(v, expiry)) => Ok(Some((v.clone(), *expiry))),
        Some(Written::Gone) => Ok(None),
        None => Values::read(space, &key.1),
    };
    let (old, expiry) = match current {
        Err(e) => return (e, false),
        Ok(None) => (None, KeyExpiry::Never),
        Ok(Some((v, expiry))) => (Some(v), expiry),
    };
    match incremented(old.as_deref(), by) {
        Err(e) => (e, false),
        Ok(new) => {
            written.insert(key, Written::Put(new.to_string().into_bytes(), expiry));
            (Reply::Int(new), true)
        }
    }
}
