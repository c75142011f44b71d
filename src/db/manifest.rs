//! The manifest: which tables are live on which level, the next file number, and the oldest
//! WAL still needed (FORMAT.md §4). It is rewritten whole for every change — to
//! `MANIFEST.tmp`, synced, then renamed over `MANIFEST` — so a crash mid-update leaves the
//! previous manifest in place. The payload is `bincode` 2 inside our own magic, version,
//! length and CRC framing.

use std::fs::File;
use std::io::Write;
use std::path::Path;

use serde::{Deserialize, Serialize};

use super::wal::sync_dir;
use crate::error::{Error, Result};

const MAGIC: [u8; 4] = *b"LBMF";
/// Manifest format version this build writes and reads.
pub const MANIFEST_VERSION: u32 = 1;
/// File name of the live manifest.
pub const MANIFEST_FILE: &str = "MANIFEST";
const TEMP_FILE: &str = "MANIFEST.tmp";
const HEADER_LEN: usize = 16;

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

fn config() -> bincode::config::Configuration {
    bincode::config::standard()
}

/// Writes `data` as the new manifest, atomically.
pub fn write(dir: &Path, data: &ManifestData) -> Result<()> {
    let payload = bincode::serde::encode_to_vec(data, config())
        .map_err(|e| Error::InvalidArgument(format!("encoding manifest: {e}")))?;
    let mut out = Vec::with_capacity(HEADER_LEN + payload.len());
    out.extend_from_slice(&MAGIC);
    out.extend_from_slice(&MANIFEST_VERSION.to_le_bytes());
    out.extend_from_slice(&(payload.len() as u32).to_le_bytes());
    out.extend_from_slice(&crc32fast::hash(&payload).to_le_bytes());
    out.extend_from_slice(&payload);
    let tmp = dir.join(TEMP_FILE);
    let io = |what: &str, e| Error::io(format!("{what} {}", tmp.display()), e);
    let mut f = File::create(&tmp).map_err(|e| io("creating", e))?;
    f.write_all(&out).map_err(|e| io("writing", e))?;
    f.sync_all().map_err(|e| io("syncing", e))?;
    std::fs::rename(&tmp, dir.join(MANIFEST_FILE)).map_err(|e| io("renaming", e))?;
    sync_dir(dir)
}

/// Reads and validates the manifest; `Ok(None)` when there is none (a new database).
pub fn read(dir: &Path) -> Result<Option<ManifestData>> {
    let path = dir.join(MANIFEST_FILE);
    let bytes = match std::fs::read(&path) {
        Ok(b) => b,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(Error::io(format!("reading {}", path.display()), e)),
    };
    let bad = |r: String| Err(Error::corruption(&path, r));
    if bytes.len() < HEADER_LEN {
        return bad(format!(
            "manifest is {} bytes, shorter than its header",
            bytes.len()
        ));
    }
    if bytes[..4] != MAGIC {
        return bad(format!("bad manifest magic {:02x?}", &bytes[..4]));
    }
    let word = |i: usize| u32::from_le_bytes([bytes[i], bytes[i + 1], bytes[i + 2], bytes[i + 3]]);
    let version = word(4);
    if version != MANIFEST_VERSION {
        return Err(Error::UnsupportedVersion {
            path,
            what: "manifest",
            found: version,
            supported: MANIFEST_VERSION,
        });
    }
    let (len, crc) = (word(8) as usize, word(12));
    if bytes.len() - HEADER_LEN != len {
        return bad(format!(
            "manifest payload is {} bytes, header says {len}",
            bytes.len() - HEADER_LEN
        ));
    }
    let payload = &bytes[HEADER_LEN..];
    let actual = crc32fast::hash(payload);
    if actual != crc {
        return bad(format!(
            "manifest checksum mismatch: stored {crc:#010x}, computed {actual:#010x}"
        ));
    }
    let (data, used): (ManifestData, usize) =
        match bincode::serde::decode_from_slice(payload, config()) {
            Ok(v) => v,
            Err(e) => return bad(format!("manifest payload does not decode: {e}")),
        };
    if used != payload.len() {
        return bad("trailing bytes after the manifest payload".into());
    }
    Ok(Some(data))
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
        write(dir.path(), &data).unwrap();
        assert_eq!(read(dir.path()).unwrap(), Some(data));
        let path = dir.path().join(MANIFEST_FILE);
        let good = std::fs::read(&path).unwrap();
        for i in 0..good.len() {
            let mut bad = good.clone();
            bad[i] ^= 0x01;
            std::fs::write(&path, &bad).unwrap();
            assert!(read(dir.path()).is_err(), "flip at byte {i} accepted");
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
