//! Logs retired by a rotation and not yet synced. A rotation (`write.rs`) hands the retired
//! log here instead of syncing it on the writer's path, and starts the next log with a
//! predecessor record (`log_chain.rs`) so replay can tell when a power loss took the retired
//! log's tail. Who syncs them:
//! - the flush thread, before it flushes a memtable (RocksDB's `SyncClosedLogs`), so the
//!   writes a power loss can take stay within about one memtable;
//! - a durable write (`sync_writes`, `WriteOptions::sync`), `Db::sync_wal`, a keyspace drop and
//!   `close`, before they sync the current log: what they make durable must not depend on an
//!   older log that could still lose its tail.
//!
//! `syncing` is held across the syncs, so whoever takes it after another syncer finds every
//! log that syncer took already synced. A failed sync puts the store in the error state before
//! `syncing` is released, so a durable write that waited for it fails too.

use super::inner::{lock, Inner};
use super::wal::WalWriter;
use crate::error::Result;

impl Inner {
    /// Keeps `log` (retired by a rotation) until a sync of retired logs.
    pub(super) fn retire_log(&self, log: WalWriter) {
        lock(&self.retired_logs).push(log);
    }

    /// Syncs and closes every retired log; on failure the store enters the error state.
    pub(super) fn sync_retired_logs(&self) -> Result<()> {
        let _syncing = lock(&self.syncing_retired);
        let logs = std::mem::take(&mut *lock(&self.retired_logs));
        for mut log in logs {
            log.sync().map_err(|e| self.errors.set(e))?;
        }
        Ok(())
    }

    /// Makes every write acknowledged so far durable: the retired logs, then `current` (the
    /// writer's, whose lock the caller holds).
    pub(super) fn sync_all_logs(&self, current: &mut WalWriter) -> Result<()> {
        self.sync_retired_logs()?;
        self.errors.check()?;
        current.sync().map_err(|e| self.errors.set(e))
    }
}
