//! Byte-string keys as points of the u64 line, in order: a table's keys share a prefix `P`
//! (their longest common one, at most [`MAX_PREFIX`] bytes); a key's point is the `w` bytes
//! after `P`, big-endian, zero-padded when the key is shorter, where the width `w` is the
//! longest key's length past `P`, at most 8 (at least 1).
//!
//! Why a width: keys of a fixed length whose last bytes vary (`user:` and an 8-byte counter)
//! share their first bytes within a table; with the 8 bytes after `P` always taken, a key of
//! `P` and 3 bytes would become a point `2^40` times its counter, and a range of 32 counters
//! a range of `2^45` points, which no filter answers. With `w = 3` it is 32 points.
//!
//! The map only keeps order (`k1 ≤ k2` gives `point(k1) ≤ point(k2)`); keys alike in those 8
//! bytes share a point, and "ab" and "ab\0" do too. So a range of keys maps to the points
//! between its bounds' points, taken inclusive unless exclusion is exact, and a key inside
//! the range can never fall outside its points: the filter may say "maybe" wrongly, never
//! "empty".

use std::cmp::Ordering;
use std::ops::Bound;

/// The longest prefix a block stores; keys sharing more than this map by the 8 bytes after
/// its first `MAX_PREFIX` bytes (all to one point, when they share 8 more).
pub(crate) const MAX_PREFIX: usize = 256;

/// The point of `rest`, a key with the prefix taken off.
#[inline]
pub(crate) fn point(rest: &[u8]) -> u64 {
    if let Some(b) = rest.first_chunk::<8>() {
        return u64::from_be_bytes(*b);
    }
    // Shorter: byte by byte (a copy of a variable length called `memmove`).
    rest.iter()
        .enumerate()
        .fold(0, |p, (i, &b)| p | u64::from(b) << (56 - 8 * i))
}

/// The point of `rest` at width `width` (1 to 8 bytes): `point(rest)`'s first `width` bytes,
/// so still in order.
#[inline]
pub(crate) fn point_at(rest: &[u8], width: u32) -> u64 {
    point(rest) >> shift(width)
}

/// The bits `point` has beyond a point of `width` bytes.
#[inline]
pub(crate) fn shift(width: u32) -> u32 {
    8 * (8 - width)
}

/// The points a range of keys with prefix `prefix` can map to at `width`, inclusive; `None`
/// when no key with that prefix lies in the range.
pub(crate) fn points(
    prefix: KeyPrefix<'_>,
    width: u32,
    lo: Bound<&[u8]>,
    hi: Bound<&[u8]>,
) -> Option<(u64, u64)> {
    let last = u64::MAX >> shift(width);
    let a = match lo {
        Bound::Unbounded => 0,
        // An exclusive lower bound maps as an inclusive one: keys above it are at or above
        // its point.
        Bound::Included(k) | Bound::Excluded(k) => match place(prefix, k) {
            Place::Within(rest) => point_at(rest, width),
            Place::Below => 0,
            Place::Above => return None,
        },
    };
    let b = match hi {
        Bound::Unbounded => last,
        Bound::Included(k) => match place(prefix, k) {
            Place::Within(rest) => point_at(rest, width),
            Place::Below => return None,
            Place::Above => last,
        },
        Bound::Excluded(k) => match place(prefix, k) {
            Place::Within(rest) if exact(rest, width) => point_at(rest, width).checked_sub(1)?,
            Place::Within(rest) => point_at(rest, width),
            Place::Below => return None,
            Place::Above => last,
        },
    };
    (a <= b).then_some((a, b))
}

/// Whether no key below `P + rest` has the point of `rest`, so an exclusive bound can stop one
/// point short: true when `rest` has at most `width` bytes and does not end in a zero (a
/// shorter key padded with zeros would share its point; a longer one shares its first `width`
/// bytes only by being at or above it).
fn exact(rest: &[u8], width: u32) -> bool {
    rest.len() <= width as usize && rest.last() != Some(&0)
}

/// Where a bound lies against the keys with a prefix.
enum Place<'k> {
    /// It has the prefix: the rest of it.
    Within(&'k [u8]),
    /// Below every key with the prefix.
    Below,
    /// Above every key with the prefix.
    Above,
}

fn place<'k>(prefix: KeyPrefix<'_>, k: &'k [u8]) -> Place<'k> {
    match strip(prefix, k) {
        Some(rest) => Place::Within(rest),
        // Not a prefix of k: they differ at a byte before the prefix ends, or k is shorter
        // and a prefix of it — below everything then.
        None => match k.cmp(prefix.bytes) {
            Ordering::Less => Place::Below,
            _ => Place::Above,
        },
    }
}

/// A range filter's key prefix, with its first 8 bytes as a word (`KeyPrefix::new`, once per
/// filter) so that a prefix of at most 8 bytes is compared with a key in one load.
#[derive(Clone, Copy, Debug)]
pub(crate) struct KeyPrefix<'a> {
    bytes: &'a [u8],
    /// The first (up to) 8 bytes, big-endian, zero-padded.
    word: u64,
    /// The bits of `word` the prefix covers.
    mask: u64,
}

impl<'a> KeyPrefix<'a> {
    #[cfg(test)]
    pub(crate) fn new(bytes: &'a [u8]) -> Self {
        let (word, mask) = word_of(bytes);
        KeyPrefix { bytes, word, mask }
    }

    /// `bytes` with `word_of(bytes)` computed before.
    pub(crate) fn with_word(bytes: &'a [u8], (word, mask): (u64, u64)) -> Self {
        KeyPrefix { bytes, word, mask }
    }
}

/// The first (up to) 8 bytes of `bytes` as a big-endian word, and the mask of the bits they
/// cover.
pub(crate) fn word_of(bytes: &[u8]) -> (u64, u64) {
    let n = bytes.len().min(8);
    let mut b = [0u8; 8];
    b[..n].copy_from_slice(&bytes[..n]);
    let mask = if n == 0 { 0 } else { u64::MAX << (64 - 8 * n) };
    (u64::from_be_bytes(b), mask)
}

/// `k` without `prefix`, if it starts with it: one masked word compare for a prefix of at most
/// 8 bytes and a key of at least 8 (callgrind, `range_filter_bench` at 10^4 keys and a
/// 7-byte prefix: the byte loop was ~100 of ~490 instructions a probe), else a byte loop
/// (the slice comparison's call to `memcmp` took a tenth of a probe).
#[inline]
fn strip<'k>(prefix: KeyPrefix<'_>, k: &'k [u8]) -> Option<&'k [u8]> {
    let (head, rest) = k.split_at_checked(prefix.bytes.len())?;
    if prefix.bytes.len() <= 8 {
        if let Some(first) = k.first_chunk::<8>() {
            return (u64::from_be_bytes(*first) & prefix.mask == prefix.word).then_some(rest);
        }
    }
    head.iter()
        .zip(prefix.bytes)
        .all(|(a, b)| a == b)
        .then_some(rest)
}

/// The longest common prefix of `a` and `b`.
pub(crate) fn common(a: &[u8], b: &[u8]) -> usize {
    a.iter().zip(b).take_while(|(x, y)| x == y).count()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::ops::RangeBounds;

    fn in_range(k: &[u8], lo: Bound<&[u8]>, hi: Bound<&[u8]>) -> bool {
        RangeBounds::<[u8]>::contains(&(lo, hi), k)
    }

    /// For every key with the prefix and every range over a small alphabet rich in zeros and
    /// 0xFF: a key inside the range has its point inside the range's points.
    #[test]
    fn no_key_in_a_range_maps_outside_its_points() {
        let alphabet = [0u8, 1, 0x7f, 0xff];
        let mut words: Vec<Vec<u8>> = vec![Vec::new()];
        for len in 1..=3 {
            let mut next = Vec::new();
            for w in words.iter().filter(|w| w.len() == len - 1) {
                for &c in &alphabet {
                    let mut x = w.clone();
                    x.push(c);
                    next.push(x);
                }
            }
            words.extend(next);
        }
        for prefix in [&b""[..], b"p", b"\x00\xff"] {
            // Keys: prefix + word, and prefix + 8 bytes + word (beyond the mapped bytes).
            let keys: Vec<Vec<u8>> = words
                .iter()
                .flat_map(|w| {
                    let mut a = prefix.to_vec();
                    a.extend_from_slice(w);
                    let mut b = prefix.to_vec();
                    b.extend_from_slice(&[0xff; 7]);
                    b.extend_from_slice(w);
                    [a, b]
                })
                .collect();
            // Bounds: the keys themselves and strings without the prefix.
            let mut bounds: Vec<Vec<u8>> = keys.clone();
            bounds.extend([vec![], vec![0], b"o".to_vec(), b"q".to_vec(), vec![0xff; 3]]);
            // Every width, the keys' rests longer than it or not.
            for width in [1, 2, 3, 8] {
                let mut checked = 0u64;
                for lo in &bounds {
                    for hi in bounds.iter().step_by(3) {
                        for (lb, hb) in [
                            (Bound::Included(&lo[..]), Bound::Excluded(&hi[..])),
                            (Bound::Excluded(&lo[..]), Bound::Included(&hi[..])),
                            (Bound::Included(&lo[..]), Bound::Unbounded),
                            (Bound::Unbounded, Bound::Excluded(&hi[..])),
                        ] {
                            let pts = points(KeyPrefix::new(prefix), width, lb, hb);
                            for k in keys.iter().filter(|k| in_range(k, lb, hb)) {
                                let p = point_at(&k[prefix.len()..], width);
                                let (a, b) = pts.unwrap_or_else(|| {
                                    panic!("w {width}: {lb:?}..{hb:?} called empty, holds {k:?}")
                                });
                                assert!(
                                    a <= p && p <= b,
                                    "w {width}: {k:?} at {p:#x} outside {a:#x}..={b:#x}"
                                );
                                checked += 1;
                            }
                        }
                    }
                }
                assert!(checked > 100_000, "{checked}");
            }
        }
    }

    #[test]
    fn exclusive_bounds_stop_short_when_exact() {
        assert_eq!(
            points(
                KeyPrefix::new(b"p"),
                8,
                Bound::Included(b"pa"),
                Bound::Excluded(b"pb")
            ),
            Some((0x61 << 56, (0x62 << 56) - 1))
        );
        // "pa\0" and "pa" share a point: no stopping short.
        assert_eq!(
            points(
                KeyPrefix::new(b"p"),
                8,
                Bound::Unbounded,
                Bound::Excluded(b"pa\0")
            ),
            Some((0, 0x61 << 56))
        );
        // Nothing with the prefix is below the prefix itself, or beside it.
        assert_eq!(
            points(
                KeyPrefix::new(b"p"),
                8,
                Bound::Unbounded,
                Bound::Excluded(b"p")
            ),
            None
        );
        assert_eq!(
            points(
                KeyPrefix::new(b"p"),
                8,
                Bound::Included(b"q"),
                Bound::Unbounded
            ),
            None
        );
        assert_eq!(
            points(
                KeyPrefix::new(b"p"),
                8,
                Bound::Unbounded,
                Bound::Included(b"o")
            ),
            None
        );
        assert_eq!(
            points(
                KeyPrefix::new(b"p"),
                8,
                Bound::Included(b"o"),
                Bound::Included(b"q")
            ),
            Some((0, u64::MAX))
        );
    }

    /// At a width of 2 bytes the points are the 2 bytes after the prefix: consecutive 2-byte
    /// counters are consecutive points, a bound past the width stops short only when exact,
    /// and the line ends at 2^16 − 1.
    #[test]
    fn a_narrow_width_keeps_counters_consecutive() {
        let at = |x: u16| [&b"p"[..], &x.to_be_bytes()].concat();
        let (a, b) = (at(0x1234), at(0x1240));
        assert_eq!(
            points(
                KeyPrefix::new(b"p"),
                2,
                Bound::Included(&a),
                Bound::Excluded(&b)
            ),
            Some((0x1234, 0x123f))
        );
        let longer = [&b[..], b"x"].concat();
        assert_eq!(
            points(
                KeyPrefix::new(b"p"),
                2,
                Bound::Included(&a),
                Bound::Excluded(&longer)
            ),
            Some((0x1234, 0x1240))
        );
        assert_eq!(
            points(
                KeyPrefix::new(b"p"),
                2,
                Bound::Included(&a),
                Bound::Unbounded
            ),
            Some((0x1234, 0xffff))
        );
        assert_eq!(
            points(
                KeyPrefix::new(b"p"),
                2,
                Bound::Included(b"o"),
                Bound::Included(b"q")
            ),
            Some((0, 0xffff))
        );
        assert_eq!(point_at(b"\x12\x34\x56", 2), 0x1234);
    }
}
