//! A state machine's snapshots: building one (a checkpoint of the live store, packed),
//! declaring it the newest, and installing a received one in place of the live store — the
//! steps and their crash safety are the parent module's comment.

use std::fs;
use std::io::{Seek, SeekFrom};
use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;
use std::sync::Arc;

use openraft::storage::Snapshot;
use openraft::RaftSnapshotBuilder;

use super::keyspaces::Spaces;
use super::sessions::Sessions;
use super::{
    blocking, io_err, read_applied, read_applied_at, read_membership_at, remove_any, snap_err,
    SnapshotFile, StateMachine, StorageResult,
};
use crate::db::Db;
use crate::replication::codec;
use crate::replication::snapshot::{self, Meta, RaftMeta};
use crate::replication::TypeConfig;

impl StateMachine {
    /// Makes `pack` (with `meta`) the newest snapshot if it is newer than the current one,
    /// and returns true; otherwise removes it. An older pack is deleted: a sender holding it
    /// open keeps reading it (the file lives until its last handle closes).
    fn declare(&self, meta: Meta, pack: &Path) -> crate::Result<bool> {
        let snaps = self.shared.dir.join("snapshots");
        let path = snaps.join(format!("snap-{}.pack", meta.snapshot_id));
        let mut st = self.lock();
        if st
            .current
            .as_ref()
            .is_some_and(|(c, _)| c.last_log_id >= meta.last_log_id)
        {
            drop(st);
            remove_any(pack);
            return Ok(false);
        }
        fs::rename(pack, &path).map_err(io_err(format!("renaming {}", pack.display())))?;
        snapshot::sync_dir(&snaps).map_err(io_err(format!("syncing {}", snaps.display())))?;
        if let Some((_, old)) = st.current.replace((meta, path)) {
            remove_any(&old);
        }
        Ok(true)
    }

    /// Builds a snapshot of the live store (blocking: run off the async runtime).
    fn build(&self) -> crate::Result<(Meta, fs::File)> {
        let db = self.shared.db.load_full();
        let view = db.snapshot();
        let last_log_id = read_applied_at(&db, &view)?;
        let last_membership = read_membership_at(&db, &view)?;
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos());
        let snapshot_id = match last_log_id {
            Some(id) => format!(
                "{}-{}-{}-{nanos}",
                id.leader_id.term, id.leader_id.node_id, id.index
            ),
            None => format!("0-0-0-{nanos}"),
        };
        let meta = Meta {
            last_log_id,
            last_membership,
            snapshot_id,
        };
        let ckpt = self.temp_name("checkpoint");
        db.checkpoint_of(&view, &ckpt)?;
        drop(view);
        // The state machine is durable up to the snapshot before the snapshot is declared,
        // so the log is never purged past what survives a crash (module comment).
        db.sync_wal()?;
        let tmp = self.temp_name("pack");
        let packed = snapshot::pack(&ckpt, &meta, &tmp);
        remove_any(&ckpt);
        packed.map_err(io_err(format!("packing a snapshot into {}", tmp.display())))?;
        // Opened before it is declared: if a newer one was declared meanwhile, this one is
        // removed, and the handle still reads it.
        let file = fs::File::open(&tmp).map_err(io_err(format!("opening {}", tmp.display())))?;
        self.declare(meta.clone(), &tmp)?;
        Ok((meta, file))
    }

    /// Installs the pack read from `file` (blocking). `pack_path` is where it was received.
    pub(super) fn install(
        &self,
        meta: &RaftMeta,
        mut file: fs::File,
        pack_path: Option<PathBuf>,
    ) -> crate::Result<()> {
        let dir = &self.shared.dir;
        file.seek(SeekFrom::Start(0))
            .map_err(io_err("rewinding a received snapshot".into()))?;
        let generation = self.lock().generation + 1;
        let staging = dir.join(format!("install-{generation}"));
        remove_any(&staging);
        let got = snapshot::unpack(file, &staging).map_err(|e| crate::Error::Corruption {
            path: pack_path.clone().unwrap_or_default(),
            reason: format!("received snapshot: {e}"),
        })?;
        if got.last_log_id != meta.last_log_id || got.last_membership != meta.last_membership {
            remove_any(&staging);
            return Err(crate::Error::Corruption {
                path: pack_path.unwrap_or_default(),
                reason: format!(
                    "received snapshot {} holds up to {:?}, the leader announced up to {:?}",
                    got.snapshot_id, got.last_log_id, meta.last_log_id
                ),
            });
        }
        let live = dir.join(format!("data-{generation}"));
        fs::rename(&staging, &live).map_err(io_err(format!("renaming {}", staging.display())))?;
        snapshot::sync_dir(dir).map_err(io_err(format!("syncing {}", dir.display())))?;
        let db = match Db::open(&live, self.shared.opts.clone()) {
            Ok(db) => db,
            Err(e) => {
                remove_any(&live);
                return Err(e);
            }
        };
        codec::check_layout(&db, "state machine")?;
        let applied = read_applied(&db)?;
        if applied != meta.last_log_id {
            drop(db);
            remove_any(&live);
            return Err(crate::Error::Corruption {
                path: live,
                reason: format!(
                    "snapshot's store is applied up to {applied:?}, its meta says {:?}",
                    meta.last_log_id
                ),
            });
        }
        let sessions = match Sessions::load(&db) {
            Ok(s) => s,
            Err(e) => {
                drop(db);
                remove_any(&live);
                return Err(e);
            }
        };
        let db = Arc::new(db);
        let spaces = match Spaces::load(Arc::clone(&db)) {
            Ok(s) => s,
            Err(e) => {
                drop(db);
                remove_any(&live);
                return Err(e);
            }
        };
        // The commit point: from here a crash reopens the new store.
        crate::fs::write_atomic(
            &crate::fs::StdFs,
            dir,
            "CURRENT.tmp",
            "CURRENT",
            format!("data-{generation}\n").as_bytes(),
        )?;
        let old = {
            // Swapped under the sessions' lock: an apply sees the new store with its table.
            let mut table = self
                .shared
                .sessions
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            *table = sessions;
            spaces.tidy();
            self.shared.spaces.store(Arc::new(spaces));
            self.shared.db.swap(db)
        };
        let old_dir = dir.join(format!("data-{}", generation - 1));
        {
            let mut st = self.lock();
            st.generation = generation;
            st.retired.push((old, old_dir));
        }
        self.reap();
        self.shared.installed.fetch_add(1, Ordering::Relaxed);
        if let Some(p) = pack_path {
            // Keep what was received as this node's newest snapshot (it is one).
            let _ = self.declare(got, &p);
        }
        Ok(())
    }

    /// Copies `file` from its start to the new file `to`, synced; returns `to` opened.
    pub(super) fn copy_in(&self, mut file: fs::File, to: &Path) -> crate::Result<fs::File> {
        let err = io_err(format!("copying a snapshot to {}", to.display()));
        let copied = (|| {
            file.seek(SeekFrom::Start(0))?;
            let mut out = fs::File::create(to)?;
            std::io::copy(&mut file, &mut out)?;
            out.sync_all()?;
            fs::File::open(to)
        })();
        copied.map_err(err)
    }

    /// Deletes replaced stores no reader holds any more.
    fn reap(&self) {
        let mut st = self.lock();
        st.retired.retain(|(db, dir)| {
            if Arc::strong_count(db) == 1 {
                remove_any(dir);
                false
            } else {
                true
            }
        });
    }
}

/// Builds snapshots of a [`StateMachine`] (openraft's `RaftSnapshotBuilder`).
pub struct SnapshotBuilder {
    pub(super) sm: StateMachine,
}

impl RaftSnapshotBuilder<TypeConfig> for SnapshotBuilder {
    type SnapshotData = tokio::fs::File;

    /// A checkpoint of the live store as of one moment, with the applied position and
    /// membership read at that same moment, packed and declared (module comment).
    async fn build_snapshot(&mut self) -> StorageResult<SnapshotFile> {
        let sm = self.sm.clone();
        let (meta, file) = blocking(move || sm.build()).await.map_err(snap_err)?;
        Ok(Snapshot {
            meta: meta.raft(),
            snapshot: tokio::fs::File::from_std(file),
        })
    }
}

impl StateMachine {
    /// A new file under `snapshots/` for the transport to write a received snapshot to;
    /// `install_snapshot` takes it over.
    pub async fn begin_receiving_snapshot(&self) -> StorageResult<tokio::fs::File> {
        let path = self.temp_name("receive");
        let file = tokio::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create_new(true)
            .open(&path)
            .await
            .map_err(snap_err)?;
        if let Some(old) = self.lock().receiving.replace(path) {
            remove_any(&old);
        }
        Ok(file)
    }
}

impl StateMachine {
    /// Bytes free to an unprivileged writer on the disk holding `snapshots/`; `None` where
    /// that cannot be told.
    pub(crate) fn free_bytes(&self) -> Option<u64> {
        free_bytes(&self.shared.dir.join("snapshots"))
    }
}

#[cfg(target_os = "linux")]
fn free_bytes(path: &Path) -> Option<u64> {
    use std::os::unix::ffi::OsStrExt;
    let c = std::ffi::CString::new(path.as_os_str().as_bytes()).ok()?;
    let mut st = std::mem::MaybeUninit::<libc::statvfs>::uninit();
    // SAFETY: `c` is a NUL-terminated path and `st` a buffer statvfs fills on success.
    let r = unsafe { libc::statvfs(c.as_ptr(), st.as_mut_ptr()) };
    if r != 0 {
        return None;
    }
    // SAFETY: statvfs returned 0, so it filled `st`.
    let st = unsafe { st.assume_init() };
    #[allow(
        clippy::useless_conversion,
        reason = "the fields are u32 on 32-bit targets"
    )]
    Some(u64::from(st.f_bavail).saturating_mul(u64::from(st.f_frsize)))
}

#[cfg(not(target_os = "linux"))]
fn free_bytes(_: &Path) -> Option<u64> {
    None
}

/// Whether `file` is the file at `path`.
pub(super) fn same_file(file: &fs::File, path: &Path) -> bool {
    use std::os::unix::fs::MetadataExt;
    match (file.metadata(), fs::metadata(path)) {
        (Ok(a), Ok(b)) => a.dev() == b.dev() && a.ino() == b.ino(),
        _ => false,
    }
}
