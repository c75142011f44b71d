//! Reading RocksDB block-based SST files far enough to find and decode their filter blocks,
//! without RocksDB: the footer, the metaindex block (which names each meta block), the
//! properties block, and each filter block — an lsm-bloom block (FORMAT.md §1, under
//! `fullfilter.lsm_bloom`) decoded in full, a RocksDB built-in filter by its metadata. The
//! layout read here is summarised in FORMAT.md §5. Every offset and length comes from the
//! file, so each is bounds-checked before use; nothing here panics on a damaged file.

use std::collections::BTreeMap;
use std::path::Path;

use serde::Serialize;

pub(crate) use super::rocksdb_block::varint;
use super::rocksdb_block::{block_entries, Handle, Sst, BLOCK_TRAILER};
use super::rocksdb_builtin::describe;
pub use super::rocksdb_builtin::{builtin_info, BuiltinFilterInfo};
use super::rocksdb_checksum::ChecksumType;
use super::rocksdb_partitions::{self, PartitionReport, PartitionSummary};
use super::FilterReport;
use crate::error::{Error, Result};

/// The last 8 bytes of a RocksDB block-based table (`kBlockBasedTableMagicNumber`).
pub const BLOCK_BASED_MAGIC: u64 = 0x88e2_41b7_85f4_cff7;
/// Footer length of format_version ≥ 1 (checksum type, 40 bytes, version, magic).
const FOOTER_LEN: usize = 53;
/// The `extended magic` of format_version ≥ 6 footers.
const EXTENDED_MAGIC: [u8; 4] = [0x3e, 0x00, 0x7a, 0x00];

/// True if `bytes` (a whole file) ends with the block-based table magic.
pub fn is_rocksdb_sst(bytes: &[u8]) -> bool {
    bytes.len() >= FOOTER_LEN && bytes[bytes.len() - 8..] == BLOCK_BASED_MAGIC.to_le_bytes()
}

/// A RocksDB SST as `dump_filter` shows it.
#[derive(Clone, Debug, Serialize)]
pub struct RocksTableReport {
    /// File name.
    pub file: String,
    /// Level, from the MANIFEST when the file was read as part of a database directory.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub level: Option<u32>,
    /// File size.
    pub file_bytes: u64,
    /// Block-based table format_version.
    pub format_version: u32,
    /// Checksum type of the blocks (RocksDB's `ChecksumType`).
    pub checksum_type: String,
    /// `rocksdb.num.entries`.
    pub entries: Option<u64>,
    /// `rocksdb.filter.policy`: the filter policy's name as the writer recorded it.
    pub filter_policy: Option<String>,
    /// `rocksdb.num.filter_entries`: keys and prefixes added to the filter.
    pub filter_entries: Option<u64>,
    /// `rocksdb.filter.size`.
    pub filter_size: Option<u64>,
    /// Each filter block the metaindex names.
    pub filters: Vec<RocksFilterReport>,
}

/// One filter block of a RocksDB SST.
#[derive(Clone, Debug, Serialize)]
pub struct RocksFilterReport {
    /// Metaindex key (`fullfilter.<CompatibilityName>` or `partitionedfilter.<...>`).
    pub metaindex_key: String,
    /// Block offset in the file.
    pub offset: u64,
    /// Block size (without RocksDB's 5-byte trailer).
    pub bytes: u64,
    /// "valid" or "invalid" (a partitioned filter is valid when its index is; each partition
    /// has its own status).
    pub status: &'static str,
    /// Why the block is invalid.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// An lsm-bloom block, decoded.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub lsm_bloom: Option<FilterReport>,
    /// A RocksDB built-in filter, by its metadata.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub builtin: Option<BuiltinFilterInfo>,
    /// A partitioned filter's partitions (`rocksdb_partitions.rs`).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub partitions: Vec<PartitionReport>,
    /// A partitioned filter in total.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub partition_summary: Option<PartitionSummary>,
}

fn checksum_name(t: u8) -> String {
    match t {
        0 => "none".into(),
        1 => "crc32c".into(),
        2 => "xxhash".into(),
        3 => "xxhash64".into(),
        4 => "xxh3".into(),
        other => format!("unknown ({other})"),
    }
}

/// What a table's footer says (FORMAT.md §5): how its blocks are checked, its
/// format_version, and where its metaindex block is.
pub(super) struct Footer {
    /// The checksum type byte, as stored.
    pub(super) checksum_byte: u8,
    pub(super) checksum: ChecksumType,
    pub(super) format_version: u32,
    /// format_version ≥ 6: `base_context_checksum`; 0 before.
    pub(super) base_context: u32,
    pub(super) metaindex: Handle,
}

/// Decodes the footer of the table `bytes` (the whole file).
pub(super) fn footer(bytes: &[u8]) -> std::result::Result<Footer, String> {
    if !is_rocksdb_sst(bytes) {
        return Err("not a RocksDB block-based table (no magic number at the end)".into());
    }
    let footer = &bytes[bytes.len() - FOOTER_LEN..];
    let footer_offset = (bytes.len() - FOOTER_LEN) as u64;
    let checksum_byte = footer[0];
    let checksum = ChecksumType::from_byte(checksum_byte)
        .ok_or_else(|| format!("unknown block checksum type {checksum_byte} in the footer"))?;
    let format_version = u32::from_le_bytes(
        footer[FOOTER_LEN - 12..FOOTER_LEN - 8]
            .try_into()
            .map_err(|_| "footer cut short".to_string())?,
    );
    let part2 = &footer[1..41];
    let base_context = if format_version >= 6 {
        u32::from_le_bytes([part2[8], part2[9], part2[10], part2[11]])
    } else {
        0
    };
    let metaindex = if format_version >= 6 {
        if part2[..4] != EXTENDED_MAGIC {
            return Err(format!(
                "format_version {format_version} footer lacks its extended magic"
            ));
        }
        let size = u64::from(u32::from_le_bytes(
            part2[12..16]
                .try_into()
                .map_err(|_| "footer cut short".to_string())?,
        ));
        let offset = footer_offset
            .checked_sub(BLOCK_TRAILER)
            .and_then(|e| e.checked_sub(size))
            .ok_or("metaindex size larger than the file")?;
        Handle { offset, size }
    } else {
        let mut pos = 0;
        Handle::decode(part2, &mut pos).ok_or("footer's metaindex handle is not a varint pair")?
    };
    Ok(Footer {
        checksum_byte,
        checksum,
        format_version,
        base_context,
        metaindex,
    })
}

/// Reads the SST `bytes` (the whole file) named `file`.
pub fn read_table(file: &str, bytes: &[u8]) -> std::result::Result<RocksTableReport, String> {
    let Footer {
        checksum_byte,
        checksum,
        format_version,
        base_context,
        metaindex,
    } = footer(bytes)?;
    let sst = Sst {
        bytes,
        checksum,
        base_context,
    };
    let meta = block_entries(metaindex.read(&sst, "metaindex")?, "metaindex")?;
    let mut properties = BTreeMap::new();
    let mut filter_handles = Vec::new();
    for (key, value) in &meta {
        let name = String::from_utf8_lossy(key).into_owned();
        let mut pos = 0;
        let Some(h) = Handle::decode(value, &mut pos) else {
            return Err(format!("metaindex entry {name:?} holds no block handle"));
        };
        if name == "rocksdb.properties" {
            for (k, v) in block_entries(h.read(&sst, "properties")?, "properties")? {
                properties.insert(String::from_utf8_lossy(&k).into_owned(), v);
            }
        } else if name.starts_with("fullfilter.") || name.starts_with("partitionedfilter.") {
            filter_handles.push((name, h));
        }
    }
    let number = |name: &str| {
        properties.get(name).and_then(|v| {
            let mut pos = 0;
            varint(v, &mut pos)
        })
    };
    let filter_entries = number("rocksdb.num.filter_entries");
    let filters = filter_handles
        .into_iter()
        .map(|(key, h)| filter_report(&sst, key, h, filter_entries, format_version))
        .collect();
    Ok(RocksTableReport {
        file: file.to_string(),
        level: None,
        file_bytes: bytes.len() as u64,
        format_version,
        checksum_type: checksum_name(checksum_byte),
        entries: number("rocksdb.num.entries"),
        filter_policy: properties
            .get("rocksdb.filter.policy")
            .map(|v| String::from_utf8_lossy(v).into_owned()),
        filter_entries,
        filter_size: number("rocksdb.filter.size"),
        filters,
    })
}

fn filter_report(
    sst: &Sst<'_>,
    key: String,
    h: Handle,
    entries: Option<u64>,
    format_version: u32,
) -> RocksFilterReport {
    let mut r = RocksFilterReport {
        metaindex_key: key,
        offset: h.offset,
        bytes: h.size,
        status: "valid",
        error: None,
        lsm_bloom: None,
        builtin: None,
        partitions: Vec::new(),
        partition_summary: None,
    };
    if let Some(name) = r.metaindex_key.strip_prefix("partitionedfilter.") {
        let lsm_bloom = Some(name) == crate_metaindex_key().strip_prefix("fullfilter.");
        match rocksdb_partitions::read(sst, h, format_version, entries, lsm_bloom) {
            Ok((partitions, summary)) => {
                r.partitions = partitions;
                r.partition_summary = Some(summary);
            }
            Err(e) => {
                r.status = "invalid";
                r.error = Some(e);
            }
        }
        return r;
    }
    let lsm_bloom = r.metaindex_key == crate_metaindex_key();
    let d = describe(sst, h, "filter", lsm_bloom, entries);
    (r.status, r.error, r.lsm_bloom, r.builtin) = (d.status, d.error, d.lsm_bloom, d.builtin);
    r
}

/// `fullfilter.` + the lsm-bloom policies' `CompatibilityName` (as `rocksdb::METAINDEX_KEY`,
/// which exists only with the plugin feature; this reader does not need it).
fn crate_metaindex_key() -> &'static str {
    "fullfilter.lsm_bloom"
}

/// Reads the SST at `path`.
pub fn read_table_file(path: &Path) -> Result<RocksTableReport> {
    let bytes =
        std::fs::read(path).map_err(|e| Error::io(format!("reading {}", path.display()), e))?;
    let name = path
        .file_name()
        .map_or_else(String::new, |f| f.to_string_lossy().into_owned());
    read_table(&name, &bytes).map_err(|e| Error::corruption(path, e))
}

#[cfg(test)]
pub(crate) mod tests;
