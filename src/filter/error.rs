//! Everything that can be wrong with a filter block or a policy, as typed errors that name what
//! was found.

use std::fmt;

/// Everything that can be wrong with a filter block or a policy.
#[derive(Clone, Debug, PartialEq)]
pub enum FilterError {
    /// The block is shorter than header plus trailer.
    TooShort {
        /// Bytes given.
        len: usize,
        /// Bytes needed at least.
        min: usize,
    },
    /// The first four bytes are not `LBFB`.
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
    /// Unknown filter kind id.
    UnknownKind {
        /// Id found.
        found: u8,
    },
    /// Unknown hash function id.
    UnknownHashFunction {
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
    /// k, m, n and the length disagree or are out of range.
    BadParameters {
        /// What is inconsistent.
        reason: String,
    },
    /// A policy that cannot build a filter.
    InvalidPolicy(String),
}

impl fmt::Display for FilterError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            FilterError::TooShort { len, min } => {
                write!(
                    f,
                    "filter block too short: {len} bytes, at least {min} needed"
                )
            }
            FilterError::BadMagic { found } => {
                write!(
                    f,
                    "bad filter block magic: found {found:02x?}, expected \"LBFB\""
                )
            }
            FilterError::UnsupportedVersion { found, supported } => write!(
                f,
                "unsupported filter format version {found} (this build reads up to {supported})"
            ),
            FilterError::ChecksumMismatch { expected, actual } => write!(
                f,
                "filter block checksum mismatch: stored {expected:#010x}, computed {actual:#010x}"
            ),
            FilterError::UnknownKind { found } => write!(f, "unknown filter kind id {found}"),
            FilterError::UnknownHashFunction { found } => {
                write!(f, "unknown hash function id {found}")
            }
            FilterError::ReservedNotZero { offset, found } => {
                write!(
                    f,
                    "reserved field at offset {offset} is {found:#x}, must be 0"
                )
            }
            FilterError::BadParameters { reason } => write!(f, "bad filter parameters: {reason}"),
            FilterError::InvalidPolicy(reason) => write!(f, "invalid filter policy: {reason}"),
        }
    }
}

impl std::error::Error for FilterError {}
