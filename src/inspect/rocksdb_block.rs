//! RocksDB block-based table blocks, as the SST reader (`rocksdb_sst.rs`) and the partition
//! reader (`rocksdb_partitions.rs`) take them: block handles, a block read only once its
//! trailer's checksum matches, and the entries of a key-delta-coded block, decoded with work
//! bounded by the block's size. FORMAT.md §5 has the layout.

use super::rocksdb_checksum::{self as checksum, ChecksumType};

/// Every block is followed by a compression type byte and a 4-byte checksum.
pub(super) const BLOCK_TRAILER: u64 = 5;

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
pub(super) struct Handle {
    pub(super) offset: u64,
    pub(super) size: u64,
}

impl Handle {
    pub(super) fn decode(buf: &[u8], pos: &mut usize) -> Option<Handle> {
        Some(Handle {
            offset: varint(buf, pos)?,
            size: varint(buf, pos)?,
        })
    }

    /// The block's bytes, inside the file, once its checksum matches and it is uncompressed.
    pub(super) fn read<'a>(
        &self,
        sst: &Sst<'a>,
        what: &str,
    ) -> std::result::Result<&'a [u8], String> {
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
pub(super) struct Sst<'a> {
    pub(super) bytes: &'a [u8],
    pub(super) checksum: ChecksumType,
    /// format_version ≥ 6: the footer's `base_context_checksum`; 0 before.
    pub(super) base_context: u32,
}

/// Entries of a block in RocksDB's key-delta format: `(shared, non_shared, value_len)` as
/// varints, the key's new bytes, the value; then restart offsets and their count.
/// A block's `(key, value)` entries in order.
pub(super) type Entries = Vec<(Vec<u8>, Vec<u8>)>;

/// How many times its own size a meta block's decoded entries may take.
const MAX_EXPANSION: usize = 16;

pub(super) fn block_entries(block: &[u8], what: &str) -> std::result::Result<Entries, String> {
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
