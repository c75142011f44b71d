//! Command execution: `Server` (the store and what all connections share) and `Session`
//! (one connection's protocol, authentication and name); `execute` runs one request and puts
//! its reply in the connection's output. The commands on stored values, and the order of
//! writes, are `values.rs`'s; the numbered databases' (SELECT, FLUSHDB, FLUSHALL, SWAPDB,
//! DBSIZE) are `db_commands.rs`'s; this module has the connection-level ones (PING, AUTH,
//! HELLO, CLIENT, CONFIG, INFO, …) and the dispatch.

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;

use sha2::{Digest, Sha256};

use super::db_commands;
use super::resp::{Out, Proto, Reply};
use super::scan::{self, Cursors, Glob};
use super::store::Store;
use super::values::{self, Values, Writes};

/// The version reported to clients (some pick features by it, e.g. `CLIENT SETINFO` ≥ 7.2).
pub const REDIS_VERSION: &str = "7.2.0";

/// What every connection shares.
pub struct Server {
    pub db: Store,
    /// SHA-256 of the password, if one is required: compared in constant time, and the same
    /// time for every length of attempt.
    password: Option<[u8; 32]>,
    pub writes: Writes,
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
    /// The selected database (`SELECT`).
    pub db: usize,
    /// MULTI's queue and WATCH's transactions (`multi.rs`).
    pub multi: super::multi::Multi,
}

fn digest(s: &[u8]) -> [u8; 32] {
    Sha256::digest(s).into()
}

fn int_arg(a: &[u8]) -> Option<i64> {
    std::str::from_utf8(a).ok()?.parse().ok()
}

impl Server {
    pub fn new(db: Store, password: Option<&[u8]>, config: Vec<(&'static str, String)>) -> Server {
        Server {
            db,
            password: password.map(digest),
            writes: Writes::default(),
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
            db: 0,
            multi: Default::default(),
        }
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
            return Reply::wrong_args("client");
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
            (b"GETNAME", []) => s.name.clone().map_or(Reply::Null, Reply::Bulk),
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
            Some(sub) if sub == b"GET" => Reply::wrong_args("config|get"),
            Some(sub) => Reply::err(format!(
                "CONFIG {} is not supported: kv_server is configured by its command line \
                 (CONFIG GET reads it)",
                String::from_utf8_lossy(&sub)
            )),
            None => Reply::wrong_args("config"),
        }
    }

    /// Runs a pipeline's plain SETs (`values::is_plain_set`) as one batch (`Values::set_many`).
    pub fn set_many(&self, sets: &mut Vec<Vec<Vec<u8>>>, out: &mut impl Out, s: &Session) {
        self.values(s).set_many(sets, out, s.proto);
    }

    /// True when `args` is a plain `SET key value` or a counter command that `s` may run with
    /// others (`set_many`).
    pub fn is_batchable(s: &Session, args: &[Vec<u8>]) -> bool {
        !s.multi.queuing() && values::is_batchable(s.authed, args)
    }

    fn values(&self, s: &Session) -> Values<'_> {
        self.values_of(s.db)
    }

    /// The value commands on database `db`.
    pub fn values_of(&self, db: usize) -> Values<'_> {
        Values {
            db: &self.db,
            writes: &self.writes,
            index: db,
        }
    }

    /// Executes one request, its reply put in `out`. Returns whether the connection stays
    /// open. The arguments are the request's own: a value written or echoed is moved, not
    /// copied.
    pub fn execute(
        &self,
        s: &mut Session,
        mut args: Vec<Vec<u8>>,
        out: &mut impl Out,
    ) -> std::io::Result<bool> {
        let Some(name) = args.first() else {
            return Ok(true); // never sent: empty requests are skipped
        };
        let cmd = String::from_utf8_lossy(name).to_ascii_uppercase();
        if !s.authed && !matches!(cmd.as_str(), "AUTH" | "HELLO" | "QUIT") {
            out.reply(
                &Reply::Error("NOAUTH Authentication required.".into()),
                s.proto,
            );
            return Ok(true);
        }
        if let Some(open) = self.run_multi(s, &cmd, &mut args, out)? {
            return Ok(open);
        }
        let (_, rest) = args.split_at_mut(1);
        if self.values(s).run(&cmd, rest, out, s.proto)? {
            return Ok(true);
        }
        if let Some(reply) = db_commands::run(&self.db, s, &cmd, rest) {
            out.reply(&reply, s.proto);
            return Ok(true);
        }
        let reply = match cmd.as_str() {
            "PING" => match rest {
                [] => Reply::Simple("PONG".into()),
                [msg] => Reply::Bulk(std::mem::take(msg)),
                _ => Reply::wrong_args(&cmd),
            },
            "ECHO" => match rest {
                [msg] => Reply::Bulk(std::mem::take(msg)),
                _ => Reply::wrong_args(&cmd),
            },
            "QUIT" => {
                out.reply(&Reply::ok(), s.proto);
                return Ok(false);
            }
            "HELLO" => self.hello(s, rest),
            "AUTH" => {
                let tried = match &*rest {
                    [pass] => self.authenticate(s, b"default", pass),
                    [user, pass] => self.authenticate(s, user, pass),
                    _ => Err(Reply::err("syntax error")),
                };
                tried.map_or_else(|refused| refused, |()| Reply::ok())
            }
            "CLIENT" => self.client(s, rest),
            "CONFIG" => self.config(rest),
            "SCAN" => match self.db.space(s.db) {
                Ok(space) => scan::scan(&space, &self.cursors, rest, out),
                Err(e) => e,
            },
            "INFO" => Reply::Verbatim(super::info::info(
                &self.db,
                rest,
                &self.request_bytes,
                &self.output_bytes,
            )),
            "CLUSTER" => self.db.cluster_command(rest),
            "COMMAND" => match rest.first().map(|a| a.to_ascii_uppercase()) {
                Some(sub) if sub == b"DOCS" => Reply::Map(Vec::new()),
                _ => Reply::Array(Vec::new()),
            },
            _ => unknown(&args),
        };
        out.reply(&reply, s.proto);
        Ok(true)
    }
}

/// Redis's answer to a command it does not know (`args`: the name and its arguments): the
/// name cut to 128 bytes, then the arguments quoted, each followed by a space, while the list is
/// under 128 bytes (each cut to what is left of them).
pub fn unknown(args: &[Vec<u8>]) -> Reply {
    let text = |b: &[u8]| String::from_utf8_lossy(b).into_owned();
    let name = args.first().map_or(&[][..], |n| &n[..n.len().min(128)]);
    let mut list: Vec<u8> = Vec::new();
    for a in args.iter().skip(1) {
        if list.len() >= 128 {
            break;
        }
        let room = 128 - list.len();
        list.push(b'\'');
        list.extend_from_slice(&a[..a.len().min(room)]);
        list.extend_from_slice(b"' ");
    }
    Reply::err(format!(
        "unknown command '{}', with args beginning with: {}",
        text(name),
        text(&list)
    ))
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
