//! A filter budget split among the keyspaces of a store: each keyspace's tables are planned
//! (`plan`) with its part, so that the store's filters together stay within the budget.

use super::{FilterBudget, FilterMemory};

/// `b` as one keyspace's part of a store of several: a total of bytes is split among the
/// keyspaces by their keys (`mine` of `mine + others`, table entries), so the store's filters
/// stay within it; an average of bits per key needs no split. A keyspace with no keys in
/// tables yet counts the table being built (the caller's `mine`), so its first tables get the
/// store's average.
pub(crate) fn share(b: &FilterBudget, mine: u64, others: u64) -> FilterBudget {
    match b.memory {
        FilterMemory::TotalBytes(total) if others > 0 => {
            let part = total as f64 * mine as f64 / (mine as f64 + others as f64);
            FilterBudget {
                memory: FilterMemory::TotalBytes(part as u64),
                ..*b
            }
        }
        _ => *b,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_total_is_split_by_keys_and_bits_per_key_are_not() {
        let total = FilterBudget::total_bytes(1_000_000);
        let part = |mine, others| match share(&total, mine, others).memory {
            FilterMemory::TotalBytes(b) => b,
            FilterMemory::BitsPerKey(_) => unreachable!("a total stays a total"),
        };
        assert_eq!(part(10, 0), 1_000_000, "alone: the whole");
        assert_eq!(part(0, 0), 1_000_000);
        assert_eq!(part(1, 3), 250_000);
        assert_eq!(part(3, 1), 750_000);
        assert!(part(1, 3) + part(3, 1) <= 1_000_000);
        let bits = FilterBudget::bits_per_key(8.0);
        assert_eq!(share(&bits, 1, 1_000), bits);
    }
}
