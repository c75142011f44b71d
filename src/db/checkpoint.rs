//! Checkpoints: a consistent, openable copy of a live store in another directory
//! (`Db::checkpoint`), taken while writes, flushes and compactions go on.
//!
//! A checkpoint is a `Snapshot` written out. Its tables get a second name in the new
//! directory (a hard link, which costs no space; a copy read from the snapshot's open handle
//! when linking fails — another file system, or the file already deleted by a compaction that
//! replaced it). Its memtables are written as one new log, oldest first, entries newest per
//! key with deletions kept, so the copy's first open replays them into a level-0 table exactly
//! as recovery does after a crash (a memtable's deleted ranges ahead of its entries). Then the manifest naming those tables and that log, and the
//! options record (FORMAT.md §4, §2, §6). No lock is held while any of this runs: the snapshot
//! pins what it copies, so writers and the background threads are never held up.
//!
//! The copy is built in `<dir>.checkpoint-tmp`, every file synced, and renamed to `<dir>` once
//! complete (the parent directory synced): a crash leaves no half-written `<dir>`, only the
//! temporary directory, which the next checkpoint to the same place refuses to reuse (it
//! names it, for the user to remove).

use std::path::{Path, PathBuf};
use std::sync::Arc;

use super::files::table_path;
use super::inner::Inner;
use super::manifest::{self, ManifestData};
use super::memtable::Memtable;
use super::snapshot::Snapshot;
use super::state::State;
use super::stored_options;
use super::wal::{self, Batch, Op, WalWriter};
use super::worker::manifest_data;
use crate::error::{Error, Result};
use crate::fs::{CreateMode, FileSystem};
use crate::table::{Cursor, Direction, KeyRange, Table};

/// Largest write batch the checkpoint's log gets (entries are split into batches this size).
const BATCH_BYTES: usize = 4 << 20;

/// What `Db::checkpoint` wrote.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct CheckpointReport {
    /// Tables given a second name (no bytes copied).
    pub tables_linked: u64,
    /// Tables copied (linking failed).
    pub tables_copied: u64,
    /// Bytes of all tables in the checkpoint.
    pub table_bytes: u64,
    /// Memtable entries (values and deletions) written to the checkpoint's log.
    pub log_entries: u64,
}

fn temp_dir(target: &Path) -> PathBuf {
    let mut name = target.file_name().unwrap_or_default().to_os_string();
    name.push(".checkpoint-tmp");
    target.with_file_name(name)
}

/// Writes the checkpoint of `inner` as `snap` sees it to `target` (module comment).
pub(super) fn checkpoint(
    inner: &Inner,
    snap: &Snapshot,
    target: &Path,
) -> Result<CheckpointReport> {
    if !snap.belongs_to(inner) {
        return Err(Error::InvalidArgument(
            "checkpoint of a snapshot taken from another store".into(),
        ));
    }
    let fs = &*inner.opts.fs;
    if target.file_name().is_none() {
        return Err(Error::InvalidArgument(format!(
            "checkpoint directory {} has no name",
            target.display()
        )));
    }
    if target.exists() {
        return Err(Error::AlreadyExists {
            path: target.to_path_buf(),
        });
    }
    let tmp = temp_dir(target);
    if tmp.exists() {
        return Err(Error::InvalidArgument(format!(
            "{} is left from an interrupted checkpoint: remove it first",
            tmp.display()
        )));
    }
    std::fs::create_dir_all(&tmp)
        .map_err(|e| Error::io(format!("creating {}", tmp.display()), e))?;
    let published = snap.published();
    // The snapshot's keyspaces, each under its name: none created after it was taken, and
    // each dropped since kept (its tables are pinned by the snapshot): the copy holds every
    // keyspace as the snapshot saw them, so data in one that names another (a map of them,
    // as the replicated state machine keeps) stays whole.
    let mut registry = inner.lock_checked(&inner.work).keyspaces.clone();
    registry.keep(|id| published.get(id).is_some());
    for (id, state) in published.all().filter(|(id, _)| *id != 0) {
        if registry.name(id).is_none() {
            registry.restore(id, &state.name);
        }
    }
    let spaces: Vec<(u32, &State)> = published.all().collect();
    let mut report = CheckpointReport::default();

    let mut versions = Vec::with_capacity(spaces.len());
    for (id, state) in &spaces {
        for t in state.version.levels().iter().flatten() {
            place_table(fs, &inner.dir, &tmp, t, &mut report)?;
        }
        versions.push((*id, &*state.version));
    }
    let data = manifest_data(&registry, versions.into_iter(), 0, 0);
    let listed = std::iter::once(&data.levels).chain(data.keyspaces.iter().map(|k| &k.levels));
    let highest = listed.flatten().flatten().map(|m| m.id).max().unwrap_or(0);
    let log_id = highest + 1;
    let mut log = WalWriter::create(fs, &tmp, log_id)?;
    for (id, state) in &spaces {
        let memtables = state.imm.iter().map(|m| (m, m.visible()));
        for (m, seen) in memtables.chain(std::iter::once((&state.mem, snap.mem_seen()))) {
            report.log_entries += write_memtable(&mut log, *id, m, seen)?;
        }
    }
    log.sync()?;
    drop(log);
    manifest::write(
        fs,
        &tmp,
        &ManifestData {
            next_file: log_id + 1,
            log_number: log_id,
            ..data
        },
    )?;
    stored_options::write(fs, &tmp, &registry.record(&inner.opts))?;
    crate::fs::sync_dir(fs, &tmp)?;
    fs.rename(&tmp, target).map_err(|e| {
        Error::io(
            format!("renaming {} to {}", tmp.display(), target.display()),
            e,
        )
    })?;
    let parent = match target.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    };
    crate::fs::sync_dir(fs, parent)?;
    Ok(report)
}

/// Links `t` into `to_dir`, or copies it from its open handle.
fn place_table(
    fs: &dyn FileSystem,
    from_dir: &Path,
    to_dir: &Path,
    t: &Arc<Table>,
    report: &mut CheckpointReport,
) -> Result<()> {
    let dst = table_path(to_dir, t.id());
    report.table_bytes += t.file_size();
    if fs.hard_link(&table_path(from_dir, t.id()), &dst).is_ok() {
        report.tables_linked += 1;
        return Ok(());
    }
    let io = |what: &str, e| Error::io(format!("{what} {}", dst.display()), e);
    let mut out = fs
        .create(&dst, CreateMode::Truncate)
        .map_err(|e| io("creating", e))?;
    t.copy_to(&mut *out)
        .map_err(|e| io("copying a table to", e))?;
    out.sync().map_err(|e| io("syncing", e))?;
    report.tables_copied += 1;
    Ok(())
}

/// Appends the newest entry of each key of `m` (keyspace `keyspace`'s) among its first
/// `seen` batches to `log`, in batches of about `BATCH_BYTES`; returns how many entries.
fn write_memtable(log: &mut WalWriter, keyspace: u32, m: &Arc<Memtable>, seen: u64) -> Result<u64> {
    // The ranges it deleted go first, so that they hide the older tables' keys again; the
    // entries they hide here read as deletions, and the ones after them follow.
    let ranges = m.ranges_at(seen);
    if !ranges.is_empty() {
        let mut b = Batch::default();
        for r in ranges {
            b.push_range(keyspace, r);
        }
        log.append(&wal::encode_batch(&b)?, false)?;
    }
    let mut cursor = m.cursor(&KeyRange::all(), Direction::Forward, seen);
    let mut count = 0;
    let mut batch = Batch::default();
    let mut bytes = 0;
    while let Some(k) = cursor.key() {
        let (v, expiry) = (cursor.value(), cursor.expiry());
        bytes += wal::op_encoded_len(k.len(), v.map(<[u8]>::len), expiry);
        batch.part(keyspace).push(Op {
            key: k.to_vec(),
            value: v.map(<[u8]>::to_vec),
            expiry,
        });
        count += 1;
        cursor.step()?;
        if bytes >= BATCH_BYTES {
            log.append(&wal::encode_batch(&batch)?, false)?;
            batch = Batch::default();
            bytes = 0;
        }
    }
    if batch.len() > 0 {
        log.append(&wal::encode_batch(&batch)?, false)?;
    }
    Ok(count)
}
