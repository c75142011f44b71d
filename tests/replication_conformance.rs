//! openraft's storage conformance suite (`openraft::testing::Suite`) on the real stores, on
//! disk: the log store and the state machine of `lsm_bloom::replication`, each case on fresh
//! directories.

#![cfg(feature = "replication")]

use lsm_bloom::replication::openraft::testing::log::{StoreBuilder, Suite};
use lsm_bloom::replication::openraft::StorageError;
use lsm_bloom::replication::{LogStore, StateMachine, TypeConfig};
use lsm_bloom::Options;

struct OnDisk;

impl StoreBuilder<TypeConfig, LogStore, StateMachine, tempfile::TempDir> for OnDisk {
    async fn build(
        &self,
    ) -> Result<(tempfile::TempDir, LogStore, StateMachine), StorageError<TypeConfig>> {
        let dir = tempfile::tempdir().expect("temp dir");
        let log = LogStore::open(dir.path().join("log")).expect("log store");
        let sm = StateMachine::open(dir.path().join("sm"), Options::default()).expect("sm");
        Ok((dir, log, sm))
    }
}

#[test]
fn openraft_storage_suite_passes_on_the_real_stores() {
    let rt = tokio::runtime::Runtime::new().expect("runtime");
    rt.block_on(Suite::test_all(OnDisk)).expect("the suite");
}

/// An append larger than one write batch is written in several batches and reads back
/// whole, in order, after a reopen: 270 MiB of entries with `LSM_BLOOM_THOROUGH` (more than
/// the store takes in one batch), 90 MiB otherwise.
#[test]
fn an_append_larger_than_a_batch_reads_back_whole() {
    use lsm_bloom::replication::openraft::storage::{RaftLogStorage, RaftLogStorageExt};
    use lsm_bloom::replication::openraft::vote::RaftLeaderId;
    use lsm_bloom::replication::openraft::{EntryPayload, RaftLogReader};
    use lsm_bloom::replication::{CommittedLeaderId as LeaderId, LogId};
    use lsm_bloom::replication::{Entry, Op, Request};
    let n: u64 = if std::env::var_os("LSM_BLOOM_THOROUGH").is_some_and(|v| v != "0") {
        9
    } else {
        3
    };
    let dir = tempfile::tempdir().unwrap();
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(async {
        let entry = |i: u64| Entry {
            log_id: LogId::new(LeaderId::new(1, 1), i),
            payload: EntryPayload::Normal(Request::new(vec![Op::Put {
                key: vec![i as u8],
                value: vec![i as u8; 30 << 20],
            }])),
        };
        {
            let mut log = LogStore::open(dir.path()).unwrap();
            log.blocking_append((1..=n).map(entry)).await.unwrap();
        }
        let mut log = LogStore::open(dir.path()).unwrap();
        assert_eq!(
            log.get_log_state()
                .await
                .unwrap()
                .last_log_id
                .map(|l| l.index),
            Some(n)
        );
        let got = log.try_get_log_entries(1..=n).await.unwrap();
        assert_eq!(got.len() as u64, n);
        for (i, e) in (1..=n).zip(&got) {
            assert_eq!(e, &entry(i));
        }
    });
}

/// Reads after truncations, purges and appends that replace entries return what the log
/// holds: the newest entries are served from memory (`log_tail.rs`), the rest from the
/// store, and both always agree with a model of the log.
#[test]
fn reads_agree_with_the_log_through_truncations_purges_and_replaced_entries() {
    use lsm_bloom::replication::openraft::storage::{RaftLogStorage, RaftLogStorageExt};
    use lsm_bloom::replication::openraft::vote::RaftLeaderId;
    use lsm_bloom::replication::openraft::{EntryPayload, RaftLogReader};
    use lsm_bloom::replication::Entry;
    use lsm_bloom::replication::{CommittedLeaderId as LeaderId, LogId};
    use std::collections::BTreeMap;
    let entry = |term: u64, i: u64| Entry {
        log_id: LogId::new(LeaderId::new(term, 1), i),
        payload: EntryPayload::Blank,
    };
    let dir = tempfile::tempdir().unwrap();
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(async {
        let mut log = LogStore::open(dir.path()).unwrap();
        let mut model: BTreeMap<u64, Entry> = BTreeMap::new();
        let mut seed = 42u64;
        let mut next = || {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed
        };
        let (mut term, mut last, mut purged) = (1u64, 0u64, 0u64);
        let mut purged_id: Option<LogId> = None;
        for step in 0..3000 {
            match next() % 10 {
                0 if last > purged + 1 => {
                    // Truncate somewhere after the purge mark, then a new term's entries.
                    let at = purged + 1 + next() % (last - purged);
                    let keep = model.get(&(at - 1)).map(|e| e.log_id).or(purged_id);
                    log.truncate_after(keep).await.unwrap();
                    model.retain(|&i, _| i < at);
                    last = at - 1;
                    term += 1;
                }
                1 if last > purged + 10 => {
                    let upto = purged + 1 + next() % 10;
                    let id = model[&upto].log_id;
                    log.purge(id).await.unwrap();
                    purged_id = Some(id);
                    model.retain(|&i, _| i > upto);
                    purged = upto;
                }
                _ => {
                    let n = 1 + next() % 40;
                    let es: Vec<Entry> = (last + 1..=last + n).map(|i| entry(term, i)).collect();
                    for e in &es {
                        model.insert(e.log_id.index, e.clone());
                    }
                    log.blocking_append(es).await.unwrap();
                    last += n;
                }
            }
            let lo = purged + 1 + next() % (last - purged + 1);
            let hi = lo + next() % 1500;
            let ids = |es: &[Entry]| -> Vec<(u64, u64)> {
                es.iter()
                    .map(|e| (e.log_id.index, e.log_id.leader_id.term))
                    .collect()
            };
            let got = log.try_get_log_entries(lo..hi).await.unwrap();
            let want: Vec<Entry> = model.range(lo..hi).map(|(_, e)| e.clone()).collect();
            assert_eq!(ids(&got), ids(&want), "step {step}: entries {lo}..{hi}");
        }
    });
}
