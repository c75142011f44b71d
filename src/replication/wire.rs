//! The Raft RPCs as bytes (FORMAT.md §8): framing, and each request and response of
//! openraft's `RaftNetwork` in this crate's own encoding (§7.4's pieces).
//!
//! A frame is a u32 payload length, a CRC-32 of the payload, the payload; the payload is a
//! message tag and its body. Decoding trusts nothing: lengths and counts are checked against
//! the bytes present, tags against their values, trailing bytes refused; a failure is an
//! error naming what was wrong, and the connection that sent it is closed by the caller.

use openraft::raft::{AppendEntriesRequest, AppendEntriesResponse, VoteRequest, VoteResponse};

use super::codec::{self, DecodeResult};
use super::{snapshot, LogId, NodeId, TypeConfig, Vote};
use crate::coding::Cursor;

/// Largest frame payload accepted (an append carrying one largest request fits).
pub const MAX_FRAME: usize = 256 << 20;
/// Bytes before a frame's payload: length and CRC.
pub const FRAME_HEADER: usize = 8;

const APPEND: u8 = 1;
const VOTE: u8 = 2;
const SNAPSHOT: u8 = 3;
const FORWARD: u8 = 4;
const READ_INDEX: u8 = 5;
const STREAM: u8 = 6;
const FORWARD_OK: u8 = 0x84;
const READ_INDEX_OK: u8 = 0x85;
const APPEND_OK: u8 = 0x81;
const VOTE_OK: u8 = 0x82;
const SNAPSHOT_OK: u8 = 0x83;
const ERROR: u8 = 0xff;

/// Error codes of an `ERROR` response.
const ERR_SNAPSHOT_MISMATCH: u8 = 1;
const ERR_OTHER: u8 = 2;
const ERR_NOT_LEADER: u8 = 3;

/// One chunk of a snapshot's pack, as the leader streams it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SnapshotChunk {
    /// The sender's vote.
    pub vote: Vote,
    /// The snapshot's meta (openraft's, and an id naming this stream).
    pub meta: snapshot::Meta,
    /// Where in the pack this chunk starts.
    pub offset: u64,
    /// The chunk's bytes.
    pub data: Vec<u8>,
    /// Whether this is the pack's last chunk.
    pub done: bool,
}

/// A position in a snapshot stream: the snapshot's id and an offset in its pack.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Segment {
    /// The snapshot's id.
    pub id: String,
    /// The offset.
    pub offset: u64,
}

/// A request, as the server receives it.
pub enum Request {
    /// `append_entries`.
    Append(AppendEntriesRequest<TypeConfig>),
    /// `vote`.
    Vote(VoteRequest<TypeConfig>),
    /// One chunk of a snapshot.
    Snapshot(SnapshotChunk),
    /// A client's write, forwarded by a follower to the leader.
    Forward(super::Request),
    /// A follower asking the leader for a read index (a linearizable read's position).
    ReadIndex,
    /// The rest of this connection is a pipelined stream of appends (`tcp/pipeline.rs`).
    Stream,
}

/// A response, as the client receives it.
pub enum Response {
    /// To an append.
    Append(AppendEntriesResponse<TypeConfig>),
    /// To a vote.
    Vote(VoteResponse<TypeConfig>),
    /// To a snapshot chunk: the receiver's vote.
    Snapshot(Vote),
    /// The snapshot chunk did not continue the stream the receiver has.
    SnapshotMismatch {
        /// Where the receiver's stream stands.
        expect: Segment,
        /// Where the chunk began.
        got: Segment,
    },
    /// A forwarded write was applied: its calls' answers (`Response::answers`).
    Forwarded(Vec<Option<Vec<u8>>>),
    /// The leader's read index: the follower may read once it has applied this far.
    ReadIndex(Option<LogId>),
    /// The remote node is not the leader; the leader it knows, if any.
    NotLeader(Option<(NodeId, String)>),
    /// The remote node failed the call (shutting down, a storage error); the message says why.
    Failed(String),
}

/// The largest snapshot chunk a node takes (`Config::snapshot_max_chunk_size` must not be
/// larger; it is 1 MiB by default).
pub const MAX_SNAPSHOT_CHUNK: usize = 64 << 20;

/// The largest payload a request with tag `tag` may have: a frame announcing more is refused
/// from its first bytes, before the rest is read, so a peer cannot make the server buffer a
/// `MAX_FRAME` frame for a message that is never that large. Appends may fill a frame.
pub fn max_request(tag: u8) -> usize {
    match tag {
        APPEND => MAX_FRAME,
        // Tag, a vote, an optional log id.
        VOTE => 1 + 17 + 25,
        // Tag, vote, meta (at most 1 MiB, §7.3), offset, data, done.
        SNAPSHOT => 1 + 17 + 4 + (1 << 20) + 8 + 4 + MAX_SNAPSHOT_CHUNK + 1,
        // Tag and a request with parts: two counts and `Request::size` bytes.
        FORWARD => 1 + 4 + 4 + super::MAX_REQUEST_SIZE,
        // Tag only; an unknown tag is refused when decoded.
        _ => 1,
    }
}

/// Wraps `payload` in a frame.
pub fn frame(payload: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(FRAME_HEADER + payload.len());
    out.extend_from_slice(
        &u32::try_from(payload.len())
            .unwrap_or(u32::MAX)
            .to_le_bytes(),
    );
    out.extend_from_slice(&crc32fast::hash(payload).to_le_bytes());
    out.extend_from_slice(payload);
    out
}

/// A frame header's payload length and CRC, the length checked against `MAX_FRAME`.
pub fn frame_header(h: &[u8; FRAME_HEADER]) -> Result<(usize, u32), String> {
    let len = u32::from_le_bytes([h[0], h[1], h[2], h[3]]) as usize;
    let crc = u32::from_le_bytes([h[4], h[5], h[6], h[7]]);
    if len > MAX_FRAME {
        return Err(format!("frame of {len} bytes (at most {MAX_FRAME})"));
    }
    Ok((len, crc))
}

fn put_vote(out: &mut Vec<u8>, v: &Vote) {
    out.extend_from_slice(&codec::encode_vote(v));
}

fn get_vote(c: &mut Cursor<'_>) -> DecodeResult<Vote> {
    codec::decode_vote(c.bytes(17)?)
}

fn get_bool(c: &mut Cursor<'_>, what: &str) -> DecodeResult<bool> {
    match c.u8()? {
        0 => Ok(false),
        1 => Ok(true),
        b => Err(format!("{what} byte {b} (not 0 or 1)")),
    }
}

fn get_str(c: &mut Cursor<'_>, what: &str) -> DecodeResult<String> {
    String::from_utf8(c.len_prefixed()?.to_vec()).map_err(|_| format!("{what} is not UTF-8"))
}

/// An append's payload, sending at most `max_bytes` of entries (at least one). Returns the
/// payload and how many entries it holds.
#[cfg(test)]
pub fn encode_append(r: &AppendEntriesRequest<TypeConfig>, max_bytes: usize) -> (Vec<u8>, usize) {
    let (frame, sent) = append_frame(r, max_bytes);
    (frame[FRAME_HEADER..].to_vec(), sent)
}

/// An append's whole frame, entries encoded straight into it (one buffer, sized up front:
/// an entry may hold 63 MiB, and a copy per step — entry, payload, frame, and the payload's
/// doublings as it grew — cost the leader about 4× each large entry per follower), and how
/// many entries it holds: those that fit a payload of `max_bytes`, at least one.
pub fn append_frame(r: &AppendEntriesRequest<TypeConfig>, max_bytes: usize) -> (Vec<u8>, usize) {
    let entries = r
        .entries
        .iter()
        .fold(0usize, |n, e| n.saturating_add(4 + codec::size_hint(e)));
    let mut out = Vec::with_capacity(FRAME_HEADER + 64 + entries.min(max_bytes));
    out.resize(FRAME_HEADER, 0);
    out.push(APPEND);
    put_vote(&mut out, &r.vote);
    codec::put_opt_log_id(&mut out, r.prev_log_id.as_ref());
    codec::put_opt_log_id(&mut out, r.leader_commit.as_ref());
    let count_at = out.len();
    codec::put_u32(&mut out, 0);
    let mut sent = 0;
    for e in &r.entries {
        let start = out.len();
        codec::put_u32(&mut out, 0);
        codec::put_entry(&mut out, e);
        let len = out.len() - start - 4;
        if sent > 0 && out.len() - FRAME_HEADER > max_bytes {
            out.truncate(start);
            break;
        }
        out[start..start + 4]
            .copy_from_slice(&u32::try_from(len).unwrap_or(u32::MAX).to_le_bytes());
        sent += 1;
    }
    out[count_at..count_at + 4]
        .copy_from_slice(&u32::try_from(sent).unwrap_or(u32::MAX).to_le_bytes());
    let n = u32::try_from(out.len() - FRAME_HEADER).unwrap_or(u32::MAX);
    let crc = crc32fast::hash(&out[FRAME_HEADER..]);
    out[..4].copy_from_slice(&n.to_le_bytes());
    out[4..FRAME_HEADER].copy_from_slice(&crc.to_le_bytes());
    (out, sent)
}

/// A vote request's payload.
pub fn encode_vote_request(r: &VoteRequest<TypeConfig>) -> Vec<u8> {
    let mut out = vec![VOTE];
    put_vote(&mut out, &r.vote);
    codec::put_opt_log_id(&mut out, r.last_log_id.as_ref());
    out
}

/// A snapshot chunk's payload.
pub fn encode_snapshot(r: &SnapshotChunk) -> Vec<u8> {
    let mut out = vec![SNAPSHOT];
    put_vote(&mut out, &r.vote);
    let meta = snapshot::encode_meta(&r.meta);
    codec::put_u32(&mut out, meta.len());
    out.extend_from_slice(&meta);
    out.extend_from_slice(&r.offset.to_le_bytes());
    codec::put_u32(&mut out, r.data.len());
    out.extend_from_slice(&r.data);
    out.push(u8::from(r.done));
    out
}

/// A forwarded write's payload (`forward_frame` makes it framed, without the copy).
#[cfg(test)]
pub fn encode_forward(r: &super::Request) -> Vec<u8> {
    let mut out = vec![FORWARD];
    codec::put_parted(&mut out, r);
    out
}

/// A forwarded write's whole frame, encoded in one buffer (a forwarded value may be 63 MiB:
/// no copy of it is made between the payload and the frame).
pub fn forward_frame(r: &super::Request) -> Vec<u8> {
    let mut out = Vec::with_capacity(FRAME_HEADER + 9 + r.size());
    out.resize(FRAME_HEADER, 0);
    out.push(FORWARD);
    codec::put_parted(&mut out, r);
    let n = u32::try_from(out.len() - FRAME_HEADER).unwrap_or(u32::MAX);
    let crc = crc32fast::hash(&out[FRAME_HEADER..]);
    out[..4].copy_from_slice(&n.to_le_bytes());
    out[4..FRAME_HEADER].copy_from_slice(&crc.to_le_bytes());
    out
}

/// The payload that turns a connection into a pipelined stream of appends.
pub fn encode_stream() -> Vec<u8> {
    vec![STREAM]
}

/// A read index request's payload.
pub fn encode_read_index() -> Vec<u8> {
    vec![READ_INDEX]
}

/// Decodes a request payload.
pub fn decode_request(b: &[u8]) -> DecodeResult<Request> {
    let mut c = Cursor::new(b);
    let req = match c.u8()? {
        APPEND => {
            let vote = get_vote(&mut c)?;
            let prev_log_id = codec::get_opt_log_id(&mut c)?;
            let leader_commit = codec::get_opt_log_id(&mut c)?;
            let n = c.u32()?;
            let mut entries = Vec::new();
            for i in 0..n {
                let e = codec::decode_entry(c.len_prefixed()?)
                    .map_err(|m| format!("entry {i}: {m}"))?;
                entries.push(e);
            }
            Request::Append(AppendEntriesRequest {
                vote,
                prev_log_id,
                entries,
                leader_commit,
            })
        }
        VOTE => Request::Vote(VoteRequest {
            vote: get_vote(&mut c)?,
            last_log_id: codec::get_opt_log_id(&mut c)?,
            // Leadership transfer is not used by this crate, so never sent.
            leadership_transfer: false,
        }),
        SNAPSHOT => {
            let vote = get_vote(&mut c)?;
            let meta = snapshot::decode_meta(c.len_prefixed()?)?;
            let offset = c.u64()?;
            let data = c.len_prefixed()?.to_vec();
            let done = get_bool(&mut c, "done")?;
            Request::Snapshot(SnapshotChunk {
                vote,
                meta,
                offset,
                data,
                done,
            })
        }
        FORWARD => Request::Forward(codec::get_parted(&mut c)?),
        READ_INDEX => Request::ReadIndex,
        STREAM => Request::Stream,
        t => return Err(format!("request tag {t} (not 1 to 6)")),
    };
    finish(&c)?;
    Ok(req)
}

/// A response's payload.
pub fn encode_response(r: &Response) -> Vec<u8> {
    let mut out = Vec::new();
    match r {
        Response::Append(a) => {
            out.push(APPEND_OK);
            match a {
                AppendEntriesResponse::Success => out.push(0),
                AppendEntriesResponse::PartialSuccess(id) => {
                    out.push(1);
                    codec::put_opt_log_id(&mut out, id.as_ref());
                }
                AppendEntriesResponse::Conflict => out.push(2),
                AppendEntriesResponse::HigherVote(v) => {
                    out.push(3);
                    put_vote(&mut out, v);
                }
            }
        }
        Response::Vote(v) => {
            out.push(VOTE_OK);
            put_vote(&mut out, &v.vote);
            out.push(u8::from(v.vote_granted));
            codec::put_opt_log_id(&mut out, v.last_log_id.as_ref());
        }
        Response::Snapshot(vote) => {
            out.push(SNAPSHOT_OK);
            put_vote(&mut out, vote);
        }
        Response::SnapshotMismatch { expect, got } => {
            out.push(ERROR);
            out.push(ERR_SNAPSHOT_MISMATCH);
            for seg in [expect, got] {
                codec::put_bytes(&mut out, seg.id.as_bytes());
                out.extend_from_slice(&seg.offset.to_le_bytes());
            }
        }
        Response::Forwarded(answers) => {
            out.push(FORWARD_OK);
            codec::put_u32(&mut out, answers.len());
            for a in answers {
                match a {
                    None => out.push(0),
                    Some(a) => {
                        out.push(1);
                        codec::put_bytes(&mut out, a);
                    }
                }
            }
        }
        Response::ReadIndex(id) => {
            out.push(READ_INDEX_OK);
            codec::put_opt_log_id(&mut out, id.as_ref());
        }
        Response::NotLeader(leader) => {
            out.push(ERROR);
            out.push(ERR_NOT_LEADER);
            match leader {
                None => out.push(0),
                Some((id, addr)) => {
                    out.push(1);
                    out.extend_from_slice(&id.to_le_bytes());
                    codec::put_bytes(&mut out, addr.as_bytes());
                }
            }
        }
        Response::Failed(msg) => {
            out.push(ERROR);
            out.push(ERR_OTHER);
            codec::put_bytes(&mut out, msg.as_bytes());
        }
    }
    out
}

/// Decodes a response payload.
pub fn decode_response(b: &[u8]) -> DecodeResult<Response> {
    let mut c = Cursor::new(b);
    let r = match c.u8()? {
        APPEND_OK => Response::Append(match c.u8()? {
            0 => AppendEntriesResponse::Success,
            1 => AppendEntriesResponse::PartialSuccess(codec::get_opt_log_id(&mut c)?),
            2 => AppendEntriesResponse::Conflict,
            3 => AppendEntriesResponse::HigherVote(get_vote(&mut c)?),
            k => return Err(format!("append response kind {k} (not 0 to 3)")),
        }),
        VOTE_OK => Response::Vote(VoteResponse {
            vote: get_vote(&mut c)?,
            vote_granted: get_bool(&mut c, "vote granted")?,
            last_log_id: codec::get_opt_log_id(&mut c)?,
        }),
        SNAPSHOT_OK => Response::Snapshot(get_vote(&mut c)?),
        FORWARD_OK => {
            let n = c.u32()?;
            // No capacity from the count: each answer takes at least a byte to decode.
            let mut answers = Vec::new();
            for _ in 0..n {
                answers.push(match c.u8()? {
                    0 => None,
                    1 => Some(c.len_prefixed()?.to_vec()),
                    k => return Err(format!("answer presence byte {k} (not 0 or 1)")),
                });
            }
            Response::Forwarded(answers)
        }
        READ_INDEX_OK => Response::ReadIndex(codec::get_opt_log_id(&mut c)?),
        ERROR => match c.u8()? {
            ERR_SNAPSHOT_MISMATCH => {
                let mut seg = || -> DecodeResult<Segment> {
                    let id = get_str(&mut c, "snapshot id")?;
                    Ok(Segment {
                        id,
                        offset: c.u64()?,
                    })
                };
                let expect = seg()?;
                let got = seg()?;
                Response::SnapshotMismatch { expect, got }
            }
            ERR_OTHER => Response::Failed(get_str(&mut c, "error message")?),
            ERR_NOT_LEADER => Response::NotLeader(if get_bool(&mut c, "leader known")? {
                let id = c.u64()?;
                Some((id, get_str(&mut c, "leader address")?))
            } else {
                None
            }),
            k => return Err(format!("error code {k} (not 1 to 3)")),
        },
        t => return Err(format!("response tag {t:#x}")),
    };
    finish(&c)?;
    Ok(r)
}

fn finish(c: &Cursor<'_>) -> DecodeResult<()> {
    if c.is_empty() {
        Ok(())
    } else {
        Err("trailing bytes after the message".into())
    }
}

#[cfg(test)]
#[path = "wire_tests.rs"]
mod tests;
