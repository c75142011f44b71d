//! Point lookups per keyspace, counted on the read path and decayed over time: the weights of
//! the filter budget's split among the keyspaces sharing it (`budget::split`), so that a
//! keyspace probed often gets the bits a cold one does not need.
//!
//! Counting costs a get one add to a counter of its own thread (`ReadCounters::
//! keyspace_lookups`), in one of `SLOTS` slots chosen by keyspace id: a store with more
//! keyspaces than slots shares a slot's count among the keyspaces in it, split by their keys
//! (`Weights::of`). The counts are decayed with a half-life of `HALF_LIFE` whenever a split
//! is computed (flushes and compactions), so the weights follow the lookups of the last
//! minutes, not of the store's whole life.

use std::time::{Duration, Instant};

/// Counter slots per thread; a keyspace counts in slot `id % SLOTS`.
pub(crate) const SLOTS: usize = 32;

/// How long a lookup takes to count half as much.
const HALF_LIFE: Duration = Duration::from_secs(600);

/// The counter slot of keyspace `id`.
pub(crate) fn slot(id: u32) -> usize {
    id as usize % SLOTS
}

/// Decayed lookups per slot, and the counts they were last brought up to.
#[derive(Default)]
pub(crate) struct Weights {
    seen: Option<([u64; SLOTS], Instant)>,
    decayed: [f64; SLOTS],
}

impl Weights {
    /// Brings the weights up to `counts` (the counters' totals) at `now`: what was there
    /// decays by the time since the last call, and the lookups since are added.
    pub(crate) fn update(&mut self, counts: [u64; SLOTS], now: Instant) -> [f64; SLOTS] {
        let (last, at) = self.seen.unwrap_or(([0; SLOTS], now));
        let factor =
            (-(now.saturating_duration_since(at).as_secs_f64()) / HALF_LIFE.as_secs_f64()).exp2();
        for ((d, &c), &l) in self.decayed.iter_mut().zip(&counts).zip(&last) {
            *d = *d * factor + c.wrapping_sub(l) as f64;
        }
        self.seen = Some((counts, now));
        self.decayed
    }

    /// The weight of each of `members` ((id, keys)) under slot weights `slots`: its slot's
    /// weight, split among the members in that slot by their keys.
    pub(crate) fn of(slots: &[f64; SLOTS], members: &[(u32, u64)]) -> Vec<f64> {
        let mut keys_in = [0u64; SLOTS];
        let mut count_in = [0u64; SLOTS];
        for &(id, keys) in members {
            keys_in[slot(id)] += keys;
            count_in[slot(id)] += 1;
        }
        members
            .iter()
            .map(|&(id, keys)| {
                let s = slot(id);
                match keys_in[s] {
                    0 => slots[s] / count_in[s] as f64,
                    all => slots[s] * keys as f64 / all as f64,
                }
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lookups_decay_by_half_life_and_new_ones_add() {
        let mut w = Weights::default();
        let t0 = Instant::now();
        let mut counts = [0u64; SLOTS];
        counts[1] = 1_000;
        assert_eq!(w.update(counts, t0)[1], 1_000.0);
        counts[2] = 10;
        let later = w.update(counts, t0 + HALF_LIFE);
        assert!((later[1] - 500.0).abs() < 1e-6, "{}", later[1]);
        assert_eq!(later[2], 10.0);
    }

    #[test]
    fn a_shared_slot_is_split_by_keys() {
        let mut slots = [0.0; SLOTS];
        slots[slot(3)] = 90.0;
        let members = [(3, 100), (3 + SLOTS as u32, 200), (4, 50)];
        assert_eq!(Weights::of(&slots, &members), [30.0, 60.0, 0.0]);
    }
}
