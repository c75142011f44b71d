//! Reading RocksDB block-based SST files far enough to find and decode their filter blocks,
//! without RocksDB: the footer, the metaindex block (which names each meta block), the
//! properties block, and each filter block — an lsm-bloom block (FORMAT.md §1, under
//! `fullfilter.lsm_bloom`) decoded in full, a RocksDB built-in filter by its metadata. The
//! layout read here is summarised in FORMAT.md §5. Every offset and length comes from the
//! file, so each is bounds-checked before use; nothing here panics on a damaged file.

use std::collections::BTreeMap;
use std::path::Path;

use serde::Serialize;

use super::rocksdb_checksum::{self as checksum, ChecksumType};
use super::FilterReport;
use crate::error::{Error, Result};
use crate::filter::math;

/// The last 8 bytes of a RocksDB block-based table (`kBlockBasedTableMagicNumber`).
pub const BLOCK_BASED_MAGIC: u64 = 0x88e2_41b7_85f4_cff7;
/// Footer length of format_version ≥ 1 (checksum type, 40 bytes, version, magic).
const FOOTER_LEN: usize = 53;
/// Every block is followed by a compression type byte and a 4-byte checksum.
const BLOCK_TRAILER: u64 = 5;
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
    /// "valid", "invalid", or "not decoded" (partitioned filters: only their index is here).
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
}

/// What a RocksDB built-in filter's 5 bytes of metadata say.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct BuiltinFilterInfo {
    /// "fast_local_bloom", "standard128_ribbon", "legacy_bloom", "always_false" (no keys)
    /// or "always_true" (a marker RocksDB reads as "may match everything").
    pub kind: &'static str,
    /// Bytes of the bit array (without the metadata).
    pub array_bytes: u64,
    /// Bloom: probes per key.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub num_probes: Option<u32>,
    /// Ribbon: 128-slot blocks; legacy Bloom: cache lines.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub num_blocks: Option<u64>,
    /// Array bits per filter entry (from `rocksdb.num.filter_entries`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub bits_per_key: Option<f64>,
    /// False-positive rate predicted from the shape.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub estimated_fpr: Option<f64>,
}

/// A varint64 at `*pos` (advanced past it), if whole and at most 10 bytes.
pub(crate) fn varint(buf: &[u8], pos: &mut usize) -> Option<u64> {
    let mut v = 0u64;
    for shift in (0..64).step_by(7) {
        let b = *buf.get(*pos)?;
        *pos += 1;
        v |= u64::from(b & 0x7f) << shift;
        if b & 0x80 == 0 {
            return Some(v);
        }
    }
    None
}

/// A block handle: offset and size of a block (without its trailer).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Handle {
    offset: u64,
    size: u64,
}

impl Handle {
    fn decode(buf: &[u8], pos: &mut usize) -> Option<Handle> {
        Some(Handle {
            offset: varint(buf, pos)?,
            size: varint(buf, pos)?,
        })
    }

    /// The block's bytes, inside the file, once its checksum matches and it is uncompressed.
    fn read<'a>(&self, sst: &Sst<'a>, what: &str) -> std::result::Result<&'a [u8], String> {
        let file = sst.bytes;
        let end = self
            .offset
            .checked_add(self.size)
            .and_then(|e| e.checked_add(BLOCK_TRAILER))
            .filter(|&e| e <= file.len() as u64)
            .ok_or_else(|| {
                format!(
                    "{what} block at {} ({} bytes) runs past the end of the file",
                    self.offset, self.size
                )
            })?;
        let start = self.offset as usize;
        let body = &file[start..start + self.size as usize];
        let at = (end - BLOCK_TRAILER) as usize;
        let trailer = [
            file[at],
            file[at + 1],
            file[at + 2],
            file[at + 3],
            file[at + 4],
        ];
        checksum::verify(sst.checksum, sst.base_context, self.offset, body, trailer)
            .map_err(|e| format!("{what} block at {}: {e}", self.offset))?;
        let compression = trailer[0];
        if compression != 0 {
            return Err(format!(
                "{what} block is compressed (type {compression}): not decoded"
            ));
        }
        Ok(body)
    }
}

/// The file and what its footer says about checking its blocks.
struct Sst<'a> {
    bytes: &'a [u8],
    checksum: ChecksumType,
    /// format_version ≥ 6: the footer's `base_context_checksum`; 0 before.
    base_context: u32,
}

/// Entries of a block in RocksDB's key-delta format: `(shared, non_shared, value_len)` as
/// varints, the key's new bytes, the value; then restart offsets and their count.
/// A block's `(key, value)` entries in order.
type Entries = Vec<(Vec<u8>, Vec<u8>)>;

/// How many times its own size a meta block's decoded entries may take.
const MAX_EXPANSION: usize = 16;

fn block_entries(block: &[u8], what: &str) -> std::result::Result<Entries, String> {
    let bad = |m: &str| format!("{what} block: {m}");
    if block.len() < 4 {
        return Err(bad("shorter than its restart count"));
    }
    let tail = u32::from_le_bytes(
        block[block.len() - 4..]
            .try_into()
            .map_err(|_| bad("tail"))?,
    );
    // The top bit says how data blocks are indexed; meta blocks have it clear.
    let restarts = u64::from(tail & 0x7fff_ffff);
    let restart_bytes = restarts
        .checked_mul(4)
        .and_then(|r| r.checked_add(4))
        .filter(|&r| r <= block.len() as u64)
        .ok_or_else(|| bad("restart array larger than the block"))?;
    let end = block.len() - restart_bytes as usize;
    let mut pos = 0;
    let mut key: Vec<u8> = Vec::new();
    let mut out = Vec::new();
    // Keys are delta-coded, so an entry may repeat all of the previous key in 3 bytes: the
    // bytes materialised are bounded by the block's size (RocksDB's meta blocks come nowhere
    // near it), or a crafted 6 MiB block would ask for ~500 GB.
    let mut budget = block
        .len()
        .saturating_mul(MAX_EXPANSION)
        .saturating_add(4096);
    while pos < end {
        let trunc = || bad("entry header cut short");
        let shared = varint(block, &mut pos).ok_or_else(trunc)? as usize;
        let non_shared = varint(block, &mut pos).ok_or_else(trunc)? as usize;
        let value_len = varint(block, &mut pos).ok_or_else(trunc)? as usize;
        if shared > key.len() {
            return Err(bad("entry shares more bytes than the previous key has"));
        }
        let key_end = pos
            .checked_add(non_shared)
            .filter(|&e| e <= end)
            .ok_or_else(|| bad("key runs past the entries"))?;
        let value_end = key_end
            .checked_add(value_len)
            .filter(|&e| e <= end)
            .ok_or_else(|| bad("value runs past the entries"))?;
        let produced = shared + non_shared + value_len;
        budget = budget.checked_sub(produced).ok_or_else(|| {
            bad(&format!(
                "its keys and values expand past {MAX_EXPANSION}x its {} bytes",
                block.len()
            ))
        })?;
        key.truncate(shared);
        key.extend_from_slice(&block[pos..key_end]);
        out.push((key.clone(), block[key_end..value_end].to_vec()));
        pos = value_end;
    }
    Ok(out)
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

/// Reads the SST `bytes` (the whole file) named `file`.
pub fn read_table(file: &str, bytes: &[u8]) -> std::result::Result<RocksTableReport, String> {
    if !is_rocksdb_sst(bytes) {
        return Err("not a RocksDB block-based table (no magic number at the end)".into());
    }
    let footer = &bytes[bytes.len() - FOOTER_LEN..];
    let footer_offset = (bytes.len() - FOOTER_LEN) as u64;
    let checksum_type = footer[0];
    let checksum = ChecksumType::from_byte(checksum_type)
        .ok_or_else(|| format!("unknown block checksum type {checksum_type} in the footer"))?;
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
    let sst = Sst {
        bytes,
        checksum,
        base_context,
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
        .map(|(key, h)| filter_report(&sst, key, h, filter_entries))
        .collect();
    Ok(RocksTableReport {
        file: file.to_string(),
        level: None,
        file_bytes: bytes.len() as u64,
        format_version,
        checksum_type: checksum_name(checksum_type),
        entries: number("rocksdb.num.entries"),
        filter_policy: properties
            .get("rocksdb.filter.policy")
            .map(|v| String::from_utf8_lossy(v).into_owned()),
        filter_entries,
        filter_size: number("rocksdb.filter.size"),
        filters,
    })
}

fn filter_report(sst: &Sst<'_>, key: String, h: Handle, entries: Option<u64>) -> RocksFilterReport {
    let mut r = RocksFilterReport {
        metaindex_key: key,
        offset: h.offset,
        bytes: h.size,
        status: "valid",
        error: None,
        lsm_bloom: None,
        builtin: None,
    };
    let block = match h.read(sst, "filter") {
        Ok(b) => b,
        Err(e) => {
            r.status = "invalid";
            r.error = Some(e);
            return r;
        }
    };
    if r.metaindex_key.starts_with("partitionedfilter.") {
        r.status = "not decoded";
    } else if r.metaindex_key == crate_metaindex_key() {
        match FilterReport::from_block(block) {
            Ok(f) => r.lsm_bloom = Some(f),
            Err(e) => {
                r.status = "invalid";
                r.error = Some(e.to_string());
            }
        }
    } else {
        r.builtin = Some(builtin_info(block, entries));
    }
    r
}

/// `fullfilter.` + the lsm-bloom policies' `CompatibilityName` (as `rocksdb::METAINDEX_KEY`,
/// which exists only with the plugin feature; this reader does not need it).
fn crate_metaindex_key() -> &'static str {
    "fullfilter.lsm_bloom"
}

/// Decodes a built-in filter's metadata the way RocksDB's `GetBuiltinFilterBitsReader` does.
pub fn builtin_info(block: &[u8], entries: Option<u64>) -> BuiltinFilterInfo {
    const META: usize = 5;
    let mut info = BuiltinFilterInfo {
        kind: "always_false",
        array_bytes: 0,
        num_probes: None,
        num_blocks: None,
        bits_per_key: None,
        estimated_fpr: None,
    };
    if block.len() <= META {
        return info;
    }
    let len = block.len() - META;
    info.array_bytes = len as u64;
    let bits_per_key = entries
        .filter(|&n| n > 0)
        .map(|n| len as f64 * 8.0 / n as f64);
    info.bits_per_key = bits_per_key;
    let meta = &block[len..];
    match meta[0] as i8 {
        -1 => {
            // New Bloom: sub-implementation, block size and probes, two zero bytes.
            let probes = u32::from(meta[2] & 31);
            let log2_block = ((meta[2] >> 5) & 7) + 6;
            if meta[1] == 0 && log2_block == 6 && (1..=30).contains(&probes) && meta[3..] == [0, 0]
            {
                info.kind = "fast_local_bloom";
                info.num_probes = Some(probes);
                info.estimated_fpr = bits_per_key.map(|b| math::blocked_fpr(b, probes));
            } else {
                info.kind = "always_true";
            }
        }
        -2 => {
            let blocks = u64::from(meta[2]) | u64::from(meta[3]) << 8 | u64::from(meta[4]) << 16;
            if blocks < 2 {
                info.kind = "always_true";
            } else {
                info.kind = "standard128_ribbon";
                info.num_blocks = Some(blocks);
                // 16 bytes per block and result column: 2^-columns (fractional columns are
                // split between c and c + 1 across the blocks).
                let columns = len as f64 / (blocks as f64 * 16.0);
                info.estimated_fpr = Some(2f64.powf(-columns));
            }
        }
        p if p >= 1 => {
            let lines = u64::from(u32::from_le_bytes([meta[1], meta[2], meta[3], meta[4]]));
            info.kind = "legacy_bloom";
            info.num_probes = Some(p as u32);
            info.num_blocks = Some(lines);
            info.estimated_fpr = bits_per_key.map(|b| math::blocked_fpr(b, p as u32));
        }
        _ => info.kind = "always_true",
    }
    info
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

/// Recomputes the checksum of every block the footer and metaindex name (as far as they
/// decode), so mutation fuzzing reaches the decoders behind the checksums.
#[cfg(test)]
pub(crate) fn reseal(bytes: &mut [u8]) {
    if !is_rocksdb_sst(bytes) {
        return;
    }
    let footer_at = bytes.len() - FOOTER_LEN;
    let footer = &bytes[footer_at..];
    let Some(kind) = ChecksumType::from_byte(footer[0]) else {
        return;
    };
    let version = u32::from_le_bytes([footer[41], footer[42], footer[43], footer[44]]);
    let (base, meta) = if version >= 6 {
        let size = u64::from(u32::from_le_bytes([
            footer[13], footer[14], footer[15], footer[16],
        ]));
        let base = u32::from_le_bytes([footer[9], footer[10], footer[11], footer[12]]);
        let Some(offset) = (footer_at as u64).checked_sub(BLOCK_TRAILER + size) else {
            return;
        };
        (base, Handle { offset, size })
    } else {
        let mut pos = 0;
        let Some(h) = Handle::decode(&footer[1..41], &mut pos) else {
            return;
        };
        (0, h)
    };
    let seal = |bytes: &mut [u8], h: Handle| {
        let Some(end) = h
            .offset
            .checked_add(h.size)
            .filter(|&e| e + BLOCK_TRAILER <= bytes.len() as u64)
        else {
            return;
        };
        let (start, end) = (h.offset as usize, end as usize);
        if let Some(v) =
            checksum::stored_value(kind, base, h.offset, &bytes[start..end], bytes[end])
        {
            bytes[end + 1..end + 5].copy_from_slice(&v.to_le_bytes());
        }
    };
    seal(bytes, meta);
    let entries = {
        let end = (meta.offset + meta.size) as usize;
        block_entries(&bytes[meta.offset as usize..end], "metaindex").unwrap_or_default()
    };
    for (_, value) in entries {
        let mut pos = 0;
        if let Some(h) = Handle::decode(&value, &mut pos) {
            seal(bytes, h);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn block_entries_decode_key_deltas_and_refuse_overruns() {
        // Two entries: "abc" -> "1", then shared 2 + "d" -> "22"; one restart at 0.
        let mut b = vec![0, 3, 1, b'a', b'b', b'c', b'1', 2, 1, 2, b'd', b'2', b'2'];
        b.extend_from_slice(&0u32.to_le_bytes());
        b.extend_from_slice(&1u32.to_le_bytes());
        let e = block_entries(&b, "test").unwrap();
        assert_eq!(e[1], (b"abd".to_vec(), b"22".to_vec()));
        let mut bad = b.clone();
        bad[1] = 200; // key longer than the block
        assert!(block_entries(&bad, "test").is_err());
        let mut bad = b.clone();
        bad[7] = 9; // shares more than the previous key has
        assert!(block_entries(&bad, "test").is_err());
        let n = bad.len();
        bad[n - 4..].copy_from_slice(&1000u32.to_le_bytes());
        assert!(block_entries(&bad, "test").is_err());
    }

    /// Appends `block` and its trailer (uncompressed, CRC-32C as format_version 5 writes it).
    fn push_block(file: &mut Vec<u8>, block: &[u8]) {
        file.extend_from_slice(block);
        let crc = crc32c::crc32c_append(crc32c::crc32c(block), &[0]);
        file.push(0);
        file.extend_from_slice(&crc.rotate_right(15).wrapping_add(0xa282_ead8).to_le_bytes());
    }

    /// A format_version 5 table (CRC-32C) whose metaindex block is `meta`.
    fn table_with_metaindex(meta: &[u8]) -> Vec<u8> {
        let mut file = Vec::new();
        push_block(&mut file, meta);
        let mut footer = vec![1u8, 0, 0]; // CRC-32C; metaindex at 0 (varint), size next
        let mut size = meta.len() as u64;
        footer.truncate(2);
        while size >= 0x80 {
            footer.push(size as u8 | 0x80);
            size >>= 7;
        }
        footer.push(size as u8);
        footer.resize(41, 0);
        footer.extend_from_slice(&5u32.to_le_bytes());
        footer.extend_from_slice(&BLOCK_BASED_MAGIC.to_le_bytes());
        file.extend_from_slice(&footer);
        file
    }

    /// A constructed metaindex whose every entry repeats all of the previous key (3 bytes an
    /// entry, after one 64 KiB key): 1 MiB of block would materialise ~22 GB of keys. It is
    /// refused, quickly, naming the block.
    #[test]
    fn a_block_whose_keys_expand_quadratically_is_refused() {
        let mut meta = vec![0u8];
        let mut len = 64u64 << 10;
        while len >= 0x80 {
            meta.push(len as u8 | 0x80);
            len >>= 7;
        }
        meta.push(len as u8);
        meta.push(0);
        meta.extend(std::iter::repeat_n(b'k', 64 << 10));
        while meta.len() < 1 << 20 {
            meta.extend_from_slice(&[0x80, 0x80, 0x04, 0, 0]); // shared 65,536, nothing new
        }
        meta.extend_from_slice(&0u32.to_le_bytes());
        meta.extend_from_slice(&1u32.to_le_bytes());
        let started = std::time::Instant::now();
        let e = read_table("t.sst", &table_with_metaindex(&meta)).unwrap_err();
        assert!(e.contains("metaindex block") && e.contains("expand"), "{e}");
        assert!(started.elapsed() < std::time::Duration::from_secs(5));
    }

    /// A block whose bytes or trailer changed is refused by its checksum.
    #[test]
    fn a_damaged_block_fails_its_checksum() {
        let mut meta = Vec::new();
        meta.extend_from_slice(&0u32.to_le_bytes());
        meta.extend_from_slice(&1u32.to_le_bytes());
        let file = table_with_metaindex(&meta);
        assert!(read_table("t.sst", &file).is_ok());
        for i in 0..meta.len() + 5 {
            let mut f = file.clone();
            f[i] ^= 0x10;
            let e = read_table("t.sst", &f).unwrap_err();
            assert!(e.contains("checksum mismatch"), "byte {i}: {e}");
        }
    }

    #[test]
    fn every_truncation_and_flip_of_a_table_is_an_error_or_a_report() {
        // A minimal format_version 5 table: metaindex with a filter and properties.
        let mut file = Vec::new();
        let filter = {
            let mut f = vec![0u8; 64];
            f.extend_from_slice(&[0xff, 0, 6, 0, 0]); // fast local Bloom, 6 probes
            f
        };
        push_block(&mut file, &filter);
        let entry = |key: &str, h: Handle| {
            let mut v = Vec::new();
            for x in [h.offset, h.size] {
                let mut x = x;
                while x >= 0x80 {
                    v.push(x as u8 | 0x80);
                    x >>= 7;
                }
                v.push(x as u8);
            }
            let mut e = vec![0, key.len() as u8, v.len() as u8];
            e.extend_from_slice(key.as_bytes());
            e.extend_from_slice(&v);
            e
        };
        let mut meta = entry(
            "fullfilter.rocksdb.BuiltinBloomFilter",
            Handle {
                offset: 0,
                size: filter.len() as u64,
            },
        );
        meta.extend_from_slice(&0u32.to_le_bytes());
        meta.extend_from_slice(&1u32.to_le_bytes());
        let meta_handle = Handle {
            offset: file.len() as u64,
            size: meta.len() as u64,
        };
        push_block(&mut file, &meta);
        let mut footer = vec![1u8];
        let mut part2 = Vec::new();
        for x in [meta_handle.offset, meta_handle.size, 0, 0] {
            part2.push(x as u8); // all < 128
        }
        part2.resize(40, 0);
        footer.extend_from_slice(&part2);
        footer.extend_from_slice(&5u32.to_le_bytes());
        footer.extend_from_slice(&BLOCK_BASED_MAGIC.to_le_bytes());
        file.extend_from_slice(&footer);
        let r = read_table("t.sst", &file).unwrap();
        assert_eq!(r.format_version, 5);
        let b = r.filters[0].builtin.as_ref().unwrap();
        assert_eq!((b.kind, b.num_probes), ("fast_local_bloom", Some(6)));
        for cut in 0..file.len() {
            let _ = read_table("t.sst", &file[cut..]);
            let _ = read_table("t.sst", &file[..cut]);
        }
        for i in 0..file.len() {
            for bit in 0..8 {
                let mut f = file.clone();
                f[i] ^= 1 << bit;
                let _ = read_table("t.sst", &f);
            }
        }
    }
}
