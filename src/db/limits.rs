//! The sizes the store accepts: a write that exceeds one is refused when it is made
//! (`WriteBatch::validate`), never acknowledged and then dropped at replay.

use super::wal;

/// Largest key accepted, in bytes.
pub const MAX_KEY_SIZE: usize = 16 * 1024;
/// Largest value accepted, in bytes.
pub const MAX_VALUE_SIZE: usize = 64 * 1024 * 1024;
/// Largest write batch accepted, measured as its write-ahead log record
/// (`WriteBatch::encoded_len`: keys, values and 5–9 bytes per operation), in bytes.
pub const MAX_BATCH_SIZE: usize = 256 * 1024 * 1024;
const _: () = assert!(
    MAX_BATCH_SIZE <= wal::MAX_RECORD,
    "every batch written must replay"
);
