//! A scan's walk over the tables of one level (`LevelCursor`), one table at a time, as
//! RocksDB's `LevelIterator` does: the level's tables are sorted with disjoint ranges
//! (levels 1 and deeper), so two binary searches give the tables the range can touch, and the
//! cursor opens the first of them (the last, backward) and the next only when it is done. A
//! scan therefore reads one data block per level until it crosses a table boundary. A table of
//! level 0 is a `LevelCursor` over that one table.
//!
//! Prefix and range filters: when the scan's range lies inside one prefix
//! (`iter::range_prefix`), a table whose prefix filter lacks it is passed over unopened, when
//! the walk reaches it; so is a table whose range filter says the range holds none of its
//! keys (`Table::check_range`), and so is a table a newer source's deleted range holds whole
//! (`Cover::holds`). Data blocks the tables' cursors read are added to the level's
//! `scan_block_reads`.

use std::ops::{Bound, Range};
use std::sync::Arc;

use super::counters::{bump, Counters};
use super::cover::Cover;
use super::version::Version;
use crate::error::Result;
use crate::expiry::Reading;
use crate::prefix::PrefixExtractor;
use crate::table::{
    BlockCache, Cursor, DeletedRange, Direction, KeyRange, PrefixCheck, RangeCheck, Table,
    TableCursor,
};

/// What every cursor of one scan shares.
pub(super) struct ScanSetup {
    pub(super) range: Arc<KeyRange>,
    pub(super) cache: Option<Arc<BlockCache>>,
    pub(super) counters: Arc<Counters>,
    /// The prefix every key of the range has under the store's rule, and its hash.
    pub(super) prefix: Option<(PrefixExtractor, Vec<u8>, u64)>,
    /// Whether tables' range filters are asked: only when the range has both bounds (with
    /// one open, the range cut to a table runs to its end, and no range filter answers
    /// that).
    pub(super) ask_ranges: bool,
    /// The scan's clock reading: a table expired whole at it, over no older table, is
    /// passed over unopened (`Version::shadows_nothing`).
    pub(super) now: Reading,
}

/// Where a table's walk starts (`LevelCursor::start_past`).
enum Start {
    /// Where the scan's range says.
    As,
    /// Past a newer source's deleted range: this part of the scan's range.
    Past(KeyRange),
    /// Nowhere: the range covers the rest of the walk.
    Nowhere,
}

/// One level's tables in a range, one open at a time (see the module comment).
pub(super) struct LevelCursor {
    scan: Arc<ScanSetup>,
    version: Arc<Version>,
    level: usize,
    dir: Direction,
    /// Positions in the level of the tables not opened yet.
    left: Range<usize>,
    table: Option<TableCursor>,
    /// The open table's block reads and cache hits already counted.
    counted: (u64, u64),
    /// The deleted ranges of the scan's sources and this cursor's number among them: a table
    /// a newer source's range holds whole is passed over unopened (`Cover::holds`).
    cover: Option<(Arc<Cover>, usize)>,
}

impl LevelCursor {
    /// A cursor over the level's tables whose ranges meet the scan's (level 1 and deeper).
    pub(super) fn level(
        scan: &Arc<ScanSetup>,
        version: &Arc<Version>,
        (level, cover): (usize, Option<(Arc<Cover>, usize)>),
        dir: Direction,
    ) -> Result<LevelCursor> {
        let positions = version.reaching(level, scan.range.start(), scan.range.end());
        LevelCursor::over(scan, version, (level, cover), positions, dir)
    }

    /// A cursor over the tables at `positions` of `level`, in `dir`.
    pub(super) fn over(
        scan: &Arc<ScanSetup>,
        version: &Arc<Version>,
        (level, cover): (usize, Option<(Arc<Cover>, usize)>),
        positions: Range<usize>,
        dir: Direction,
    ) -> Result<LevelCursor> {
        let mut c = LevelCursor {
            scan: Arc::clone(scan),
            version: Arc::clone(version),
            level,
            dir,
            left: positions,
            table: None,
            counted: (0, 0),
            cover,
        };
        c.open_next()?;
        Ok(c)
    }

    /// Opens the next table in the walk's direction that has a key in the range (the
    /// cursor is over when none is left).
    fn open_next(&mut self) -> Result<()> {
        let range = Arc::clone(&self.scan.range);
        self.open_next_in(&range)
    }

    /// `open_next`, the table cursor walking `range` (the scan's, or the part of it past a
    /// deleted range: `skip_past`).
    fn open_next_in(&mut self, range: &Arc<KeyRange>) -> Result<()> {
        self.table = None;
        while !self.left.is_empty() {
            let i = match self.dir {
                Direction::Forward => {
                    self.left.start += 1;
                    self.left.start - 1
                }
                Direction::Backward => {
                    self.left.end -= 1;
                    self.left.end
                }
            };
            let Some(t) = self.version.levels()[self.level].get(i) else {
                self.left = 0..0;
                break;
            };
            if self.passed_over(t) || self.expired_whole(i, t) || self.deleted_whole(t) {
                continue;
            }
            let check = match self.scan.ask_ranges {
                true => self.range_check(t),
                false => RangeCheck::Unfiltered,
            };
            if check == RangeCheck::Empty {
                continue;
            }
            // A walk that would start inside a newer source's deleted range starts past it.
            let walk = match self.start_past(t, range) {
                Start::As => Arc::clone(range),
                Start::Past(rest) => Arc::new(rest),
                Start::Nowhere => {
                    self.end();
                    break;
                }
            };
            let c = TableCursor::new(Arc::clone(t), self.scan.cache.clone(), walk, self.dir)?;
            self.counted = (0, 0);
            let found = c.key().is_some();
            self.table = Some(c);
            self.count();
            if check == RangeCheck::Maybe && !found {
                let counters = self.scan.counters.reader();
                bump(&counters.levels[self.level].range_false_positives, 1);
            }
            if found {
                return Ok(());
            }
        }
        self.table = None;
        Ok(())
    }

    /// What the table's range filter says about the scan's range (counted).
    fn range_check(&self, t: &Table) -> RangeCheck {
        let range = &self.scan.range;
        let check = t.check_range(range.start(), range.end());
        let counters = self.scan.counters.reader();
        let c = &counters.levels[self.level];
        match check {
            RangeCheck::Empty => {
                bump(&c.range_checks, 1);
                bump(&c.range_useful, 1);
            }
            RangeCheck::Maybe => bump(&c.range_checks, 1),
            RangeCheck::TooWide | RangeCheck::Unfiltered => bump(&c.range_unfiltered, 1),
        }
        check
    }

    /// True when table `i` (`t`) expired whole at the scan's reading and hides no older
    /// table's keys: it holds nothing the scan shows (counted in `expired_skips`).
    fn expired_whole(&self, i: usize, t: &Table) -> bool {
        let Some(latest) = t.expire_whole_by() else {
            return false;
        };
        if !self.scan.now.expired(latest) || !self.version.shadows_nothing(self.level, i) {
            return false;
        }
        let counters = self.scan.counters.reader();
        bump(&counters.levels[self.level].expired_skips, 1);
        true
    }

    /// Ends the walk: no table open, none left.
    fn end(&mut self) {
        self.table = None;
        self.left = 0..0;
    }

    /// When a newer source's deleted range covers the first key of `t` the walk over `range`
    /// would reach, `range` less what that range covers (`KeyRange::past`): the table's
    /// cursor then starts past it, not on a covered entry it would read a block for and then
    /// jump from (seek + 10 into a deleted range ran at 0.3× the same store without it).
    fn start_past(&self, t: &Table, range: &KeyRange) -> Start {
        let Some((cover, me)) = self.cover.as_ref() else {
            return Start::As;
        };
        let first = match self.dir {
            Direction::Forward => match range.start() {
                Bound::Included(k) | Bound::Excluded(k) if k > t.min_key() => k,
                _ => t.min_key(),
            },
            Direction::Backward => match range.end() {
                Bound::Included(k) | Bound::Excluded(k) if k < t.max_key() => k,
                _ => t.max_key(),
            },
        };
        match cover.covering(first, *me) {
            None => Start::As,
            Some(r) => range.past(r, self.dir).map_or(Start::Nowhere, Start::Past),
        }
    }

    /// True when a newer source's deleted range holds the table's whole key range.
    fn deleted_whole(&self, t: &Table) -> bool {
        self.cover
            .as_ref()
            .is_some_and(|(c, me)| c.holds(t.min_key(), t.max_key(), *me))
    }

    /// True when the table's prefix filter says it lacks the scan's prefix (counted).
    fn passed_over(&self, t: &Table) -> bool {
        let Some((rule, q, hash)) = &self.scan.prefix else {
            return false;
        };
        let counters = self.scan.counters.reader();
        let c = &counters.levels[self.level];
        match t.check_prefix(*rule, q, *hash) {
            PrefixCheck::Absent => {
                bump(&c.prefix_checks, 1);
                bump(&c.prefix_useful, 1);
                true
            }
            PrefixCheck::Maybe => {
                bump(&c.prefix_checks, 1);
                false
            }
            PrefixCheck::Unfiltered => {
                bump(&c.prefix_unfiltered, 1);
                false
            }
        }
    }

    /// Adds the open table's new block reads and cache hits to the level's scan counters.
    fn count(&mut self) {
        if let Some(t) = &self.table {
            let (blocks, hits) = (t.stats.blocks, t.stats.cache_hits);
            if (blocks, hits) != self.counted {
                let counters = self.scan.counters.reader();
                let c = &counters.levels[self.level];
                bump(&c.scan_block_reads, blocks - self.counted.0);
                bump(&c.scan_block_cache_hits, hits - self.counted.1);
                self.counted = (blocks, hits);
            }
        }
    }
}

impl Cursor for LevelCursor {
    #[inline]
    fn key(&self) -> Option<&[u8]> {
        self.table.as_ref()?.key()
    }

    #[inline]
    fn value(&self) -> Option<&[u8]> {
        self.table.as_ref()?.value()
    }

    #[inline]
    fn entry(&self) -> Option<(&[u8], Option<&[u8]>)> {
        self.table.as_ref()?.entry()
    }

    #[inline]
    fn expiry(&self) -> u64 {
        self.table
            .as_ref()
            .map_or(crate::expiry::NEVER, |t| t.expiry())
    }

    fn step(&mut self) -> Result<()> {
        let Some(t) = self.table.as_mut() else {
            return Ok(());
        };
        let stepped = t.step();
        self.count();
        // A table walked to its end hands over to the next one the range reaches.
        let moved = stepped.and_then(|()| match self.key() {
            None => self.open_next(),
            Some(_) => Ok(()),
        });
        if moved.is_err() {
            // After an error the cursor is over.
            self.end();
        }
        moved
    }

    /// The open table jumps past `r` (`TableCursor`'s `skip_past`); if that ends it, the
    /// next table the range does not hold whole opens where the range ends, not at the
    /// scan's start.
    fn skip_past(&mut self, r: &DeletedRange) -> Result<()> {
        let Some(t) = self.table.as_mut() else {
            return Ok(());
        };
        let skipped = t.skip_past(r);
        self.count();
        let moved = skipped.and_then(|()| match self.key() {
            Some(_) => Ok(()),
            None => match self.scan.range.past(r, self.dir) {
                Some(rest) => self.open_next_in(&Arc::new(rest)),
                None => {
                    self.end();
                    Ok(())
                }
            },
        });
        if moved.is_err() {
            self.end();
        }
        moved
    }
}
