//! Encoding and validating the filter block layout. The layout itself is specified byte by
//! byte in FORMAT.md §1 ("Filter block, version 1"); this file only implements it.
//!
//! `decode` checks, in order: length, magic, version, checksum, then kind, hash function,
//! reserved fields and the parameters against the length. Nothing past the header is trusted
//! before the checksum matches.

use super::{blocked, ribbon, standard, FilterError, FilterKind};

/// Magic bytes opening every filter block.
pub const MAGIC: [u8; 4] = *b"LBFB";
/// The format version this build writes.
pub const VERSION: u16 = 1;
/// Versions this build reads.
pub const SUPPORTED_VERSIONS: &[u16] = &[1];
/// Bytes before the bit array.
pub const HEADER_LEN: usize = 48;
/// Bytes after the bit array (the CRC).
pub const TRAILER_LEN: usize = 4;

/// The decoded, validated header of a filter block.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Header {
    /// Format version of the block.
    pub version: u16,
    /// Filter kind.
    pub kind: FilterKind,
    /// Hash function id (FORMAT.md §1).
    pub hash_fn: u8,
    /// Hash seed.
    pub seed: u64,
    /// Probes per key.
    pub k: u32,
    /// Bits in the array.
    pub m: u64,
    /// Keys added.
    pub n: u64,
    /// CRC-32 stored in the trailer (equal to the computed one once decoded).
    pub crc: u32,
}

impl Header {
    /// Length in bytes of the bit array for this kind and m, if representable.
    pub fn array_len(kind: FilterKind, m: u64) -> Option<u64> {
        match kind {
            FilterKind::Standard => standard::array_len(m),
            FilterKind::Blocked | FilterKind::Ribbon => Some(m / 8),
        }
    }
}

/// Writes a complete block: header, `bits`, CRC.
pub(crate) fn encode(
    kind: FilterKind,
    hash_fn: u8,
    seed: u64,
    k: u32,
    m: u64,
    n: u64,
    bits: &[u8],
) -> Vec<u8> {
    let mut out = Vec::with_capacity(HEADER_LEN + bits.len() + TRAILER_LEN);
    out.extend_from_slice(&MAGIC);
    out.extend_from_slice(&VERSION.to_le_bytes());
    out.push(kind.id());
    out.push(hash_fn);
    out.extend_from_slice(&seed.to_le_bytes());
    out.extend_from_slice(&k.to_le_bytes());
    out.extend_from_slice(&0u32.to_le_bytes());
    out.extend_from_slice(&m.to_le_bytes());
    out.extend_from_slice(&n.to_le_bytes());
    out.extend_from_slice(&0u64.to_le_bytes());
    out.extend_from_slice(bits);
    let crc = crc32fast::hash(&out);
    out.extend_from_slice(&crc.to_le_bytes());
    out
}

fn u16_at(b: &[u8], at: usize) -> u16 {
    u16::from_le_bytes([b[at], b[at + 1]])
}
fn u32_at(b: &[u8], at: usize) -> u32 {
    let mut a = [0u8; 4];
    a.copy_from_slice(&b[at..at + 4]);
    u32::from_le_bytes(a)
}
fn u64_at(b: &[u8], at: usize) -> u64 {
    let mut a = [0u8; 8];
    a.copy_from_slice(&b[at..at + 8]);
    u64::from_le_bytes(a)
}

/// Validates a whole block and returns its header. Never panics.
pub fn decode(block: &[u8]) -> Result<Header, FilterError> {
    let min = HEADER_LEN + TRAILER_LEN;
    if block.len() < min {
        return Err(FilterError::TooShort {
            len: block.len(),
            min,
        });
    }
    let magic = [block[0], block[1], block[2], block[3]];
    if magic != MAGIC {
        return Err(FilterError::BadMagic { found: magic });
    }
    let version = u16_at(block, 4);
    if !SUPPORTED_VERSIONS.contains(&version) {
        return Err(FilterError::UnsupportedVersion {
            found: version,
            supported: VERSION,
        });
    }
    let body = block.len() - TRAILER_LEN;
    let expected = u32_at(block, body);
    let actual = crc32fast::hash(&block[..body]);
    if expected != actual {
        return Err(FilterError::ChecksumMismatch { expected, actual });
    }
    let kind = FilterKind::from_id(block[6]).ok_or(FilterError::UnknownKind { found: block[6] })?;
    let hash_fn = block[7];
    if hash_fn != super::hash::HASH_FN_XXH3_64 {
        return Err(FilterError::UnknownHashFunction { found: hash_fn });
    }
    let seed = u64_at(block, 8);
    let k = u32_at(block, 16);
    let m = u64_at(block, 24);
    let n = u64_at(block, 32);
    for (offset, value) in [
        (20usize, u64::from(u32_at(block, 20))),
        (40, u64_at(block, 40)),
    ] {
        if value != 0 {
            return Err(FilterError::ReservedNotZero {
                offset,
                found: value,
            });
        }
    }
    let bad = |reason: String| Err(FilterError::BadParameters { reason });
    if k == 0 || k > super::math::MAX_PROBES {
        return bad(format!("k = {k}, expected 1..={}", super::math::MAX_PROBES));
    }
    if m == 0 && n != 0 {
        return bad(format!("m = 0 bits but n = {n} keys"));
    }
    if kind == FilterKind::Blocked {
        if !m.is_multiple_of(blocked::LINE_BITS) {
            return bad(format!("blocked filter m = {m} is not a multiple of 512"));
        }
        if m / blocked::LINE_BITS > 1 << 32 {
            return bad(format!(
                "blocked filter has {} lines, at most 2^32 allowed",
                m / 512
            ));
        }
    }
    if kind == FilterKind::Ribbon && !m.is_multiple_of(ribbon::WIDTH * u64::from(k)) {
        return bad(format!(
            "ribbon filter m = {m} is not a multiple of 128 slots × r = {k}"
        ));
    }
    let array = body - HEADER_LEN;
    match Header::array_len(kind, m) {
        Some(len) if len == array as u64 => {}
        Some(len) => {
            return bad(format!(
                "m = {m} bits needs a {len}-byte array, block holds {array}"
            ))
        }
        None => return bad(format!("m = {m} bits is too large")),
    }
    if kind == FilterKind::Standard && !m.is_multiple_of(8) {
        // Padding bits past m must be zero (only the byte holding bit m can have any below
        // a byte boundary; whole padding bytes are checked next).
        let last = block[HEADER_LEN + (m / 8) as usize];
        if last >> (m % 8) != 0 {
            return bad(format!("padding bits after bit {m} are set"));
        }
    }
    if kind == FilterKind::Standard {
        let first_pad = HEADER_LEN + m.div_ceil(8) as usize;
        if block[first_pad..body].iter().any(|&b| b != 0) {
            return bad(format!("padding bytes after bit {m} are not zero"));
        }
    }
    Ok(Header {
        version,
        kind,
        hash_fn,
        seed,
        k,
        m,
        n,
        crc: expected,
    })
}
