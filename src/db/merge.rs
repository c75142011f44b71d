//! K-way merge of sorted entry streams, newest source first: for each key, the entry from the
//! lowest-numbered (newest) source wins and older versions are skipped. Used by scans (then
//! tombstones are hidden by the caller) and by compaction (which may drop them).

use std::cmp::Reverse;
use std::collections::BinaryHeap;

use crate::error::Result;
use crate::table::Entry;

/// A sorted stream of entries.
pub(crate) type Source = Box<dyn Iterator<Item = Result<Entry>> + Send>;

/// Merges sources; `sources[0]` is the newest.
pub(crate) struct MergeIter {
    sources: Vec<Source>,
    heads: Vec<Option<Entry>>,
    heap: BinaryHeap<Reverse<(Vec<u8>, usize)>>,
    failed: bool,
}

impl MergeIter {
    pub(crate) fn new(sources: Vec<Source>) -> Result<Self> {
        let mut m = MergeIter {
            heads: (0..sources.len()).map(|_| None).collect(),
            sources,
            heap: BinaryHeap::new(),
            failed: false,
        };
        for i in 0..m.sources.len() {
            m.refill(i)?;
        }
        Ok(m)
    }

    fn refill(&mut self, i: usize) -> Result<()> {
        match self.sources[i].next() {
            Some(Ok(e)) => {
                self.heap.push(Reverse((e.key.clone(), i)));
                self.heads[i] = Some(e);
            }
            Some(Err(e)) => return Err(e),
            None => self.heads[i] = None,
        }
        Ok(())
    }
}

impl Iterator for MergeIter {
    type Item = Result<Entry>;

    fn next(&mut self) -> Option<Result<Entry>> {
        if self.failed {
            return None;
        }
        let Reverse((key, src)) = self.heap.pop()?;
        let entry = self.heads[src].take()?;
        let mut result = self.refill(src);
        while result.is_ok() {
            match self.heap.peek() {
                Some(Reverse((k, _))) if *k == key => {}
                _ => break,
            }
            if let Some(Reverse((_, older))) = self.heap.pop() {
                self.heads[older] = None;
                result = self.refill(older);
            }
        }
        match result {
            Ok(()) => Some(Ok(entry)),
            Err(e) => {
                self.failed = true;
                Some(Err(e))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn src(items: &[(&str, Option<&str>)]) -> Source {
        let v: Vec<Result<Entry>> = items
            .iter()
            .map(|(k, v)| {
                Ok(Entry {
                    key: k.as_bytes().to_vec(),
                    value: v.map(|v| v.as_bytes().to_vec()),
                })
            })
            .collect();
        Box::new(v.into_iter())
    }

    #[test]
    fn newest_source_wins_and_order_is_kept() {
        let m = MergeIter::new(vec![
            src(&[("b", Some("new")), ("d", None)]),
            src(&[("a", Some("1")), ("b", Some("old")), ("d", Some("4"))]),
            src(&[("c", Some("3")), ("d", Some("older"))]),
        ])
        .unwrap();
        let got: Vec<(Vec<u8>, Option<Vec<u8>>)> =
            m.map(|e| e.unwrap()).map(|e| (e.key, e.value)).collect();
        let want: Vec<(Vec<u8>, Option<Vec<u8>>)> = vec![
            (b"a".to_vec(), Some(b"1".to_vec())),
            (b"b".to_vec(), Some(b"new".to_vec())),
            (b"c".to_vec(), Some(b"3".to_vec())),
            (b"d".to_vec(), None),
        ];
        assert_eq!(got, want);
    }
}
