//! Opening a database: lock the directory, read and check the manifest, classify every file,
//! replay the write-ahead logs by the recovery rules, and commit the result.
//!
//! Order (each step only after the one before succeeded):
//! 1. Lock `LOCK` (`Error::Locked` if held). Read `MANIFEST`. No manifest: a directory that
//!    holds tables or non-empty logs is refused (`Error::MissingManifest`, nothing touched);
//!    otherwise it is a new database (`create_if_missing`). Read the options record
//!    (`stored_options.rs`; damaged: refused, nothing touched) and merge it with the options
//!    passed.
//! 2. Open every table the manifest names and check the table set: levels ≥ 1 sorted and
//!    disjoint, else `Error::Corruption`.
//! 3. Remove only what the manifest proves obsolete: tables it does not name whose number is
//!    below its `next_file`, logs below its `log_number`, `MANIFEST.tmp`, `OPTIONS.tmp`. A
//!    table numbered at or above `next_file` is unexplained: left in place and reported.
//! 4. Replay the logs at or above `log_number` in order (reading only). Replay stops at the
//!    first damaged or incomplete record across all logs (`WalRecovery::PointInTime`), or
//!    refuses unless that damage is a torn tail of the newest log (`WalRecovery::TornTailOnly`).
//! 5. Create a new log. If anything was replayed: write a manifest reserving file numbers,
//!    then the level-0 table, and sync the directory. Rewrite the options record if it
//!    changed. Write the manifest naming the tables and the new log, and only then remove the
//!    replayed logs. (A crash before that manifest in a new directory leaves only an empty
//!    log and perhaps the options record, which the next open takes as a new database's.)

use std::collections::HashSet;
use std::fs::File;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex};

use super::budget_parts::{self, Space};
use super::counters::{add, Counters};
use super::files::table_path;
use super::flush::{l0_filter, write_l0};
use super::inner::{ErrorState, Inner, Signal, Work};
use super::lookups::SLOTS;
use super::manifest::{self, ManifestData};
use super::memtable::Memtable;
use super::options::{Options, WalRecovery};
use super::registry::Registry;
use super::report::{RecoveryReport, WalDamage};
use super::state::{Published, State};
use super::stored_options;
use super::version::{Version, MAX_LEVELS};
use super::wal::{self, WalWriter};
use super::worker::{manifest_data, ID_RESERVATION};
use crate::error::{Error, Result};
use crate::fs::FileSystem;
use crate::table::Table;

struct Inventory {
    tables: Vec<u64>,
    /// (number, size in bytes)
    logs: Vec<(u64, u64)>,
}

fn numbered(name: &str, ext: &str) -> Option<u64> {
    name.strip_suffix(ext)?.parse().ok()
}

fn inventory(dir: &Path) -> Result<Inventory> {
    let listing = |e| Error::io(format!("listing {}", dir.display()), e);
    let mut inv = Inventory {
        tables: Vec::new(),
        logs: Vec::new(),
    };
    for entry in std::fs::read_dir(dir).map_err(listing)? {
        let entry = entry.map_err(listing)?;
        let name = entry.file_name();
        let name = name.to_string_lossy();
        if let Some(id) = numbered(&name, ".sst") {
            inv.tables.push(id);
        } else if let Some(id) = numbered(&name, ".wal") {
            let len = entry.metadata().map_err(listing)?.len();
            inv.logs.push((id, len));
        }
    }
    inv.tables.sort_unstable();
    inv.logs.sort_unstable();
    Ok(inv)
}

fn describe(inv: &Inventory) -> Option<String> {
    let logs: Vec<u64> = inv.logs.iter().filter(|l| l.1 > 0).map(|l| l.0).collect();
    if inv.tables.is_empty() && logs.is_empty() {
        return None;
    }
    let first = |ids: &[u64], ext: &str| {
        ids.iter()
            .take(3)
            .map(|id| format!("{id:06}.{ext}"))
            .collect::<Vec<_>>()
            .join(", ")
    };
    Some(format!(
        "{} table file(s) ({}) and {} non-empty log(s) ({})",
        inv.tables.len(),
        first(&inv.tables, "sst"),
        logs.len(),
        first(&logs, "wal")
    ))
}

/// Opens the tables `m` names and checks the table set.
/// Opens the tables of one keyspace's `levels` (from the manifest) and checks the set.
fn load_version(
    fs: &dyn FileSystem,
    dir: &Path,
    opts: &Options,
    levels: &[Vec<manifest::TableMeta>],
    report: &mut RecoveryReport,
) -> Result<Version> {
    let mut version = Version::empty();
    version.edit(|out| -> Result<()> {
        for (level, metas) in levels.iter().enumerate().take(MAX_LEVELS) {
            for meta in metas {
                let how = opts.table_open(level);
                let t = Table::open_in(fs, &table_path(dir, meta.id), meta.id, how)?;
                report.filters_rejected += t.rejected_filters();
                out[level].push(Arc::new(t));
            }
        }
        Ok(())
    })?;
    for (level, tables) in version.levels().iter().enumerate().skip(1) {
        let live: Vec<&Arc<Table>> = tables
            .iter()
            .filter(|t| t.properties().entries > 0)
            .collect();
        for pair in live.windows(2) {
            if pair[0].max_key() >= pair[1].min_key() {
                return Err(Error::corruption(
                    dir.join(manifest::MANIFEST_FILE),
                    format!(
                        "level {level} tables {:06}.sst and {:06}.sst overlap or are out of order",
                        pair[0].id(),
                        pair[1].id()
                    ),
                ));
            }
        }
    }
    Ok(version)
}

/// Replays the logs numbered `log_number` and above by `mode`'s rules into one memtable per
/// keyspace of `ids` (the default's first), sharing one batch count; operations on any other
/// keyspace id (one dropped since) are skipped.
fn replay(
    fs: &dyn FileSystem,
    dir: &Path,
    logs: &[(u64, u64)],
    mode: WalRecovery,
    ids: &[u32],
    report: &mut RecoveryReport,
) -> Result<Vec<(u32, Arc<Memtable>)>> {
    let lead = Arc::new(Memtable::new(0));
    let recovered: Vec<(u32, Arc<Memtable>)> = ids
        .iter()
        .map(|&id| match id {
            0 => (id, Arc::clone(&lead)),
            _ => (id, Arc::new(Memtable::following(&lead))),
        })
        .collect();
    for &(id, _) in logs {
        let path = wal::wal_path(dir, id);
        let data = fs
            .read_all(&path)
            .map_err(|e| Error::io(format!("reading {}", path.display()), e))?;
        if let Some(d) = &report.wal_damage {
            if !data.is_empty() && mode == WalRecovery::TornTailOnly {
                return Err(Error::corruption(
                    &d.log,
                    format!(
                        "{} at offset {}, and the later log {} holds {} bytes: the damage is not \
                         a torn tail (WalRecovery::TornTailOnly refuses; PointInTime would \
                         recover up to offset {})",
                        d.reason,
                        d.offset,
                        path.display(),
                        data.len(),
                        d.offset
                    ),
                ));
            }
            report.wal_bytes_dropped += data.len() as u64;
            continue;
        }
        report.logs_replayed += 1;
        let scan = wal::scan(&data);
        report.batches_replayed += scan.batches.len() as u64;
        for batch in scan.batches {
            let seq = lead.next();
            for (id, ops, ranges) in batch.into_parts() {
                if let Ok(i) = ids.binary_search(&id) {
                    recovered[i].1.append(ops, seq);
                    recovered[i].1.append_ranges(ranges, seq);
                }
            }
            lead.publish(seq);
        }
        if let Some(d) = scan.damage {
            if !d.torn_tail && mode == WalRecovery::TornTailOnly {
                return Err(Error::corruption(
                    &path,
                    format!(
                        "{} at offset {}, with {} more bytes after it holding {} intact \
                         records: damage in the middle of the log (WalRecovery::TornTailOnly \
                         refuses; PointInTime would drop them)",
                        d.reason,
                        d.offset,
                        data.len() - d.offset,
                        d.later_records
                            .map_or("an unknown number of".to_string(), |n| n.to_string()),
                    ),
                ));
            }
            report.wal_bytes_dropped += (data.len() - d.offset) as u64;
            report.wal_damage = Some(WalDamage {
                log: path,
                offset: d.offset as u64,
                reason: d.reason,
                torn_tail: d.torn_tail,
                later_records: d.later_records,
            });
        }
    }
    Ok(recovered)
}

fn lock_dir(dir: &Path) -> Result<File> {
    let lock_path = dir.join("LOCK");
    let lock_file = File::create(&lock_path)
        .map_err(|e| Error::io(format!("creating {}", lock_path.display()), e))?;
    match lock_file.try_lock() {
        Ok(()) => Ok(lock_file),
        Err(std::fs::TryLockError::WouldBlock) => Err(Error::Locked {
            path: dir.to_path_buf(),
        }),
        Err(std::fs::TryLockError::Error(e)) => {
            Err(Error::io(format!("locking {}", lock_path.display()), e))
        }
    }
}

/// Opens (or creates) the database in `dir`; see the module comment for the steps.
/// Creates a new store's directory (and any missing parents) and makes each new entry
/// durable by syncing the directory holding it, deepest first: without that, a power loss
/// soon after could take the directory, and every acknowledged write in it, away.
fn create_store_dir(fs: &dyn crate::fs::FileSystem, dir: &Path) -> Result<()> {
    let missing: Vec<&Path> = dir
        .ancestors()
        .take_while(|d| !d.as_os_str().is_empty() && !d.exists())
        .collect();
    fs.create_dir(dir)
        .map_err(|e| Error::io(format!("creating {}", dir.display()), e))?;
    for created in missing {
        let parent = match created.parent() {
            Some(p) if !p.as_os_str().is_empty() => p,
            _ => Path::new("."),
        };
        crate::fs::sync_dir(fs, parent)?;
    }
    Ok(())
}

pub(super) fn open(dir: &Path, given: Options) -> Result<Inner> {
    given.validate()?;
    if !dir.exists() {
        if !given.create_if_missing {
            return Err(Error::NotFound {
                path: dir.to_path_buf(),
            });
        }
        create_store_dir(&*given.fs, dir)?;
    }
    let had_lock_file = dir.join("LOCK").exists();
    let lock_file = lock_dir(dir)?;
    let fs = &*given.fs;
    let inv = inventory(dir)?;
    let mut report = RecoveryReport::default();
    // Refusing to open leaves the directory as it was: no LOCK file of ours stays behind.
    let refuse = |e: Error| {
        if !had_lock_file {
            let _ = std::fs::remove_file(dir.join("LOCK"));
        }
        Err(e)
    };
    let m = match manifest::read_in(fs, dir)? {
        Some(_) if given.error_if_exists => {
            return refuse(Error::AlreadyExists {
                path: dir.to_path_buf(),
            })
        }
        Some(m) => m,
        None => {
            if let Some(found) = describe(&inv) {
                return refuse(Error::MissingManifest {
                    path: dir.to_path_buf(),
                    found,
                });
            }
            if !given.create_if_missing {
                return refuse(Error::NotFound {
                    path: dir.to_path_buf(),
                });
            }
            ManifestData::default()
        }
    };
    // The settings tables are written with: the record's where `given` leaves them at their
    // defaults. Read before anything in the directory changes: a damaged record refuses.
    let stored = match stored_options::read_in(fs, dir) {
        Ok(s) => s,
        Err(e) => return refuse(e),
    };
    let (opts, options_report) = stored_options::resolve(given, stored.as_ref());
    if let Err(e) = opts.validate() {
        return refuse(e);
    }
    report.options = options_report;
    let fs = &*opts.fs;
    let mut registry = Registry::of(&m);
    let recorded_own = stored.as_ref().map_or(&[][..], |s| &s.keyspaces[..]);
    let space_opts = registry.settle_own(recorded_own, &opts, &mut report.options.changed);
    let opts_of = |id: u32| -> &Arc<Options> {
        let i = space_opts.iter().position(|(k, _)| *k == id);
        &space_opts[i.unwrap_or(0)].1
    };
    let spaces =
        std::iter::once((0, &m.levels)).chain(m.keyspaces.iter().map(|k| (k.id, &k.levels)));
    let mut versions = Vec::new();
    for (id, levels) in spaces {
        versions.push((id, load_version(fs, dir, &opts, levels, &mut report)?));
    }
    let ids: Vec<u32> = versions.iter().map(|(id, _)| *id).collect();

    let tables = std::iter::once(&m.levels).chain(m.keyspaces.iter().map(|k| &k.levels));
    let live: HashSet<u64> = tables.flatten().flatten().map(|t| t.id).collect();
    let mut obsolete: Vec<PathBuf> = Vec::new();
    for &id in inv.tables.iter().filter(|id| !live.contains(id)) {
        if id < m.next_file {
            obsolete.push(table_path(dir, id));
        } else {
            report.unexplained_tables.push(table_path(dir, id));
        }
    }
    obsolete.extend(
        inv.logs
            .iter()
            .filter(|l| l.0 < m.log_number)
            .map(|l| wal::wal_path(dir, l.0)),
    );
    for temp in [manifest::temp_path(dir), stored_options::temp_path(dir)] {
        if temp.exists() {
            obsolete.push(temp);
        }
    }
    for path in &obsolete {
        if fs.remove_file(path).is_ok() {
            report.obsolete_files_removed += 1;
        }
    }

    let highest = inv
        .tables
        .iter()
        .chain(inv.logs.iter().map(|l| &l.0))
        .max()
        .map_or(0, |id| id + 1);
    let next_file = AtomicU64::new(m.next_file.max(highest).max(1));
    let mut work = Work {
        cursors: Default::default(),
        next_pick: 0,
        keyspaces: registry,
        reserved: next_file.load(Ordering::SeqCst) + ID_RESERVATION,
        running: Default::default(),
        manual: 0,
    };
    let logs: Vec<(u64, u64)> = inv
        .logs
        .iter()
        .copied()
        .filter(|l| l.0 >= m.log_number)
        .collect();
    let recovered = replay(fs, dir, &logs, opts.wal_recovery, &ids, &mut report)?;
    let wal_id = next_file.fetch_add(1, Ordering::SeqCst);
    let writer = WalWriter::create(fs, dir, wal_id)?;
    let manifest_of = |versions: &[(u32, Version)], reserved, log_number| {
        let all = versions.iter().map(|(id, v)| (*id, v));
        manifest_data(&work.keyspaces, all, reserved, log_number)
    };
    if recovered.iter().any(|(_, mem)| !mem.is_empty()) {
        // Reserve the tables' numbers in a manifest before creating the tables.
        let reserving = manifest_of(&versions, work.reserved, m.log_number);
        manifest::write(fs, dir, &reserving)?;
        // Each keyspace's filter budget (`budget_parts.rs`), no lookups seen yet.
        let spaces: Vec<Space<'_>> = versions
            .iter()
            .zip(&recovered)
            .map(|((id, version), (_, mem))| Space {
                id: *id,
                version,
                opts: opts_of(*id),
                in_store_budget: work.keyspaces.follows_store_filters(*id),
                pending: mem.key_count() as u64,
            })
            .collect();
        let parts = budget_parts::parts(&opts, &spaces, &[0.0; SLOTS]);
        drop(spaces);
        for (((_, mem), (ks, version)), part) in recovered.iter().zip(&mut versions).zip(parts) {
            if mem.is_empty() {
                continue;
            }
            let id = next_file.fetch_add(1, Ordering::SeqCst);
            let o = opts_of(*ks);
            let filters = l0_filter(o, version, part.as_ref(), mem, id);
            let Some(t) = write_l0(fs, dir, o, filters, (mem, version), id)? else {
                continue;
            };
            report.filters_rejected += t.rejected_filters();
            version.edit(|levels| levels[0].push(Arc::new(t)));
        }
        crate::fs::sync_dir(fs, dir)?;
    }
    work.reserved = work.reserved.max(next_file.load(Ordering::SeqCst));
    let record = work.keyspaces.record(&opts);
    if stored.as_ref() != Some(&record) {
        stored_options::write(fs, dir, &record)?;
    }
    manifest::write(fs, dir, &manifest_of(&versions, work.reserved, wal_id))?;
    for (id, _) in logs {
        let _ = fs.remove_file(&wal::wal_path(dir, id));
    }

    let counters = Counters::default();
    add(
        &counters.filter_validation_failures,
        report.filters_rejected,
    );
    add(&counters.wal_bytes_dropped, report.wal_bytes_dropped);
    let table_count = versions
        .iter()
        .flat_map(|(_, v)| v.levels())
        .map(Vec::len)
        .sum();
    report.log(dir, table_count);
    let pending = versions
        .iter()
        .map(|(_, v)| super::compaction::pending_bytes(v, &opts))
        .sum();
    let level0 = versions
        .iter()
        .map(|(_, v)| v.levels()[0].len())
        .max()
        .unwrap_or(0);
    let lead = Arc::new(Memtable::new(wal_id));
    let fresh = |id, version, mem| {
        let follows = work.keyspaces.follows_store_filters(id);
        let name = work.keyspaces.name(id).unwrap_or(super::DEFAULT_KEYSPACE);
        let opts = Arc::clone(opts_of(id));
        State::new((id, name), mem, Arc::new(version), opts, follows)
    };
    let mut published = Published {
        default: fresh(0, Version::empty(), Arc::clone(&lead)),
        others: Vec::new(),
    };
    for (id, version) in versions {
        match id {
            0 => published.default = fresh(0, version, Arc::clone(&lead)),
            _ => {
                let mem = Arc::new(Memtable::following(&lead));
                published.others.push((id, fresh(id, version, mem)));
            }
        }
    }
    let expiring = work.keyspaces.expiring;
    let range_deletes = work.keyspaces.range_deletes;
    Ok(Inner {
        dir: dir.to_path_buf(),
        state: arc_swap::ArcSwap::from_pointee(published),
        publish: Mutex::new(()),
        cache: crate::table::BlockCache::new(opts.block_cache_bytes).map(Arc::new),
        queue: Mutex::default(),
        groups_done: Default::default(),
        writer: Mutex::new(writer),
        spare: Mutex::default(),
        throttle: Mutex::default(),
        work: Mutex::new(work),
        signal: Mutex::new(Signal::default()),
        wake_worker: Condvar::new(),
        progress: Condvar::new(),
        counters: Arc::new(counters),
        writes: AtomicU64::new(0),
        quiet: Mutex::new((0, std::time::Instant::now())),
        slowing: Default::default(),
        keyspace_full: Default::default(),
        expiring: expiring.into(),
        range_deletes: range_deletes.into(),
        seen_now: 0.into(),
        lookup_weights: Default::default(),
        pending_compaction_bytes: AtomicU64::new(pending),
        level0_tables: std::sync::atomic::AtomicUsize::new(level0),
        settling: AtomicU64::new(0),
        graveyard: Default::default(),
        next_file,
        errors: ErrorState::default(),
        recovery: report,
        snapshots: Arc::default(),
        opts,
        _lock: lock_file,
    })
}
