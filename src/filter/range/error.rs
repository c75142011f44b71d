//! Everything that can be wrong with a range-filter block or policy, naming what was found.

use std::fmt;

/// Everything that can be wrong with a range-filter block (FORMAT.md §9) or policy.
#[derive(Clone, Debug, PartialEq)]
pub enum RangeFilterError {
    /// The block is shorter than its header and trailer.
    TooShort {
        /// Bytes given.
        len: usize,
        /// Bytes needed at least.
        min: usize,
    },
    /// The first four bytes are not `LBRF`.
    BadMagic {
        /// Bytes found.
        found: [u8; 4],
    },
    /// A format version this build does not read.
    UnsupportedVersion {
        /// Version in the block.
        found: u16,
        /// Newest version this build reads.
        supported: u16,
    },
    /// The stored CRC does not match the block.
    ChecksumMismatch {
        /// CRC stored in the block.
        expected: u32,
        /// CRC computed over the block.
        actual: u32,
    },
    /// Unknown range-filter kind id.
    UnknownKind {
        /// Id found.
        found: u8,
    },
    /// A reserved field is not zero.
    ReservedNotZero {
        /// Offset of the field in the block.
        offset: usize,
        /// Value found.
        found: u64,
    },
    /// The parameters, the length and the stored set disagree.
    BadLayout {
        /// What is inconsistent.
        reason: String,
    },
    /// A policy that cannot build a filter.
    InvalidPolicy(String),
}

impl fmt::Display for RangeFilterError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            RangeFilterError::TooShort { len, min } => write!(
                f,
                "range filter block too short: {len} bytes, at least {min} needed"
            ),
            RangeFilterError::BadMagic { found } => write!(
                f,
                "bad range filter block magic: found {found:02x?}, expected \"LBRF\""
            ),
            RangeFilterError::UnsupportedVersion { found, supported } => write!(
                f,
                "unsupported range filter format version {found} (this build reads up to {supported})"
            ),
            RangeFilterError::ChecksumMismatch { expected, actual } => write!(
                f,
                "range filter block checksum mismatch: stored {expected:#010x}, computed {actual:#010x}"
            ),
            RangeFilterError::UnknownKind { found } => {
                write!(f, "unknown range filter kind id {found}")
            }
            RangeFilterError::ReservedNotZero { offset, found } => write!(
                f,
                "reserved field at offset {offset} of a range filter block is {found:#x}, must be 0"
            ),
            RangeFilterError::BadLayout { reason } => {
                write!(f, "bad range filter block: {reason}")
            }
            RangeFilterError::InvalidPolicy(reason) => {
                write!(f, "invalid range filter policy: {reason}")
            }
        }
    }
}

impl std::error::Error for RangeFilterError {}
