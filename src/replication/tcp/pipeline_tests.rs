//! Unit tests of `pipeline.rs`.

use super::super::hello::{self, Side};
use super::*;
use crate::replication::receive::ChunkResult;
use crate::replication::service::RpcAnswer;
use crate::replication::{
    CommittedLeaderId, Entry, Error, LogId, Op, Request as Write, Result, Vote,
};
use openraft::raft::{AppendEntriesResponse, StreamAppendResult, VoteRequest, VoteResponse};
use openraft::vote::RaftLeaderId;

/// A node that takes pipelined appends and answers each only once `gate` lets it.
#[derive(Clone)]
struct Gated {
    gate: Arc<Semaphore>,
    taken: Arc<std::sync::atomic::AtomicUsize>,
}

impl RaftService for Gated {
    async fn append_entries(
        &self,
        _: AppendEntriesRequest<TypeConfig>,
    ) -> RpcAnswer<AppendEntriesResponse<TypeConfig>> {
        Err("not here".into())
    }
    fn stream_append<S>(
        &self,
        input: S,
    ) -> impl Stream<Item = RpcAnswer<StreamAppendResult<TypeConfig>>> + Send + 'static
    where
        S: Stream<Item = AppendEntriesRequest<TypeConfig>> + Send + 'static,
    {
        let (gate, taken) = (Arc::clone(&self.gate), Arc::clone(&self.taken));
        // Takes appends as they come (as openraft does), answers them in order.
        input
            .map(move |req| {
                taken.fetch_add(1, Ordering::SeqCst);
                let gate = Arc::clone(&gate);
                async move {
                    if let Ok(p) = gate.acquire().await {
                        p.forget();
                    }
                    Ok(Ok(req.entries.last().map(|e| e.log_id)))
                }
            })
            .buffered(64)
    }
    async fn vote(&self, _: VoteRequest<TypeConfig>) -> RpcAnswer<VoteResponse<TypeConfig>> {
        Err("not here".into())
    }
    async fn install_snapshot_chunk(&self, _: crate::replication::SnapshotChunk) -> ChunkResult {
        Err("not here".into())
    }
    async fn write(&self, _: Write) -> Result<Vec<Option<Vec<u8>>>> {
        Err(Error::Raft("not here".into()))
    }
    async fn read_index(&self) -> Result<Option<LogId>> {
        Err(Error::Raft("not here".into()))
    }
}

/// An append of one entry holding `n` bytes.
fn append(index: u64, n: usize) -> AppendEntriesRequest<TypeConfig> {
    let mut vote = Vote::new(1, 1);
    vote.committed = true;
    AppendEntriesRequest {
        vote,
        prev_log_id: None,
        leader_commit: None,
        entries: vec![Entry {
            log_id: LogId::new(CommittedLeaderId::new(1, 1), index),
            payload: openraft::EntryPayload::Normal(Write::new(vec![Op::Put {
                key: b"k".to_vec(),
                value: vec![5; n],
            }])),
        }],
    }
}

/// A pipelined append keeps its frame's share of the read budget until it is answered
/// (it costs the follower copies of itself until then); it used to give it back as soon
/// as the node took it, so appends in flight were not bounded by the budget.
#[tokio::test]
async fn pipelined_appends_hold_the_read_budget_until_answered() {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let mut leader = tokio::net::TcpStream::connect(listener.local_addr().unwrap())
        .await
        .unwrap();
    let (follower, _) = listener.accept().await.unwrap();
    let budget = Arc::new(Semaphore::new(4 << 20));
    let node = Gated {
        gate: Arc::new(Semaphore::new(0)),
        taken: Arc::default(),
    };
    let tally = Arc::<crate::replication::tcp::TransportStats>::default().tally(1);
    let served = {
        let (node, budget) = (node.clone(), Arc::clone(&budget));
        tokio::spawn(async move { serve(Conn::Plain(follower), &node, &tally, &budget).await })
    };
    for i in 1..=3 {
        let (frame, _) = wire::append_frame(&append(i, 300 << 10), MAX_FRAME);
        tokio::io::AsyncWriteExt::write_all(&mut leader, &frame)
            .await
            .unwrap();
    }
    while node.taken.load(Ordering::SeqCst) < 3 {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let held = (4 << 20) - budget.available_permits();
    assert!(
        held >= 3 * (300 << 10),
        "only {held} bytes held for 3 unanswered appends"
    );
    // Answered: each share goes back.
    node.gate.add_permits(3);
    for _ in 0..3 {
        let mut header = [0u8; FRAME_HEADER];
        leader.read_exact(&mut header).await.unwrap();
        let (body, _) = read_payload(&mut leader, &header, None).await.ok().unwrap();
        assert!(matches!(
            wire::decode_response(&body),
            Ok(Response::Append(AppendEntriesResponse::Success))
        ));
    }
    drop(leader);
    let _ = served.await;
    assert_eq!(budget.available_permits(), 4 << 20);
}

/// A stream with nothing to send ends by itself, without an error, once `idle` passes —
/// and only then: the follower saw the stream opened and nothing closed it before.
#[tokio::test]
async fn an_idle_stream_ends_quietly() {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    let follower = tokio::spawn(async move {
        let (mut conn, _) = listener.accept().await.unwrap();
        let from = hello::read(&mut conn, Side::Caller, "c").await.unwrap();
        hello::write(&mut conn, Side::Server, "c", 2).await.unwrap();
        assert_eq!(from, 1);
        let mut got = Vec::new();
        let _ = conn.read_to_end(&mut got).await;
        got
    });
    let idle = Duration::from_millis(300);
    let input = futures_util::stream::pending::<AppendEntriesRequest<TypeConfig>>();
    let started = std::time::Instant::now();
    let auth = PeerAuth::plain_loopback("c", 1).unwrap();
    let ttl = Duration::from_secs(1);
    let answers = open(
        &auth,
        addr,
        2,
        Arc::<crate::replication::tcp::TransportStats>::default().tally(2),
        input,
        ttl,
        idle,
    )
    .await
    .unwrap();
    let mut answers = std::pin::pin!(answers);
    let end = tokio::time::timeout(Duration::from_secs(10), answers.next()).await;
    assert!(
        matches!(end, Ok(None)),
        "the idle stream did not end quietly"
    );
    assert!(started.elapsed() >= idle, "ended before it was idle");
    // The follower saw exactly the request that opens a stream, then the close (the
    // stream closed its connection when it ended).
    assert_eq!(follower.await.unwrap(), wire::frame(&wire::encode_stream()));
}
