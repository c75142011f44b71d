//! The file operations the store makes — create, write, sync, truncate, rename, remove, sync a
//! directory, and the reads: a table's blocks by positional reads, a whole log or manifest at
//! open — behind one small trait, so that a test can make any one of them fail (or return
//! damaged bytes), or lose power after it, and check that the store stays correct (RocksDB's
//! `FaultInjectionTestFS` plays the same part). Directory listings and the `LOCK` file use
//! `std::fs` directly.
//!
//! Use: `Options::fs` holds an `Arc<dyn FileSystem>`; the default is [`StdFs`], the real file
//! system. Two test file systems wrap it:
//! - [`FaultyFs`] (`faulty.rs`) counts every operation and, from the Nth on, returns an error
//!   (or writes part of a buffer and then fails, as a full disk does, or panics);
//!   `FaultyFs::hold_table_creates` makes table creation wait until released, so a test can
//!   keep a memtable "immutable, not yet flushed" for as long as it needs.
//! - [`PowerLossFs`] (`power.rs`) remembers what each file sync and directory sync made
//!   durable, cuts the power at the Nth operation, and writes out what a machine would find
//!   after that power loss.

use std::fmt;
use std::fs::{File, OpenOptions};
use std::io::{self, Write};
use std::path::Path;

mod faulty;
mod power;

pub use faulty::{Fault, FaultyFs, FsOp, HeldTableCreates, ReadFault};
pub use power::{PowerLossFs, UnsyncedTail};

/// A file being written: the write path only appends, syncs and (after a failed append)
/// truncates back.
pub trait WritableFile: Send {
    /// Writes all of `buf` at the end of the file.
    fn write_all(&mut self, buf: &[u8]) -> io::Result<()>;
    /// Makes everything written so far durable (`fdatasync`: data and the file size).
    fn sync(&mut self) -> io::Result<()>;
    /// Cuts the file back to `len` bytes.
    fn truncate(&mut self, len: u64) -> io::Result<()>;
    /// Starts writing `len` bytes at `offset` out to the device without waiting for them
    /// (Linux `sync_file_range(SYNC_FILE_RANGE_WRITE)`), so that a later `sync` has little
    /// left to wait for. A hint: it makes nothing durable, and a file system may ignore it.
    fn start_writeback(&mut self, _offset: u64, _len: u64) {}
}

/// How `FileSystem::create` opens a file.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CreateMode {
    /// Create or truncate (tables, the temporary manifest).
    Truncate,
    /// Create; fail if the file exists (write-ahead logs).
    New,
}

/// A file opened for positional reads (a table: its blocks are read where its index says).
pub trait RandomAccessFile: Send + Sync {
    /// Fills `buf` with the bytes at `offset`; an error if the file ends first.
    fn read_exact_at(&self, buf: &mut [u8], offset: u64) -> io::Result<()>;
    /// The file's size in bytes.
    fn size(&self) -> io::Result<u64>;
    /// The whole file as memory, when it was opened mapped (`FileSystem::open_read_mapped`):
    /// a reader may then look at its bytes in place instead of copying them out.
    fn mapped(&self) -> Option<&[u8]> {
        None
    }
}

/// Opens a table file read-only. On Linux with `O_NOATIME`, so that a read does not check
/// whether the file's access time is due an update: under `relatime` that check (`touch_atime`,
/// `atime_needs_update`, `current_time`) was 2.4% of a present get's samples, which are
/// mostly a `pread` per get (`db_bench --hold present`, 2×10^6 keys, `perf record -e
/// cpu-clock`). The kernel grants the flag only to the file's owner (or with `CAP_FOWNER`);
/// otherwise the file is opened without it.
fn open_table_file(path: &Path) -> io::Result<File> {
    #[cfg(target_os = "linux")]
    {
        use std::os::unix::fs::OpenOptionsExt;
        match OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_NOATIME)
            .open(path)
        {
            Err(e) if e.raw_os_error() == Some(libc::EPERM) => {}
            opened => return opened,
        }
    }
    File::open(path)
}

impl RandomAccessFile for File {
    fn read_exact_at(&self, buf: &mut [u8], offset: u64) -> io::Result<()> {
        std::os::unix::fs::FileExt::read_exact_at(self, buf, offset)
    }
    fn size(&self) -> io::Result<u64> {
        Ok(self.metadata()?.len())
    }
}

/// The file operations the store makes. The read methods have defaults that read the real
/// file system, so a write-path wrapper need not implement them.
pub trait FileSystem: Send + Sync + fmt::Debug {
    /// Opens `path` for appending, created as `mode` says.
    fn create(&self, path: &Path, mode: CreateMode) -> io::Result<Box<dyn WritableFile>>;
    /// Renames `from` to `to`, replacing `to`.
    fn rename(&self, from: &Path, to: &Path) -> io::Result<()>;
    /// Removes a file.
    fn remove_file(&self, path: &Path) -> io::Result<()>;
    /// Makes the directory's entries (created, renamed, removed files) durable.
    fn sync_dir(&self, dir: &Path) -> io::Result<()>;
    /// Creates `dir` and any missing parents (a new store's directory). Its entry is durable
    /// once its parent is synced (`sync_dir`).
    fn create_dir(&self, dir: &Path) -> io::Result<()> {
        std::fs::create_dir_all(dir)
    }
    /// Opens `path` for positional reads (tables).
    fn open_read(&self, path: &Path) -> io::Result<Box<dyn RandomAccessFile>> {
        Ok(Box::new(open_table_file(path)?))
    }
    /// Opens `path` for reads through a memory map (`Options::mmap_reads`), where this file
    /// system supports one; the default opens it as `open_read` does, so a test file system
    /// that wraps `open_read` keeps seeing (and failing) every read.
    fn open_read_mapped(&self, path: &Path) -> io::Result<Box<dyn RandomAccessFile>> {
        self.open_read(path)
    }
    /// Reads a whole file (a log or the manifest, at open).
    fn read_all(&self, path: &Path) -> io::Result<Vec<u8>> {
        std::fs::read(path)
    }
    /// Gives the file `from` a second name `to` (`Db::checkpoint` links tables; on an error,
    /// e.g. across file systems, it copies instead).
    fn hard_link(&self, from: &Path, to: &Path) -> io::Result<()> {
        std::fs::hard_link(from, to)
    }
}

/// `fs.sync_dir(dir)` with the error naming the directory (what the store's write path calls).
pub(crate) fn sync_dir(fs: &dyn FileSystem, dir: &Path) -> crate::error::Result<()> {
    fs.sync_dir(dir)
        .map_err(|e| crate::error::Error::io(format!("syncing directory {}", dir.display()), e))
}

/// Replaces `dir/name` with `bytes` so that a crash at any point leaves the old file or the
/// new one whole: written to `dir/temp`, synced, renamed over `dir/name`, the directory
/// synced. The manifest and the options record are written this way.
pub(crate) fn write_atomic(
    fs: &dyn FileSystem,
    dir: &Path,
    temp: &str,
    name: &str,
    bytes: &[u8],
) -> crate::error::Result<()> {
    let tmp = dir.join(temp);
    let io = |what: &str, e| crate::error::Error::io(format!("{what} {}", tmp.display()), e);
    let mut f = fs
        .create(&tmp, CreateMode::Truncate)
        .map_err(|e| io("creating", e))?;
    f.write_all(bytes).map_err(|e| io("writing", e))?;
    f.sync().map_err(|e| io("syncing", e))?;
    drop(f);
    fs.rename(&tmp, &dir.join(name))
        .map_err(|e| io("renaming", e))?;
    sync_dir(fs, dir)
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
    #[cfg(target_os = "linux")]
    fn start_writeback(&mut self, offset: u64, len: u64) {
        use std::os::fd::AsRawFd;
        let (Ok(offset), Ok(len)) = (i64::try_from(offset), i64::try_from(len)) else {
            return;
        };
        // SAFETY: a plain system call on a descriptor this file owns; no memory is passed.
        // A failure is ignored: the next `sync` reports any error the device had.
        unsafe {
            libc::sync_file_range(self.0.as_raw_fd(), offset, len, libc::SYNC_FILE_RANGE_WRITE);
        }
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
    fn open_read_mapped(&self, path: &Path) -> io::Result<Box<dyn RandomAccessFile>> {
        let file = open_table_file(path)?;
        if file.metadata()?.len() == 0 {
            // Nothing to map (and a zero-length map is an error): read it as a file.
            return Ok(Box::new(file));
        }
        #[expect(
            unsafe_code,
            reason = "mapping a file is unsafe only if it changes under the map; the store \
                      never rewrites or truncates a table file (it writes a new one and unlinks \
                      the old, which leaves a map valid). See MappedFile"
        )]
        // SAFETY: as the reason above; what another process or the device can still do is
        // in `Options::mmap_reads`.
        let map = unsafe { memmap2::Mmap::map(&file)? };
        // Gets read scattered blocks: read-ahead would fetch pages no lookup asked for.
        map.advise(memmap2::Advice::Random)?;
        Ok(Box::new(MappedFile(map)))
    }
}

/// A table file read through a memory map: a block read is a look at mapped memory (the page
/// cache's own pages) instead of a `pread` system call that copies them. The file's size is
/// the map's, fixed when it was opened, as a table's is.
struct MappedFile(memmap2::Mmap);

impl RandomAccessFile for MappedFile {
    fn read_exact_at(&self, buf: &mut [u8], offset: u64) -> io::Result<()> {
        let bytes = usize::try_from(offset)
            .ok()
            .and_then(|o| self.0.get(o..o.checked_add(buf.len())?))
            .ok_or(io::ErrorKind::UnexpectedEof)?;
        buf.copy_from_slice(bytes);
        Ok(())
    }
    fn size(&self) -> io::Result<u64> {
        Ok(self.0.len() as u64)
    }
    fn mapped(&self) -> Option<&[u8]> {
        Some(&self.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A table file this process owns is opened with `O_NOATIME` (read back from the kernel's
    /// `/proc/self/fdinfo`), and reads through it return the file's bytes.
    #[test]
    #[cfg(target_os = "linux")]
    fn table_files_are_opened_without_access_time_updates() {
        use std::os::fd::AsRawFd;
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("t.sst");
        std::fs::write(&path, b"0123456789").unwrap();
        let file = open_table_file(&path).unwrap();
        let info =
            std::fs::read_to_string(format!("/proc/self/fdinfo/{}", file.as_raw_fd())).unwrap();
        let flags = info
            .lines()
            .find_map(|l| l.strip_prefix("flags:"))
            .map(|f| i64::from_str_radix(f.trim(), 8).unwrap())
            .unwrap();
        assert_ne!(flags & i64::from(libc::O_NOATIME), 0, "flags {flags:o}");
        let mut buf = [0u8; 4];
        file.read_exact_at(&mut buf, 3).unwrap();
        assert_eq!(&buf, b"3456");
    }
}
