//! The manifest: which keyspaces exist, which tables are live on which level of each, the next
//! file number, and the oldest WAL still needed (FORMAT.md §4). It is rewritten whole for every change — to
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
/// Manifest format version this build writes once the store's logs may hold range deletes
/// (FORMAT.md §2), which builds before them would take for damage: they refuse the version
/// instead. Version 3 says the same of puts with an expiry. Both have version 2's payload.
/// The build reads 1 to 3 too, and writes the oldest that says what the logs may hold (3
/// after an expiring put, else 2 once a keyspace other than the default was created, else
/// 1), so that a store still opens in the older builds that can read it.
pub const MANIFEST_VERSION: u32 = 4;
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

/// One keyspace other than the default.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct KeyspaceMeta {
    /// Its id: at least 1, below `ManifestData::next_keyspace`, never reused.
    pub id: u32,
    /// Its name (unique among live keyspaces, never `DEFAULT_KEYSPACE`).
    #[serde(with = "name_bytes")]
    pub name: String,
    /// Its live tables per level, as `ManifestData::levels`.
    pub levels: Vec<Vec<TableMeta>>,
}

/// A keyspace name on disk: bincode's encoding of a `String` (a length, then the UTF-8 bytes),
/// decoded as a sequence of bytes, which grows as the bytes are read. bincode decodes a
/// `String` by allocating the length it reads first: a damaged length asked for 1 TiB
/// (found by the decoder fuzzer), where a sequence fails on the bytes that are not there.
mod name_bytes {
    use serde::de::Error as _;
    use serde::{Deserialize, Deserializer, Serialize, Serializer};

    pub(super) fn serialize<S: Serializer>(name: &str, s: S) -> Result<S::Ok, S::Error> {
        name.as_bytes().serialize(s)
    }

    pub(super) fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<String, D::Error> {
        let bytes = Vec::<u8>::deserialize(d)?;
        String::from_utf8(bytes).map_err(|e| D::Error::custom(format!("keyspace name: {e}")))
    }
}

/// The manifest's content.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ManifestData {
    /// Next unused file number.
    pub next_file: u64,
    /// WAL files with a smaller number are already in tables.
    pub log_number: u64,
    /// The default keyspace's live tables per level; level 0 oldest first, other levels by
    /// key.
    pub levels: Vec<Vec<TableMeta>>,
    /// Every other live keyspace, by id ascending (version 2; none in version 1).
    pub keyspaces: Vec<KeyspaceMeta>,
    /// The id the next keyspace created gets (version 2; 1 in version 1).
    pub next_keyspace: u32,
    /// The logs may hold puts with an expiry: written as version 3 (not in the payload).
    #[serde(skip)]
    pub expiring: bool,
    /// The logs may hold range deletes (and puts with an expiry): written as version 4 (not
    /// in the payload).
    #[serde(skip)]
    pub range_deletes: bool,
}

impl Default for ManifestData {
    fn default() -> Self {
        ManifestData {
            next_file: 0,
            log_number: 0,
            levels: Vec::new(),
            keyspaces: Vec::new(),
            next_keyspace: 1,
            expiring: false,
            range_deletes: false,
        }
    }
}

/// Version 1's content: the default keyspace alone.
#[derive(Serialize, Deserialize)]
struct ManifestDataV1 {
    next_file: u64,
    log_number: u64,
    levels: Vec<Vec<TableMeta>>,
}

const FRAMED: Framed = Framed {
    magic: MAGIC,
    version: MANIFEST_VERSION,
    oldest: 1,
    what: "manifest",
};

/// Version 1's framing, for a store that never had a keyspace besides the default.
const FRAMED_V1: Framed = Framed {
    version: 1,
    ..FRAMED
};

/// Version 2's framing, for a store whose logs never held an expiring put.
const FRAMED_V2: Framed = Framed {
    version: 2,
    ..FRAMED
};

/// Version 3's framing, for a store whose logs never held a range delete.
const FRAMED_V3: Framed = Framed {
    version: 3,
    ..FRAMED
};

/// The manifest file's bytes for `data`: version 4 once the logs may hold range deletes, 3
/// once they may hold expiring puts;
/// else version 1 while no keyspace besides the default was ever created, else version 2.
pub fn encode(data: &ManifestData) -> Result<Vec<u8>> {
    if data.range_deletes {
        return FRAMED.encode(data);
    }
    if data.expiring {
        return FRAMED_V3.encode(data);
    }
    if data.keyspaces.is_empty() && data.next_keyspace <= 1 {
        return FRAMED_V1.encode(&ManifestDataV1 {
            next_file: data.next_file,
            log_number: data.log_number,
            levels: data.levels.clone(),
        });
    }
    FRAMED_V2.encode(data)
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
/// distinct across keyspaces and below `next_file`; keyspace ids from 1, ascending, below
/// `next_keyspace`; names unique, non-empty and not the default's).
pub fn decode(path: &Path, bytes: &[u8]) -> Result<ManifestData> {
    let bad = |r: String| Err(Error::corruption(path, r));
    let data: ManifestData = match FRAMED.open(path, bytes)? {
        (1, payload) => {
            let v1: ManifestDataV1 = FRAMED.parse(path, payload)?;
            ManifestData {
                next_file: v1.next_file,
                log_number: v1.log_number,
                levels: v1.levels,
                ..ManifestData::default()
            }
        }
        (2, payload) => FRAMED.parse(path, payload)?,
        (3, payload) => ManifestData {
            expiring: true,
            ..FRAMED.parse(path, payload)?
        },
        (_, payload) => ManifestData {
            expiring: true,
            range_deletes: true,
            ..FRAMED.parse(path, payload)?
        },
    };
    let mut seen = std::collections::HashSet::new();
    let mut names = std::collections::HashSet::new();
    let mut last_id = 0;
    let spaces = data
        .keyspaces
        .iter()
        .map(|k| (k.id, k.name.as_str(), &k.levels));
    for (id, name, levels) in std::iter::once((0, "", &data.levels)).chain(spaces) {
        if id != 0 {
            if id <= last_id || id >= data.next_keyspace {
                return bad(format!(
                    "keyspace id {id} out of order or not below next_keyspace {}",
                    data.next_keyspace
                ));
            }
            if name.is_empty() || name == super::DEFAULT_KEYSPACE || !names.insert(name) {
                return bad(format!(
                    "keyspace name {name:?} is empty, reserved or repeated"
                ));
            }
            last_id = id;
        }
        if levels.len() > MAX_LEVELS {
            return bad(format!(
                "{} levels in keyspace {id}, at most {MAX_LEVELS}",
                levels.len()
            ));
        }
        for (level, tables) in levels.iter().enumerate() {
            for t in tables {
                if t.id >= data.next_file {
                    return bad(format!(
                        "level {level} of keyspace {id} names table {} but next_file is {}",
                        t.id, data.next_file
                    ));
                }
                if !seen.insert(t.id) {
                    return bad(format!("table {} is listed twice", t.id));
                }
            }
        }
    }
    if data.next_keyspace == 0 {
        return bad("next_keyspace is 0 (the default keyspace's id)".into());
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
            ..ManifestData::default()
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
                ..ManifestData::default()
            };
            let e = decode(&path, &encode(&d).unwrap()).unwrap_err().to_string();
            assert!(e.contains(why), "{e}");
        }
        assert_eq!(good[4], 1, "no keyspace besides the default: version 1");
        let mut future = good.clone();
        future[4] = 5;
        std::fs::write(&path, &future).unwrap();
        assert!(matches!(
            read(dir.path()),
            Err(Error::UnsupportedVersion { found: 5, .. })
        ));
    }

    /// A name whose length field claims 2^40 bytes is an error, not an allocation of them.
    #[test]
    fn a_damaged_name_length_is_refused_without_allocating_it() {
        let data = ManifestData {
            next_file: 9,
            keyspaces: vec![KeyspaceMeta {
                id: 1,
                name: "q".into(),
                levels: Vec::new(),
            }],
            next_keyspace: 2,
            ..ManifestData::default()
        };
        let good = encode(&data).unwrap();
        // The payload ends: the name's length (1), 'q', its empty levels (0), next_keyspace.
        let at = good.len() - 4;
        assert_eq!(&good[at..at + 2], &[1, b'q']);
        let mut payload = good[16..at].to_vec();
        payload.push(253); // a u64 length follows
        payload.extend_from_slice(&(1u64 << 40).to_le_bytes());
        payload.extend_from_slice(&good[at + 1..]);
        let mut bytes = good[..8].to_vec();
        bytes.extend_from_slice(&(payload.len() as u32).to_le_bytes());
        bytes.extend_from_slice(&crc32fast::hash(&payload).to_le_bytes());
        bytes.extend_from_slice(&payload);
        let e = decode(Path::new("MANIFEST"), &bytes).unwrap_err();
        assert!(matches!(e, Error::Corruption { .. }), "{e}");
    }

    #[test]
    fn keyspaces_round_trip_in_version_2_and_bad_lists_are_refused() {
        let dir = tempfile::tempdir().unwrap();
        let space = |id: u32, name: &str, table: u64| KeyspaceMeta {
            id,
            name: name.into(),
            levels: vec![vec![TableMeta { id: table, size: 1 }]],
        };
        let data = ManifestData {
            next_file: 9,
            log_number: 7,
            levels: vec![vec![TableMeta { id: 3, size: 100 }]],
            keyspaces: vec![space(2, "users", 4), space(5, "sessions", 6)],
            next_keyspace: 6,
            expiring: false,
            range_deletes: false,
        };
        write(&crate::fs::StdFs, dir.path(), &data).unwrap();
        assert_eq!(read(dir.path()).unwrap(), Some(data.clone()));
        let bytes = std::fs::read(dir.path().join(MANIFEST_FILE)).unwrap();
        assert_eq!(bytes[4], 2);
        // Every keyspace dropped again: still version 2, so a build from before keyspaces never
        // replays a log with keyspace switches in it.
        let dropped = ManifestData {
            keyspaces: Vec::new(),
            ..data.clone()
        };
        assert_eq!(encode(&dropped).unwrap()[4], 2);
        let path = dir.path().join(MANIFEST_FILE);
        let cases = [
            (vec![space(5, "a", 4), space(2, "b", 6)], 6, "out of order"),
            (vec![space(6, "a", 4)], 6, "next_keyspace"),
            (vec![space(2, "a", 4), space(3, "a", 6)], 6, "repeated"),
            (vec![space(2, "default", 4)], 6, "reserved"),
            (vec![space(2, "", 4)], 6, "empty"),
            (vec![space(2, "a", 3)], 6, "twice"),
            (vec![space(2, "a", 9)], 6, "next_file"),
            (Vec::new(), 0, "next_keyspace is 0"),
        ];
        for (keyspaces, next_keyspace, why) in cases {
            let d = ManifestData {
                keyspaces,
                next_keyspace,
                ..data.clone()
            };
            let e = decode(&path, &FRAMED.encode(&d).unwrap())
                .unwrap_err()
                .to_string();
            assert!(e.contains(why), "{why}: {e}");
        }
    }

    #[test]
    fn expiring_logs_make_version_3_and_it_stays() {
        let dir = tempfile::tempdir().unwrap();
        for keyspaces in [
            Vec::new(),
            vec![KeyspaceMeta {
                id: 1,
                name: "a".into(),
                levels: Vec::new(),
            }],
        ] {
            let data = ManifestData {
                next_file: 9,
                keyspaces,
                next_keyspace: 2,
                expiring: true,
                ..ManifestData::default()
            };
            write(&crate::fs::StdFs, dir.path(), &data).unwrap();
            let bytes = std::fs::read(dir.path().join(MANIFEST_FILE)).unwrap();
            assert_eq!(bytes[4], 3);
            assert_eq!(read(dir.path()).unwrap(), Some(data.clone()));
            // Without expiring logs the same content is version 2 (a keyspace was created).
            let plain = ManifestData {
                expiring: false,
                ..data
            };
            assert_eq!(encode(&plain).unwrap()[4], 2);
        }
    }

    #[test]
    fn range_deleting_logs_make_version_4_which_reads_as_expiring_too() {
        let dir = tempfile::tempdir().unwrap();
        let data = ManifestData {
            next_file: 9,
            expiring: true,
            range_deletes: true,
            ..ManifestData::default()
        };
        write(&crate::fs::StdFs, dir.path(), &data).unwrap();
        let bytes = std::fs::read(dir.path().join(MANIFEST_FILE)).unwrap();
        assert_eq!(bytes[4], 4);
        assert_eq!(read(dir.path()).unwrap(), Some(data.clone()));
        let expiring = ManifestData {
            range_deletes: false,
            ..data
        };
        assert_eq!(encode(&expiring).unwrap()[4], 3);
    }
}
