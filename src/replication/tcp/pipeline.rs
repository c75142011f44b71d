//! Pipelined appends (openraft's `stream_append`): the leader writes each append as soon as
//! openraft produces it, without waiting for the answer to the one before, on a connection of
//! the stream's own; the follower hands each to `Raft::stream_append` as it arrives and
//! answers in order (FORMAT.md §8, request 6). So a commit-only append in flight never holds
//! back the next entries.
//!
//! The stream ends after an error, a conflict, a newer vote, or a request cut to fit a frame
//! (openraft opens the next stream from where the follower stands); its connection closes
//! with it, dropping answers to requests still in flight.

use std::collections::VecDeque;
use std::io;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use futures_util::{FutureExt, Stream, StreamExt};
use openraft::base::BoxStream;
use openraft::error::{NetworkError, RPCError};
use openraft::network::RPCOption;
use openraft::raft::{AppendEntriesRequest, AppendEntriesResponse, StreamAppendError};
use openraft::RaftNetworkV2;
use tokio::io::{AsyncReadExt, ReadHalf, WriteHalf};
use tokio::sync::Semaphore;

use super::{
    allowance, read_payload, read_request, write_frame, Closed, Conn, PeerAuth, Permit, Tally,
    TcpLink, TRANSFER,
};
use crate::replication::service::RaftService;
use crate::replication::wire::{self, Request, Response, FRAME_HEADER, MAX_FRAME};
use crate::replication::{LogId, NodeId, TypeConfig};

/// Appends a stream may have in flight on its connection.
pub(super) const PIPELINE: usize = 64;

/// One answer of a pipelined stream, as openraft takes it.
pub(super) type StreamItem =
    Result<openraft::raft::StreamAppendResult<TypeConfig>, RPCError<TypeConfig>>;

/// What the writer sent, for reading its answer: the request's previous log id, the last
/// log id it carried, whether it carried all its entries, and its frame's size (its answer
/// may take the frame's `allowance` beyond the stream's time-to-live).
struct Sent {
    prev: Option<LogId>,
    last: Option<LogId>,
    whole: bool,
    bytes: usize,
}

/// Aborts a task when dropped.
struct AbortOnDrop(tokio::task::JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// How long a stream may go without an append before it ends itself (under the server's
/// `IDLE`, so a quiet stream is not cut by the follower).
pub(super) const STREAM_IDLE: Duration = Duration::from_secs(60);

/// Opens a pipelined stream to `addr` and returns its answers; the stream ends (no error)
/// when `idle` passes with no append to send.
pub(super) async fn open<S>(
    auth: &PeerAuth,
    addr: String,
    target: NodeId,
    tally: Tally,
    input: S,
    ttl: Duration,
    idle: Duration,
) -> Result<impl Stream<Item = StreamItem> + Send + 'static, RPCError<TypeConfig>>
where
    S: Stream<Item = AppendEntriesRequest<TypeConfig>> + Send + Unpin + 'static,
{
    let conn = auth
        .connect(&addr, target)
        .await
        .map_err(|e| RPCError::from(super::CallError::Unreachable(e)))?;
    tally.connected();
    let (rd, mut wr) = tokio::io::split(conn);
    write_frame(&mut wr, &wire::frame(&wire::encode_stream()))
        .await
        .map_err(|e| RPCError::from(super::CallError::Network(e)))?;
    let (tx, rx) = tokio::sync::mpsc::channel::<Sent>(PIPELINE);
    let writer = tokio::spawn(write_appends(input, wr, tx, tally.clone()));
    let state = Reader {
        rd,
        rx,
        _writer: AbortOnDrop(writer),
        ttl,
        target,
        tally,
    };
    Ok(futures_util::stream::unfold(
        Some(state),
        move |state| async move {
            let mut state = state?;
            // Idle for `idle`: the stream ends without an error, before the follower's idle limit
            // would close its connection under the next append; openraft opens a new one.
            let sent = tokio::time::timeout(idle, state.rx.recv()).await.ok()??;
            let (item, go_on) = state.answer(sent).await;
            Some((item, go_on.then_some(state)))
        },
    ))
}

/// A link's `stream_append`: the first request is awaited, and a stream that ends after it
/// — openraft sends each heartbeat as one — is a plain call on the link's connection: a
/// connection opened per heartbeat measured read index rounds at less than half their rate.
/// Anything longer opens a pipelined stream.
pub(super) async fn stream<'s, S>(
    link: &'s mut TcpLink,
    mut input: S,
    option: RPCOption,
) -> Result<BoxStream<'s, StreamItem>, RPCError<TypeConfig>>
where
    S: Stream<Item = AppendEntriesRequest<TypeConfig>> + Send + Unpin + 'static,
{
    let Some(first) = input.next().await else {
        return Ok(Box::pin(futures_util::stream::empty()));
    };
    // Polled once more: a finished stream says so at once; a pending one keeps its place.
    let head = match input.next().now_or_never() {
        Some(None) => {
            let item = one_append(link, first, option).await;
            return Ok(Box::pin(futures_util::stream::once(std::future::ready(
                item,
            ))));
        }
        Some(Some(second)) => vec![first, second],
        None => vec![first],
    };
    let input = futures_util::stream::iter(head).chain(input);
    let answers = open(
        &link.auth,
        link.addr.clone(),
        link.target,
        link.tally.clone(),
        input,
        option.hard_ttl(),
        STREAM_IDLE,
    )
    .await?;
    Ok(Box::pin(answers))
}

/// One append as a plain call, its answer as a pipelined stream gives it.
async fn one_append(
    link: &mut TcpLink,
    req: AppendEntriesRequest<TypeConfig>,
    option: RPCOption,
) -> StreamItem {
    let prev = req.prev_log_id;
    let last = req.entries.last().map(|e| e.log_id).or(prev);
    Ok(
        match RaftNetworkV2::append_entries(link, req, option).await? {
            AppendEntriesResponse::Success => Ok(last),
            AppendEntriesResponse::PartialSuccess(id) => Ok(id),
            AppendEntriesResponse::Conflict => match prev {
                Some(prev) => Err(StreamAppendError::Conflict(prev)),
                None => {
                    return Err(RPCError::Network(
                        link.unexpected(Response::Append(AppendEntriesResponse::Conflict)),
                    ))
                }
            },
            AppendEntriesResponse::HigherVote(v) => Err(StreamAppendError::HigherVote(v)),
        },
    )
}

/// Writes each request as it comes; stops after a request cut to fit a frame (its answer
/// ends the stream), or when the connection or the reader goes.
async fn write_appends<S>(
    mut input: S,
    mut wr: WriteHalf<Conn>,
    tx: tokio::sync::mpsc::Sender<Sent>,
    tally: Tally,
) where
    S: Stream<Item = AppendEntriesRequest<TypeConfig>> + Send + Unpin + 'static,
{
    while let Some(req) = input.next().await {
        let (frame, n) = wire::append_frame(&req, MAX_FRAME);
        let last = match n.checked_sub(1) {
            Some(i) => req.entries.get(i).map(|e| e.log_id),
            None => req.prev_log_id,
        };
        let whole = n == req.entries.len();
        let sent = Sent {
            prev: req.prev_log_id,
            last,
            whole,
            bytes: frame.len(),
        };
        if tx.send(sent).await.is_err() || write_frame(&mut wr, &frame).await.is_err() {
            return;
        }
        tally.frame_out(frame.len());
        if !whole {
            return;
        }
    }
}

/// The reading side of a stream.
struct Reader {
    rd: ReadHalf<Conn>,
    rx: tokio::sync::mpsc::Receiver<Sent>,
    _writer: AbortOnDrop,
    ttl: Duration,
    target: NodeId,
    tally: Tally,
}

impl Reader {
    /// The answer to `sent`, and whether the stream goes on after it.
    async fn answer(&mut self, sent: Sent) -> (StreamItem, bool) {
        let target = self.target;
        let net = |m: String| {
            RPCError::Network(NetworkError::new(&io::Error::other(format!(
                "node {target}: {m}"
            ))))
        };
        let rd = &mut self.rd;
        let read = async {
            let mut header = [0u8; FRAME_HEADER];
            rd.read_exact(&mut header)
                .await
                .map_err(|e| e.to_string())?;
            let (body, _) = read_payload(rd, &header, None)
                .await
                .map_err(|_| "a malformed frame".to_string())?;
            wire::decode_response(&body).map(|r| (r, FRAME_HEADER + body.len()))
        };
        // The clock starts once the answer before is read; this request may still be on its
        // way (the writer does not wait), so its bytes are allowed for too.
        let ttl = self.ttl + allowance(sent.bytes);
        let response = match tokio::time::timeout(ttl, read).await {
            Ok(Ok((r, bytes))) => {
                self.tally.frame_in(bytes);
                r
            }
            Ok(Err(m)) => {
                self.tally.failed();
                return (Err(net(m)), false);
            }
            Err(_) => {
                self.tally.failed();
                return (Err(net(format!("no answer within {ttl:?}"))), false);
            }
        };
        let result = match response {
            Response::Append(AppendEntriesResponse::Success) => Ok(sent.last),
            Response::Append(AppendEntriesResponse::PartialSuccess(id)) => {
                return (Ok(Ok(id)), false);
            }
            Response::Append(AppendEntriesResponse::Conflict) => match sent.prev {
                Some(prev) => Err(StreamAppendError::Conflict(prev)),
                None => return (Err(net("a conflict at the log's start".into())), false),
            },
            Response::Append(AppendEntriesResponse::HigherVote(v)) => {
                Err(StreamAppendError::HigherVote(v))
            }
            Response::Failed(m) => return (Err(net(format!("failed the call: {m}"))), false),
            _ => return (Err(net("answered with the wrong message".into())), false),
        };
        let go_on = result.is_ok() && sent.whole;
        (Ok(result), go_on)
    }
}

/// Serves a connection turned into a pipelined stream. The node reads the appends itself:
/// its stream's input is the connection's read half, a frame decoded per item, so an append
/// reaches `Raft::stream_append` with no task or channel between (one wake-up less per
/// append on the follower's path). The answers are written here, in order. Anything but an
/// append closes the connection (counted as malformed).
pub(super) async fn serve(
    stream: Conn,
    node: &impl RaftService,
    tally: &Tally,
    budget: &Arc<Semaphore>,
) -> Closed {
    let (rd, mut wr) = tokio::io::split(stream);
    let bad = Arc::new(AtomicBool::new(false));
    let held = Arc::new(Mutex::new(VecDeque::new()));
    // Dropped when this returns: the input ends even while openraft's task still polls it.
    let (_stop, stop) = tokio::sync::oneshot::channel::<()>();
    let input = Input {
        rd,
        stop,
        budget: Arc::clone(budget),
        tally: tally.clone(),
        bad: Arc::clone(&bad),
        held: Arc::clone(&held),
    };
    let input = futures_util::stream::unfold(input, |mut input| async move {
        let request = input.next().await?;
        Some((request, input))
    });
    let mut answers = std::pin::pin!(node.stream_append(input));
    // Answers already owed are written before the connection closes: the input ending (the
    // leader closed its side) ends the answers after the last one.
    while let Some(answer) = answers.next().await {
        let response = match answer {
            Ok(Ok(_)) => Response::Append(AppendEntriesResponse::Success),
            Ok(Err(StreamAppendError::Conflict(_))) => {
                Response::Append(AppendEntriesResponse::Conflict)
            }
            Ok(Err(StreamAppendError::HigherVote(v))) => {
                Response::Append(AppendEntriesResponse::HigherVote(v))
            }
            Err(m) => Response::Failed(m),
        };
        let out = wire::frame(&wire::encode_response(&response));
        match tokio::time::timeout(TRANSFER, write_frame(&mut wr, &out)).await {
            Ok(Ok(())) => tally.frame_out(out.len()),
            _ => return Closed::Quietly,
        }
        // Answered: the oldest append's share of the read budget goes back.
        held.lock()
            .unwrap_or_else(PoisonError::into_inner)
            .pop_front();
    }
    if bad.load(Ordering::Relaxed) {
        Closed::Bad
    } else {
        Closed::Quietly
    }
}

/// The follower's side of a stream, as the node's input: one append per frame.
struct Input {
    rd: ReadHalf<Conn>,
    /// Resolves when `serve` returns.
    stop: tokio::sync::oneshot::Receiver<()>,
    budget: Arc<Semaphore>,
    tally: Tally,
    /// Set when the stream ended on something that is not an append.
    bad: Arc<AtomicBool>,
    /// The read budget's shares of the appends taken and not answered yet, oldest first:
    /// an append costs the follower a few copies of its frame until it is durable and
    /// answered, so its share is held that long (released by `serve` per answer written).
    held: Arc<Mutex<VecDeque<Permit>>>,
}

impl Input {
    /// The next append; `None` once the leader closes, goes idle, sends something else, or
    /// `serve` is gone. The frame's share of the read budget is held until the append is
    /// answered (`held`).
    async fn next(&mut self) -> Option<AppendEntriesRequest<TypeConfig>> {
        let (payload, permit) = tokio::select! {
            biased;
            _ = &mut self.stop => return None,
            read = read_request(&mut self.rd, &self.budget) => match read {
                Ok(p) => p,
                Err(c) => {
                    self.bad.store(c == Closed::Bad, Ordering::Relaxed);
                    return None;
                }
            },
        };
        let Ok(Request::Append(r)) = wire::decode_request(&payload) else {
            self.bad.store(true, Ordering::Relaxed);
            return None;
        };
        self.tally.frame_in(FRAME_HEADER + payload.len());
        self.held
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push_back(permit);
        Some(r)
    }
}

#[cfg(test)]
#[path = "pipeline_tests.rs"]
mod tests;
