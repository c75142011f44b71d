//! Key hashing: one 64-bit XXH3 hash per key, from which every probe of every filter kind is
//! derived. The LSM hashes a key once per lookup and hands the hash to each table's filter
//! (`FilterReader::may_contain_hash`), so a lookup over many tables costs one hash.

use xxhash_rust::xxh3::xxh3_64_with_seed;

/// Identifier of XXH3-64 in the filter block header (`hash function` field, FORMAT.md §1).
pub const HASH_FN_XXH3_64: u8 = 1;

/// The seed the builder writes into every block it makes.
pub const DEFAULT_SEED: u64 = 0;

/// Hashes `key` with XXH3-64 and the default seed: the hash `may_contain_hash` expects for a
/// block whose seed is [`DEFAULT_SEED`].
#[inline]
pub fn hash_key(key: &[u8]) -> u64 {
    xxh3_64_with_seed(key, DEFAULT_SEED)
}

/// Hashes `key` with XXH3-64 and an explicit seed.
#[inline]
pub fn hash_key_with_seed(key: &[u8], seed: u64) -> u64 {
    xxh3_64_with_seed(key, seed)
}

/// SplitMix64 finaliser: derives the second Kirsch–Mitzenmacher hash from the first. It is a
/// bijection on u64, so `(h mod m, mix(h) mod m)` is close to uniform for a uniform `h`.
#[inline]
pub(crate) fn mix(mut x: u64) -> u64 {
    x ^= x >> 30;
    x = x.wrapping_mul(0xBF58_476D_1CE4_E5B9);
    x ^= x >> 27;
    x = x.wrapping_mul(0x94D0_49BB_1331_11EB);
    x ^ (x >> 31)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hash_is_seed_dependent_and_stable() {
        assert_eq!(hash_key(b"abc"), hash_key_with_seed(b"abc", DEFAULT_SEED));
        assert_ne!(hash_key(b"abc"), hash_key_with_seed(b"abc", 1));
        assert_ne!(hash_key(b"abc"), hash_key(b"abd"));
    }

    #[test]
    fn mix_is_not_identity() {
        assert_ne!(mix(1), 1);
        assert_ne!(mix(1), mix(2));
    }
}
