//! The manifest: which tables are live on which level, the next file number, and the oldest
//! WAL still needed (FORMAT.md §4). It is rewritten whole for every change — to
//! `MANIFEST.tmp`, synced, then renamed over `MANIFEST`, then the directory synced — so a
//! crash mid-update leaves the previous manifest in place. The payload is `bincode` 2 inside
//! our own magic, version, length and CRC framing.
//!
//! `next_file` is a reservation: no file numbered at or above it exists when the manifest is
//! written, and the store writes a new manifest before it creates a table numbered at or
//! above it. So a table file the manifest does not list is obsolete if its number is below
//! `next_file` (a compaction input, or the output of a job that never committed) and
//! unexplained otherwise (left in place, never deleted).

use std::path::Path;

use serde::{Deserialize, Serialize};

use super::version::MAX_LEVELS;
use crate::error::{Error, Result};
use crate::framed::Framed;
use crate::fs::FileSystem;

const MAGIC: [u8; 4] = *b"LBMF";
/// Manifest format version this build writes and reads.
pub const MANIFEST_VERSION: u32 = 1;
/// File name of the live manifest.
pub const MANIFEST_FILE: &str = "MANIFEST";
const TEMP_FILE: &str = "MANIFEST.tmp";

/// One live table.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct TableMeta {
    /// File number (`NNNNNN.sst`).
    pub id: u64,
    /// File size in bytes.
    pub size: u64,
}

/// The manifest's content.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ManifestData {
    /// Next unused file number.
    pub next_file: u64,
    /// WAL files with a smaller number are already in tables.
    pub log_number: u64,
    /// Live tables per level; level 0 oldest first, other levels by key.
    pub levels: Vec<Vec<TableMeta>>,
}

const FRAMED: Framed = Framed {
    magic: MAGIC,
    version: MANIFEST_VERSION,
    oldest: MANIFEST_VERSION,
    what: "manifest",
};

/// The manifest file's bytes for `data`.
pub fn encode(data: &ManifestData) -> Result<Vec<u8>> {
    FRAMED.encode(data)
}

/// Writes `data` as the new manifest, atomically, through `fs`.
pub fn write(fs: &dyn FileSystem, dir: &Path, data: &ManifestData) -> Result<()> {
    crate::fs::write_atomic(fs, dir, TEMP_FILE, MANIFEST_FILE, &encode(data)?)
}

/// The name of the temporary file a manifest is written to before its rename.
pub(crate) fn temp_path(dir: &Path) -> std::path::PathBuf {
    dir.join(TEMP_FILE)
}

/// Reads and validates the manifest; `Ok(None)` when there is none.
pub fn read(dir: &Path) -> Result<Option<ManifestData>> {
    read_in(&crate::fs::StdFs, dir)
}

/// `read` through the store's file system.
pub(crate) fn read_in(fs: &dyn FileSystem, dir: &Path) -> Result<Option<ManifestData>> {
    let path = dir.join(MANIFEST_FILE);
    let bytes = match fs.read_all(&path) {
        Ok(b) => b,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(Error::io(format!("reading {}", path.display()), e)),
    };
    decode(&path, &bytes).map(Some)
}

/// Validates and decodes the bytes of the manifest file at `path` (named in errors): framing,
/// checksum, payload, and the payload's own consistency (level count, every table number
/// distinct and below `next_file`).
pub fn decode(path: &Path, bytes: &[u8]) -> Result<ManifestData> {
    let bad = |r: String| Err(Error::corruption(path, r));
    let data: ManifestData = FRAMED.decode(path, bytes)?;
    if data.levels.len() > MAX_LEVELS {
        return bad(format!(
            "{} levels, at most {MAX_LEVELS}",
            data.levels.len()
        ));
    }
    let mut seen = std::collections::HashSet::new();
    for (level, tables) in data.levels.iter().enumerate() {
        for t in tables {
            if t.id >= data.next_file {
                return bad(format!(
                    "level {level} names table {} but next_file is {}",
                    t.id, data.next_file
                ));
            }
            if !seen.insert(t.id) {
                return bad(format!("table {} is listed twice", t.id));
            }
        }
    }
    Ok(data)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_and_every_flip_rejected() {
        let dir = tempfile::tempdir().unwrap();
        assert_eq!(read(dir.path()).unwrap(), None);
        let data = ManifestData {
            next_file: 9,
            log_number: 7,
            levels: vec![
                vec![TableMeta { id: 3, size: 100 }],
                vec![],
                vec![TableMeta { id: 5, size: 9 }],
            ],
        };
        write(&crate::fs::StdFs, dir.path(), &data).unwrap();
        assert_eq!(read(dir.path()).unwrap(), Some(data));
        let path = dir.path().join(MANIFEST_FILE);
        let good = std::fs::read(&path).unwrap();
        for i in 0..good.len() {
            let mut bad = good.clone();
            bad[i] ^= 0x01;
            std::fs::write(&path, &bad).unwrap();
            assert!(read(dir.path()).is_err(), "flip at byte {i} accepted");
        }
        for (bad, why) in [
            (vec![vec![TableMeta { id: 9, size: 1 }]], "next_file"),
            (
                vec![
                    vec![TableMeta { id: 3, size: 1 }],
                    vec![TableMeta { id: 3, size: 1 }],
                ],
                "twice",
            ),
            (vec![vec![]; MAX_LEVELS + 1], "levels"),
        ] {
            let d = ManifestData {
                next_file: 9,
                log_number: 1,
                levels: bad,
            };
            let e = decode(&path, &encode(&d).unwrap()).unwrap_err().to_string();
            assert!(e.contains(why), "{e}");
        }
        let mut future = good.clone();
        future[4] = 2;
        std::fs::write(&path, &future).unwrap();
        assert!(matches!(
            read(dir.path()),
            Err(Error::UnsupportedVersion { found: 2, .. })
        ));
    }
}
