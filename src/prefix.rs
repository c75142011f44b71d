//! Prefix rules: which leading bytes of a key are its *prefix*, for prefix filters
//! (FORMAT.md §3, "Prefix filter block").
//!
//! A table written under a rule holds, beside (or instead of) its whole-key filter, a filter
//! over the distinct prefixes of its keys; a key the rule gives no prefix (too short, too few
//! delimiters) is simply not in it. The rule's [`PrefixExtractor::id`] is recorded in the
//! table's properties, and a reader uses a table's prefix filter only under the same rule.
//!
//! Both rules are *prefix-stable*: if the rule gives key `k` the prefix `k[..l]`, it gives
//! every key that starts with `k[..l]` the same prefix. That is what makes a prefix filter safe
//! to consult for "every key starting with `p`": when the rule gives `p` itself a prefix `q`,
//! every key starting with `p` has prefix `q`, so a table whose filter says `q` is absent
//! holds none of them. When `p` has no prefix under the rule (shorter than the fixed length,
//! fewer delimiters), the filter is not consulted. RocksDB's `prefix_extractor` leaves this
//! property to the user's code and its seeks return wrong results when it does not hold; these
//! two rules hold it by construction, so a user-supplied closure (which could not be checked,
//! and whose name would have to change with its code) is deliberately not offered.
//!
//! Use: `Options::default().with_prefix_filters(Some(PrefixFilters::with(PrefixExtractor::delimiter(b':', 1))))`, then
//! `Db::scan_prefix(b"user:")`.

/// A rule giving each key its prefix (or none).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
pub enum PrefixExtractor {
    /// The first `len` bytes; a key shorter than `len` has no prefix.
    Fixed {
        /// Prefix length in bytes (≥ 1).
        len: u32,
    },
    /// The key up to and including the `count`-th occurrence of `byte`; a key with fewer has
    /// no prefix. `delimiter(b':', 2)` gives `user:42:` for `user:42:name`.
    Delimiter {
        /// The delimiter byte.
        byte: u8,
        /// Which occurrence ends the prefix (≥ 1).
        count: u32,
    },
}

impl PrefixExtractor {
    /// The first `len` bytes of each key.
    pub fn fixed(len: u32) -> Self {
        PrefixExtractor::Fixed { len }
    }

    /// Each key up to and including the `count`-th `byte`.
    pub fn delimiter(byte: u8, count: u32) -> Self {
        PrefixExtractor::Delimiter { byte, count }
    }

    /// `Err` naming the problem when the rule is degenerate (a zero length or count).
    pub fn validate(&self) -> Result<(), String> {
        match *self {
            PrefixExtractor::Fixed { len: 0 } => {
                Err("prefix_extractor: a fixed prefix length must be at least 1".into())
            }
            PrefixExtractor::Delimiter { count: 0, .. } => {
                Err("prefix_extractor: the delimiter count must be at least 1".into())
            }
            _ => Ok(()),
        }
    }

    /// Length of `key`'s prefix, or `None` when the rule gives it none.
    pub fn prefix_len(&self, key: &[u8]) -> Option<usize> {
        match *self {
            PrefixExtractor::Fixed { len } => {
                let len = usize::try_from(len).ok()?;
                (len > 0 && key.len() >= len).then_some(len)
            }
            PrefixExtractor::Delimiter { byte, count } => {
                let count = usize::try_from(count).ok()?;
                if count == 0 {
                    return None;
                }
                key.iter()
                    .enumerate()
                    .filter(|(_, b)| **b == byte)
                    .nth(count - 1)
                    .map(|(i, _)| i + 1)
            }
        }
    }

    /// `key`'s prefix, or `None`.
    pub fn prefix<'k>(&self, key: &'k [u8]) -> Option<&'k [u8]> {
        self.prefix_len(key).map(|l| &key[..l])
    }

    /// The rule's identity as recorded in table properties: `fixed:<len>` or
    /// `delimiter:<byte as two hex digits>:<count>`.
    pub fn id(&self) -> String {
        match *self {
            PrefixExtractor::Fixed { len } => format!("fixed:{len}"),
            PrefixExtractor::Delimiter { byte, count } => format!("delimiter:{byte:02x}:{count}"),
        }
    }

    /// The rule whose `id()` is `id`; `None` for anything else (a rule this build does not
    /// know is never matched, so its tables are read unfiltered).
    pub fn from_id(id: &str) -> Option<Self> {
        let rule = match id.split(':').collect::<Vec<_>>()[..] {
            ["fixed", len] => PrefixExtractor::fixed(len.parse().ok()?),
            ["delimiter", byte, count] if byte.len() == 2 => {
                PrefixExtractor::delimiter(u8::from_str_radix(byte, 16).ok()?, count.parse().ok()?)
            }
            _ => return None,
        };
        (rule.validate().is_ok() && rule.id() == id).then_some(rule)
    }
}

impl std::fmt::Display for PrefixExtractor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.id())
    }
}

/// The smallest key greater than every key starting with `prefix`: `None` when there is none
/// (`prefix` empty or all `0xff`). `[prefix, prefix_end(prefix))` is the range of keys starting
/// with `prefix`.
pub fn prefix_end(prefix: &[u8]) -> Option<Vec<u8>> {
    let last = prefix.iter().rposition(|b| *b != 0xff)?;
    let mut end = prefix[..=last].to_vec();
    end[last] += 1;
    Some(end)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rules_give_the_documented_prefixes() {
        let f = PrefixExtractor::fixed(3);
        assert_eq!(f.prefix(b"abcd"), Some(&b"abc"[..]));
        assert_eq!(f.prefix(b"abc"), Some(&b"abc"[..]));
        assert_eq!(f.prefix(b"ab"), None);
        let d = PrefixExtractor::delimiter(b':', 2);
        assert_eq!(d.prefix(b"user:42:name"), Some(&b"user:42:"[..]));
        assert_eq!(d.prefix(b"user:42:"), Some(&b"user:42:"[..]));
        assert_eq!(d.prefix(b"user:42"), None);
        assert_eq!(d.prefix(b""), None);
        assert!(PrefixExtractor::fixed(0).validate().is_err());
        assert!(PrefixExtractor::delimiter(b':', 0).validate().is_err());
        assert_eq!(PrefixExtractor::fixed(0).prefix_len(b"abc"), None);
    }

    #[test]
    fn ids_round_trip_and_nothing_else_parses() {
        for r in [
            PrefixExtractor::fixed(1),
            PrefixExtractor::fixed(u32::MAX),
            PrefixExtractor::delimiter(b':', 1),
            PrefixExtractor::delimiter(0, 7),
            PrefixExtractor::delimiter(0xff, 2),
        ] {
            assert_eq!(PrefixExtractor::from_id(&r.id()), Some(r), "{r}");
        }
        for bad in [
            "",
            "fixed",
            "fixed:0",
            "fixed:+3",
            "fixed:03",
            "fixed:3:",
            "delimiter:3a",
            "delimiter:3A:1",
            "delimiter:3a:0",
            "delimiter:a:1",
            "closure:x",
        ] {
            assert_eq!(PrefixExtractor::from_id(bad), None, "{bad}");
        }
    }

    /// Prefix stability, the property `scan_prefix` relies on: every key extending a key's
    /// prefix has the same prefix.
    #[test]
    fn rules_are_prefix_stable() {
        let alphabet = [b'a', b':', 0, 0xff];
        let mut keys: Vec<Vec<u8>> = vec![Vec::new()];
        for _ in 0..5 {
            let next: Vec<Vec<u8>> = keys
                .iter()
                .flat_map(|k| alphabet.iter().map(move |b| [k.as_slice(), &[*b]].concat()))
                .collect();
            keys.extend(next);
            keys.dedup();
        }
        for rule in [
            PrefixExtractor::fixed(2),
            PrefixExtractor::delimiter(b':', 1),
            PrefixExtractor::delimiter(b':', 2),
        ] {
            for k in &keys {
                let Some(l) = rule.prefix_len(k) else {
                    continue;
                };
                for other in keys.iter().filter(|o| o.starts_with(&k[..l])) {
                    assert_eq!(rule.prefix_len(other), Some(l), "{rule} {k:?} {other:?}");
                }
            }
        }
    }

    #[test]
    fn prefix_end_is_the_least_upper_bound() {
        assert_eq!(prefix_end(b"ab"), Some(b"ac".to_vec()));
        assert_eq!(prefix_end(b"a\xff\xff"), Some(b"b".to_vec()));
        assert_eq!(prefix_end(b"ab\xff"), Some(b"ac".to_vec()));
        assert_eq!(prefix_end(b"\xff"), None);
        assert_eq!(prefix_end(b""), None);
    }
}
