//! RedisBloom's `BF.*` commands (`bloom.rs` holds the filters): arguments checked in
//! RedisBloom's order and words, before the key is read; writes run as changes
//! (`Values::run_change`), reads (`BF.EXISTS`, `BF.MEXISTS`, `BF.CARD`, `BF.INFO`) look the
//! items up directly, in cluster mode after one read barrier for the whole command.
//!
//! `BF.SCANDUMP` and `BF.LOADCHUNK` are refused: their chunks are RedisBloom's bit arrays,
//! which an exact set does not have.

use super::bloom::{
    header_key, item_key, BfChange, Header, Params, DEFAULTS, MAX_CAPACITY, MAX_EXPANSION,
};
use super::expire::parse_int;
use super::resp::{Out, Proto, Reply};
use super::rmw::Change;
use super::rmw_view::wrong_type;
use super::store::{Space, StoreResult};
use super::strings::parse_float;
use super::values::Values;

/// The index of the argument equal to `word` (any case), as RedisBloom's `RMUtil_ArgIndex`.
fn arg_index(args: &[Vec<u8>], word: &str) -> Option<usize> {
    args.iter()
        .position(|a| a.eq_ignore_ascii_case(word.as_bytes()))
}

/// `BF.RESERVE key error_rate capacity [EXPANSION n] [NONSCALING]`'s parameters (`args`
/// after the command name), refused as RedisBloom refuses them: the error rate, the
/// capacity, then the options, found anywhere among the arguments.
pub fn reserve_params(args: &[Vec<u8>]) -> Result<Params, Reply> {
    let error_rate = parse_float(&args[1]).ok_or_else(|| Reply::err("bad error rate"))?;
    if !(error_rate > 0.0 && error_rate < 1.0) {
        return Err(Reply::err(
            "error rate must be in the range (0.000000, 1.000000)",
        ));
    }
    let capacity = parse_int(&args[2]).ok_or_else(|| Reply::err("bad capacity"))?;
    if !(1..=MAX_CAPACITY as i64).contains(&capacity) {
        return Err(Reply::err(format!(
            "capacity must be in the range [1, {MAX_CAPACITY}]"
        )));
    }
    let mut nonscaling = arg_index(args, "NONSCALING").is_some();
    let mut expansion = i64::from(DEFAULTS.expansion);
    if let Some(at) = arg_index(args, "EXPANSION") {
        let Some(n) = args.get(at + 1) else {
            return Err(Reply::err("no expansion"));
        };
        expansion = parse_int(n).ok_or_else(|| Reply::err("bad expansion"))?;
        if expansion == 0 {
            nonscaling = true;
        } else if nonscaling {
            return Err(Reply::Error("Nonscaling filters cannot expand".into()));
        }
        if !(0..=i64::from(MAX_EXPANSION)).contains(&expansion) {
            return Err(Reply::err(format!(
                "expansion must be in the range [0, {MAX_EXPANSION}]"
            )));
        }
    }
    Ok(Params {
        error_rate,
        capacity: capacity as u64,
        expansion: if nonscaling { 0 } else { expansion as u32 },
    })
}

/// `BF.INSERT key [CAPACITY c] [ERROR e] [EXPANSION n] [NOCREATE] [NONSCALING] ITEMS item…`
/// (`args` after the command name): the parameters to create with (`None`: NOCREATE) and
/// where the items start.
pub fn insert_options(args: &[Vec<u8>]) -> Result<(Option<Params>, usize), Reply> {
    let mut p = DEFAULTS;
    let (mut create, mut nonscaling, mut i) = (true, false, 1);
    let value = |i: usize| {
        args.get(i + 1)
            .ok_or_else(|| Reply::wrong_args("bf.insert"))
    };
    let items_at = loop {
        let Some(word) = args.get(i) else {
            return Err(Reply::wrong_args("bf.insert"));
        };
        match word.to_ascii_uppercase().as_slice() {
            b"ITEMS" => break i + 1,
            b"CAPACITY" => {
                p.capacity = parse_int(value(i)?)
                    .filter(|c| (1..=MAX_CAPACITY as i64).contains(c))
                    .ok_or_else(|| Reply::Error("Bad capacity".into()))?
                    as u64;
                i += 2;
            }
            b"ERROR" => {
                p.error_rate = parse_float(value(i)?)
                    .filter(|e| *e > 0.0 && *e < 1.0)
                    .ok_or_else(|| Reply::Error("Bad error rate".into()))?;
                i += 2;
            }
            b"EXPANSION" => {
                p.expansion = parse_int(value(i)?)
                    .filter(|e| (0..=i64::from(MAX_EXPANSION)).contains(e))
                    .ok_or_else(|| Reply::Error("Bad expansion".into()))?
                    as u32;
                i += 2;
            }
            b"NOCREATE" => (create, i) = (false, i + 1),
            b"NONSCALING" => (nonscaling, i) = (true, i + 1),
            _ => return Err(Reply::Error("Unknown argument received".into())),
        }
    };
    if items_at >= args.len() {
        return Err(Reply::wrong_args("bf.insert"));
    }
    if nonscaling {
        p.expansion = 0;
    }
    Ok((create.then_some(p), items_at))
}

/// Items one change adds at most: a longer BF.MADD or BF.INSERT runs as several changes in
/// order, so what the server holds beyond the request itself (the change's view of its
/// writes, its batch: ~250 bytes an item, measured at 376 MB of peak for one BF.MADD of 10^6
/// one-byte items as one change) stays bounded whatever the request's length. Each item's
/// answer is still exact; another client may see the first part before the rest.
pub const ADD_CHUNK: usize = 10_000;
/// What a read finds under `key`: a string, a filter, or nothing.
enum Found {
    String,
    Filter(Header),
    Absent,
}

/// `key` in `space`, read after one barrier (the filters keyspace too: `filters`).
fn find(space: &Space<'_>, filters: &Space<'_>, key: &[u8]) -> StoreResult<Found> {
    space.sync()?;
    if space.peek_with(key, |_| ())?.is_some() {
        return Ok(Found::String);
    }
    match filters.peek_with(&header_key(key), Header::decode)? {
        None => Ok(Found::Absent),
        Some(Ok(h)) => Ok(Found::Filter(h)),
        Some(Err(e)) => Err(Reply::err(e)),
    }
}

/// `BF.INFO`'s fields: RESP2 names and values; the value alone for one field asked for.
fn info(h: &Header, field: Option<&[u8]>) -> Reply {
    let expansion = match h.params.expansion {
        0 => Reply::Null,
        e => Reply::Int(i64::from(e)),
    };
    let fields = [
        ("Capacity", "CAPACITY", Reply::Int(h.params.capacity as i64)),
        ("Size", "SIZE", Reply::Int(h.size() as i64)),
        ("Number of filters", "FILTERS", Reply::Int(1)),
        (
            "Number of items inserted",
            "ITEMS",
            Reply::Int(h.items as i64),
        ),
        ("Expansion rate", "EXPANSION", expansion),
    ];
    match field {
        None => Reply::Map(
            fields
                .into_iter()
                .map(|(name, _, v)| (Reply::Simple(name.into()), v))
                .collect(),
        ),
        Some(f) => fields
            .into_iter()
            .find(|(_, word, _)| f.eq_ignore_ascii_case(word.as_bytes()))
            .map_or_else(
                || Reply::Error("Invalid information value".into()),
                |(_, _, v)| Reply::Array(vec![v]),
            ),
    }
}

impl Values<'_> {
    /// Runs `cmd` if it is a `BF.*` command, its reply put in `out`; false if it is not one.
    pub fn run_bloom(
        &self,
        cmd: &str,
        rest: &mut [Vec<u8>],
        out: &mut impl Out,
        proto: Proto,
    ) -> bool {
        if !cmd.starts_with("BF.") {
            return false;
        }
        let reply = match (cmd, rest.len()) {
            ("BF.RESERVE", 3..=6) => match reserve_params(rest) {
                Ok(params) => self.run_change(Change::Bf(BfChange::Reserve {
                    key: rest[0].clone(),
                    params,
                })),
                Err(e) => e,
            },
            ("BF.ADD", 2) => self.run_change(Change::Bf(BfChange::Add {
                key: rest[0].clone(),
                items: vec![std::mem::take(&mut rest[1])],
                create: Some(DEFAULTS),
                many: false,
            })),
            ("BF.MADD", 2..) => self.add(rest, Some(DEFAULTS), 1),
            ("BF.INSERT", 3..) => match insert_options(rest) {
                Ok((create, items_at)) => self.add(rest, create, items_at),
                Err(e) => e,
            },
            ("BF.EXISTS", 2) | ("BF.MEXISTS", 2..) | ("BF.CARD", 1) | ("BF.INFO", 1 | 2) => {
                self.read_bloom(cmd, rest).unwrap_or_else(|e| e)
            }
            ("BF.SCANDUMP", 2) | ("BF.LOADCHUNK", 3) => Reply::err(format!(
                "{cmd} is not supported: kv_server's filters are exact sets of items, not \
                 RedisBloom's bit arrays (copy one with BF.MEXISTS and BF.MADD)"
            )),
            (
                "BF.RESERVE" | "BF.ADD" | "BF.MADD" | "BF.INSERT" | "BF.EXISTS" | "BF.MEXISTS"
                | "BF.CARD" | "BF.INFO" | "BF.SCANDUMP" | "BF.LOADCHUNK",
                _,
            ) => Reply::wrong_args(cmd),
            _ => return false,
        };
        out.reply(&reply, proto);
        true
    }

    /// BF.MADD and BF.INSERT: the items of `args` from `items_at` added to `args[0]`
    /// (made with `create` if absent), `ADD_CHUNK` to a change; the answers in one array,
    /// ending at the first refusal as RedisBloom's do. An error before any item is the
    /// reply.
    fn add(&self, args: &mut [Vec<u8>], create: Option<Params>, items_at: usize) -> Reply {
        let key = args[0].clone();
        let mut answers = Vec::with_capacity(args.len() - items_at);
        for chunk in args[items_at..].chunks_mut(ADD_CHUNK) {
            let items = chunk.iter_mut().map(std::mem::take).collect();
            let change = Change::Bf(BfChange::Add {
                key: key.clone(),
                items,
                create,
                many: true,
            });
            match self.run_change(change) {
                Reply::Array(got) => {
                    let refused = got.last().is_some_and(|r| matches!(r, Reply::Error(_)));
                    answers.extend(got);
                    if refused {
                        break;
                    }
                }
                e if answers.is_empty() => return e,
                e => {
                    answers.push(e);
                    break;
                }
            }
        }
        Reply::Array(answers)
    }

    /// `BF.EXISTS`, `BF.MEXISTS`, `BF.CARD` and `BF.INFO`.
    fn read_bloom(&self, cmd: &str, rest: &[Vec<u8>]) -> StoreResult<Reply> {
        let space = self.db.space(self.index)?;
        let filters = space.filters(false)?;
        let found = find(&space, &filters, &rest[0])?;
        Ok(match (cmd, found) {
            ("BF.EXISTS" | "BF.MEXISTS", found) => {
                let mut answers = Vec::with_capacity(rest.len() - 1);
                for item in &rest[1..] {
                    let hit = match &found {
                        // RedisBloom answers 0 for a key of another type.
                        Found::String | Found::Absent => false,
                        Found::Filter(h) => filters
                            .peek_with(&item_key(h.generation, item), |_| ())?
                            .is_some(),
                    };
                    answers.push(Reply::Bool(hit));
                }
                match cmd {
                    "BF.EXISTS" => answers.pop().unwrap_or(Reply::Bool(false)),
                    _ => Reply::Array(answers),
                }
            }
            (_, Found::String) => wrong_type(),
            ("BF.CARD", Found::Filter(h)) => Reply::Int(h.items as i64),
            ("BF.CARD", Found::Absent) => Reply::Int(0),
            (_, Found::Absent) => Reply::err("not found"),
            (_, Found::Filter(h)) => info(&h, rest.get(1).map(Vec::as_slice)),
        })
    }

    /// The filters in `space`, for `DBSIZE`: counted exactly up to `EXACT_DBSIZE`, and
    /// that many beyond (a filter is a key, its items are not).
    pub fn filter_count(space: &Space<'_>) -> StoreResult<u64> {
        let filters = space.filters(false)?;
        if matches!(filters, Space::Unmade) {
            return Ok(0);
        }
        let mut n = 0;
        let end = std::ops::Bound::Excluded(super::bloom::HEADERS_END.to_vec());
        for e in filters.scan(header_key(b""), end)? {
            let (k, _) = e.map_err(|e| Reply::err(e.to_string()))?;
            // A header under a string is dead (`rmw_view.rs`).
            let name = k.get(1..).unwrap_or_default();
            if space.peek_with(name, |_| ())?.is_none() {
                n += 1;
            }
            if n >= super::store::EXACT_DBSIZE {
                break;
            }
        }
        Ok(n)
    }

    /// Whether `key` names a filter in `space` (for TYPE, EXISTS, GET and the other
    /// commands that read a string without a change; after their own read of `key`, so in
    /// cluster mode without a second read barrier).
    pub fn is_filter(space: &Space<'_>, key: &[u8]) -> StoreResult<bool> {
        let filters = space.filters(false)?;
        if matches!(filters, Space::Unmade) {
            return Ok(false);
        }
        Ok(filters.peek_with(&header_key(key), |_| ())?.is_some())
    }
}

/// `absent`, or `filter` if `key`, not a string in `space`, names a filter there.
pub fn or_filter(space: &Space<'_>, key: &[u8], absent: Reply, filter: Reply) -> Reply {
    match Values::is_filter(space, key) {
        Ok(true) => filter,
        Ok(false) => absent,
        Err(e) => e,
    }
}

impl Values<'_> {
    /// Whether the session's database holds (or held) filters on a single server, where
    /// its string commands then run as changes, which know a filter's name (in a cluster
    /// they always do).
    pub fn has_filters(&self) -> bool {
        match self.db.space(self.index) {
            Ok(space) => !matches!(space.filters(false), Ok(Space::Unmade)),
            Err(_) => false,
        }
    }
}
