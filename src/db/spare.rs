//! The next memtable generation's log and memtable, made ready by the flush thread so that a
//! rotation (`write.rs`) only swaps them in.
//!
//! Use: after each flush the flush thread calls `prepare_spare`; a rotation, holding the writer
//! lock, calls `take_spare` and gets the log and, when it was ready, the memtable; otherwise it
//! builds the memtable itself (`Memtable::new`, cheap: its entries then grow as they come).
//!
//! Why ahead: a log's creation syncs its directory (up to 18 ms under load), and a memtable with
//! its entries reserved (`Memtable::reserved`) is zeroed memory the size of its entry array
//! (~40 MiB for a 64 MiB memtable of 116-byte entries). Measured on the writer's path
//! (`db_bench --workload latency`, 64 MiB memtables): 10–127 ms per rotation when reserved
//! there, and 25–56 ms single writes when the array instead grew by doubling as writes came.
//! On the flush thread it costs no write anything.
//!
//! Order: log numbers are drawn only under the `spare_wal` lock, and a log is created under it
//! too, so each log a rotation starts has a higher number than the one before it (replay goes
//! in that order). The memtable is built outside the lock, then attached to the spare if that
//! spare is still waiting; a rotation that came first took the log alone.

use std::sync::atomic::Ordering;

use super::inner::{lock, Inner};
use super::memtable::Memtable;
use super::wal::WalWriter;
use crate::error::Result;

impl Inner {
    /// Creates the next rotation's log, if none is waiting, then its memtable with entries
    /// reserved; run by the flush thread. An empty log left by a crash or a close is replayed
    /// (nothing) and removed at the next open like any other.
    pub(super) fn prepare_spare(&self) -> Result<()> {
        let id = {
            let mut spare = lock(&self.spare_wal);
            match spare.as_ref() {
                Some((_, Some(_))) => return Ok(()),
                Some((wal, None)) => wal.id(),
                None => {
                    let id = self.next_file.fetch_add(1, Ordering::SeqCst);
                    *spare = Some((WalWriter::create(&*self.opts.fs, &self.dir, id)?, None));
                    id
                }
            }
        };
        let mem = Memtable::reserved(id, self.opts.memtable_size);
        if let Some((wal, slot)) = lock(&self.spare_wal).as_mut() {
            if wal.id() == id {
                *slot = Some(mem);
            }
        }
        Ok(())
    }

    /// The log the flush thread made ready (and its memtable, if built), or a new log; the
    /// caller holds the writer lock.
    pub(super) fn take_spare(&self) -> Result<(WalWriter, Option<Memtable>)> {
        let mut spare = lock(&self.spare_wal);
        match spare.take() {
            Some(spare) => Ok(spare),
            None => {
                let id = self.next_file.fetch_add(1, Ordering::SeqCst);
                Ok((WalWriter::create(&*self.opts.fs, &self.dir, id)?, None))
            }
        }
    }
}
