//! The file operations the store's write path makes — create, write, sync, truncate, rename,
//! remove, sync a directory — behind one small trait, so that a test can make any one of them
//! fail and check that the store stays correct (RocksDB's `FaultInjectionTestFS` plays the
//! same part). Reads do not go through it: tables are read with positional reads on `File`.
//!
//! Use: `Options::fs` holds an `Arc<dyn FileSystem>`; the default is [`StdFs`], the real file
//! system. [`FaultyFs`] wraps it: it counts every operation and, from the Nth on, returns an
//! error (or writes part of a buffer and then fails, as a full disk does, or panics).
//! `FaultyFs::hold_table_creates` makes table creation wait until released (or
//! `allow_table_creates` admits a number of them), so a test can keep a memtable in the
//! "immutable, not yet flushed" state for as long as it needs.

use std::fmt;
use std::fs::{File, OpenOptions};
use std::io::{self, Write};
use std::path::Path;
use std::sync::{Arc, Condvar, Mutex, MutexGuard};

/// A file being written: the write path only appends, syncs and (after a failed append)
/// truncates back.
pub trait WritableFile: Send {
    /// Writes all of `buf` at the end of the file.
    fn write_all(&mut self, buf: &[u8]) -> io::Result<()>;
    /// Makes everything written so far durable (`fdatasync`: data and the file size).
    fn sync(&mut self) -> io::Result<()>;
    /// Cuts the file back to `len` bytes.
    fn truncate(&mut self, len: u64) -> io::Result<()>;
}

/// How `FileSystem::create` opens a file.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CreateMode {
    /// Create or truncate (tables, the temporary manifest).
    Truncate,
    /// Create; fail if the file exists (write-ahead logs).
    New,
}

/// The file operations the store's write path makes.
pub trait FileSystem: Send + Sync + fmt::Debug {
    /// Opens `path` for appending, created as `mode` says.
    fn create(&self, path: &Path, mode: CreateMode) -> io::Result<Box<dyn WritableFile>>;
    /// Renames `from` to `to`, replacing `to`.
    fn rename(&self, from: &Path, to: &Path) -> io::Result<()>;
    /// Removes a file.
    fn remove_file(&self, path: &Path) -> io::Result<()>;
    /// Makes the directory's entries (created, renamed, removed files) durable.
    fn sync_dir(&self, dir: &Path) -> io::Result<()>;
}

/// `fs.sync_dir(dir)` with the error naming the directory (what the store's write path calls).
pub(crate) fn sync_dir(fs: &dyn FileSystem, dir: &Path) -> crate::Result<()> {
    fs.sync_dir(dir)
        .map_err(|e| crate::Error::io(format!("syncing directory {}", dir.display()), e))
}

/// The real file system.
#[derive(Clone, Copy, Debug, Default)]
pub struct StdFs;

struct StdFile(File);

impl WritableFile for StdFile {
    fn write_all(&mut self, buf: &[u8]) -> io::Result<()> {
        self.0.write_all(buf)
    }
    fn sync(&mut self) -> io::Result<()> {
        self.0.sync_data()
    }
    fn truncate(&mut self, len: u64) -> io::Result<()> {
        self.0.set_len(len)
    }
}

impl FileSystem for StdFs {
    fn create(&self, path: &Path, mode: CreateMode) -> io::Result<Box<dyn WritableFile>> {
        let mut o = OpenOptions::new();
        match mode {
            // Written sequentially from the start, so plain writes append.
            CreateMode::Truncate => o.write(true).create(true).truncate(true),
            CreateMode::New => o.append(true).create_new(true),
        };
        Ok(Box::new(StdFile(o.open(path)?)))
    }
    fn rename(&self, from: &Path, to: &Path) -> io::Result<()> {
        std::fs::rename(from, to)
    }
    fn remove_file(&self, path: &Path) -> io::Result<()> {
        std::fs::remove_file(path)
    }
    fn sync_dir(&self, dir: &Path) -> io::Result<()> {
        File::open(dir)?.sync_all()
    }
}

/// An operation `FaultyFs` counts (and can fail).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum FsOp {
    /// `create`.
    Create,
    /// `write_all`.
    Write,
    /// `sync`.
    Sync,
    /// `truncate`.
    Truncate,
    /// `rename`.
    Rename,
    /// `remove_file`.
    Remove,
    /// `sync_dir`.
    SyncDir,
}

/// What a failing operation does.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Fault {
    /// Returns an error (`ENOSPC` for create and write, `EIO` otherwise) and does nothing.
    Error,
    /// A write stores the first half of its buffer, then returns `ENOSPC` (a full disk); any
    /// other operation behaves as `Error`.
    PartialWrite,
    /// Panics (a bug in a background thread must not hang or corrupt the store).
    Panic,
}

#[derive(Default)]
struct FaultState {
    ops: u64,
    /// Operation number (1-based) from which operations fail, and how.
    fail_from: Option<(u64, Fault)>,
    /// Only the one operation fails, not every one after it.
    once: bool,
    /// Operations that failed, in order.
    failed: Vec<FsOp>,
    /// Table files that may still be created (`None`: any number).
    table_create_permits: Option<u64>,
}

/// A `FileSystem` over the real one that counts operations and fails the ones it is told to.
/// Clones share one counter, so the store and the test see the same numbers.
#[derive(Clone, Default)]
pub struct FaultyFs {
    state: Arc<(Mutex<FaultState>, Condvar)>,
}

impl fmt::Debug for FaultyFs {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("FaultyFs")
            .field("ops", &self.ops())
            .finish()
    }
}

impl FaultyFs {
    /// A file system that fails nothing (yet).
    pub fn new() -> Self {
        Self::default()
    }

    fn lock(&self) -> MutexGuard<'_, FaultState> {
        self.state.0.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Operations counted so far.
    pub fn ops(&self) -> u64 {
        self.lock().ops
    }

    /// Operation number `n` (counting from 1 since this file system was made) and every one
    /// after it fail with `fault`: a disk that stays full or broken.
    pub fn fail_from(&self, n: u64, fault: Fault) {
        let mut s = self.lock();
        s.fail_from = Some((n, fault));
        s.once = false;
    }

    /// Only operation number `n` fails with `fault`; the ones after it succeed again.
    pub fn fail_once(&self, n: u64, fault: Fault) {
        let mut s = self.lock();
        s.fail_from = Some((n, fault));
        s.once = true;
    }

    /// The operations that failed, in order.
    pub fn failed(&self) -> Vec<FsOp> {
        self.lock().failed.clone()
    }

    /// While `hold` is true, creating a table file (`*.sst`) waits; false releases it.
    pub fn hold_table_creates(&self, hold: bool) {
        self.lock().table_create_permits = hold.then_some(0);
        self.state.1.notify_all();
    }

    /// While holding, lets `n` more table files be created (then holds again).
    pub fn allow_table_creates(&self, n: u64) {
        let mut s = self.lock();
        s.table_create_permits = s.table_create_permits.map(|p| p + n);
        drop(s);
        self.state.1.notify_all();
    }

    /// Counts one operation and says whether (and how) it fails.
    fn step(&self, op: FsOp) -> Option<Fault> {
        let mut s = self.lock();
        s.ops += 1;
        let n = s.ops;
        let fault = match s.fail_from {
            Some((from, fault)) if n == from || (n > from && !s.once) => Some(fault),
            _ => None,
        };
        if fault.is_some() {
            s.failed.push(op);
        }
        drop(s);
        if fault == Some(Fault::Panic) {
            panic!("FaultyFs: injected panic at operation {n} ({op:?})");
        }
        fault
    }

    fn error(op: FsOp) -> io::Error {
        match op {
            FsOp::Create | FsOp::Write => io::Error::from_raw_os_error(28), // ENOSPC
            _ => io::Error::from_raw_os_error(5),                           // EIO
        }
    }

    fn check(&self, op: FsOp) -> io::Result<()> {
        match self.step(op) {
            None => Ok(()),
            Some(_) => Err(Self::error(op)),
        }
    }
}

struct FaultyFile {
    fs: FaultyFs,
    inner: Box<dyn WritableFile>,
}

impl WritableFile for FaultyFile {
    fn write_all(&mut self, buf: &[u8]) -> io::Result<()> {
        match self.fs.step(FsOp::Write) {
            None => self.inner.write_all(buf),
            Some(Fault::PartialWrite) => {
                self.inner.write_all(&buf[..buf.len() / 2])?;
                Err(FaultyFs::error(FsOp::Write))
            }
            Some(_) => Err(FaultyFs::error(FsOp::Write)),
        }
    }
    fn sync(&mut self) -> io::Result<()> {
        self.fs.check(FsOp::Sync)?;
        self.inner.sync()
    }
    fn truncate(&mut self, len: u64) -> io::Result<()> {
        self.fs.check(FsOp::Truncate)?;
        self.inner.truncate(len)
    }
}

impl FileSystem for FaultyFs {
    fn create(&self, path: &Path, mode: CreateMode) -> io::Result<Box<dyn WritableFile>> {
        if path.extension().is_some_and(|e| e == "sst") {
            let (lock, cv) = &*self.state;
            let mut s = lock.lock().unwrap_or_else(|p| p.into_inner());
            while s.table_create_permits == Some(0) {
                s = cv.wait(s).unwrap_or_else(|p| p.into_inner());
            }
            if let Some(p) = s.table_create_permits.as_mut() {
                *p -= 1;
            }
        }
        self.check(FsOp::Create)?;
        Ok(Box::new(FaultyFile {
            fs: self.clone(),
            inner: StdFs.create(path, mode)?,
        }))
    }
    fn rename(&self, from: &Path, to: &Path) -> io::Result<()> {
        self.check(FsOp::Rename)?;
        StdFs.rename(from, to)
    }
    fn remove_file(&self, path: &Path) -> io::Result<()> {
        self.check(FsOp::Remove)?;
        StdFs.remove_file(path)
    }
    fn sync_dir(&self, dir: &Path) -> io::Result<()> {
        self.check(FsOp::SyncDir)?;
        StdFs.sync_dir(dir)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn faulty_fs_fails_exactly_the_operations_it_is_told_to() {
        let dir = tempfile::tempdir().unwrap();
        let fs = FaultyFs::new();
        let path = dir.path().join("f");
        let mut f = fs.create(&path, CreateMode::New).unwrap(); // op 1
        f.write_all(b"abcd").unwrap(); // op 2
        fs.fail_once(4, Fault::PartialWrite);
        f.sync().unwrap(); // op 3
        let e = f.write_all(b"efgh").unwrap_err(); // op 4: half written, then ENOSPC
        assert_eq!(e.raw_os_error(), Some(28));
        assert_eq!(std::fs::read(&path).unwrap(), b"abcdef");
        f.truncate(4).unwrap(); // op 5 succeeds again
        assert_eq!(std::fs::read(&path).unwrap(), b"abcd");
        assert_eq!(fs.failed(), vec![FsOp::Write]);
        fs.fail_from(6, Fault::Error);
        assert!(fs.sync_dir(dir.path()).is_err());
        assert!(fs.rename(&path, &dir.path().join("g")).is_err());
        assert!(
            fs.create(&path, CreateMode::New).is_err(),
            "exists, and op 8 fails"
        );
        assert_eq!(fs.ops(), 8);
    }
}
