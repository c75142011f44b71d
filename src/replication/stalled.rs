//! A guard on openraft's stream of appends to one follower: [`end_when_stalled`] ends the
//! stream at an append that carries no entries and repeats the one before it (same vote,
//! previous log id and commit). Both networks here wrap their input in it; a service with a
//! network of its own should too.
//!
//! Why. openraft (0.10.0-alpha.37) replicates to a follower in sessions, one stream each, and
//! a session that streams "every log after `prev`" asks for new entries for as long as the
//! leader's log goes on past `prev`; it looks for a newer command from the leader only when
//! it has nothing left to send. The leader may purge a range such a session still has to send
//! once it has chosen to send that follower a snapshot instead: it counts the session's logs
//! as in use only while the session is the follower's current one. When the old session is
//! still running — it was sleeping out a back-off when the follower came back empty and the
//! leader switched to the snapshot — its reads of the purged range come back empty, and
//! openraft sends each empty read as an entry-less append from the same `prev` (after a 10 ms
//! sleep). The follower, which holds the snapshot, accepts each one, so the session never
//! ends, never reads the leader's newer command, and the follower gets nothing after its
//! snapshot. The `kv_server` cluster test (a follower wiped and restarted while the leader
//! took 2,500 writes) stalled this way in 9 of 12 runs: the leader's log showed the empty
//! read of one range every 11 ms for as long as it ran.
//!
//! A healthy session never sends the same entry-less append twice in a row: it sends one
//! only to carry a commit index no request has carried yet. So a repeat means the session
//! reads nothing; ending its stream makes openraft end the session, and the next one takes
//! the leader's newest command (a stream from the follower's snapshot, here). If the repeat
//! had another cause, the cost is one new stream.

use futures_util::{future, Stream, StreamExt};
use openraft::raft::AppendEntriesRequest;

use super::TypeConfig;

/// An append request of this type config.
type Append = AppendEntriesRequest<TypeConfig>;

/// `input` up to (without) the first append that carries no entries and has the vote, the
/// previous log id and the commit index of the append before it.
pub fn end_when_stalled<S>(input: S) -> impl Stream<Item = Append> + Send + Unpin + 'static
where
    S: Stream<Item = Append> + Send + Unpin + 'static,
{
    // The vote, previous log id and commit of the append before, if it carried no entries.
    let mut before = None;
    input.take_while(move |req| {
        let empty =
            req.entries
                .is_empty()
                .then_some((req.vote, req.prev_log_id, req.leader_commit));
        let repeat = empty.is_some() && empty == before;
        before = empty;
        future::ready(!repeat)
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::replication::{CommittedLeaderId, Entry, LogId, Vote};
    use openraft::vote::RaftLeaderId;
    use openraft::EntryPayload;

    fn id(index: u64) -> Option<LogId> {
        Some(LogId::new(CommittedLeaderId::new(1, 1), index))
    }

    /// An append after `prev` carrying `n` entries, with the commit at `commit`.
    fn append(prev: u64, n: u64, commit: u64) -> Append {
        Append {
            vote: vote(1),
            prev_log_id: id(prev),
            leader_commit: id(commit),
            entries: (prev + 1..=prev + n)
                .map(|i| Entry {
                    log_id: LogId::new(CommittedLeaderId::new(1, 1), i),
                    payload: EntryPayload::Blank,
                })
                .collect(),
        }
    }

    fn vote(term: u64) -> Vote {
        let mut v = Vote::new(term, 1);
        v.committed = true;
        v
    }

    async fn passed(input: Vec<Append>) -> Vec<(u64, usize, u64)> {
        let out: Vec<Append> = end_when_stalled(futures_util::stream::iter(input))
            .collect()
            .await;
        out.iter()
            .map(|r| {
                let at = |l: &Option<LogId>| l.map_or(0, |l| l.index);
                (at(&r.prev_log_id), r.entries.len(), at(&r.leader_commit))
            })
            .collect()
    }

    /// A healthy session passes whole: entries, then entry-less appends each carrying a
    /// newer commit, entries again, and an entry-less append after entries from the same
    /// `prev` as the one before them.
    #[tokio::test]
    async fn a_healthy_session_passes_whole() {
        let input = vec![
            append(5, 0, 5),
            append(5, 3, 5),
            append(8, 0, 6),
            append(8, 0, 8),
            append(8, 1, 8),
            append(9, 0, 9),
            append(9, 1, 9),
            append(9, 0, 9),
        ];
        assert_eq!(passed(input.clone()).await.len(), input.len());
    }

    /// The stalled session of the module comment: entries, then the same entry-less append
    /// over and over. The stream ends before the first repeat.
    #[tokio::test]
    async fn a_repeated_empty_append_ends_the_stream() {
        let mut input = vec![append(10, 300, 9), append(310, 0, 400)];
        input.extend(std::iter::repeat_n(append(310, 0, 400), 50));
        input.push(append(310, 5, 400));
        assert_eq!(passed(input).await, vec![(10, 300, 9), (310, 0, 400)]);
        // A newer vote is not a repeat.
        let mut newer = append(310, 0, 400);
        newer.vote = vote(2);
        assert_eq!(passed(vec![append(310, 0, 400), newer]).await.len(), 2);
    }
}
