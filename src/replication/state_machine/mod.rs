//! The replicated data in a `Db` (openraft's `RaftStateMachine`), and its snapshots.
//!
//! Layout under the state machine's directory (FORMAT.md §7.2): `CURRENT` names the live
//! store, `data-<generation>/`; its keys are `d` + the user's key, and `m/applied` and
//! `m/membership`, written in the same `WriteBatch` as the data they describe, so the
//! applied position can never disagree with the data. `snapshots/snap-<id>.pack` is the
//! newest snapshot (`snapshot`).
//!
//! **Durability: applies are not synced.** The log is: every entry applied was synced to the
//! log before it could commit. After a power loss the state machine may come back at an
//! earlier applied position; openraft then applies the committed entries after it again,
//! from the log. That needs those entries to still be in the log, and openraft purges only
//! up to the last snapshot. So a snapshot is declared (its pack renamed into place) only after
//! `Db::sync_wal` has made the state machine durable at least up to it: the applied position
//! that survives any crash is at or after every purge. One fsync per snapshot replaces one
//! per apply. `tests/replication.rs` checks it with power losses.
//!
//! **Installing a snapshot** unpacks it into `install-<g>/` (every file checked and synced),
//! renames that to `data-<g>/`, opens it and checks its applied position against the
//! snapshot's meta, then replaces `CURRENT` (written whole or not at all). A crash before that
//! last step leaves the old store live; `open` removes any directory `CURRENT` does not name.

use std::fs;
use std::ops::Bound;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

use arc_swap::ArcSwap;
use futures_util::Stream;
use openraft::storage::{EntryResponder, RaftStateMachine, Snapshot};

use super::snapshot::{self, Meta, RaftMeta};
use super::{codec, LogId, StoredMembership, TypeConfig};
use crate::db::{Db, Options};

mod apply;
mod calls;
mod keyspaces;
mod reads;
pub(crate) mod sessions;
mod snapshots;

pub use apply::NO_PROCEDURES;
pub use calls::{CallContext, Procedures, Stored};
use keyspaces::Spaces;
pub use reads::Scan;

pub use snapshots::SnapshotBuilder;

const DATA: u8 = b'd';
const APPLIED: &[u8] = b"m/applied";
const MEMBERSHIP: &[u8] = b"m/membership";

type StorageResult<T> = Result<T, std::io::Error>;

/// What a state machine's operation was doing when it failed.
#[derive(Clone, Copy)]
enum ErrorVerb {
    Read,
    Write,
}

/// A snapshot as openraft hands it around: its meta and its pack, open.
pub type SnapshotFile = openraft::alias::SnapshotOf<TypeConfig, tokio::fs::File>;

/// The applied position and the membership as of it.
pub type Applied = (Option<LogId>, StoredMembership);

fn sm_err(verb: ErrorVerb, e: impl std::fmt::Display) -> std::io::Error {
    let verb = match verb {
        ErrorVerb::Read => "reading",
        ErrorVerb::Write => "writing",
    };
    std::io::Error::other(format!("{verb} the state machine: {e}"))
}

fn snap_err(e: impl std::fmt::Display) -> std::io::Error {
    std::io::Error::other(format!("snapshot: {e}"))
}

/// The store key of the user's `key`.
pub(crate) fn data_key(key: &[u8]) -> Vec<u8> {
    let mut k = Vec::with_capacity(key.len() + 1);
    k.push(DATA);
    k.extend_from_slice(key);
    k
}

/// The bounds in the default place of the data keys from `start` to `end` (`data_key`'s):
/// an open end stays within `DATA`'s prefix, off the state machine's own keys.
pub(crate) fn data_range(
    start: Bound<&[u8]>,
    end: Bound<&[u8]>,
) -> (Bound<Vec<u8>>, Bound<Vec<u8>>) {
    let start = match start {
        Bound::Unbounded => Bound::Included(vec![DATA]),
        b => b.map(data_key),
    };
    let end = match end {
        Bound::Unbounded => Bound::Excluded(vec![DATA + 1]),
        b => b.map(data_key),
    };
    (start, end)
}

/// The replicated data of one node. Clones share it.
#[derive(Clone)]
pub struct StateMachine {
    shared: Arc<Shared>,
    /// What `Op::Call`s run (`calls.rs`); none: each answers `apply::NO_PROCEDURES`.
    procedures: Option<Arc<dyn Procedures>>,
}

struct Shared {
    dir: PathBuf,
    opts: Options,
    /// The live store; readers load it, an install swaps it.
    db: ArcSwap<Db>,
    /// The live store's keyspace map (`keyspaces.rs`): swapped by an apply that changes it,
    /// and by an install, with the store.
    spaces: ArcSwap<Spaces>,
    state: Mutex<State>,
    next_temp: AtomicU64,
    installed: AtomicU64,
    /// The write sessions of the live store (`sessions.rs`).
    sessions: Mutex<sessions::Sessions>,
}

struct State {
    generation: u64,
    /// The newest snapshot: its meta and its pack.
    current: Option<(Meta, PathBuf)>,
    /// The path `begin_receiving_snapshot` gave out last.
    receiving: Option<PathBuf>,
    /// Replaced stores, deleted once no reader holds them.
    retired: Vec<(Arc<Db>, PathBuf)>,
}

fn io_err(what: String) -> impl FnOnce(std::io::Error) -> crate::Error {
    move |e| crate::Error::io(what, e)
}

impl StateMachine {
    /// Opens (or creates) the state machine in `dir`; its store is opened with `opts`, which
    /// must write table format 6 or later: the log may carry puts with an expiry
    /// (`Op::PutUntil`) and range deletes (`Op::DeleteRange`), and every node must apply
    /// every entry.
    pub fn open(dir: impl AsRef<Path>, opts: Options) -> crate::Result<StateMachine> {
        if opts.table_format_version < 6 {
            return Err(crate::Error::InvalidArgument(format!(
                "a replicated store writes table format 6 or later (expiring puts, range \
                 deletes), not {} (Options::table_format_version)",
                opts.table_format_version
            )));
        }
        let dir = dir.as_ref().to_path_buf();
        let snaps = dir.join("snapshots");
        fs::create_dir_all(&snaps).map_err(io_err(format!("creating {}", snaps.display())))?;
        let generation = match fs::read_to_string(dir.join("CURRENT")) {
            Ok(s) => parse_current(&s).ok_or_else(|| crate::Error::Corruption {
                path: dir.join("CURRENT"),
                reason: format!("names {s:?}, not data-<generation>"),
            })?,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                // Nothing was ever made live here: start empty.
                crate::fs::write_atomic(
                    &crate::fs::StdFs,
                    &dir,
                    "CURRENT.tmp",
                    "CURRENT",
                    b"data-0\n",
                )?;
                0
            }
            Err(e) => {
                return Err(crate::Error::io(
                    format!("reading {}/CURRENT", dir.display()),
                    e,
                ))
            }
        };
        let live = format!("data-{generation}");
        for e in fs::read_dir(&dir).map_err(io_err(format!("listing {}", dir.display())))? {
            let e = e.map_err(io_err(format!("listing {}", dir.display())))?;
            let name = e.file_name().to_string_lossy().into_owned();
            if name != live && name != "CURRENT" && name != "snapshots" {
                remove_any(&e.path());
            }
        }
        let db = Db::open(dir.join(&live), opts.clone())?;
        codec::check_layout(&db, "state machine")?;
        let applied = read_applied(&db)?;
        let sessions = sessions::Sessions::load(&db)?;
        let db = Arc::new(db);
        let spaces = Spaces::load(Arc::clone(&db))?;
        spaces.tidy();
        // The newest readable snapshot at or before the applied position is kept.
        let mut current: Option<(Meta, PathBuf)> = None;
        for e in fs::read_dir(&snaps).map_err(io_err(format!("listing {}", snaps.display())))? {
            let e = e.map_err(io_err(format!("listing {}", snaps.display())))?;
            let path = e.path();
            let is_pack = e.file_name().to_string_lossy().starts_with("snap-")
                && path.extension().is_some_and(|x| x == "pack");
            let meta = if is_pack {
                snapshot::read_meta(&path).ok()
            } else {
                None
            };
            match meta {
                Some(m)
                    if m.last_log_id <= applied
                        && current
                            .as_ref()
                            .is_none_or(|(c, _)| c.last_log_id < m.last_log_id) =>
                {
                    if let Some((_, old)) = current.replace((m, path)) {
                        remove_any(&old);
                    }
                }
                _ => remove_any(&path),
            }
        }
        Ok(StateMachine {
            shared: Arc::new(Shared {
                dir,
                opts,
                db: ArcSwap::new(db),
                spaces: ArcSwap::from_pointee(spaces),
                state: Mutex::new(State {
                    generation,
                    current,
                    receiving: None,
                    retired: Vec::new(),
                }),
                next_temp: AtomicU64::new(0),
                installed: AtomicU64::new(0),
                sessions: Mutex::new(sessions),
            }),
            procedures: None,
        })
    }

    /// The state machine running `procedures` for the entries' `Op::Call`s. Every node of
    /// a cluster must run the same ones (`Procedures`).
    pub fn with_procedures(mut self, procedures: Option<Arc<dyn Procedures>>) -> StateMachine {
        self.procedures = procedures;
        self
    }

    /// The live store. Its user keys carry a one-byte prefix: read through
    /// [`StateMachine::get`] and [`StateMachine::scan`] rather than directly.
    pub fn db(&self) -> Arc<Db> {
        self.shared.db.load_full()
    }

    /// The applied position and membership, as stored.
    pub fn applied(&self) -> crate::Result<Applied> {
        let db = self.shared.db.load();
        Ok((read_applied(&db)?, read_membership(&db)?))
    }

    /// Removes the file `begin_receiving_snapshot` gave out last (a refused snapshot).
    pub(crate) fn discard_received(&self) {
        if let Some(p) = self.lock().receiving.take() {
            remove_any(&p);
        }
    }

    /// Snapshots installed since this state machine was opened.
    pub fn snapshots_installed(&self) -> u64 {
        self.shared.installed.load(Ordering::Relaxed)
    }

    /// The newest snapshot's meta, if there is one.
    pub fn current_snapshot(&self) -> Option<RaftMeta> {
        self.lock().current.as_ref().map(|(m, _)| m.raft())
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.shared
            .state
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    fn temp_name(&self, what: &str) -> PathBuf {
        let n = self.shared.next_temp.fetch_add(1, Ordering::Relaxed);
        self.shared
            .dir
            .join("snapshots")
            .join(format!("{what}-{n}.tmp"))
    }
}

/// Removes a file or a directory tree, ignoring failures (temporary and replaced data).
fn remove_any(path: &Path) {
    if path.is_dir() {
        let _ = fs::remove_dir_all(path);
    } else {
        let _ = fs::remove_file(path);
    }
}

fn parse_current(s: &str) -> Option<u64> {
    s.strip_suffix('\n')?.strip_prefix("data-")?.parse().ok()
}

fn corrupt(db: &Db, what: &str, reason: String) -> crate::Error {
    crate::Error::Corruption {
        path: db.path().to_path_buf(),
        reason: format!("state machine {what}: {reason}"),
    }
}

fn read_applied(db: &Db) -> crate::Result<Option<LogId>> {
    match db.get(APPLIED)? {
        None => Ok(None),
        Some(b) => codec::decode_opt_log_id(&b).map_err(|r| corrupt(db, "applied position", r)),
    }
}

fn read_membership(db: &Db) -> crate::Result<StoredMembership> {
    match db.get(MEMBERSHIP)? {
        None => Ok(StoredMembership::default()),
        Some(b) => codec::decode_stored_membership(&b).map_err(|r| corrupt(db, "membership", r)),
    }
}

fn read_applied_at(db: &Db, s: &crate::db::Snapshot) -> crate::Result<Option<LogId>> {
    match s.get(APPLIED)? {
        None => Ok(None),
        Some(b) => codec::decode_opt_log_id(&b).map_err(|r| corrupt(db, "applied position", r)),
    }
}

fn read_membership_at(db: &Db, s: &crate::db::Snapshot) -> crate::Result<StoredMembership> {
    match s.get(MEMBERSHIP)? {
        None => Ok(StoredMembership::default()),
        Some(b) => codec::decode_stored_membership(&b).map_err(|r| corrupt(db, "membership", r)),
    }
}

/// Runs blocking store work off the async runtime's workers.
async fn blocking<T: Send + 'static>(
    f: impl FnOnce() -> crate::Result<T> + Send + 'static,
) -> crate::Result<T> {
    tokio::task::spawn_blocking(f)
        .await
        .map_err(|e| crate::Error::io("a blocking task", std::io::Error::other(e.to_string())))?
}

impl RaftStateMachine<TypeConfig> for StateMachine {
    type SnapshotData = tokio::fs::File;
    type SnapshotBuilder = SnapshotBuilder;

    async fn applied_state(&mut self) -> StorageResult<Applied> {
        self.applied().map_err(|e| sm_err(ErrorVerb::Read, e))
    }

    /// Applies `entries` in order (`apply.rs`).
    async fn apply<Strm>(&mut self, entries: Strm) -> StorageResult<()>
    where
        Strm: Stream<Item = Result<EntryResponder<TypeConfig>, std::io::Error>> + Unpin + Send,
    {
        self.apply_entries(entries).await
    }

    async fn get_snapshot_builder(&mut self) -> SnapshotBuilder {
        SnapshotBuilder { sm: self.clone() }
    }

    /// Verifies and swaps in the received snapshot (module comment); on any failure the
    /// live store is untouched and the error names what was wrong.
    async fn install_snapshot(
        &mut self,
        meta: &RaftMeta,
        snapshot: tokio::fs::File,
    ) -> StorageResult<()> {
        let mut snapshot = snapshot;
        // Whatever the transport wrote is on its way to the file before it is read back.
        tokio::io::AsyncWriteExt::flush(&mut snapshot)
            .await
            .map_err(snap_err)?;
        let mut file = snapshot.into_std().await;
        let mut path = self.lock().receiving.take();
        if !path
            .as_ref()
            .is_some_and(|p| snapshots::same_file(&file, p))
        {
            // Handed a file other than the one `begin_receiving_snapshot` made (a caller
            // that had the pack at hand): copy it in, so it is kept as this node's snapshot.
            if let Some(old) = path.take() {
                remove_any(&old);
            }
            let copy = self.temp_name("receive");
            let sm = self.clone();
            file = blocking(move || sm.copy_in(file, &copy).map(|f| (f, copy)))
                .await
                .map(|(f, copy)| {
                    path = Some(copy);
                    f
                })
                .map_err(snap_err)?;
        }
        let pack_path = path.clone();
        let sm = self.clone();
        let meta2 = meta.clone();
        let result = blocking(move || sm.install(&meta2, file, pack_path)).await;
        if let (Err(_), Some(p)) = (&result, path) {
            remove_any(&p);
        }
        result.map_err(snap_err)
    }

    async fn get_current_snapshot(&mut self) -> StorageResult<Option<SnapshotFile>> {
        // Opened under the lock: a newer snapshot's `declare` deletes the pack it replaces
        // under it, so the one named is there, and the handle keeps it readable after. (Opened
        // after the lock, a build finishing in between made the open fail, a storage error
        // that stopped the node's Raft for good.)
        let (meta, file) = {
            let st = self.lock();
            let Some((meta, path)) = st.current.as_ref() else {
                return Ok(None);
            };
            (meta.raft(), fs::File::open(path).map_err(snap_err)?)
        };
        Ok(Some(Snapshot {
            meta,
            snapshot: tokio::fs::File::from_std(file),
        }))
    }
}
