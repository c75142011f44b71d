//! A transaction's scan (`Transaction::scan`): the snapshot's scan with the transaction's own
//! writes in the range laid over it, in key order, both ways. An own put shows its value in
//! place of the snapshot's, an own delete or deleted range hides the snapshot's key.

use std::cmp::Ordering;

use super::iter::DbIter;
use super::transaction_writes::{Hidden, Overlay};
use crate::error::Result;

type Item = Result<(Vec<u8>, Vec<u8>)>;

/// Live keys and values of a range as a transaction sees them: its snapshot's, overlaid with
/// its own writes made before the scan began. Forward with `next`, backward with
/// `next_back` (`.rev()`), as `DbIter`.
pub struct TransactionIter {
    base: DbIter,
    /// The snapshot's next entry from the front, taken from `base` and not yet returned.
    front: Option<Item>,
    /// The same from the back.
    back: Option<Item>,
    /// Own writes in the range, in key order (`None`: deleted).
    own: Overlay,
    /// The ranges the transaction deleted: the snapshot's entries inside them are skipped.
    hidden: Hidden,
}

impl std::fmt::Debug for TransactionIter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TransactionIter")
            .field("own_writes_left", &self.own.len())
            .finish_non_exhaustive()
    }
}

impl TransactionIter {
    pub(super) fn new(base: DbIter, own: Overlay, hidden: Hidden) -> Self {
        TransactionIter {
            base,
            front: None,
            back: None,
            own,
            hidden,
        }
    }

    /// The snapshot's next entry from the front that no own range hides: once `base` is spent
    /// from the front, the one taken from the back is the last left.
    fn fill_front(&mut self) {
        while self.front.is_none() {
            let Some(item) = self.base.next().or_else(|| self.back.take()) else {
                return;
            };
            self.front = self.shown(item);
        }
    }

    /// `fill_front` from the back.
    fn fill_back(&mut self) {
        while self.back.is_none() {
            let Some(item) = self.base.next_back().or_else(|| self.front.take()) else {
                return;
            };
            self.back = self.shown(item);
        }
    }

    /// `item`, unless an own range hides its key (an error always shows).
    fn shown(&self, item: Item) -> Option<Item> {
        match &item {
            Ok((k, _)) if self.hidden.hides(k) => None,
            _ => Some(item),
        }
    }
}

/// Which of the snapshot's entry and the own write comes first in the walk's direction.
enum Next {
    Base,
    Own,
    /// The same key: the own write wins, the snapshot's entry is dropped.
    Both,
}

fn pick(base: Option<&Item>, own: Option<&[u8]>, forward: bool) -> Option<Next> {
    let base_key = match base {
        Some(Ok((k, _))) => Some(k.as_slice()),
        // An error comes out at once.
        Some(Err(_)) => return Some(Next::Base),
        None => None,
    };
    Some(match (base_key, own) {
        (None, None) => return None,
        (Some(_), None) => Next::Base,
        (None, Some(_)) => Next::Own,
        (Some(b), Some(o)) => match (b.cmp(o), forward) {
            (Ordering::Equal, _) => Next::Both,
            (Ordering::Less, true) | (Ordering::Greater, false) => Next::Base,
            _ => Next::Own,
        },
    })
}

impl Iterator for TransactionIter {
    type Item = Item;

    fn next(&mut self) -> Option<Item> {
        loop {
            self.fill_front();
            let own = self.own.front().map(|(k, _)| k.as_slice());
            match pick(self.front.as_ref(), own, true)? {
                Next::Base => return self.front.take(),
                next => {
                    if matches!(next, Next::Both) {
                        self.front = None;
                    }
                    if let Some((k, Some(v))) = self.own.pop_front() {
                        return Some(Ok((k, v)));
                    }
                }
            }
        }
    }
}

impl DoubleEndedIterator for TransactionIter {
    fn next_back(&mut self) -> Option<Item> {
        loop {
            self.fill_back();
            let own = self.own.back().map(|(k, _)| k.as_slice());
            match pick(self.back.as_ref(), own, false)? {
                Next::Base => return self.back.take(),
                next => {
                    if matches!(next, Next::Both) {
                        self.back = None;
                    }
                    if let Some((k, Some(v))) = self.own.pop_back() {
                        return Some(Ok((k, v)));
                    }
                }
            }
        }
    }
}
