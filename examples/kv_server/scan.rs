//! `SCAN cursor [MATCH pattern] [COUNT n] [TYPE type]` over the store's ordered keys.
//!
//! Cursors: clients parse the cursor as an unsigned 64-bit integer (`redis-cli` with
//! `strtoull`, go-redis and node-redis as numbers), so it cannot carry the key to resume from.
//! The server keeps that key in a bounded table (`Cursors`: at most 100,000 cursors and 64 MiB,
//! oldest dropped first) under a number that is never 0 (0 means "done"), below 2^53 (node-redis
//! keeps it in a JavaScript number: a larger one came back rounded, and its scan failed), and
//! starts from a per-process random offset, so a cursor from an earlier server process is
//! reported as expired rather than misread. A cursor resumes at the first key ≥ the one saved, so a full
//! iteration returns every key present throughout it exactly once, in key order.
//!
//! `MATCH` uses Redis's glob syntax (`*`, `?`, `[a-z]`, `[^x]`, `\` escapes), matched in
//! O(pattern × key) time whatever the pattern; a pattern that is a literal prefix followed by
//! `*` scans only that prefix's key range (with `--prefix-delimiter` or `--prefix-len`, the
//! store's prefix filters skip every table without the prefix, from cursor 0 and on resumed
//! cursors alike).
//! `COUNT` is how many keys one call examines (default 10), capped at 100,000 per call.
//! A pattern is at most 1,024 bytes with at most 64 `*` (a longer one is refused), and one
//! call's matching work (pattern tokens × key bytes, summed) is at most `MATCH_WORK`: a call
//! that spends it returns early with a cursor, so no client can make one call run for long.

use std::collections::{HashMap, VecDeque};
use std::ops::Bound;
use std::sync::Mutex;

use super::bloom::{header_key, TYPE_NAME};
use super::store::{Space, StoreIter};
use lsm_bloom::prefix::prefix_end;

use super::resp::{Out, Reply};

const MAX_CURSORS: usize = 100_000;
/// Cursor numbers are below 2^53, so a client that keeps them in a JavaScript number
/// (node-redis's `scanIterator`) or a double gets them back exact.
const CURSOR_BITS: u32 = 53;
const MAX_CURSOR_BYTES: usize = 64 << 20;
/// Most keys one SCAN call examines, whatever COUNT says.
pub const MAX_COUNT: u64 = 100_000;
/// Longest `MATCH` pattern, in bytes, and most `*` in one.
pub const MAX_PATTERN_BYTES: usize = 1024;
pub const MAX_PATTERN_STARS: usize = 64;
/// Matching work one SCAN call may do: the sum over examined keys of pattern tokens × key
/// bytes (what `Glob::matches` costs at most). A call that spends it stops early and returns
/// a cursor, as one that reaches COUNT does: ~2^26 steps, a few tens of milliseconds.
pub const MATCH_WORK: u64 = 1 << 26;

/// Saved resume keys, by cursor number.
pub struct Cursors {
    inner: Mutex<CursorTable>,
}

struct CursorTable {
    keys: HashMap<u64, Vec<u8>>,
    order: VecDeque<u64>,
    bytes: usize,
    next: u64,
}

impl Cursors {
    pub fn new() -> Self {
        let seed = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(1, |d| d.as_nanos() as u64);
        Cursors {
            inner: Mutex::new(CursorTable {
                keys: HashMap::new(),
                order: VecDeque::new(),
                bytes: 0,
                next: (seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> (64 - CURSOR_BITS)) | 1,
            }),
        }
    }

    fn save(&self, key: Vec<u8>) -> u64 {
        let mut t = self.inner.lock().unwrap_or_else(|p| p.into_inner());
        let id = t.next;
        t.next = (t.next + 1) % (1 << CURSOR_BITS);
        t.next = t.next.max(1);
        t.bytes += key.len();
        t.keys.insert(id, key);
        t.order.push_back(id);
        while t.order.len() > MAX_CURSORS || t.bytes > MAX_CURSOR_BYTES {
            let Some(old) = t.order.pop_front() else {
                break;
            };
            if let Some(k) = t.keys.remove(&old) {
                t.bytes -= k.len();
            }
        }
        id
    }

    fn get(&self, id: u64) -> Option<Vec<u8>> {
        let t = self.inner.lock().unwrap_or_else(|p| p.into_inner());
        t.keys.get(&id).cloned()
    }
}

#[derive(Debug, PartialEq)]
enum Token {
    Star,
    Any,
    Byte(u8),
    Class {
        negated: bool,
        ranges: Vec<(u8, u8)>,
    },
}

/// A compiled glob pattern.
pub struct Glob(Vec<Token>);

impl Glob {
    pub fn new(pattern: &[u8]) -> Glob {
        let mut tokens = Vec::new();
        let mut i = 0;
        while i < pattern.len() {
            let c = pattern[i];
            i += 1;
            let t = match c {
                b'*' => {
                    if tokens.last() == Some(&Token::Star) {
                        continue;
                    }
                    Token::Star
                }
                b'?' => Token::Any,
                b'\\' if i < pattern.len() => {
                    i += 1;
                    Token::Byte(pattern[i - 1])
                }
                b'[' => {
                    let negated = pattern.get(i) == Some(&b'^');
                    i += usize::from(negated);
                    let mut ranges = Vec::new();
                    while i < pattern.len() && pattern[i] != b']' {
                        let mut lo = pattern[i];
                        if lo == b'\\' && i + 1 < pattern.len() {
                            i += 1;
                            lo = pattern[i];
                        }
                        if i + 2 < pattern.len() && pattern[i + 1] == b'-' && pattern[i + 2] != b']'
                        {
                            let hi = pattern[i + 2];
                            ranges.push((lo.min(hi), lo.max(hi)));
                            i += 3;
                        } else {
                            ranges.push((lo, lo));
                            i += 1;
                        }
                    }
                    i += 1; // the closing ']' (or the end: Redis treats it as closed)
                    Token::Class { negated, ranges }
                }
                other => Token::Byte(other),
            };
            tokens.push(t);
        }
        Glob(tokens)
    }

    fn one(t: &Token, b: u8) -> bool {
        match t {
            Token::Any => true,
            Token::Byte(x) => *x == b,
            Token::Class { negated, ranges } => {
                ranges.iter().any(|&(lo, hi)| (lo..=hi).contains(&b)) != *negated
            }
            Token::Star => false,
        }
    }

    /// Whether `s` matches: single-byte tokens advance together, and a mismatch after a `*`
    /// retries with that `*` taking one more byte (each (token, byte) pair at most once).
    pub fn matches(&self, s: &[u8]) -> bool {
        let p = &self.0;
        let (mut pi, mut si) = (0, 0);
        let mut star: Option<(usize, usize)> = None;
        while si < s.len() {
            if pi < p.len() && p[pi] == Token::Star {
                star = Some((pi, si));
                pi += 1;
            } else if pi < p.len() && Self::one(&p[pi], s[si]) {
                pi += 1;
                si += 1;
            } else if let Some((sp, ss)) = star {
                pi = sp + 1;
                si = ss + 1;
                star = Some((sp, ss + 1));
            } else {
                return false;
            }
        }
        p[pi..].iter().all(|t| *t == Token::Star)
    }

    /// The literal prefix, if the pattern is exactly `prefix*` (or `prefix` alone).
    pub fn literal_prefix(&self) -> Option<Vec<u8>> {
        let body = match self.0.split_last() {
            Some((Token::Star, body)) => body,
            _ => &self.0[..],
        };
        body.iter()
            .map(|t| match t {
                Token::Byte(b) => Some(*b),
                _ => None,
            })
            .collect()
    }
}

/// Runs `SCAN` with its arguments after the command name. The keys it gathers are charged to
/// `out`'s budget as they are (`Out::hold`); over it, the reply is refused.
pub fn scan(db: &Space<'_>, cursors: &Cursors, args: &[Vec<u8>], out: &mut impl Out) -> Reply {
    let Some(cursor) = args.first() else {
        return Reply::err("wrong number of arguments for 'scan' command");
    };
    let Some(cursor) = std::str::from_utf8(cursor)
        .ok()
        .and_then(|s| s.parse::<u64>().ok())
    else {
        return Reply::err("invalid cursor");
    };
    let mut glob = None;
    let mut count = 10u64;
    let mut only = Only::All;
    let mut opts = args[1..].chunks(2);
    for pair in &mut opts {
        let [name, value] = pair else {
            return Reply::err("syntax error");
        };
        match name.to_ascii_uppercase().as_slice() {
            b"MATCH" => {
                let stars = value.iter().filter(|&&b| b == b'*').count();
                if value.len() > MAX_PATTERN_BYTES || stars > MAX_PATTERN_STARS {
                    return Reply::err(format!(
                        "MATCH pattern of {} bytes with {stars} '*': at most \
                         {MAX_PATTERN_BYTES} bytes and {MAX_PATTERN_STARS} '*'",
                        value.len()
                    ));
                }
                glob = Some(Glob::new(value));
            }
            b"COUNT" => match std::str::from_utf8(value)
                .ok()
                .and_then(|s| s.parse::<i64>().ok())
            {
                Some(n) if n >= 1 => count = (n as u64).min(MAX_COUNT),
                Some(_) => return Reply::err("syntax error: COUNT must be at least 1"),
                None => return Reply::err("value is not an integer or out of range"),
            },
            b"TYPE" if value.eq_ignore_ascii_case(b"string") => only = Only::Strings,
            b"TYPE" if value.eq_ignore_ascii_case(TYPE_NAME.as_bytes()) => only = Only::Filters,
            b"TYPE" => only = Only::Nothing,
            _ => return Reply::err("syntax error"),
        }
    }
    let prefix = glob
        .as_ref()
        .and_then(Glob::literal_prefix)
        .unwrap_or_default();
    let start = if cursor == 0 {
        prefix.clone()
    } else {
        match cursors.get(cursor) {
            Some(k) => k,
            None => return Reply::err("invalid or expired SCAN cursor: start again from 0"),
        }
    };
    // From cursor 0 this is exactly `Db::scan_prefix(prefix)`; a resumed range still lies
    // inside the prefix, so the store's prefix filters apply to both.
    let end = prefix_end(&prefix).map_or(Bound::Unbounded, Bound::Excluded);
    let mut iter = match Merged::new(db, start, end) {
        Ok(it) => it,
        Err(reply) => return reply,
    };
    let mut keys = Vec::new();
    let mut next = None;
    let mut work = 0u64;
    for (examined, item) in (&mut iter).enumerate() {
        let (key, filter) = match item {
            Ok(found) => found,
            Err(e) => return e,
        };
        if examined as u64 == count || work > MATCH_WORK {
            next = Some(key);
            break;
        }
        if let Some(g) = &glob {
            work += (g.0.len().max(1) * key.len().max(1)) as u64;
        }
        let wanted = match only {
            Only::All => true,
            Only::Strings => !filter,
            Only::Filters => filter,
            Only::Nothing => false,
        };
        if wanted && glob.as_ref().is_none_or(|g| g.matches(&key)) {
            // Its encoding, and its place in the list.
            if !out.hold(key.len() + 16 + std::mem::size_of::<Reply>()) {
                return Reply::Null; // refused: the connection closes with the error
            }
            keys.push(Reply::Bulk(key));
        }
    }
    let cursor = next.map_or(0, |k| cursors.save(k));
    Reply::Array(vec![
        Reply::Bulk(cursor.to_string().into_bytes()),
        Reply::Array(keys),
    ])
}

/// `SCAN … TYPE`'s choice.
enum Only {
    All,
    Strings,
    /// Bloom filters (`TYPE MBbloom--`).
    Filters,
    /// A type no key here has.
    Nothing,
}

/// A database's keys in order, strings and filters (`bloom.rs`) merged: each key with
/// whether it names a filter. A key held by both is a string (the header under it is dead:
/// `rmw_view.rs`).
struct Merged {
    strings: std::iter::Peekable<StoreIter>,
    filters: std::iter::Peekable<StoreIter>,
}

impl Merged {
    /// The keys from `start` up to `end`.
    fn new(db: &Space<'_>, start: Vec<u8>, end: Bound<Vec<u8>>) -> Result<Merged, Reply> {
        let headers = |k: &[u8]| header_key(k);
        let fs = db.filters(false)?;
        let filters_end = match &end {
            Bound::Excluded(e) => Bound::Excluded(headers(e)),
            _ => Bound::Excluded(super::bloom::HEADERS_END.to_vec()),
        };
        Ok(Merged {
            strings: db.scan(start.clone(), end)?.peekable(),
            filters: fs.scan(headers(&start), filters_end)?.peekable(),
        })
    }
}

impl Iterator for Merged {
    type Item = Result<(Vec<u8>, bool), Reply>;

    fn next(&mut self) -> Option<Self::Item> {
        let fail = |e: lsm_bloom::Error| Some(Err(Reply::err(e.to_string())));
        // A header's key without its `h`.
        let name = |k: &[u8]| k.get(1..).unwrap_or_default().to_vec();
        let order = match (self.strings.peek(), self.filters.peek()) {
            (None, None) => return None,
            (Some(Err(_)), _) | (_, None) => std::cmp::Ordering::Less,
            (None, Some(_)) | (_, Some(Err(_))) => std::cmp::Ordering::Greater,
            (Some(Ok((s, _))), Some(Ok((f, _)))) => {
                s.as_slice().cmp(f.get(1..).unwrap_or_default())
            }
        };
        if order == std::cmp::Ordering::Equal {
            self.filters.next(); // a dead header
        }
        match order {
            std::cmp::Ordering::Greater => match self.filters.next()? {
                Ok((k, _)) => Some(Ok((name(&k), true))),
                Err(e) => fail(e),
            },
            _ => match self.strings.next()? {
                Ok((k, _)) => Some(Ok((k, false))),
                Err(e) => fail(e),
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::resp::Gathered;

    #[test]
    fn glob_follows_redis_syntax() {
        let m = |p: &str, s: &str| Glob::new(p.as_bytes()).matches(s.as_bytes());
        assert!(m("*", "") && m("*", "abc") && m("a*", "abc") && !m("a*", "bc"));
        assert!(m("h?llo", "hello") && !m("h?llo", "hllo"));
        assert!(m("h[ae]llo", "hallo") && !m("h[ae]llo", "hillo"));
        assert!(m("h[^e]llo", "hallo") && !m("h[^e]llo", "hello"));
        assert!(m("h[a-b]llo", "hbllo") && !m("h[a-b]llo", "hcllo"));
        assert!(m("a\\*b", "a*b") && !m("a\\*b", "axb"));
        assert!(m("*a*b*c", "xxaybzc") && !m("*a*b*c", "xxaybz"));
        // No exponential blow-up on many stars.
        let long = "a".repeat(5000);
        assert!(!Glob::new(format!("{}b", "*a".repeat(50)).as_bytes()).matches(long.as_bytes()));
    }

    /// A pattern over the limits is refused by name; a call whose matching work would run
    /// past `MATCH_WORK` stops early with a cursor, and the cursor resumes where it stopped.
    #[test]
    fn match_patterns_and_their_work_are_bounded() {
        let dir = tempfile::tempdir().unwrap();
        let store = lsm_bloom::Db::open(dir.path(), lsm_bloom::Options::default()).unwrap();
        let dbs = super::super::databases::Databases::open(store, 1).unwrap();
        let db = Space::Local(&dbs, dbs.slot_for_write(0).unwrap());
        let cursors = Cursors::new();
        let args = |c: &str, pattern: Vec<u8>| {
            vec![
                c.as_bytes().to_vec(),
                b"MATCH".to_vec(),
                pattern,
                b"COUNT".to_vec(),
                b"100000".to_vec(),
            ]
        };
        let err = |r: Reply| match r {
            Reply::Error(e) => e,
            other => panic!("expected an error, got {other:?}"),
        };
        let long = vec![b'a'; MAX_PATTERN_BYTES + 1];
        assert!(err(scan(
            &db,
            &cursors,
            &args("0", long),
            &mut Gathered::default()
        ))
        .contains("at most 1024 bytes"));
        let stars = b"*a".repeat(MAX_PATTERN_STARS + 1);
        assert!(err(scan(
            &db,
            &cursors,
            &args("0", stars),
            &mut Gathered::default()
        ))
        .contains("65 '*'"));
        // 400 keys of 8 KiB under a 1,000-token pattern (that every key matches, in time
        // linear in the key): charged 8.2e6 steps a key, so a call examines ~9 keys before
        // its work is spent, not 400.
        for i in 0..400u32 {
            let mut k = format!("k{i:04}").into_bytes();
            k.resize(8 << 10, b'x');
            let mut b = db.batch();
            db.put(&mut b, k, b"v".to_vec());
            db.write(b).unwrap();
        }
        let pattern = [b"k".as_slice(), &b"?".repeat(998), b"*"].concat();
        let (mut cursor, mut calls) = ("0".to_string(), 0);
        let mut found = 0;
        loop {
            let Reply::Array(parts) = scan(
                &db,
                &cursors,
                &args(&cursor, pattern.clone()),
                &mut Gathered::default(),
            ) else {
                panic!("SCAN failed");
            };
            let (Reply::Bulk(c), Reply::Array(keys)) = (&parts[0], &parts[1]) else {
                panic!("malformed SCAN reply");
            };
            calls += 1;
            found += keys.len();
            cursor = String::from_utf8(c.clone()).unwrap();
            if cursor == "0" {
                break;
            }
        }
        assert_eq!(found, 400, "every key matches once");
        assert!(
            calls >= 400 / 10,
            "{calls} calls: the work bound did not stop them"
        );
    }

    #[test]
    fn literal_prefixes() {
        let p = |s: &str| Glob::new(s.as_bytes()).literal_prefix();
        assert_eq!(p("user:*"), Some(b"user:".to_vec()));
        assert_eq!(p("*"), Some(Vec::new()));
        assert_eq!(p("user:?*"), None);
        assert_eq!(p("us\\*er*"), Some(b"us*er".to_vec()));
        assert_eq!(p("exact"), Some(b"exact".to_vec()));
    }
}
