//! Command execution: `Server` (the store and what all connections share) and `Session`
//! (one connection's protocol, authentication and name); `execute` maps one request to one
//! reply. Writes go through `Server::writes`: a plain write (`SET`, `MSET`) holds it shared, a
//! read-then-write (`SETNX`, `SET NX|XX|GET`, `GETDEL`, `DEL` and its count) exclusive, so a
//! conditional write is atomic with respect to every other write while plain writes do not
//! queue behind each other twice (the store already orders them).

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, RwLock, RwLockReadGuard, RwLockWriteGuard};

use lsm_bloom::{Db, WriteBatch};
use sha2::{Digest, Sha256};

use super::resp::{Proto, Reply};
use super::scan::{self, Cursors, Glob};

/// The version reported to clients (some pick features by it, e.g. `CLIENT SETINFO` ≥ 7.2).
pub const REDIS_VERSION: &str = "7.2.0";

/// What every connection shares.
pub struct Server {
    pub db: Db,
    /// SHA-256 of the password, if one is required: compared in constant time, and the same
    /// time for every length of attempt.
    password: Option<[u8; 32]>,
    writes: RwLock<()>,
    cursors: Cursors,
    next_id: AtomicU64,
    /// `CONFIG GET` answers.
    config: Vec<(&'static str, String)>,
    /// Request bytes all connections hold against the shared budget (INFO
    /// `request_budget_used`).
    pub request_bytes: Arc<AtomicUsize>,
    /// Reply bytes all connections hold against the shared output budget (INFO
    /// `output_budget_used`).
    pub output_bytes: Arc<AtomicUsize>,
}

/// One connection's state.
pub struct Session {
    pub id: u64,
    pub proto: Proto,
    pub authed: bool,
    name: Option<Vec<u8>>,
}

fn digest(s: &[u8]) -> [u8; 32] {
    Sha256::digest(s).into()
}

fn int_arg(a: &[u8]) -> Option<i64> {
    std::str::from_utf8(a).ok()?.parse().ok()
}

fn wrong_args(cmd: &str) -> Reply {
    Reply::err(format!(
        "wrong number of arguments for '{}' command",
        cmd.to_ascii_lowercase()
    ))
}

fn db_err(e: lsm_bloom::Error) -> Reply {
    Reply::err(e.to_string())
}

fn opt_bulk(v: Option<Vec<u8>>) -> Reply {
    v.map_or(Reply::Null, Reply::Bulk)
}

impl Server {
    pub fn new(db: Db, password: Option<&[u8]>, config: Vec<(&'static str, String)>) -> Server {
        Server {
            db,
            password: password.map(digest),
            writes: RwLock::new(()),
            cursors: Cursors::new(),
            next_id: AtomicU64::new(1),
            config,
            request_bytes: Arc::default(),
            output_bytes: Arc::default(),
        }
    }

    pub fn session(&self) -> Session {
        Session {
            id: self.next_id.fetch_add(1, Ordering::Relaxed),
            proto: Proto::Resp2,
            authed: self.password.is_none(),
            name: None,
        }
    }

    /// Held by a read-then-write: no other write runs in between.
    fn write_lock(&self) -> RwLockWriteGuard<'_, ()> {
        self.writes.write().unwrap_or_else(|p| p.into_inner())
    }

    /// Held by a plain write: excludes read-then-writes only.
    fn plain_write_lock(&self) -> RwLockReadGuard<'_, ()> {
        self.writes.read().unwrap_or_else(|p| p.into_inner())
    }

    /// Checks a password attempt for user `user` and, if it is right, authenticates `s`;
    /// otherwise the error reply.
    fn authenticate(&self, s: &mut Session, user: &[u8], pass: &[u8]) -> Result<(), Reply> {
        let Some(want) = &self.password else {
            return Err(Reply::err(
                "AUTH <password> called without any password configured for the default user. \
                 Are you sure your configuration is correct?",
            ));
        };
        let same = constant_time_eq::constant_time_eq_32(&digest(pass), want);
        if !(same && user == b"default") {
            return Err(Reply::Error(
                "WRONGPASS invalid username-password pair or user is disabled.".into(),
            ));
        }
        s.authed = true;
        Ok(())
    }

    fn hello(&self, s: &mut Session, args: &[Vec<u8>]) -> Reply {
        let mut proto = s.proto;
        let mut auth = None;
        let mut name = None;
        if let Some(v) = args.first() {
            proto = match int_arg(v) {
                Some(2) => Proto::Resp2,
                Some(3) => Proto::Resp3,
                Some(_) => return Reply::Error("NOPROTO unsupported protocol version".into()),
                None => return Reply::err("Protocol version is not an integer or out of range"),
            };
            let mut i = 1;
            while i < args.len() {
                match args[i].to_ascii_uppercase().as_slice() {
                    b"AUTH" if i + 2 < args.len() => {
                        auth = Some((&args[i + 1], &args[i + 2]));
                        i += 3;
                    }
                    b"SETNAME" if i + 1 < args.len() => {
                        name = Some(args[i + 1].clone());
                        i += 2;
                    }
                    _ => {
                        return Reply::err(format!(
                            "Syntax error in HELLO option '{}'",
                            String::from_utf8_lossy(&args[i])
                        ))
                    }
                }
            }
        }
        if let Some((user, pass)) = auth {
            if let Err(refused) = self.authenticate(s, user, pass) {
                return refused;
            }
        }
        if !s.authed {
            return Reply::Error(
                "NOAUTH HELLO must be called with the client already authenticated, otherwise \
                 the HELLO <proto> AUTH <user> <pass> option can be used to authenticate the \
                 client and select the RESP protocol version at the same time"
                    .into(),
            );
        }
        if let Some(n) = name {
            if let Err(e) = set_name(s, n) {
                return e;
            }
        }
        s.proto = proto;
        let v = |x: &str| Reply::bulk_str(x);
        Reply::Map(vec![
            (v("server"), v("redis")),
            (v("version"), v(REDIS_VERSION)),
            (
                v("proto"),
                Reply::Int(if proto == Proto::Resp3 { 3 } else { 2 }),
            ),
            (v("id"), Reply::Int(s.id as i64)),
            (v("mode"), v("standalone")),
            (v("role"), v("master")),
            (v("modules"), Reply::Array(Vec::new())),
        ])
    }

    fn client(&self, s: &mut Session, args: &[Vec<u8>]) -> Reply {
        let Some(sub) = args.first() else {
            return wrong_args("client");
        };
        match (sub.to_ascii_uppercase().as_slice(), &args[1..]) {
            (b"SETINFO", [attr, _value]) => {
                if attr.eq_ignore_ascii_case(b"lib-name") || attr.eq_ignore_ascii_case(b"lib-ver") {
                    Reply::ok()
                } else {
                    Reply::err(format!(
                        "Unrecognized option '{}'",
                        String::from_utf8_lossy(attr)
                    ))
                }
            }
            (b"SETNAME", [name]) => set_name(s, name.clone()).map_or_else(|e| e, |()| Reply::ok()),
            (b"GETNAME", []) => opt_bulk(s.name.clone()),
            (b"ID", []) => Reply::Int(s.id as i64),
            (b"SETINFO" | b"SETNAME" | b"GETNAME" | b"ID", _) => Reply::err(format!(
                "wrong number of arguments for 'client|{}' command",
                String::from_utf8_lossy(sub).to_ascii_lowercase()
            )),
            _ => Reply::err(format!(
                "unknown subcommand '{}'. Supported: SETINFO, SETNAME, GETNAME, ID",
                String::from_utf8_lossy(sub)
            )),
        }
    }

    fn config(&self, args: &[Vec<u8>]) -> Reply {
        match args.first().map(|a| a.to_ascii_uppercase()) {
            Some(sub) if sub == b"GET" && args.len() > 1 => {
                let globs: Vec<Glob> = args[1..]
                    .iter()
                    .map(|p| Glob::new(&p.to_ascii_lowercase()))
                    .collect();
                let pairs = self
                    .config
                    .iter()
                    .filter(|(name, _)| globs.iter().any(|g| g.matches(name.as_bytes())))
                    .map(|(name, value)| (Reply::bulk_str(name), Reply::bulk_str(value)))
                    .collect();
                Reply::Map(pairs)
            }
            Some(sub) if sub == b"GET" => wrong_args("config|get"),
            Some(sub) => Reply::err(format!(
                "CONFIG {} is not supported: kv_server is configured by its command line \
                 (CONFIG GET reads it)",
                String::from_utf8_lossy(&sub)
            )),
            None => wrong_args("config"),
        }
    }

    /// `SET key value [NX|XX] [GET]`, and `SETNX` (`nx_int`: reply 1 or 0).
    fn set(&self, k: &[u8], v: &[u8], opts: &[Vec<u8>], nx_int: bool) -> Reply {
        let (mut nx, mut xx, mut get) = (nx_int, false, false);
        for o in opts {
            match o.to_ascii_uppercase().as_slice() {
                b"NX" => nx = true,
                b"XX" => xx = true,
                b"GET" => get = true,
                b"EX" | b"PX" | b"EXAT" | b"PXAT" | b"KEEPTTL" => {
                    return Reply::err(format!(
                        "SET {} is not supported: keys in lsm-bloom do not expire",
                        String::from_utf8_lossy(o).to_ascii_uppercase()
                    ))
                }
                _ => return Reply::err("syntax error"),
            }
        }
        if nx && xx {
            return Reply::err("syntax error: NX and XX exclude each other");
        }
        let conditional = nx || xx || get;
        let _exclusive = conditional.then(|| self.write_lock());
        let _shared = (!conditional).then(|| self.plain_write_lock());
        let old = if conditional {
            match self.db.get(k) {
                Ok(old) => old,
                Err(e) => return db_err(e),
            }
        } else {
            None
        };
        let write = !(nx && old.is_some() || xx && old.is_none());
        if write {
            if let Err(e) = self.db.put(k, v) {
                return db_err(e);
            }
        }
        match (nx_int, get, write) {
            (true, _, w) => Reply::Int(i64::from(w)),
            (false, true, _) => opt_bulk(old),
            (false, false, true) => Reply::ok(),
            (false, false, false) => Reply::Null,
        }
    }

    fn del_or_exists(&self, cmd: &str, keys: &[Vec<u8>]) -> Reply {
        let del = cmd == "DEL";
        let _w = del.then(|| self.write_lock());
        let mut count = 0;
        let mut batch = WriteBatch::new();
        // DEL counts distinct keys removed (`DEL k k` is 1, as in Redis); EXISTS counts every
        // argument that exists (`EXISTS k k` is 2). All keys are looked up in one batched read.
        let mut seen = std::collections::HashSet::new();
        let keys: Vec<&Vec<u8>> = keys
            .iter()
            .filter(|k| !del || seen.insert(k.as_slice()))
            .collect();
        for (k, found) in keys.iter().zip(self.db.multi_get(&keys)) {
            match found {
                Ok(Some(_)) => {
                    count += 1;
                    batch.delete(k.to_vec());
                }
                Ok(None) => {}
                Err(e) => return db_err(e),
            }
        }
        if del && !batch.is_empty() {
            if let Err(e) = self.db.write(batch) {
                return db_err(e);
            }
        }
        Reply::Int(count)
    }

    /// True when `args` is an `MGET` with keys this session may run: the connection makes
    /// its reply a few values at a time (`mget_step`) and writes it as it goes, so a reply of
    /// many large values is never held whole.
    pub fn is_mget(s: &Session, args: &[Vec<u8>]) -> bool {
        s.authed && args.len() >= 2 && args[0].eq_ignore_ascii_case(b"MGET")
    }

    /// The reply elements of one step of an MGET: `keys`' values in one batched read
    /// (`Db::multi_get`), a failed read as an error in its key's place.
    pub fn mget_step(&self, keys: &[Vec<u8>]) -> Vec<Reply> {
        self.db
            .multi_get(keys)
            .into_iter()
            .map(|found| found.map_or_else(db_err, opt_bulk))
            .collect()
    }

    /// True when `args` is a plain `SET key value` this session may run: such requests in one
    /// pipeline may be committed together (`set_many`).
    pub fn is_plain_set(s: &Session, args: &[Vec<u8>]) -> bool {
        s.authed
            && args.len() == 3
            && args[0].eq_ignore_ascii_case(b"SET")
            // One that the store would refuse runs alone, so its error is its own.
            && args[1].len() <= lsm_bloom::db::MAX_KEY_SIZE
            && args[2].len() <= lsm_bloom::db::MAX_VALUE_SIZE
    }

    /// Runs plain SETs of one pipeline as one write batch (one log append, one memtable
    /// update visible at once), in their order (a later SET of a key wins, as it would one by
    /// one). Redis runs a pipeline's commands one after the other with no other client's in
    /// between only if nothing else arrives; committing them together is one of the orders a
    /// client could observe. The reply, `+OK` or the error, is for each of them.
    pub fn set_many(&self, sets: &[Vec<Vec<u8>>]) -> Reply {
        let _shared = self.plain_write_lock();
        let mut batch = WriteBatch::new();
        for args in sets {
            batch.put(args[1].as_slice(), args[2].as_slice());
        }
        match self.db.write(batch) {
            Ok(()) => Reply::ok(),
            Err(e) => db_err(e),
        }
    }

    /// Executes one request. Returns the reply and whether the connection stays open.
    pub fn execute(&self, s: &mut Session, args: &[Vec<u8>]) -> (Reply, bool) {
        let Some(name) = args.first() else {
            return (Reply::Array(Vec::new()), true); // never sent: empty requests are skipped
        };
        let cmd = String::from_utf8_lossy(name).to_ascii_uppercase();
        let rest = &args[1..];
        if !s.authed && !matches!(cmd.as_str(), "AUTH" | "HELLO" | "QUIT") {
            return (Reply::Error("NOAUTH Authentication required.".into()), true);
        }
        let db = &self.db;
        let reply = match cmd.as_str() {
            "PING" => match rest {
                [] => Reply::Simple("PONG".into()),
                [msg] => Reply::Bulk(msg.clone()),
                _ => wrong_args(&cmd),
            },
            "ECHO" => match rest {
                [msg] => Reply::Bulk(msg.clone()),
                _ => wrong_args(&cmd),
            },
            "QUIT" => return (Reply::ok(), false),
            "HELLO" => self.hello(s, rest),
            "AUTH" => {
                let tried = match rest {
                    [pass] => self.authenticate(s, b"default", pass),
                    [user, pass] => self.authenticate(s, user, pass),
                    _ => Err(Reply::err("syntax error")),
                };
                tried.map_or_else(|refused| refused, |()| Reply::ok())
            }
            "CLIENT" => self.client(s, rest),
            "SELECT" => match rest {
                [n] => match int_arg(n) {
                    Some(0) => Reply::ok(),
                    Some(_) => Reply::err("DB index is out of range (kv_server serves one database, 0)"),
                    None => Reply::err("value is not an integer or out of range"),
                },
                _ => wrong_args(&cmd),
            },
            "CONFIG" => self.config(rest),
            "GET" => match rest {
                [k] => db.get(k).map_or_else(db_err, opt_bulk),
                _ => wrong_args(&cmd),
            },
            "SET" => match rest {
                [k, v, opts @ ..] => self.set(k, v, opts, false),
                _ => wrong_args(&cmd),
            },
            "SETNX" => match rest {
                [k, v] => self.set(k, v, &[], true),
                _ => wrong_args(&cmd),
            },
            "GETDEL" => match rest {
                [k] => {
                    let _w = self.write_lock();
                    match db.get(k) {
                        Ok(Some(v)) => db.delete(k).map_or_else(db_err, |()| Reply::Bulk(v)),
                        Ok(None) => Reply::Null,
                        Err(e) => db_err(e),
                    }
                }
                _ => wrong_args(&cmd),
            },
            "STRLEN" => match rest {
                [k] => db
                    .get(k)
                    .map_or_else(db_err, |v| Reply::Int(v.map_or(0, |v| v.len() as i64))),
                _ => wrong_args(&cmd),
            },
            "TYPE" => match rest {
                [k] => db.get(k).map_or_else(db_err, |v| {
                    Reply::Simple(if v.is_some() { "string" } else { "none" }.into())
                }),
                _ => wrong_args(&cmd),
            },
            "DEL" | "EXISTS" if !rest.is_empty() => self.del_or_exists(&cmd, rest),
            "MSET" if !rest.is_empty() && rest.len().is_multiple_of(2) => {
                let mut batch = WriteBatch::new();
                for pair in rest.chunks_exact(2) {
                    batch.put(pair[0].clone(), pair[1].clone());
                }
                let _w = self.plain_write_lock();
                db.write(batch).map_or_else(db_err, |()| Reply::ok())
            }
            // An MGET with keys is streamed by the connection (`is_mget`, `mget_step`).
            "DEL" | "EXISTS" | "MGET" | "MSET" => wrong_args(&cmd),
            "SCAN" => scan::scan(db, &self.cursors, rest),
            "DBSIZE" => Reply::err(
                "DBSIZE is not supported: lsm-bloom keeps no key count (counting would read every table)",
            ),
            "INFO" => Reply::Verbatim(super::info::info(db, &self.request_bytes, &self.output_bytes)),
            "COMMAND" => match rest.first().map(|a| a.to_ascii_uppercase()) {
                Some(sub) if sub == b"DOCS" => Reply::Map(Vec::new()),
                _ => Reply::Array(Vec::new()),
            },
            _ => {
                let first = rest
                    .first()
                    .map(|a| String::from_utf8_lossy(a).into_owned())
                    .unwrap_or_default();
                Reply::err(format!(
                    "unknown command '{}', with args beginning with: '{first}'",
                    String::from_utf8_lossy(name)
                ))
            }
        };
        (reply, true)
    }
}

fn set_name(s: &mut Session, name: Vec<u8>) -> Result<(), Reply> {
    if name.iter().any(|&b| !(b'!'..=b'~').contains(&b)) {
        return Err(Reply::err(
            "Client names cannot contain spaces, newlines or special characters.",
        ));
    }
    s.name = (!name.is_empty()).then_some(name);
    Ok(())
}
