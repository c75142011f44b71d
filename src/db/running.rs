//! The compactions running now, so that others can run beside them safely (`picker::pick`
//! asks; `worker.rs` registers a job before it starts and releases it once installed or
//! failed). Kept under `Inner::work` with the manifest's state.
//!
//! Jobs of different keyspaces never touch the same tables or key space, so they always may
//! run at once. Two jobs of one keyspace may when neither can change what the other reads or
//! writes:
//! - no table is the input of two jobs;
//! - a job's output key span at its output level does not overlap another's at that level
//!   (two sets of new tables in one level must stay disjoint when both are installed);
//! - a job reads no table of a level whose key span another job is still writing into (the
//!   other job's output would land among tables this one replaces);
//! - at most one job of a keyspace reads its level 0 (level-0 tables overlap, so two such jobs
//!   would write overlapping tables into level 1).
//!
//! A job picked while a deeper job runs whose output span overlaps its own keeps its
//! tombstones (`keeps_tombstones`): the deeper job's output may hold an older version of a key.
//!
//! A job is described here by its inputs (level, table) and output level, as
//! `compaction::Job` holds them; this module knows nothing else of compaction.

use std::collections::HashSet;
use std::sync::Arc;

use crate::table::Table;

/// A job's input tables, each with its level.
pub(super) type Inputs = [(usize, Arc<Table>)];

/// One running job's footprint.
struct Claim {
    ticket: u64,
    keyspace: u32,
    inputs: Vec<u64>,
    reads_l0: bool,
    output_level: usize,
    /// Smallest and largest key of all its inputs: its output lies within.
    span: (Vec<u8>, Vec<u8>),
}

/// The running jobs.
#[derive(Default)]
pub(super) struct Running {
    busy: HashSet<u64>,
    claims: Vec<Claim>,
    next_ticket: u64,
}

/// Smallest and largest key of `inputs`.
fn span(inputs: &Inputs) -> Option<(Vec<u8>, Vec<u8>)> {
    let min = inputs.iter().map(|(_, t)| t.min_key()).min()?;
    let max = inputs.iter().map(|(_, t)| t.max_key()).max()?;
    Some((min.to_vec(), max.to_vec()))
}

fn overlaps(a: &(Vec<u8>, Vec<u8>), b: &(Vec<u8>, Vec<u8>)) -> bool {
    a.0 <= b.1 && b.0 <= a.1
}

impl Running {
    /// True when table `id` is an input of a running job.
    pub(super) fn is_busy(&self, id: u64) -> bool {
        self.busy.contains(&id)
    }

    /// True when a running job of `keyspace` reads its level 0.
    pub(super) fn reads_l0(&self, keyspace: u32) -> bool {
        self.claims
            .iter()
            .any(|c| c.keyspace == keyspace && c.reads_l0)
    }

    /// Jobs running.
    pub(super) fn len(&self) -> usize {
        self.claims.len()
    }

    /// True when a job of `inputs` into `output_level` may not run beside the running jobs
    /// (the module comment's rules).
    pub(super) fn conflicts(&self, keyspace: u32, inputs: &Inputs, output_level: usize) -> bool {
        let Some(span) = span(inputs) else {
            return false;
        };
        if inputs.iter().any(|(_, t)| self.busy.contains(&t.id())) {
            return true;
        }
        if inputs.iter().any(|(l, _)| *l == 0) && self.reads_l0(keyspace) {
            return true;
        }
        let input_levels: HashSet<usize> = inputs.iter().map(|(l, _)| *l).collect();
        self.claims
            .iter()
            .filter(|c| c.keyspace == keyspace)
            .any(|c| {
                let writes_where_job_reads_or_writes =
                    c.output_level == output_level || input_levels.contains(&c.output_level);
                writes_where_job_reads_or_writes && overlaps(&c.span, &span)
            })
    }

    /// True when a job of `inputs` into `output_level` must keep its tombstones: a running
    /// job writes an overlapping span deeper down.
    pub(super) fn keeps_tombstones(
        &self,
        keyspace: u32,
        inputs: &Inputs,
        output_level: usize,
    ) -> bool {
        let Some(span) = span(inputs) else {
            return false;
        };
        self.claims.iter().any(|c| {
            c.keyspace == keyspace && c.output_level > output_level && overlaps(&c.span, &span)
        })
    }

    /// Records a job of `inputs` into `output_level` as running; the ticket releases it.
    pub(super) fn register(&mut self, keyspace: u32, inputs: &Inputs, output_level: usize) -> u64 {
        let ticket = self.next_ticket;
        self.next_ticket += 1;
        let ids: Vec<u64> = inputs.iter().map(|(_, t)| t.id()).collect();
        self.busy.extend(ids.iter().copied());
        self.claims.push(Claim {
            ticket,
            keyspace,
            inputs: ids,
            reads_l0: inputs.iter().any(|(l, _)| *l == 0),
            output_level,
            span: span(inputs).unwrap_or_default(),
        });
        ticket
    }

    /// Forgets the job of `ticket` (installed, or failed).
    pub(super) fn release(&mut self, ticket: u64) {
        if let Some(i) = self.claims.iter().position(|c| c.ticket == ticket) {
            let c = self.claims.swap_remove(i);
            for id in c.inputs {
                self.busy.remove(&id);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::table::{TableBuilder, TableBuilderOptions};
    use std::path::Path;

    fn table(dir: &Path, id: u64, from: u32, to: u32) -> Arc<Table> {
        let path = dir.join(format!("{id}.sst"));
        let mut b = TableBuilder::create(&path, TableBuilderOptions::default()).unwrap();
        for k in from..=to {
            b.add(format!("k{k:04}").as_bytes(), Some(b"v")).unwrap();
        }
        b.finish().unwrap();
        Arc::new(Table::open(&path, id).unwrap())
    }

    /// A job: its inputs and output level.
    struct Job(Vec<(usize, Arc<Table>)>, usize);

    fn job(inputs: Vec<(usize, Arc<Table>)>, output_level: usize) -> Job {
        Job(inputs, output_level)
    }

    impl Running {
        fn conflicts_with(&self, j: &Job) -> bool {
            self.conflicts(0, &j.0, j.1)
        }
        fn add(&mut self, j: &Job) -> u64 {
            self.register(0, &j.0, j.1)
        }
    }

    #[test]
    fn jobs_that_share_a_table_a_span_or_level_0_conflict_and_disjoint_ones_do_not() {
        let d = tempfile::tempdir().unwrap();
        let t = |id, a, b| table(d.path(), id, a, b);
        let mut r = Running::default();
        // Level 2 → 3 over keys 100..200.
        let deep = job(vec![(2, t(1, 100, 150)), (3, t(2, 120, 200))], 3);
        assert!(!r.conflicts_with(&deep));
        let ticket = r.add(&deep);
        // Same table: conflict.
        assert!(r.conflicts_with(&job(vec![(2, deep.0[0].1.clone())], 3)));
        // Disjoint keys into the same level: no conflict.
        assert!(!r.conflicts_with(&job(vec![(2, t(3, 300, 400))], 3)));
        // Overlapping output span in level 3: conflict.
        assert!(r.conflicts_with(&job(vec![(2, t(4, 190, 250))], 3)));
        // Reading level 3 where the job is still writing: conflict.
        assert!(r.conflicts_with(&job(vec![(3, t(5, 180, 190))], 4)));
        // Level 1 → 2 over the same keys: reads and writes other levels, no conflict — but it
        // keeps its tombstones, since the deeper job may carry older versions.
        let above = job(vec![(1, t(6, 100, 110))], 2);
        assert!(!r.conflicts_with(&above));
        assert!(r.keeps_tombstones(0, &above.0, above.1));
        assert!(!r.keeps_tombstones(0, &deep.0, deep.1));
        // One level-0 reader at a time.
        let l0 = job(vec![(0, t(7, 0, 10))], 1);
        let t0 = r.add(&l0);
        assert!(r.conflicts_with(&job(vec![(0, t(8, 500, 600))], 1)));
        // Another keyspace's jobs: its level 0, and the same keys and levels as `deep`, run
        // beside them (and keep no tombstones for them).
        let other_l0 = job(vec![(0, t(9, 0, 10))], 1);
        assert!(!r.conflicts(7, &other_l0.0, other_l0.1));
        let other_deep = job(vec![(2, t(10, 100, 150))], 3);
        assert!(!r.conflicts(7, &other_deep.0, other_deep.1));
        assert!(!r.keeps_tombstones(7, &above.0, above.1));
        let t7 = r.register(7, &other_l0.0, other_l0.1);
        assert!(r.conflicts(7, &job(vec![(0, t(11, 500, 600))], 1).0, 1));
        r.release(t7);
        r.release(t0);
        assert!(!r.conflicts_with(&job(vec![(0, t(8, 500, 600))], 1)));
        r.release(ticket);
        assert!(!r.conflicts_with(&deep));
        assert_eq!(r.len(), 0);
    }
}
