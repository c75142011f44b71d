//! openraft's storage conformance suite (`openraft::testing::Suite`) on the real stores, on
//! disk: the log store and the state machine of `lsm_bloom::replication`, each case on fresh
//! directories.

#![cfg(feature = "replication")]

use lsm_bloom::replication::openraft::testing::{StoreBuilder, Suite};
use lsm_bloom::replication::openraft::StorageError;
use lsm_bloom::replication::{LogStore, NodeId, StateMachine, TypeConfig};
use lsm_bloom::Options;

struct OnDisk;

impl StoreBuilder<TypeConfig, LogStore, StateMachine, tempfile::TempDir> for OnDisk {
    async fn build(
        &self,
    ) -> Result<(tempfile::TempDir, LogStore, StateMachine), StorageError<NodeId>> {
        let dir = tempfile::tempdir().expect("temp dir");
        let log = LogStore::open(dir.path().join("log")).expect("log store");
        let sm = StateMachine::open(dir.path().join("sm"), Options::default()).expect("sm");
        Ok((dir, log, sm))
    }
}

#[test]
fn openraft_storage_suite_passes_on_the_real_stores() {
    Suite::test_all(OnDisk).expect("the suite");
}

/// An append larger than one write batch is written in several batches and reads back
/// whole, in order, after a reopen: 270 MiB of entries with `LSM_BLOOM_THOROUGH` (more than
/// the store takes in one batch), 90 MiB otherwise.
#[test]
fn an_append_larger_than_a_batch_reads_back_whole() {
    use lsm_bloom::replication::openraft::storage::{RaftLogStorage, RaftLogStorageExt};
    use lsm_bloom::replication::openraft::{EntryPayload, LeaderId, LogId, RaftLogReader};
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
            payload: EntryPayload::Normal(Request {
                ops: vec![Op::Put {
                    key: vec![i as u8],
                    value: vec![i as u8; 30 << 20],
                }],
            }),
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
