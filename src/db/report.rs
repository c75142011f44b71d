//! What `Db::open` found and did (`Db::recovery()`): filled in by `recovery.rs`, kept by the
//! store (`inner.rs`) for as long as it is open.

use std::path::PathBuf;

/// Where replay stopped early.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WalDamage {
    /// The log holding the first unusable record.
    pub log: PathBuf,
    /// Byte offset of that record.
    pub offset: u64,
    /// What was wrong with it.
    pub reason: String,
    /// Whether it was a torn tail (damage running to the end of the newest log with data).
    pub torn_tail: bool,
}

/// What `Db::open` found and did (`Db::recovery()`).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RecoveryReport {
    /// Logs replayed.
    pub logs_replayed: u64,
    /// Write batches recovered from them.
    pub batches_replayed: u64,
    /// The first damaged or incomplete log record, if replay stopped early.
    pub wal_damage: Option<WalDamage>,
    /// Log bytes not replayed: from that record to the end of its log, plus every later log.
    pub wal_bytes_dropped: u64,
    /// Files removed because the manifest proves them obsolete.
    pub obsolete_files_removed: u64,
    /// Table files the manifest neither names nor proves obsolete: left in place, unused.
    pub unexplained_tables: Vec<PathBuf>,
    /// Filter blocks (whole-key or prefix) that are damaged or do not match their table: the
    /// table is read without that filter.
    pub filters_rejected: u64,
}
