//! Encoding and validating the range-filter block, specified byte by byte in FORMAT.md §9;
//! this file only implements it.
//!
//! `decode` checks, in order: length, magic, version, checksum, then kind, reserved fields,
//! the parameters against each other and the length, and finally the stored set itself
//! (`EliasFano::new`). Nothing past the header is trusted before the checksum matches, and no
//! query ever reads a set that is not one.

use super::elias_fano::{self, EliasFano};
use super::map::MAX_PREFIX;
use super::RangeFilterError;

/// Magic bytes opening every range-filter block.
pub const MAGIC: [u8; 4] = *b"LBRF";
/// The format version this build writes (2: the point width).
pub const VERSION: u16 = 2;
/// Versions this build reads (1: points of 8 bytes).
pub const SUPPORTED_VERSIONS: &[u16] = &[1, 2];
/// Bytes before the prefix.
pub const HEADER_LEN: usize = 48;
/// Bytes after the arrays (the CRC).
pub const TRAILER_LEN: usize = 4;
/// Kind id of a Grafite filter, the one kind.
pub const KIND_GRAFITE: u8 = 1;
/// The largest reduced universe a block may give.
pub const MAX_UNIVERSE: u64 = 1 << 62;
/// The largest `log2 L` a block may give.
pub const MAX_LOG_L: u8 = 62;

/// The fields of a block, as written and as read back.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Fields {
    /// The block's format version.
    pub(crate) version: u16,
    pub(crate) low_bits: u32,
    pub(crate) seed: u64,
    /// Keys added.
    pub(crate) n: u64,
    /// Values stored.
    pub(crate) count: u64,
    /// The reduced universe.
    pub(crate) r: u64,
    pub(crate) log_l: u32,
    /// Bytes of a key after the prefix that make its point, 1 to 8 (8 in version 1).
    pub(crate) width: u32,
    pub(crate) prefix: Vec<u8>,
    pub(crate) crc: u32,
}

/// Writes a complete block: header, prefix, arrays, CRC.
pub(crate) fn encode(f: &Fields, high: &[u64], low: &[u64]) -> Vec<u8> {
    let mut b = Vec::with_capacity(HEADER_LEN + f.prefix.len() + 8 * (high.len() + low.len()) + 12);
    b.extend_from_slice(&MAGIC);
    b.extend_from_slice(&f.version.to_le_bytes());
    b.push(KIND_GRAFITE);
    b.push(f.low_bits as u8);
    b.extend_from_slice(&f.seed.to_le_bytes());
    b.extend_from_slice(&f.n.to_le_bytes());
    b.extend_from_slice(&f.count.to_le_bytes());
    b.extend_from_slice(&f.r.to_le_bytes());
    b.push(f.log_l as u8);
    // Version 1 has no width (its points are 8 bytes): the byte is reserved there.
    b.push(if f.version == 1 { 0 } else { f.width as u8 });
    b.extend_from_slice(&(f.prefix.len() as u16).to_le_bytes());
    b.extend_from_slice(&[0; 4]);
    b.extend_from_slice(&f.prefix);
    b.resize(HEADER_LEN + padded(f.prefix.len()), 0);
    for w in high.iter().chain(low) {
        b.extend_from_slice(&w.to_le_bytes());
    }
    let crc = crc32fast::hash(&b);
    b.extend_from_slice(&crc.to_le_bytes());
    b
}

fn padded(len: usize) -> usize {
    len.div_ceil(8) * 8
}

fn u64_at(b: &[u8], at: usize) -> u64 {
    let mut w = [0u8; 8];
    w.copy_from_slice(&b[at..at + 8]);
    u64::from_le_bytes(w)
}

fn bad(reason: impl Into<String>) -> RangeFilterError {
    RangeFilterError::BadLayout {
        reason: reason.into(),
    }
}

/// Reads and validates a whole block: its fields, and its set (`None` for an empty filter).
pub(crate) fn decode(b: &[u8]) -> Result<(Fields, Option<EliasFano>), RangeFilterError> {
    let min = HEADER_LEN + TRAILER_LEN;
    if b.len() < min {
        return Err(RangeFilterError::TooShort { len: b.len(), min });
    }
    let magic = [b[0], b[1], b[2], b[3]];
    if magic != MAGIC {
        return Err(RangeFilterError::BadMagic { found: magic });
    }
    let version = u16::from_le_bytes([b[4], b[5]]);
    if !SUPPORTED_VERSIONS.contains(&version) {
        return Err(RangeFilterError::UnsupportedVersion {
            found: version,
            supported: VERSION,
        });
    }
    let body = b.len() - TRAILER_LEN;
    let expected = u32::from_le_bytes([b[body], b[body + 1], b[body + 2], b[body + 3]]);
    let actual = crc32fast::hash(&b[..body]);
    if expected != actual {
        return Err(RangeFilterError::ChecksumMismatch { expected, actual });
    }
    if b[6] != KIND_GRAFITE {
        return Err(RangeFilterError::UnknownKind { found: b[6] });
    }
    // Version 1 has no width: its byte is reserved, and points are 8 bytes.
    let reserved: &[(usize, usize)] = if version == 1 {
        &[(41, 1), (44, 4)]
    } else {
        &[(44, 4)]
    };
    for &(offset, len) in reserved {
        let found = b[offset..offset + len]
            .iter()
            .rev()
            .fold(0u64, |acc, &x| acc << 8 | u64::from(x));
        if found != 0 {
            return Err(RangeFilterError::ReservedNotZero { offset, found });
        }
    }
    let low_bits = u32::from(b[7]);
    let (seed, n, count, r) = (u64_at(b, 8), u64_at(b, 16), u64_at(b, 24), u64_at(b, 32));
    let log_l = b[40];
    let width = if version == 1 { 8 } else { b[41] };
    if !(1..=8).contains(&width) {
        return Err(bad(format!("a point width of {width} bytes, give 1 to 8")));
    }
    let prefix_len = usize::from(u16::from_le_bytes([b[42], b[43]]));
    if log_l > MAX_LOG_L {
        return Err(bad(format!("log2 L is {log_l}, at most {MAX_LOG_L}")));
    }
    if prefix_len > MAX_PREFIX {
        return Err(bad(format!(
            "a prefix of {prefix_len} bytes, at most {MAX_PREFIX}"
        )));
    }
    if count > n {
        return Err(bad(format!("{count} values stored for {n} keys")));
    }
    let arrays_at = HEADER_LEN + padded(prefix_len);
    if arrays_at > body {
        return Err(bad("the prefix runs past the block"));
    }
    if b[HEADER_LEN + prefix_len..arrays_at]
        .iter()
        .any(|&x| x != 0)
    {
        return Err(bad("the prefix's padding is not zero"));
    }
    let fields = Fields {
        version,
        low_bits,
        seed,
        n,
        count,
        r,
        log_l: u32::from(log_l),
        width: u32::from(width),
        prefix: b[HEADER_LEN..HEADER_LEN + prefix_len].to_vec(),
        crc: expected,
    };
    let arrays = &b[arrays_at..body];
    if n == 0 {
        if count != 0 || r != 0 || low_bits != 0 || !arrays.is_empty() {
            return Err(bad("an empty filter with a universe, values or arrays"));
        }
        return Ok((fields, None));
    }
    if count == 0 {
        return Err(bad(format!("no values stored for {n} keys")));
    }
    // r ≥ 2L keeps a key beside the range, in its block, out of the range's intervals; r ≤
    // 2^62 keeps a block's place plus an offset within u64.
    if r > MAX_UNIVERSE {
        return Err(bad(format!("a universe of {r}, at most 2^62")));
    }
    if r >> 1 < 1u64 << log_l {
        return Err(bad(format!("a universe of {r} under twice L = 2^{log_l}")));
    }
    if low_bits >= 64 {
        return Err(bad(format!("{low_bits} low bits per value, at most 63")));
    }
    let high_words = count
        .checked_add((r - 1) >> low_bits)
        .and_then(|x| x.checked_add(1))
        .map(elias_fano::words)
        .ok_or_else(|| bad("the high bits' length overflows"))?;
    let low_words = count
        .checked_mul(u64::from(low_bits))
        .map(elias_fano::words)
        .ok_or_else(|| bad("the low bits' length overflows"))?;
    if high_words
        .checked_add(low_words)
        .and_then(|w| w.checked_mul(8))
        != Some(arrays.len())
    {
        return Err(bad(format!(
            "{} bytes of arrays, {high_words} + {low_words} words expected",
            arrays.len()
        )));
    }
    // Each array decoded once, straight into the vector the set takes.
    let words = |b: &[u8]| -> Vec<u64> { (0..b.len() / 8).map(|i| u64_at(b, 8 * i)).collect() };
    let (high, low) = arrays.split_at(8 * high_words);
    let set = EliasFano::new(words(high), words(low), count, r, low_bits).map_err(bad)?;
    Ok((fields, Some(set)))
}
