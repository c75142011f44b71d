//! The state machine's durability argument (`replication::state_machine`, module comment),
//! tested: applies are not synced, so a power loss may take the state machine back to an
//! earlier applied position, and the log (purged only up to the last snapshot) must still
//! hold every entry after it. A one-node cluster takes writes and snapshots with the log
//! purged right up to each snapshot, then loses the power of its state machine's store
//! (`PowerLossFs`: unsynced bytes dropped or partly kept); reopened, it must have every
//! acknowledged write.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use lsm_bloom::fs::{PowerLossFs, UnsyncedTail};
use lsm_bloom::replication::network::Router;
use lsm_bloom::replication::openraft::SnapshotPolicy;
use lsm_bloom::replication::{BasicNode, ReadPolicy, ReplicatedDb, ReplicationConfig};
use lsm_bloom::Options;

use crate::cluster::fast_config;

async fn open(dir: &std::path::Path, config: ReplicationConfig, router: &Router) -> ReplicatedDb {
    let db = ReplicatedDb::open(1, dir, config, router.network(1))
        .await
        .unwrap();
    router.register(1, db.clone());
    db
}

/// One round: `writes` acknowledged puts, a power loss of the state machine's store with
/// `tail`, a restart; returns the keys lost.
pub async fn round(writes: usize, tail: UnsyncedTail, seed: u64) -> usize {
    let root = tempfile::tempdir().unwrap();
    let dir = root.path().join("n1");
    let fs = PowerLossFs::new();
    let mut config = fast_config();
    config.raft.snapshot_policy = SnapshotPolicy::LogsSinceLast(100);
    config.raft.max_in_snapshot_log_to_keep = 0;
    config.raft.purge_batch_size = 1;
    config.db = Options::default().with_fs(Arc::new(fs.clone()));
    let router = Router::new();
    let node = open(&dir, config.clone(), &router).await;
    let members = BTreeMap::from([(1, BasicNode::new("node-1"))]);
    assert!(node.initialize(members).await.unwrap());
    let mut acked = Vec::new();
    for i in 0..writes {
        let key = format!("k{i:05}");
        // The first write may race the election.
        for attempt in 0.. {
            match node.put(key.clone(), format!("v{i}")).await {
                Ok(()) => break,
                Err(e) if attempt < 200 => {
                    let _ = e;
                    tokio::time::sleep(Duration::from_millis(10)).await;
                }
                Err(e) => panic!("write {i}: {e}"),
            }
        }
        acked.push(key);
    }
    let purged = node.metrics().purged.map(|p| p.index);
    assert!(
        purged.is_some(),
        "the log was never purged: the round tests nothing"
    );

    // The power goes: the state machine's store keeps only what it synced.
    fs.cut_now();
    router.unregister(1);
    node.shutdown().await.unwrap();
    drop(node);
    let sm_dir = dir.join("sm");
    let live = std::fs::read_to_string(sm_dir.join("CURRENT")).unwrap();
    let live = sm_dir.join(live.trim());
    let image = root.path().join("image");
    std::fs::create_dir(&image).unwrap();
    // The store may still be closing its files: wait for its lock to go.
    tokio::time::sleep(Duration::from_millis(100)).await;
    fs.write_durable(&live, &image, tail, seed).unwrap();
    std::fs::remove_dir_all(&live).unwrap();
    std::fs::rename(&image, &live).unwrap();

    let config = config.with_db(Options::default());
    let node = open(&dir, config, &router).await;
    let mut lost = 0;
    for key in &acked {
        let mut got = None;
        for _ in 0..500 {
            match node.get(key, ReadPolicy::Linearizable).await {
                Ok(v) => {
                    got = Some(v);
                    break;
                }
                Err(_) => tokio::time::sleep(Duration::from_millis(10)).await,
            }
        }
        if got
            .expect("no linearizable read after the restart")
            .is_none()
        {
            lost += 1;
        }
    }
    node.shutdown().await.unwrap();
    lost
}
