//! A linearizability checker for a register (one key): the Wing–Gong search with Lowe's
//! memoisation, as porcupine implements it. Operations are intervals of a logical clock
//! (invocation, response); an operation whose outcome is unknown (it failed: it may still
//! take effect) has no response and may be placed anywhere after its invocation, or never.
//!
//! Written here rather than taken from a crate because stateright's `LinearizabilityTester`
//! (tried first) searches without memoisation: on the negative control's non-linearizable
//! histories of ~350 operations per key it took 264 s and 270 s in two runs of five. The
//! cache of (operations placed, register value) states visited bounds the search.

use std::collections::HashSet;

/// What an operation did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// Wrote this value.
    Write(u64),
    /// Read this value (`None`: absent).
    Read(Option<u64>),
}

/// One operation: invoked at `call`, answered at `ret` (`None`: no answer, outcome unknown).
#[derive(Clone, Copy, Debug)]
pub struct Op {
    pub call: u64,
    pub ret: Option<u64>,
    pub kind: Kind,
}

/// Whether the history of one register (initially `init`) is linearizable.
pub fn linearizable(ops: &[Op], init: Option<u64>) -> bool {
    // Reads without an answer constrain nothing. Nor does an unanswered write whose value
    // no read returned: a linearization with it stays one without it (no read falls between
    // it and the next write, or it would have returned its value), and without it is always
    // allowed. Each such write left in would double the states the search may visit: a run
    // with faults leaves hundreds.
    let read: HashSet<u64> = ops
        .iter()
        .filter_map(|o| match o.kind {
            Kind::Read(Some(v)) if o.ret.is_some() => Some(v),
            _ => None,
        })
        .collect();
    let ops: Vec<Op> = ops
        .iter()
        .copied()
        .filter(|o| match o.kind {
            Kind::Read(_) => o.ret.is_some(),
            Kind::Write(v) => o.ret.is_some() || read.contains(&v),
        })
        .collect();
    let n = ops.len();
    // Events in time order: (time, is_return, op). Unanswered operations return at the end.
    let mut events: Vec<(u64, bool, usize)> = Vec::with_capacity(2 * n);
    for (i, o) in ops.iter().enumerate() {
        events.push((o.call, false, i));
        events.push((o.ret.unwrap_or(u64::MAX), true, i));
    }
    // Calls before returns at equal times: concurrent rather than ordered.
    events.sort_by_key(|&(t, r, i)| (t, r, i));
    // A doubly linked list over the events: `head` is a sentinel before the first, `end`
    // marks "no next event".
    let m = events.len();
    let (head, end) = (m, m + 1);
    let mut next: Vec<usize> = (0..m)
        .map(|e| if e + 1 < m { e + 1 } else { end })
        .collect();
    next.push(if m > 0 { 0 } else { end });
    let mut prev: Vec<usize> = (0..m).map(|e| if e == 0 { head } else { e - 1 }).collect();
    prev.push(end);
    let mut call_at = vec![0; n];
    let mut ret_at = vec![0; n];
    for (e, &(_, r, i)) in events.iter().enumerate() {
        if r {
            ret_at[i] = e;
        } else {
            call_at[i] = e;
        }
    }

    let lift = |next: &mut Vec<usize>, prev: &mut Vec<usize>, e: usize| {
        let (p, nx) = (prev[e], next[e]);
        next[p] = nx;
        if nx != end {
            prev[nx] = p;
        }
    };
    let unlift = |next: &mut Vec<usize>, prev: &mut Vec<usize>, e: usize| {
        let (p, nx) = (prev[e], next[e]);
        next[p] = e;
        if nx != end {
            prev[nx] = e;
        }
    };

    let words = n.div_ceil(64).max(1);
    let mut placed = vec![0u64; words];
    let mut state = init;
    let mut seen: HashSet<(Vec<u64>, Option<u64>)> = HashSet::new();
    let mut stack: Vec<(usize, Option<u64>)> = Vec::new();
    let mut cur = next[head];
    loop {
        if next[head] == end {
            return true;
        }
        if cur == end {
            // The list ends with return events, so this is not reached; nothing is left.
            return true;
        }
        let (_, is_ret, i) = events[cur];
        if !is_ret {
            let after = match ops[i].kind {
                Kind::Write(v) => Some(Some(v)),
                Kind::Read(v) => (v == state).then_some(state),
            };
            if let Some(s2) = after {
                placed[i / 64] |= 1 << (i % 64);
                if seen.insert((placed.clone(), s2)) {
                    stack.push((i, state));
                    state = s2;
                    lift(&mut next, &mut prev, call_at[i]);
                    lift(&mut next, &mut prev, ret_at[i]);
                    cur = next[head];
                    continue;
                }
                placed[i / 64] &= !(1 << (i % 64));
            }
            cur = next[cur];
        } else if ops[i].ret.is_none() {
            // Every remaining event is an unanswered operation's end: those may never have
            // taken effect.
            return true;
        } else {
            let Some((j, s)) = stack.pop() else {
                return false;
            };
            placed[j / 64] &= !(1 << (j % 64));
            state = s;
            unlift(&mut next, &mut prev, ret_at[j]);
            unlift(&mut next, &mut prev, call_at[j]);
            cur = next[call_at[j]];
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn w(call: u64, ret: u64, v: u64) -> Op {
        Op {
            call,
            ret: Some(ret),
            kind: Kind::Write(v),
        }
    }
    fn r(call: u64, ret: u64, v: Option<u64>) -> Op {
        Op {
            call,
            ret: Some(ret),
            kind: Kind::Read(v),
        }
    }

    #[test]
    fn sequential_histories() {
        assert!(linearizable(&[], None));
        assert!(linearizable(&[w(0, 1, 5), r(2, 3, Some(5))], None));
        assert!(
            !linearizable(&[w(0, 1, 5), r(2, 3, None)], None),
            "stale read after a write"
        );
        assert!(
            !linearizable(&[r(0, 1, Some(5))], None),
            "read of a value never written"
        );
        assert!(linearizable(&[r(0, 1, Some(9))], Some(9)));
    }

    #[test]
    fn concurrent_operations_may_go_either_way() {
        // The read overlaps the write: old or new value.
        assert!(linearizable(&[w(0, 5, 1), r(1, 2, None)], None));
        assert!(linearizable(&[w(0, 5, 1), r(1, 2, Some(1))], None));
        // Two reads after the write began: once one saw the new value, a later one must too.
        assert!(!linearizable(
            &[w(0, 9, 1), r(1, 2, Some(1)), r(3, 4, None)],
            None
        ));
        assert!(linearizable(
            &[w(0, 9, 1), r(1, 2, None), r(3, 4, Some(1))],
            None
        ));
    }

    #[test]
    fn unanswered_writes_may_or_may_not_have_happened() {
        let pending = Op {
            call: 0,
            ret: None,
            kind: Kind::Write(7),
        };
        assert!(linearizable(&[pending, r(5, 6, Some(7))], None));
        assert!(linearizable(&[pending, r(5, 6, None)], None));
        assert!(linearizable(
            &[pending, r(5, 6, Some(7)), r(7, 8, Some(7))],
            None
        ));
        assert!(
            !linearizable(&[pending, r(5, 6, Some(7)), r(7, 8, None)], None),
            "it cannot be undone"
        );
        // Placed after the write of 8: a later read may see 7 again.
        assert!(linearizable(&[pending, w(1, 2, 8), r(3, 4, Some(7))], None));
        // But not before its invocation.
        let late = Op {
            call: 5,
            ret: None,
            kind: Kind::Write(7),
        };
        assert!(!linearizable(&[late, r(1, 2, Some(7))], None));
    }

    #[test]
    fn a_long_valid_history_and_a_long_invalid_one_are_decided_quickly() {
        // Four clients, overlapping writes and reads of the latest value; then one stale read.
        let mut ops = Vec::new();
        let mut t = 0;
        for v in 1..=2000u64 {
            ops.push(w(t, t + 3, v));
            ops.push(r(t + 1, t + 5, Some(v)));
            ops.push(r(t + 4, t + 6, Some(v)));
            t += 6;
        }
        let start = std::time::Instant::now();
        assert!(linearizable(&ops, None));
        ops.push(r(t + 10, t + 11, Some(3)));
        assert!(!linearizable(&ops, None));
        assert!(
            start.elapsed() < std::time::Duration::from_secs(10),
            "{:?}",
            start.elapsed()
        );
    }
}
