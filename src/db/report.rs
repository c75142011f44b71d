//! What `Db::open` found and did (`Db::recovery()`): filled in by `recovery.rs`, kept by the
//! store (`inner.rs`) for as long as it is open.

use std::path::PathBuf;

/// Where replay stopped early.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct WalDamage {
    /// The log holding the first unusable record.
    pub log: PathBuf,
    /// Byte offset of that record.
    pub offset: u64,
    /// What was wrong with it.
    pub reason: String,
    /// Whether it was a torn tail (damage running to the end of the newest log with data,
    /// with no intact record after it).
    pub torn_tail: bool,
    /// Intact records in that log after the damaged one, which replay dropped with it; `None`
    /// when the search for them stopped at its work bound (4 × the log's size in checksummed
    /// bytes).
    pub later_records: Option<u64>,
}

/// What `Db::open` found and did (`Db::recovery()`).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
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
    /// The options record: what it kept and what the options passed changed.
    pub options: OptionsReport,
}

/// A recorded setting the options passed to `Db::open` replaced.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct OptionChange {
    /// `filter` or `prefix`.
    pub setting: String,
    /// The recorded value, in words.
    pub was: String,
    /// The value now in force, in words.
    pub now: String,
}

/// What `Db::open` did with the options record (`Options::filters`, FORMAT.md §6).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct OptionsReport {
    /// Whether the directory held a record (not for a new store, nor one written by a build
    /// from before records).
    pub record_found: bool,
    /// Recorded settings kept because the options passed left them at their defaults:
    /// (setting, value in words). Settings equal to their defaults are not listed.
    pub kept: Vec<(String, String)>,
    /// Recorded settings the options passed replaced.
    pub changed: Vec<OptionChange>,
}

impl RecoveryReport {
    /// Logs what the open found and decided through `tracing`: one INFO event for the open,
    /// a WARN for each thing a user should look at (WAL damage and what it dropped, tables
    /// no manifest names, filters that failed their check, settings the options record
    /// changed or kept against the defaults given).
    pub(super) fn log(&self, dir: &std::path::Path, tables: usize) {
        tracing::info!(
            dir = %dir.display(),
            tables,
            logs_replayed = self.logs_replayed,
            batches_replayed = self.batches_replayed,
            obsolete_files_removed = self.obsolete_files_removed,
            "store opened"
        );
        if let Some(d) = &self.wal_damage {
            tracing::warn!(
                log = %d.log.display(),
                offset = d.offset,
                reason = %d.reason,
                torn_tail = d.torn_tail,
                bytes_dropped = self.wal_bytes_dropped,
                "write-ahead log damaged: recovered up to the damage, the rest dropped"
            );
        }
        for t in &self.unexplained_tables {
            tracing::warn!(
                table = %t.display(),
                "table file the manifest neither names nor proves obsolete: left in place, unused"
            );
        }
        if self.filters_rejected > 0 {
            tracing::warn!(
                filters = self.filters_rejected,
                "filters failed their check: those tables are read without them"
            );
        }
        for c in &self.options.changed {
            tracing::info!(setting = %c.setting, was = %c.was, now = %c.now, "stored option changed");
        }
        for (setting, value) in &self.options.kept {
            tracing::debug!(%setting, %value, "stored option kept");
        }
    }
}
