//! The newest entries of a node's log, kept in memory, so that openraft's replication
//! streams read what was just appended without a scan of the log's store.
//!
//! A leader's stream reads each entry right after it is appended, on every write's path to
//! its followers. A scan of one entry from the store costs 7.1 µs (open the view, seek,
//! decode); a copy from here, well under 1 µs. The tail holds at most `MAX_ENTRIES` entries
//! and `MAX_BYTES` of their encodings, and always ends at the log's last entry: an append
//! that does not follow it starts it afresh, a truncation cuts it, a purge trims its front.
//! A failed append empties it. Reads it cannot serve whole go to the store.

use std::collections::VecDeque;

use super::Entry;

/// Entries kept at most.
const MAX_ENTRIES: usize = 1024;
/// Bytes of entries (encoded) kept at most.
const MAX_BYTES: usize = 8 << 20;

/// The newest entries, in index order, with their encoded sizes.
#[derive(Default)]
pub(crate) struct Tail {
    entries: VecDeque<(Entry, usize)>,
    bytes: usize,
}

impl Tail {
    /// Adds entries just written to the store, in order (`size`: each one's encoded length).
    pub(crate) fn push(&mut self, entries: impl IntoIterator<Item = (Entry, usize)>) {
        for (e, size) in entries {
            let follows = self
                .entries
                .back()
                .is_none_or(|(b, _)| b.log_id.index.checked_add(1) == Some(e.log_id.index));
            if !follows {
                self.clear();
            }
            self.bytes += size;
            self.entries.push_back((e, size));
            while self.entries.len() > MAX_ENTRIES || self.bytes > MAX_BYTES {
                self.pop_front();
            }
        }
    }

    /// Adds `other`'s entries after these (as `push`).
    pub(crate) fn append(&mut self, other: Tail) {
        self.push(other.entries);
    }

    /// Forgets every entry.
    pub(crate) fn clear(&mut self) {
        self.entries.clear();
        self.bytes = 0;
    }

    /// Removes entries at `index` and after (the log was truncated there).
    pub(crate) fn truncate(&mut self, index: u64) {
        while self
            .entries
            .back()
            .is_some_and(|(b, _)| b.log_id.index >= index)
        {
            if let Some((_, size)) = self.entries.pop_back() {
                self.bytes -= size;
            }
        }
    }

    /// Removes entries up to `index` (the log was purged up to it).
    pub(crate) fn purge(&mut self, index: u64) {
        while self
            .entries
            .front()
            .is_some_and(|(f, _)| f.log_id.index <= index)
        {
            self.pop_front();
        }
    }

    fn pop_front(&mut self) {
        if let Some((_, size)) = self.entries.pop_front() {
            self.bytes -= size;
        }
    }

    /// The entries with indexes in `start..end`, if the tail holds all of them: it begins at
    /// or before `start` and ends at `last`, the log's last index. `None`: read the store.
    pub(crate) fn get(&self, start: u64, end: u64, last: Option<u64>) -> Option<Vec<Entry>> {
        let (front, _) = self.entries.front()?;
        let (back, _) = self.entries.back()?;
        if start < front.log_id.index || Some(back.log_id.index) != last {
            return None;
        }
        let from = usize::try_from(start - front.log_id.index).ok()?;
        Some(
            self.entries
                .iter()
                .skip(from)
                .take_while(|(e, _)| e.log_id.index < end)
                .map(|(e, _)| e.clone())
                .collect(),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::replication::{CommittedLeaderId, LogId};
    use openraft::vote::RaftLeaderId;
    use openraft::EntryPayload;

    fn entry(index: u64) -> (Entry, usize) {
        let e = Entry {
            log_id: LogId::new(CommittedLeaderId::new(1, 1), index),
            payload: EntryPayload::Blank,
        };
        (e, 10)
    }

    fn indexes(v: Option<Vec<Entry>>) -> Option<Vec<u64>> {
        v.map(|v| v.iter().map(|e| e.log_id.index).collect())
    }

    #[test]
    fn serves_only_what_it_holds_whole() {
        let mut t = Tail::default();
        t.push((5..10).map(entry));
        assert_eq!(indexes(t.get(6, 8, Some(9))), Some(vec![6, 7]));
        assert_eq!(indexes(t.get(7, u64::MAX, Some(9))), Some(vec![7, 8, 9]));
        assert_eq!(indexes(t.get(10, 20, Some(9))), Some(vec![]));
        assert_eq!(t.get(4, 8, Some(9)), None, "starts before the tail");
        assert_eq!(t.get(6, 8, Some(12)), None, "the log goes on past the tail");
        t.truncate(8);
        assert_eq!(indexes(t.get(5, 20, Some(7))), Some(vec![5, 6, 7]));
        t.push([entry(8)]);
        t.purge(6);
        assert_eq!(indexes(t.get(7, 20, Some(8))), Some(vec![7, 8]));
        assert_eq!(t.get(6, 20, Some(8)), None);
        // An append that does not follow the tail starts it afresh.
        t.push([entry(20)]);
        assert_eq!(indexes(t.get(20, 21, Some(20))), Some(vec![20]));
        assert_eq!(t.get(8, 21, Some(20)), None);
    }

    #[test]
    fn stays_within_its_bounds() {
        let mut t = Tail::default();
        t.push((0..(MAX_ENTRIES as u64 + 10)).map(entry));
        assert_eq!(t.entries.len(), MAX_ENTRIES);
        assert_eq!(t.entries.front().map(|(e, _)| e.log_id.index), Some(10));
        t.clear();
        t.push((0..3).map(|i| (entry(i).0, MAX_BYTES / 2)));
        assert_eq!(t.entries.len(), 2);
        assert!(t.bytes <= MAX_BYTES);
    }
}
