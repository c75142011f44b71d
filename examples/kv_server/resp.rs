//! RESP, both directions: a resumable request parser and reply encoding for RESP2 and RESP3.
//!
//! Parsing: `Parser::feed(buf)` → `(consumed, Parsed)`. It takes whole arguments off the front
//! of `buf` as they complete and keeps them, so the caller can drop the consumed bytes and a
//! large request arriving in small reads is examined once, not re-parsed from its start on
//! every read (a bulk whose body is still arriving costs one header parse per read). Requests
//! are arrays of bulk strings, or inline commands (one line of space-separated words).
//!
//! Replies: `Reply` is encoded per connection protocol: RESP3 has its own null (`_`), map (`%`)
//! and verbatim string (`=`); RESP2 sends `$-1`, a flat array, and a bulk string in their place
//! (the RESP3 specification's own mapping). No supported command replies with a double.

/// The protocol a connection speaks (`HELLO` switches it).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Proto {
    Resp2,
    Resp3,
}

/// Limits applied while parsing, so a client cannot make the server allocate without bound.
#[derive(Clone, Copy)]
pub struct Limits {
    pub max_request: usize,
    pub max_bulk: usize,
    pub max_args: usize,
}

/// What a client that has not authenticated may send (when a password is required): at most
/// 10 arguments of at most 16 KiB each, as Redis allows since CVE-2021-32675, and 32 KiB in all
/// (arguments charged as `ARG_OVERHEAD` each too) — enough for `AUTH` and `HELLO … AUTH …
/// SETNAME …` with a 16 KiB password, far too little to pin memory with: 512 connections
/// holding the most they may hold before AUTH keep under 64 MiB (`kv_server_faults`).
pub const UNAUTHENTICATED: Limits = Limits {
    max_request: 32 << 10,
    max_bulk: 16 << 10,
    max_args: 10,
};

/// What an argument costs beyond its bytes: its `Vec` (24 bytes in the request's list) and a
/// heap block of at least 32 bytes (glibc's smallest, header included), rounded up. Counting
/// payload bytes only, 8 connections of a million 1-byte arguments pinned 250 MB while ~8 MB
/// was charged. Charged against `max_request` and reported by `held`, so the shared request
/// budget sees what a request really pins.
pub const ARG_OVERHEAD: usize = 64;

/// Why a request could not be parsed; the connection is closed after replying.
#[derive(Debug)]
pub struct ProtocolError(pub String);

/// What `feed` got to.
pub enum Parsed {
    /// A whole request (possibly empty: `*0`, or a blank inline line, which are ignored).
    Request(Vec<Vec<u8>>),
    /// More bytes are needed.
    Incomplete,
}

/// Longest header line (`*N` or `$N`) accepted.
const MAX_HEADER: usize = 64;
/// Longest inline command line accepted.
const MAX_INLINE: usize = 64 * 1024;

/// A request being parsed.
#[derive(Default)]
pub struct Parser {
    args: Vec<Vec<u8>>,
    /// Bulk strings still expected; `None` between requests.
    remaining: Option<usize>,
    /// Bytes of the arguments taken so far.
    held: usize,
}

fn line_end(buf: &[u8], from: usize, max: usize) -> Option<usize> {
    let window = &buf[from..buf.len().min(from + max + 2)];
    window
        .windows(2)
        .position(|w| w == b"\r\n")
        .map(|p| from + p)
}

fn int(s: &[u8]) -> Option<i64> {
    std::str::from_utf8(s).ok()?.parse().ok()
}

impl Parser {
    /// Bytes of the partly parsed request held by the parser.
    pub fn held(&self) -> usize {
        self.held
    }

    /// Parses from the front of `buf`; returns how many bytes were used up (the caller drops
    /// them) and whether a request is complete.
    pub fn feed(&mut self, buf: &[u8], limits: &Limits) -> Result<(usize, Parsed), ProtocolError> {
        let err = |s: String| Err(ProtocolError(s));
        let mut pos = 0;
        loop {
            let Some(remaining) = self.remaining else {
                if pos >= buf.len() {
                    return Ok((pos, Parsed::Incomplete));
                }
                if buf[pos] != b'*' {
                    let Some(nl) = buf[pos..]
                        .iter()
                        .take(MAX_INLINE + 1)
                        .position(|&b| b == b'\n')
                    else {
                        if buf.len() - pos > MAX_INLINE {
                            return err("too big inline request".into());
                        }
                        return Ok((pos, Parsed::Incomplete));
                    };
                    let line = &buf[pos..pos + nl];
                    let line = line.strip_suffix(b"\r").unwrap_or(line);
                    let args = line
                        .split(|b| b.is_ascii_whitespace())
                        .filter(|w| !w.is_empty())
                        .map(<[u8]>::to_vec)
                        .collect();
                    return Ok((pos + nl + 1, Parsed::Request(args)));
                }
                let Some(end) = line_end(buf, pos + 1, MAX_HEADER) else {
                    if buf.len() - pos > MAX_HEADER {
                        return err("invalid multibulk length".into());
                    }
                    return Ok((pos, Parsed::Incomplete));
                };
                match int(&buf[pos + 1..end]) {
                    Some(n) if (0..=limits.max_args as i64).contains(&n) => {
                        self.remaining = Some(n as usize);
                        self.args = Vec::with_capacity((n as usize).min(1024));
                    }
                    _ => return err("invalid multibulk length".into()),
                }
                pos = end + 2;
                continue;
            };
            if remaining == 0 {
                self.remaining = None;
                self.held = 0;
                return Ok((pos, Parsed::Request(std::mem::take(&mut self.args))));
            }
            if pos >= buf.len() {
                return Ok((pos, Parsed::Incomplete));
            }
            if buf[pos] != b'$' {
                return err(format!(
                    "expected '$', got '{}'",
                    char::from(buf[pos]).escape_default()
                ));
            }
            let Some(end) = line_end(buf, pos + 1, MAX_HEADER) else {
                if buf.len() - pos > MAX_HEADER {
                    return err("invalid bulk length".into());
                }
                return Ok((pos, Parsed::Incomplete));
            };
            let len = match int(&buf[pos + 1..end]) {
                Some(l) if (0..=limits.max_bulk as i64).contains(&l) => l as usize,
                _ => return err("invalid bulk length".into()),
            };
            if self.held + len + ARG_OVERHEAD > limits.max_request {
                return err("request too large".into());
            }
            let start = end + 2;
            if buf.len() < start + len + 2 {
                return Ok((pos, Parsed::Incomplete)); // the header is parsed again next time
            }
            if &buf[start + len..start + len + 2] != b"\r\n" {
                return err("bulk string not terminated by CRLF".into());
            }
            self.args.push(buf[start..start + len].to_vec());
            self.held += len + ARG_OVERHEAD;
            self.remaining = Some(remaining - 1);
            pos = start + len + 2;
        }
    }
}

/// A reply, encoded per protocol.
#[derive(Clone, Debug, PartialEq)]
pub enum Reply {
    /// `+...`
    Simple(String),
    /// `-CODE message` (the code included, e.g. "ERR ...", "NOAUTH ...").
    Error(String),
    Int(i64),
    /// RESP3 boolean (`#t`, `#f`); the integer 1 or 0 in RESP2.
    Bool(bool),
    Bulk(Vec<u8>),
    Null,
    /// A null array (`*-1` in RESP2): EXEC's answer when a watched key changed.
    NullArray,
    Array(Vec<Reply>),
    /// RESP3 map; a flat array of key, value, ... in RESP2.
    Map(Vec<(Reply, Reply)>),
    /// RESP3 verbatim text (`=len\r\ntxt:...`); a bulk string in RESP2.
    Verbatim(String),
}

impl Reply {
    pub fn ok() -> Reply {
        Reply::Simple("OK".into())
    }
    /// `-ERR msg`.
    pub fn err(msg: impl AsRef<str>) -> Reply {
        Reply::Error(format!("ERR {}", msg.as_ref()))
    }
    /// `-ERR wrong number of arguments for 'cmd' command`.
    pub fn wrong_args(cmd: &str) -> Reply {
        Reply::err(format!(
            "wrong number of arguments for '{}' command",
            cmd.to_ascii_lowercase()
        ))
    }
    pub fn bulk_str(s: &str) -> Reply {
        Reply::Bulk(s.as_bytes().to_vec())
    }

    /// The length of `encode`'s output for `proto`, known before anything is encoded (the
    /// output budget is charged before the bytes are held).
    pub fn encoded_len(&self, proto: Proto) -> usize {
        let digits = |n: usize| n.checked_ilog10().map_or(1, |d| d as usize + 1);
        // `$len\r\n` (or `*`, `%`, `=`) before a body.
        let head = |n: usize| 1 + digits(n) + 2;
        match self {
            Reply::Simple(s) | Reply::Error(s) => 1 + s.len() + 2,
            Reply::Int(i) => 1 + usize::from(*i < 0) + digits(i.unsigned_abs() as usize) + 2,
            Reply::Bool(_) => 4,
            Reply::Bulk(b) => head(b.len()) + b.len() + 2,
            Reply::Null | Reply::NullArray => match proto {
                Proto::Resp2 => 5,
                Proto::Resp3 => 3,
            },
            Reply::Array(items) => {
                head(items.len()) + items.iter().map(|r| r.encoded_len(proto)).sum::<usize>()
            }
            Reply::Map(pairs) => {
                let n = match proto {
                    Proto::Resp2 => 2 * pairs.len(),
                    Proto::Resp3 => pairs.len(),
                };
                let items: usize = pairs
                    .iter()
                    .map(|(k, v)| k.encoded_len(proto) + v.encoded_len(proto))
                    .sum();
                head(n) + items
            }
            Reply::Verbatim(text) => match proto {
                Proto::Resp2 => head(text.len()) + text.len() + 2,
                Proto::Resp3 => head(text.len() + 4) + 4 + text.len() + 2,
            },
        }
    }

    /// Appends the encoding of `self` for `proto`.
    pub fn encode(&self, proto: Proto, out: &mut Vec<u8>) {
        let line = |out: &mut Vec<u8>, prefix: u8, s: &str| {
            out.push(prefix);
            out.extend_from_slice(s.replace(['\r', '\n'], " ").as_bytes());
            out.extend_from_slice(b"\r\n");
        };
        match self {
            Reply::Simple(s) => line(out, b'+', s),
            Reply::Error(s) => line(out, b'-', s),
            Reply::Int(i) => line(out, b':', &i.to_string()),
            Reply::Bool(b) => out.extend_from_slice(match (proto, b) {
                (Proto::Resp2, true) => b":1\r\n",
                (Proto::Resp2, false) => b":0\r\n",
                (Proto::Resp3, true) => b"#t\r\n",
                (Proto::Resp3, false) => b"#f\r\n",
            }),
            Reply::Bulk(b) => {
                out.extend_from_slice(format!("${}\r\n", b.len()).as_bytes());
                out.extend_from_slice(b);
                out.extend_from_slice(b"\r\n");
            }
            Reply::Null => out.extend_from_slice(match proto {
                Proto::Resp2 => b"$-1\r\n",
                Proto::Resp3 => b"_\r\n",
            }),
            Reply::NullArray => out.extend_from_slice(match proto {
                Proto::Resp2 => b"*-1\r\n",
                Proto::Resp3 => b"_\r\n",
            }),
            Reply::Array(items) => {
                out.extend_from_slice(format!("*{}\r\n", items.len()).as_bytes());
                items.iter().for_each(|r| r.encode(proto, out));
            }
            Reply::Map(pairs) => {
                match proto {
                    Proto::Resp2 => {
                        out.extend_from_slice(format!("*{}\r\n", 2 * pairs.len()).as_bytes())
                    }
                    Proto::Resp3 => {
                        out.extend_from_slice(format!("%{}\r\n", pairs.len()).as_bytes())
                    }
                }
                for (k, v) in pairs {
                    k.encode(proto, out);
                    v.encode(proto, out);
                }
            }
            Reply::Verbatim(text) => match proto {
                Proto::Resp2 => Reply::Bulk(text.as_bytes().to_vec()).encode(proto, out),
                Proto::Resp3 => {
                    out.extend_from_slice(format!("={}\r\ntxt:", text.len() + 4).as_bytes());
                    out.extend_from_slice(text.as_bytes());
                    out.extend_from_slice(b"\r\n");
                }
            },
        }
    }
}

/// Where a command puts its reply: the connection's output (`conn::Output`), which charges
/// each reply to the shared output budget before it holds the bytes. A stored value is encoded
/// into it straight from where the store lends it (`Db::get_with`), so a value is never
/// copied before its size is charged.
pub trait Out {
    /// Appends `reply`. False when the output budget cannot hold it: nothing is appended, the
    /// output refuses everything after, and the connection is closed with an error.
    fn reply(&mut self, reply: &Reply, proto: Proto) -> bool;
    /// Appends `value` as a bulk string (as `reply`).
    fn bulk(&mut self, value: &[u8]) -> bool;
    /// Appends an array's header; its `len` items follow.
    fn array(&mut self, len: usize) -> bool;
    /// Charges `bytes` that a reply being made holds before it is appended (SCAN's keys,
    /// gathered before the reply's length is known), as `reply` would: false when the output
    /// budget cannot hold them. The charge lasts until the reply is appended.
    fn hold(&mut self, bytes: usize) -> bool;
    /// Where the output ends now, for `undo`.
    fn mark(&self) -> usize;
    /// Takes back what was appended since `mark`, which must be from the same request (a reply
    /// begun and then replaced by an error; nothing is written while a request runs but
    /// through `gathered`).
    fn undo(&mut self, mark: usize);
    /// Writes what is gathered if it has reached the size at which output is written: between
    /// the values of a long reply (MGET), so it is never held whole.
    fn gathered(&mut self) -> std::io::Result<()>;
}

/// An output without a budget, for unit tests of commands: gathers everything.
#[cfg(test)]
#[derive(Default)]
pub struct Gathered(pub Vec<u8>);

#[cfg(test)]
impl Out for Gathered {
    fn reply(&mut self, reply: &Reply, proto: Proto) -> bool {
        reply.encode(proto, &mut self.0);
        true
    }
    fn bulk(&mut self, value: &[u8]) -> bool {
        Reply::Bulk(value.to_vec()).encode(Proto::Resp2, &mut self.0);
        true
    }
    fn array(&mut self, len: usize) -> bool {
        self.0.extend_from_slice(format!("*{len}\r\n").as_bytes());
        true
    }
    fn hold(&mut self, _bytes: usize) -> bool {
        true
    }
    fn mark(&self) -> usize {
        self.0.len()
    }
    fn undo(&mut self, mark: usize) {
        self.0.truncate(mark);
    }
    fn gathered(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn encoded_len_is_the_length_of_the_encoding() {
        let replies = [
            Reply::ok(),
            Reply::err("no"),
            Reply::Int(0),
            Reply::Int(-1),
            Reply::Int(9),
            Reply::Int(10),
            Reply::Int(i64::MIN),
            Reply::Int(i64::MAX),
            Reply::Bulk(Vec::new()),
            Reply::Bulk(vec![7; 9]),
            Reply::Bulk(vec![7; 10]),
            Reply::Bulk(vec![7; 100_000]),
            Reply::Null,
            Reply::Array(Vec::new()),
            Reply::Array(vec![
                Reply::Null,
                Reply::Bulk(b"x".to_vec()),
                Reply::Int(12),
            ]),
            Reply::Map(vec![(Reply::bulk_str("a"), Reply::Int(3)); 11]),
            Reply::Verbatim("text\r\nmore".into()),
            Reply::Simple("line\nbreak".into()),
        ];
        for proto in [Proto::Resp2, Proto::Resp3] {
            for r in &replies {
                let mut out = Vec::new();
                r.encode(proto, &mut out);
                assert_eq!(r.encoded_len(proto), out.len(), "{r:?} in {proto:?}");
            }
        }
    }

    const L: Limits = Limits {
        max_request: 1 << 20,
        max_bulk: 1 << 16,
        max_args: 1000,
    };

    fn parse_all(buf: &[u8]) -> Result<Vec<Vec<Vec<u8>>>, ProtocolError> {
        let mut p = Parser::default();
        let mut pos = 0;
        let mut out = Vec::new();
        loop {
            let (used, parsed) = p.feed(&buf[pos..], &L)?;
            pos += used;
            match parsed {
                Parsed::Request(r) => out.push(r),
                Parsed::Incomplete => return Ok(out),
            }
        }
    }

    #[test]
    fn parses_pipelines_partial_input_and_inline_commands() {
        let req = b"*2\r\n$3\r\nGET\r\n$1\r\nk\r\n*1\r\n$4\r\nPING\r\n";
        let all = parse_all(req).unwrap();
        assert_eq!(
            all,
            vec![vec![b"GET".to_vec(), b"k".to_vec()], vec![b"PING".to_vec()]]
        );
        // Fed one byte at a time, with consumed bytes dropped as the server does.
        let mut p = Parser::default();
        let mut buf = Vec::new();
        let mut got = Vec::new();
        for &b in req.iter() {
            buf.push(b);
            loop {
                let (used, parsed) = p.feed(&buf, &L).unwrap();
                buf.drain(..used);
                match parsed {
                    Parsed::Request(r) => got.push(r),
                    Parsed::Incomplete => break,
                }
            }
        }
        assert_eq!(got, all);
        assert_eq!(parse_all(b"set a  b\r\n").unwrap()[0].len(), 3);
    }

    #[test]
    fn a_large_request_in_small_reads_is_not_reparsed() {
        // 20,000 arguments arriving 7 bytes at a time: the parser keeps what it took.
        let mut req = b"*20000\r\n".to_vec();
        for i in 0..20_000 {
            let a = format!("{i}");
            req.extend_from_slice(format!("${}\r\n{a}\r\n", a.len()).as_bytes());
        }
        let limits = Limits {
            max_args: 100_000,
            // Each argument is charged `ARG_OVERHEAD` besides its bytes.
            max_request: 20_000 * (ARG_OVERHEAD + 5),
            ..L
        };
        let mut p = Parser::default();
        let mut buf = Vec::new();
        let mut examined = 0usize;
        let mut done = None;
        for chunk in req.chunks(7) {
            buf.extend_from_slice(chunk);
            examined += buf.len(); // what one feed may look at
            let (used, parsed) = p.feed(&buf, &limits).unwrap();
            buf.drain(..used);
            if let Parsed::Request(r) = parsed {
                done = Some(r);
            }
        }
        assert_eq!(done.unwrap().len(), 20_000);
        // Linear: each byte is looked at a bounded number of times (quadratic would be ~10^9).
        assert!(
            examined < 4 * req.len(),
            "{examined} bytes examined for {}",
            req.len()
        );
    }

    /// Many tiny arguments pin far more than their bytes: each is charged its allocation.
    #[test]
    fn each_argument_is_charged_its_allocation() {
        let mut req = b"*1000\r\n".to_vec();
        req.extend_from_slice(&b"$1\r\nx\r\n".repeat(1000));
        let limits = Limits {
            max_request: 32 << 10,
            ..L
        };
        let e = Parser::default()
            .feed(&req, &limits)
            .err()
            .expect("refused");
        assert!(e.0.contains("request too large"), "{e:?}");
        // 1,000 bytes of payload fit easily when only payload was counted; a tenth of the
        // arguments fit with their allocations.
        let mut few = b"*100\r\n".to_vec();
        few.extend_from_slice(&b"$1\r\nx\r\n".repeat(100));
        assert!(Parser::default().feed(&few, &limits).is_ok());
    }

    #[test]
    fn rejects_oversized_and_malformed_requests() {
        assert!(parse_all(b"*99999999\r\n").is_err());
        assert!(parse_all(b"*1\r\n$99999999\r\n").is_err());
        assert!(parse_all(b"*1\r\n$-5\r\n").is_err());
        assert!(parse_all(b"*1\r\n:3\r\n").is_err());
        assert!(parse_all(b"*1\r\n$1\r\nab\r\n").is_err());
        assert!(parse_all(b"*x\r\n").is_err());
        assert!(parse_all(&vec![b'a'; 70 * 1024]).is_err());
    }

    #[test]
    fn replies_per_protocol() {
        let enc = |r: &Reply, p| {
            let mut out = Vec::new();
            r.encode(p, &mut out);
            String::from_utf8(out).unwrap()
        };
        assert_eq!(enc(&Reply::Null, Proto::Resp2), "$-1\r\n");
        assert_eq!(enc(&Reply::Null, Proto::Resp3), "_\r\n");
        let m = Reply::Map(vec![(Reply::bulk_str("a"), Reply::Int(1))]);
        assert_eq!(enc(&m, Proto::Resp2), "*2\r\n$1\r\na\r\n:1\r\n");
        assert_eq!(enc(&m, Proto::Resp3), "%1\r\n$1\r\na\r\n:1\r\n");
        assert_eq!(
            enc(&Reply::Verbatim("hi".into()), Proto::Resp3),
            "=6\r\ntxt:hi\r\n"
        );
        assert_eq!(enc(&Reply::err("a\r\nb"), Proto::Resp2), "-ERR a  b\r\n");
    }
}
