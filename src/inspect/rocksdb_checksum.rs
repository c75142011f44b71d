//! RocksDB's block checksums, so the SST reader (`rocksdb_sst.rs`) trusts no block whose
//! checksum is wrong. Each block is followed by a 5-byte trailer: its compression-type byte
//! and a 32-bit checksum of the block's bytes and that byte, of the footer's checksum type
//! (FORMAT.md §5). From format_version 6 on, the stored value also carries a modifier of the
//! block's offset and the footer's `base_context_checksum`, so a block copied to another place
//! in the file (or another file) fails. Formulas as in RocksDB's `table/format.cc`
//! (`ComputeBuiltinChecksumWithLastByte`, `ChecksumModifierForContext`); checked against the
//! frozen fixtures RocksDB 11.8.1 wrote (xxh3) and tables written with every other type
//! (`tests/rocksdb_plugin.rs`).

/// The footer's checksum type, as named in RocksDB's `ChecksumType`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum ChecksumType {
    /// `kNoChecksum`: nothing to verify.
    None,
    /// `kCRC32c`: masked CRC-32C.
    Crc32c,
    /// `kxxHash`: XXH32, seed 0.
    XxHash,
    /// `kxxHash64`: the low 32 bits of XXH64, seed 0.
    XxHash64,
    /// `kXXH3`: the low 32 bits of XXH3-64 of the block, mixed with the type byte.
    Xxh3,
}

impl ChecksumType {
    /// The type with footer byte `b`, if known.
    pub(crate) fn from_byte(b: u8) -> Option<ChecksumType> {
        Some(match b {
            0 => ChecksumType::None,
            1 => ChecksumType::Crc32c,
            2 => ChecksumType::XxHash,
            3 => ChecksumType::XxHash64,
            4 => ChecksumType::Xxh3,
            _ => return None,
        })
    }

    /// The checksum of `block` followed by its compression-type byte `last` (no context).
    fn of(self, block: &[u8], last: u8) -> Option<u32> {
        Some(match self {
            ChecksumType::None => return None,
            ChecksumType::Crc32c => mask(crc32c::crc32c_append(crc32c::crc32c(block), &[last])),
            ChecksumType::XxHash => {
                let mut h = xxhash_rust::xxh32::Xxh32::new(0);
                h.update(block);
                h.update(&[last]);
                h.digest()
            }
            ChecksumType::XxHash64 => {
                let mut h = xxhash_rust::xxh64::Xxh64::new(0);
                h.update(block);
                h.update(&[last]);
                h.digest() as u32
            }
            ChecksumType::Xxh3 => {
                (xxhash_rust::xxh3::xxh3_64(block) as u32)
                    ^ u32::from(last).wrapping_mul(RANDOM_PRIME)
            }
        })
    }
}

/// RocksDB's `kRandomPrime`, which mixes the type byte into an XXH3 checksum.
const RANDOM_PRIME: u32 = 0x6b90_83d9;

/// LevelDB's and RocksDB's CRC mask (`crc32c::Mask`): rotate right 15, add a constant.
fn mask(crc: u32) -> u32 {
    crc.rotate_right(15).wrapping_add(0xa282_ead8)
}

/// What a block's stored checksum adds for its place (`ChecksumModifierForContext`): 0 before
/// format_version 6, where `base` is 0.
fn context_modifier(base: u32, offset: u64) -> u32 {
    if base == 0 {
        return 0;
    }
    base ^ (offset as u32).wrapping_add((offset >> 32) as u32)
}

/// The value a block's trailer stores for `block` at `offset` with compression-type byte
/// `last`; `None` without checksums.
pub(crate) fn stored_value(
    kind: ChecksumType,
    base_context: u32,
    offset: u64,
    block: &[u8],
    last: u8,
) -> Option<u32> {
    Some(
        kind.of(block, last)?
            .wrapping_add(context_modifier(base_context, offset)),
    )
}

/// Checks the block `block` at `offset` against its trailer `trailer` (type byte and stored
/// checksum). `Err` names the stored and the computed values.
pub(crate) fn verify(
    kind: ChecksumType,
    base_context: u32,
    offset: u64,
    block: &[u8],
    trailer: [u8; 5],
) -> Result<(), String> {
    let Some(expected) = stored_value(kind, base_context, offset, block, trailer[0]) else {
        return Ok(());
    };
    let stored = u32::from_le_bytes([trailer[1], trailer[2], trailer[3], trailer[4]]);
    if stored == expected {
        Ok(())
    } else {
        Err(format!(
            "checksum mismatch ({kind:?}): stored {stored:#010x}, computed {expected:#010x}"
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The CRC-32C check value, and LevelDB's own mask test (`crc32c_test.cc`, `Mask`).
    #[test]
    fn crc32c_and_its_mask_match_the_references() {
        assert_eq!(crc32c::crc32c(b"123456789"), 0xe306_9283);
        let crc = crc32c::crc32c(b"foo");
        assert_ne!(mask(crc), crc);
        assert_ne!(mask(mask(crc)), crc);
        let unmask = |m: u32| m.wrapping_sub(0xa282_ead8).rotate_left(15);
        assert_eq!(unmask(mask(crc)), crc);
    }

    #[test]
    fn the_context_modifier_depends_on_the_offset() {
        assert_eq!(context_modifier(0, 12345), 0);
        assert_ne!(context_modifier(7, 100), context_modifier(7, 101));
        assert_ne!(context_modifier(7, 1 << 32), context_modifier(7, 0));
    }
}
