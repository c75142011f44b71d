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
