//! A range delete as one operation of a log record (FORMAT.md §2, operation tag 5): the
//! range's first key, then how it ends. Used by `wal.rs` to encode and decode batches.

use crate::coding::{put_len_prefixed, Cursor};
use crate::error::Result;
use crate::table::{DeletedRange, End};

/// Operation tag of a range delete.
pub(crate) const TAG_DELETE_RANGE: u8 = 5;

/// The end kinds' bytes.
const END_UNBOUNDED: u8 = 0;
const END_BEFORE: u8 = 1;
const END_THROUGH: u8 = 2;

/// Payload bytes of the operation: tag, the first key with its length, the end kind, and a
/// bounded end's key with its length.
pub(crate) fn encoded_len(r: &DeletedRange) -> usize {
    let end = match &r.end {
        End::Before(k) | End::Through(k) => 4 + k.len(),
        End::Unbounded => 0,
    };
    1 + 4 + r.start.len() + 1 + end
}

/// Appends the operation.
pub(crate) fn encode(out: &mut Vec<u8>, r: &DeletedRange) -> Result<()> {
    out.push(TAG_DELETE_RANGE);
    put_len_prefixed(out, &r.start, "key")?;
    match &r.end {
        End::Unbounded => out.push(END_UNBOUNDED),
        End::Before(k) => {
            out.push(END_BEFORE);
            put_len_prefixed(out, k, "key")?;
        }
        End::Through(k) => {
            out.push(END_THROUGH);
            put_len_prefixed(out, k, "key")?;
        }
    }
    Ok(())
}

/// Decodes the operation after its tag; `None` if malformed or empty (a writer never logs an
/// empty range).
pub(crate) fn decode(c: &mut Cursor<'_>) -> Option<DeletedRange> {
    let start = c.len_prefixed().ok()?.to_vec();
    let end = match c.u8().ok()? {
        END_UNBOUNDED => End::Unbounded,
        END_BEFORE => End::Before(c.len_prefixed().ok()?.to_vec()),
        END_THROUGH => End::Through(c.len_prefixed().ok()?.to_vec()),
        _ => return None,
    };
    let r = DeletedRange { start, end };
    (!r.is_empty()).then_some(r)
}
