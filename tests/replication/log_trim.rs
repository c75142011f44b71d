//! The Raft log's purges and truncations over ranges far wider than one write batch holds:
//! a node that installs a snapshot at index 2×10^7 on an empty log must purge "up to
//! 2×10^7" and start again afterwards (openraft repeats the purge at every start).

use lsm_bloom::replication::openraft::storage::{IOFlushed, RaftLogStorage};
use lsm_bloom::replication::openraft::vote::RaftLeaderId;
use lsm_bloom::replication::openraft::{EntryPayload, RaftLogReader};
use lsm_bloom::replication::{CommittedLeaderId, Entry, LogId, LogStore};

fn id(index: u64) -> LogId {
    LogId::new(CommittedLeaderId::new(2, 1), index)
}

async fn append(log: &mut LogStore, indexes: std::ops::RangeInclusive<u64>) {
    let entries: Vec<Entry> = indexes
        .map(|i| Entry {
            log_id: id(i),
            payload: EntryPayload::Blank,
        })
        .collect();
    log.append(entries, IOFlushed::noop()).await.unwrap();
}

/// A purge to 2×10^7 on a fresh log, then a restart that purges again as openraft does:
/// both succeed, and the log goes on from the purged index.
#[tokio::test]
async fn a_purge_far_past_an_empty_log_succeeds_and_the_log_reopens() {
    let dir = tempfile::tempdir().unwrap();
    let far = 20_000_000;
    {
        let mut log = LogStore::open(dir.path()).unwrap();
        log.purge(id(far)).await.unwrap();
        append(&mut log, far + 1..=far + 3).await;
    }
    let mut log = LogStore::open(dir.path()).unwrap();
    log.purge(id(far)).await.unwrap();
    let state = log.get_log_state().await.unwrap();
    assert_eq!(state.last_purged_log_id, Some(id(far)));
    assert_eq!(state.last_log_id, Some(id(far + 3)));
    let got = log.try_get_log_entries(far + 1..=far + 3).await.unwrap();
    assert_eq!(got.len(), 3);
}

/// A purge over entries that are present deletes exactly those at or below it; a
/// truncation deletes those after its id, over more entries than one batch deletes.
#[tokio::test]
async fn purges_and_truncations_delete_exactly_their_entries() {
    let dir = tempfile::tempdir().unwrap();
    let last = 150_000;
    {
        let mut log = LogStore::open(dir.path()).unwrap();
        append(&mut log, 1..=last).await;
        log.purge(id(70_000)).await.unwrap();
        log.truncate_after(Some(id(70_010))).await.unwrap();
    }
    let mut log = LogStore::open(dir.path()).unwrap();
    let state = log.get_log_state().await.unwrap();
    assert_eq!(state.last_purged_log_id, Some(id(70_000)));
    assert_eq!(state.last_log_id, Some(id(70_010)));
    let got = log.try_get_log_entries(0..=last).await.unwrap();
    let indexes: Vec<u64> = got.iter().map(|e| e.log_id.index).collect();
    assert_eq!(indexes, (70_001..=70_010).collect::<Vec<_>>());
}
