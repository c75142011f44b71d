//! [`PowerLossFs`]: the real file system plus a model of what a power loss would keep, so a
//! test can cut the power at any operation and reopen what a restarted machine would find.
//!
//! The model is the one LevelDB's `FaultInjectionTestEnv` (`DropUnsyncedFileData`,
//! `DeleteFilesCreatedAfterLastDirSync`) and RocksDB's `FaultInjectionTestFS` use:
//! - A file's bytes are durable up to its last `sync` (`fdatasync`). The bytes after it may be
//!   lost: all of them, a random prefix of them, or random whole 4 KiB pages (a page the
//!   kernel never wrote back reads as zeros) — [`UnsyncedTail`].
//! - A directory entry (a create, a rename, a remove) is durable only once its directory was
//!   synced. A power loss restores the entries of the last `sync_dir`: a file created since is
//!   gone, a file removed since is back with its durable bytes, a rename is undone.
//! - A truncation (a failed append cut back, or a re-created file) is durable at the file's
//!   next `sync`; until then the power loss keeps the bytes synced before it.
//! - A directory made with `create_dir` (a new store's) is durable once its parent was
//!   synced; until then a power loss takes it away with every file in it.
//!
//! Every operation but the syncs also runs on the real file system, so the store works as
//! usual and reads its files there; the syncs only move the model's durable state (a real
//! `fsync` would cost time and show nothing the model does not). `cut_at(n)` makes operation
//! `n` (counting from 1) and every later one fail with `EIO` and change nothing — the machine
//! stopped. `write_durable` then writes what the restart finds into a fresh directory, where
//! the store is reopened.
//!
//! Each file's bytes are kept in memory (the model needs what was synced even after the real
//! file changed), so this is for test-sized stores.

use std::collections::{BTreeMap, HashMap};
use std::fmt;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard};

use super::{CreateMode, FileSystem, StdFs, WritableFile};

/// What a power loss leaves of the bytes written after a file's last sync.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum UnsyncedTail {
    /// None of them.
    Dropped,
    /// A random prefix of them (writes reached the disk in order, up to some point).
    RandomPrefix,
    /// Each 4 KiB page of them kept or zeroed at random, the file ending at the last page
    /// kept (write-back in any order; holes read as zeros).
    RandomPages,
}

/// The page write-back works in, for `UnsyncedTail::RandomPages`.
const PAGE: usize = 4096;

/// One file's contents as the model knows them.
#[derive(Default)]
struct FileData {
    /// Everything written (what the real file holds now).
    data: Vec<u8>,
    /// `data[..synced]` is durable, unless `before_truncate` is set.
    synced: usize,
    /// The durable bytes when a truncation cut below them and no sync has followed.
    before_truncate: Option<Vec<u8>>,
}

impl FileData {
    fn durable(&self) -> &[u8] {
        self.before_truncate
            .as_deref()
            .unwrap_or(&self.data[..self.synced])
    }

    /// Bytes written after the durable ones (none while a truncation is undurable).
    fn unsynced(&self) -> &[u8] {
        match self.before_truncate {
            Some(_) => &[],
            None => &self.data[self.synced..],
        }
    }
}

#[derive(Default)]
struct PowerState {
    /// Operations counted so far.
    ops: u64,
    /// The operation number at which the power goes.
    cut_at: Option<u64>,
    /// The power is gone: every operation fails.
    cut: bool,
    next_id: u64,
    files: HashMap<u64, FileData>,
    /// The directory entries as they are now.
    live: BTreeMap<PathBuf, u64>,
    /// The directory entries a power loss would leave.
    durable: BTreeMap<PathBuf, u64>,
    /// Directories created through `create_dir`, and whether their entry is durable (their
    /// parent was synced since). Directories that existed before are durable.
    dirs: BTreeMap<PathBuf, bool>,
}

impl PowerState {
    /// Counts an operation; an error if the power is (now) gone.
    fn step(&mut self) -> io::Result<()> {
        self.ops += 1;
        if self.cut_at == Some(self.ops) {
            self.cut = true;
        }
        if self.cut {
            Err(io::Error::from_raw_os_error(5)) // EIO
        } else {
            Ok(())
        }
    }

    fn new_file(&mut self, data: Vec<u8>) -> u64 {
        self.next_id += 1;
        let synced = data.len();
        self.files.insert(
            self.next_id,
            FileData {
                data,
                synced,
                before_truncate: None,
            },
        );
        self.next_id
    }

    /// Forgets files no entry, live or durable, names.
    fn collect(&mut self) {
        let (live, durable) = (&self.live, &self.durable);
        self.files
            .retain(|id, _| live.values().chain(durable.values()).any(|v| v == id));
    }
}

/// A `FileSystem` over the real one that knows what a power loss would keep (module docs).
/// Clones share one state, so the store and the test see the same model.
#[derive(Clone, Default)]
pub struct PowerLossFs {
    state: Arc<Mutex<PowerState>>,
}

impl fmt::Debug for PowerLossFs {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let s = self.lock();
        f.debug_struct("PowerLossFs")
            .field("ops", &s.ops)
            .field("cut", &s.cut)
            .finish()
    }
}

impl PowerLossFs {
    /// A model that knows no files yet: for a store created under it.
    pub fn new() -> Self {
        Self::default()
    }

    /// A model whose starting point is the files in `dir` now, all of them durable: for a
    /// store reopened under it after an earlier power loss.
    pub fn adopting(dir: &Path) -> io::Result<Self> {
        let fs = Self::new();
        let mut s = fs.lock();
        for entry in std::fs::read_dir(dir)? {
            let entry = entry?;
            if entry.file_type()?.is_file() {
                let id = s.new_file(std::fs::read(entry.path())?);
                s.live.insert(entry.path(), id);
                s.durable.insert(entry.path(), id);
            }
        }
        drop(s);
        Ok(fs)
    }

    fn lock(&self) -> MutexGuard<'_, PowerState> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The power goes at operation `n` (counting from 1 since this file system was made):
    /// it and every later operation fail with `EIO` and change nothing.
    pub fn cut_at(&self, n: u64) {
        self.lock().cut_at = Some(n);
    }

    /// The power goes now.
    pub fn cut_now(&self) {
        self.lock().cut = true;
    }

    /// Whether the power is gone.
    pub fn is_cut(&self) -> bool {
        self.lock().cut
    }

    /// Operations counted so far (failed ones included).
    pub fn ops(&self) -> u64 {
        self.lock().ops
    }

    /// Writes what a restart after the power loss finds under `from` into the directory `to`
    /// (which must exist): every entry durable there, with its durable bytes and what `tail`
    /// keeps of the rest (random choices from `seed`).
    pub fn write_durable(
        &self,
        from: &Path,
        to: &Path,
        tail: UnsyncedTail,
        seed: u64,
    ) -> io::Result<()> {
        let s = self.lock();
        let mut rng = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
        let mut next = move || {
            rng ^= rng >> 12;
            rng ^= rng << 25;
            rng ^= rng >> 27;
            rng.wrapping_mul(0x2545_F491_4F6C_DD1D)
        };
        // A directory created since its parent was last synced is gone, with all it holds.
        let gone = |p: &Path| p.ancestors().any(|d| s.dirs.get(d) == Some(&false));
        for (path, id) in &s.durable {
            let Ok(rel) = path.strip_prefix(from) else {
                continue;
            };
            if gone(path) {
                continue;
            }
            let Some(f) = s.files.get(id) else {
                continue;
            };
            let (durable, unsynced) = (f.durable(), f.unsynced());
            let mut out = durable.to_vec();
            match tail {
                UnsyncedTail::Dropped => {}
                UnsyncedTail::RandomPrefix => {
                    let keep = (next() % (unsynced.len() as u64 + 1)) as usize;
                    out.extend_from_slice(&unsynced[..keep]);
                }
                UnsyncedTail::RandomPages => {
                    // Pages by file offset: the first may be partly durable already.
                    let mut pos = durable.len();
                    let mut pages = Vec::new();
                    while pos < f.data.len() && !unsynced.is_empty() {
                        let end = ((pos / PAGE + 1) * PAGE).min(f.data.len());
                        pages.push((pos, end, next() % 2 == 0));
                        pos = end;
                    }
                    if let Some(last) = pages.iter().rposition(|p| p.2) {
                        for &(a, b, kept) in &pages[..=last] {
                            if kept {
                                out.extend_from_slice(&f.data[a..b]);
                            } else {
                                out.resize(out.len() + (b - a), 0);
                            }
                        }
                    }
                }
            }
            std::fs::write(to.join(rel), &out)?;
        }
        Ok(())
    }
}

struct PowerFile {
    fs: PowerLossFs,
    id: u64,
    inner: Box<dyn WritableFile>,
}

impl WritableFile for PowerFile {
    fn write_all(&mut self, buf: &[u8]) -> io::Result<()> {
        let mut s = self.fs.lock();
        s.step()?;
        self.inner.write_all(buf)?;
        if let Some(f) = s.files.get_mut(&self.id) {
            f.data.extend_from_slice(buf);
        }
        Ok(())
    }
    fn sync(&mut self) -> io::Result<()> {
        let mut s = self.fs.lock();
        s.step()?;
        if let Some(f) = s.files.get_mut(&self.id) {
            f.synced = f.data.len();
            f.before_truncate = None;
        }
        Ok(())
    }
    fn truncate(&mut self, len: u64) -> io::Result<()> {
        let mut s = self.fs.lock();
        s.step()?;
        self.inner.truncate(len)?;
        if let Some(f) = s.files.get_mut(&self.id) {
            let len = usize::try_from(len).unwrap_or(usize::MAX).min(f.data.len());
            if len < f.synced && f.before_truncate.is_none() {
                f.before_truncate = Some(f.data[..f.synced].to_vec());
            }
            f.data.truncate(len);
            f.synced = f.synced.min(len);
        }
        Ok(())
    }
}

impl FileSystem for PowerLossFs {
    fn create(&self, path: &Path, mode: CreateMode) -> io::Result<Box<dyn WritableFile>> {
        let mut s = self.lock();
        s.step()?;
        let inner = StdFs.create(path, mode)?;
        // Truncating an existing file keeps its inode (and, until a sync, its durable bytes).
        let id = match s.live.get(path).copied() {
            Some(id) if mode == CreateMode::Truncate => {
                if let Some(f) = s.files.get_mut(&id) {
                    if f.before_truncate.is_none() && f.synced > 0 {
                        f.before_truncate = Some(f.data[..f.synced].to_vec());
                    }
                    f.data.clear();
                    f.synced = 0;
                }
                id
            }
            _ => s.new_file(Vec::new()),
        };
        s.live.insert(path.to_path_buf(), id);
        Ok(Box::new(PowerFile {
            fs: self.clone(),
            id,
            inner,
        }))
    }
    fn rename(&self, from: &Path, to: &Path) -> io::Result<()> {
        let mut s = self.lock();
        s.step()?;
        StdFs.rename(from, to)?;
        if let Some(id) = s.live.remove(from) {
            s.live.insert(to.to_path_buf(), id);
        }
        s.collect();
        Ok(())
    }
    fn remove_file(&self, path: &Path) -> io::Result<()> {
        let mut s = self.lock();
        s.step()?;
        StdFs.remove_file(path)?;
        s.live.remove(path);
        s.collect();
        Ok(())
    }
    fn create_dir(&self, dir: &Path) -> io::Result<()> {
        let mut s = self.lock();
        s.step()?;
        let missing: Vec<PathBuf> = dir
            .ancestors()
            .take_while(|d| !d.as_os_str().is_empty() && !d.exists())
            .map(Path::to_path_buf)
            .collect();
        std::fs::create_dir_all(dir)?;
        for d in missing {
            s.dirs.insert(d, false);
        }
        Ok(())
    }
    fn sync_dir(&self, dir: &Path) -> io::Result<()> {
        let mut s = self.lock();
        s.step()?;
        let s = &mut *s;
        for (d, durable) in s.dirs.iter_mut() {
            if d.parent() == Some(dir) {
                *durable = true;
            }
        }
        s.durable.retain(|p, _| p.parent() != Some(dir));
        for (p, id) in &s.live {
            if p.parent() == Some(dir) {
                s.durable.insert(p.clone(), *id);
            }
        }
        s.collect();
        Ok(())
    }
}

#[cfg(test)]
mod tests;
