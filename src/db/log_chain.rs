//! The predecessor record: the first record of each log a rotation starts names the log before
//! it and that log's length then (FORMAT.md §2; encoded in `wal.rs`). A rotation does not sync
//! the retired log (`retired.rs` syncs it off the writer's path), so a power loss may keep a
//! newer log's records while losing the tail of an older one; replay compares the older log's
//! intact length with what its successor says it held, and stops there when it is shorter, so
//! a recovered store is still a point in time. RocksDB records the same in its WALs
//! (`PredecessorWALInfo`).
//!
//! Why the sync moved: timed inside the store under a sustained write load (`db_bench
//! --workload latency`), the retired log's sync held the writer 1–9 ms at each rotation, and
//! 80–230 ms in 4 of 11 runs when the file system's journal was busy with a compaction's files.

use std::path::Path;

use super::options::WalRecovery;
use super::report::WalDamage;
use super::wal::Predecessor;
use crate::error::{Error, Result};

/// Why replay must stop before a log whose first record names `named`, given the log replayed
/// just before it (`before`: its number and intact length, `None` when it is the first log
/// replayed) and the manifest's `log_number` (logs below it are in tables); `None` when the
/// chain holds.
pub(crate) fn broken(
    named: Predecessor,
    before: Option<(u64, u64)>,
    log_number: u64,
) -> Option<String> {
    if named.id < log_number {
        return None; // already in tables: nothing of it is replayed
    }
    match before {
        Some((id, len)) if id == named.id && len >= named.len => None,
        Some((id, len)) if id == named.id => Some(format!(
            "log {id} ends after {len} intact bytes, but the next log says it held {}: its \
             tail was lost (a power loss before it was synced)",
            named.len
        )),
        _ => Some(format!(
            "the log names log {} ({} bytes) before it, which is missing",
            named.id, named.len
        )),
    }
}

/// What replay does at a log (`path`, `len` bytes, `batches` in it) the chain is `broken`
/// before, for `why`: the damage report that drops it and every later log (`PointInTime`), or
/// the refusal (`TornTailOnly`: not a torn tail, since this later log holds data).
pub(crate) fn gap(
    why: String,
    path: &Path,
    len: usize,
    batches: usize,
    mode: WalRecovery,
) -> Result<WalDamage> {
    if mode == WalRecovery::TornTailOnly {
        return Err(Error::corruption(
            path,
            format!(
                "{why}, and this later log holds {len} bytes: not a torn tail \
                 (WalRecovery::TornTailOnly refuses; PointInTime would drop this log and every \
                 later one)"
            ),
        ));
    }
    Ok(WalDamage {
        log: path.to_path_buf(),
        offset: 0,
        reason: why,
        torn_tail: false,
        later_records: Some(batches as u64),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_chain_breaks_only_where_an_older_log_came_back_short_or_missing() {
        let named = Predecessor { id: 5, len: 100 };
        assert_eq!(broken(named, Some((5, 100)), 0), None);
        assert_eq!(broken(named, Some((5, 120)), 0), None);
        assert!(broken(named, Some((5, 99)), 0)
            .is_some_and(|why| why.contains("99 intact bytes") && why.contains("held 100")));
        assert!(broken(named, Some((3, 500)), 0).is_some_and(|why| why.contains("missing")));
        assert!(broken(named, None, 5).is_some_and(|why| why.contains("missing")));
        assert_eq!(broken(named, None, 6), None, "in tables already");
        assert_eq!(broken(named, Some((2, 0)), 6), None);
    }
}
