//! [`FaultyFs`]: the real file system with a counter on every operation, failing the ones a
//! test names (module docs of `fs`). Reads have a counter of their own (`reads`,
//! `fail_read`), so arming a read fault does not move the numbers of the write path's
//! operations.

use std::fmt;
use std::io;
use std::path::Path;
use std::sync::{Arc, Condvar, Mutex, MutexGuard};

use super::{CreateMode, FileSystem, RandomAccessFile, StdFs, WritableFile};

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

/// Table creates held by [`FaultyFs::hold_table_creates_scoped`]; dropping it releases them.
pub struct HeldTableCreates(FaultyFs);

impl Drop for HeldTableCreates {
    fn drop(&mut self) {
        self.0.hold_table_creates(false);
    }
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
    /// Reads counted so far (positional reads and whole-file reads).
    reads: u64,
    /// Read numbers (1-based) that fail, and how.
    read_faults: Vec<(u64, ReadFault)>,
    /// Reads that failed.
    reads_failed: u64,
    /// How long each sync (of a file or a directory) waits before it runs: a slow disk.
    sync_delay: std::time::Duration,
    read_delay: std::time::Duration,
}

/// What a failing read does.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ReadFault {
    /// Returns `EIO`.
    Error,
    /// Fills the first half of the buffer, then reports the end of the file
    /// (`UnexpectedEof`), as a file cut short under the reader would.
    Short,
    /// Succeeds, with bit `n` (modulo the bits read) flipped: damage the disk did not report.
    FlipBit(u64),
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

    /// Every sync of a file or a directory from now on waits `delay` first (a slow disk);
    /// zero stops it.
    pub fn delay_syncs(&self, delay: std::time::Duration) {
        self.lock().sync_delay = delay;
    }

    /// Every read of a table file from now on waits `delay` first (a slow disk: a compaction,
    /// which reads its inputs block by block, takes long; a flush, which reads only its new
    /// table's footer, index and filter, little); zero stops it.
    pub fn delay_reads(&self, delay: std::time::Duration) {
        self.lock().read_delay = delay;
    }

    fn sync_delay(&self) {
        let d = self.lock().sync_delay;
        if !d.is_zero() {
            std::thread::sleep(d);
        }
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

    /// Read number `n` (counting from 1 since this file system was made; `reads()` tells
    /// how many were made so far) fails with `fault`; the reads around it succeed.
    pub fn fail_read(&self, n: u64, fault: ReadFault) {
        self.lock().read_faults.push((n, fault));
    }

    /// Reads made so far.
    pub fn reads(&self) -> u64 {
        self.lock().reads
    }

    /// Reads that failed (or returned flipped bits) so far.
    pub fn reads_failed(&self) -> u64 {
        self.lock().reads_failed
    }

    /// Counts one read and says whether (and how) it fails.
    fn step_read(&self) -> Option<ReadFault> {
        let delay = self.lock().read_delay;
        if !delay.is_zero() {
            std::thread::sleep(delay);
        }
        let mut s = self.lock();
        s.reads += 1;
        let n = s.reads;
        let i = s.read_faults.iter().position(|f| f.0 == n)?;
        s.reads_failed += 1;
        Some(s.read_faults.swap_remove(i).1)
    }

    /// While `hold` is true, creating a table file (`*.sst`) waits; false releases it.
    pub fn hold_table_creates(&self, hold: bool) {
        self.lock().table_create_permits = hold.then_some(0);
        self.state.1.notify_all();
    }

    /// Holds table creates (`hold_table_creates(true)`) until the returned guard is dropped,
    /// also when a failed assertion unwinds: declared after the store, the guard is dropped
    /// first, so the store's close does not wait forever for a held flush.
    #[must_use = "creates are released when the guard is dropped"]
    pub fn hold_table_creates_scoped(&self) -> HeldTableCreates {
        self.hold_table_creates(true);
        HeldTableCreates(self.clone())
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

struct FaultyReadFile {
    fs: FaultyFs,
    inner: Box<dyn RandomAccessFile>,
}

impl RandomAccessFile for FaultyReadFile {
    fn read_exact_at(&self, buf: &mut [u8], offset: u64) -> io::Result<()> {
        match self.fs.step_read() {
            None => self.inner.read_exact_at(buf, offset),
            Some(ReadFault::Error) => Err(io::Error::from_raw_os_error(5)),
            Some(ReadFault::Short) => {
                let half = buf.len() / 2;
                self.inner.read_exact_at(&mut buf[..half], offset)?;
                Err(io::ErrorKind::UnexpectedEof.into())
            }
            Some(ReadFault::FlipBit(bit)) => {
                self.inner.read_exact_at(buf, offset)?;
                flip(buf, bit);
                Ok(())
            }
        }
    }
    fn size(&self) -> io::Result<u64> {
        self.inner.size()
    }
}

/// Flips bit `bit` (modulo the bits of `buf`).
fn flip(buf: &mut [u8], bit: u64) {
    if !buf.is_empty() {
        let bit = bit % (buf.len() as u64 * 8);
        buf[(bit / 8) as usize] ^= 1 << (bit % 8);
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
        self.fs.sync_delay();
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
        self.sync_delay();
        StdFs.sync_dir(dir)
    }
    fn open_read(&self, path: &Path) -> io::Result<Box<dyn RandomAccessFile>> {
        Ok(Box::new(FaultyReadFile {
            fs: self.clone(),
            inner: StdFs.open_read(path)?,
        }))
    }
    fn read_all(&self, path: &Path) -> io::Result<Vec<u8>> {
        match self.step_read() {
            None => StdFs.read_all(path),
            Some(ReadFault::Error) => Err(io::Error::from_raw_os_error(5)),
            Some(ReadFault::Short) => Err(io::ErrorKind::UnexpectedEof.into()),
            Some(ReadFault::FlipBit(bit)) => {
                let mut data = StdFs.read_all(path)?;
                flip(&mut data, bit);
                Ok(data)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn delayed_syncs_wait_and_stop_waiting_when_told() {
        let dir = tempfile::tempdir().unwrap();
        let fs = FaultyFs::new();
        let mut f = fs.create(&dir.path().join("f"), CreateMode::New).unwrap();
        let delay = std::time::Duration::from_millis(300);
        fs.delay_syncs(delay);
        let t = std::time::Instant::now();
        f.sync().unwrap();
        fs.sync_dir(dir.path()).unwrap();
        assert!(t.elapsed() >= 2 * delay);
        fs.delay_syncs(std::time::Duration::ZERO);
        let t = std::time::Instant::now();
        f.sync().unwrap();
        assert!(t.elapsed() < delay, "a sync still waited");
    }

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

    #[test]
    fn faulty_fs_fails_exactly_the_reads_it_is_told_to() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("f");
        std::fs::write(&path, b"abcdefgh").unwrap();
        let fs = FaultyFs::new();
        let f = fs.open_read(&path).unwrap();
        assert_eq!(f.size().unwrap(), 8);
        fs.fail_read(2, ReadFault::Error);
        fs.fail_read(3, ReadFault::Short);
        fs.fail_read(4, ReadFault::FlipBit(9));
        fs.fail_read(5, ReadFault::FlipBit(0));
        let mut buf = [0u8; 4];
        f.read_exact_at(&mut buf, 2).unwrap(); // read 1
        assert_eq!(&buf, b"cdef");
        assert_eq!(
            f.read_exact_at(&mut buf, 0).unwrap_err().raw_os_error(),
            Some(5)
        );
        let e = f.read_exact_at(&mut buf, 0).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::UnexpectedEof);
        f.read_exact_at(&mut buf, 0).unwrap();
        assert_eq!(&buf, b"a`cd", "bit 9 is the second byte's second bit");
        assert_eq!(fs.read_all(&path).unwrap(), b"`bcdefgh");
        assert_eq!(fs.read_all(&path).unwrap(), b"abcdefgh");
        assert_eq!((fs.reads(), fs.reads_failed(), fs.ops()), (6, 4, 0));
    }
}
