use super::*;
use crate::table::{TableBuilder, TableBuilderOptions};
use std::collections::BTreeMap;

type Model = BTreeMap<Vec<u8>, Option<Vec<u8>>>;

/// A table of small blocks (many block boundaries) holding `model`.
fn table(dir: &std::path::Path, model: &Model) -> Arc<Table> {
    let path = dir.join("t.sst");
    let opts = TableBuilderOptions {
        block_size: 128,
        ..TableBuilderOptions::default()
    };
    let mut b = TableBuilder::create(&path, opts).unwrap();
    for (k, v) in model {
        b.add(k, v.as_deref()).unwrap();
    }
    b.finish().unwrap();
    Arc::new(Table::open(&path, 1).unwrap())
}

/// Every entry of `c`, in its order.
fn walk(mut c: TableCursor) -> Vec<(Vec<u8>, Option<Vec<u8>>)> {
    let mut out = Vec::new();
    while let Some(k) = c.key() {
        out.push((k.to_vec(), c.value().map(<[u8]>::to_vec)));
        c.step().unwrap();
    }
    out
}

fn bound(kind: u64, k: Vec<u8>) -> Bound<Vec<u8>> {
    match kind {
        0 => Bound::Included(k),
        1 => Bound::Excluded(k),
        _ => Bound::Unbounded,
    }
}

/// Forward and backward walks over random ranges (bounds on keys, between keys, before
/// and after the table; all three kinds) give the model's entries, with and without a
/// block cache, and read only blocks the range reaches.
#[test]
fn walks_both_ways_over_random_ranges_as_the_model() {
    let dir = tempfile::tempdir().unwrap();
    let mut model = Model::new();
    for i in (0..3000u32).step_by(3) {
        let v = (i % 7 != 0).then(|| vec![i as u8; (i % 23) as usize]);
        model.insert(format!("key{i:05}").into_bytes(), v);
    }
    let t = table(dir.path(), &model);
    assert!(t.blocks() > 100, "{} blocks", t.blocks());
    let cache = BlockCache::new(1 << 20).map(Arc::new);
    let mut x = 0x9E37_79B9_7F4A_7C15u64;
    let mut rand = |n: u64| {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x % n
    };
    for round in 0..400 {
        let a = format!("key{:05}", rand(3100)).into_bytes();
        let b = format!("key{:05}", rand(3100)).into_bytes();
        let range = KeyRange::new(bound(rand(3), a), bound(rand(3), b));
        let want: Vec<(Vec<u8>, Option<Vec<u8>>)> = model
            .iter()
            .filter(|(k, _)| range.after_start(k) && range.before_end(k))
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect();
        let range = Arc::new(range);
        let c = if round % 2 == 0 { cache.clone() } else { None };
        let fwd = TableCursor::new(
            Arc::clone(&t),
            c.clone(),
            Arc::clone(&range),
            Direction::Forward,
        )
        .unwrap();
        let fwd = walk(fwd);
        assert_eq!(fwd, want, "forward {range:?}");
        let back =
            TableCursor::new(Arc::clone(&t), c, Arc::clone(&range), Direction::Backward).unwrap();
        let mut back = walk(back);
        back.reverse();
        assert_eq!(back, want, "backward {range:?}");
    }
}

/// A short walk reads one block; a range outside the table reads none.
#[test]
fn a_walk_reads_only_the_blocks_its_range_reaches() {
    let dir = tempfile::tempdir().unwrap();
    let model: Model = (0..2000u32)
        .map(|i| (format!("key{i:05}").into_bytes(), Some(vec![1u8; 20])))
        .collect();
    let t = table(dir.path(), &model);
    let range = |s: &str, e: &str| {
        Arc::new(KeyRange::new(
            Bound::Included(s.as_bytes().to_vec()),
            Bound::Excluded(e.as_bytes().to_vec()),
        ))
    };
    for dir in [Direction::Forward, Direction::Backward] {
        // From just after block 9's last key to block 10's last (excluded): inside block 10.
        let last_key = |b: usize| String::from_utf8(t.block_last_key(b).unwrap().to_vec());
        let (after9, last10) = (last_key(9).unwrap() + "\0", last_key(10).unwrap());
        let mut c = TableCursor::new(Arc::clone(&t), None, range(&after9, &last10), dir).unwrap();
        while c.key().is_some() {
            c.step().unwrap();
        }
        assert_eq!(c.stats.blocks, 1, "{dir:?}: a range inside block 10");
        let c = TableCursor::new(Arc::clone(&t), None, range("a", "b"), dir).unwrap();
        assert!(c.key().is_none());
        assert!(c.stats.blocks <= 1, "{dir:?}: before the table");
        let c = TableCursor::new(Arc::clone(&t), None, range("z", "zz"), dir).unwrap();
        assert!(c.key().is_none());
        assert!(c.stats.blocks <= 1, "{dir:?}: after the table");
    }
}

/// A damaged data block ends a walk in either direction with its error, after exactly
/// the entries before it; nothing is skipped.
#[test]
fn a_damaged_block_ends_the_walk_with_its_error() {
    let dir = tempfile::tempdir().unwrap();
    let model: Model = (0..500u32)
        .map(|i| (format!("key{i:05}").into_bytes(), Some(vec![7u8; 10])))
        .collect();
    let t = table(dir.path(), &model);
    let h = t.block_handle(5).unwrap();
    let path = dir.path().join("t.sst");
    let mut bytes = std::fs::read(&path).unwrap();
    bytes[h.offset as usize + 3] ^= 0x40;
    std::fs::write(&path, &bytes).unwrap();
    let t = Arc::new(Table::open(&path, 2).unwrap());
    for dir in [Direction::Forward, Direction::Backward] {
        let mut c = TableCursor::new(Arc::clone(&t), None, Arc::new(KeyRange::all()), dir).unwrap();
        let mut seen = 0;
        let err = loop {
            if c.key().is_none() {
                panic!("{dir:?}: the walk ended without meeting the damage");
            }
            seen += 1;
            if let Err(e) = c.step() {
                break e;
            }
        };
        assert!(err.to_string().contains("data block"), "{err}");
        assert!(c.key().is_none(), "nothing after the error");
        // Every entry on the near side of block 5, and none of it.
        let (last4, last5) = (t.block_last_key(4).unwrap(), t.block_last_key(5).unwrap());
        let want = match dir {
            Direction::Forward => model.keys().filter(|k| k.as_slice() <= last4).count(),
            Direction::Backward => model.keys().filter(|k| k.as_slice() > last5).count(),
        };
        assert_eq!(seen, want, "{dir:?}");
        let all = TableIter::new(Arc::clone(&t), Bound::Unbounded);
        let ok = all.take_while(Result::is_ok).count();
        assert!(ok < model.len());
    }
}

/// `skip_past` (a jump over whole blocks) lands where stepping over the covered keys does,
/// either way, for random scan ranges and deleted ranges of every end kind, and reads fewer
/// blocks when the range spans some.
#[test]
fn skip_past_lands_where_stepping_does_and_reads_fewer_blocks() {
    use crate::table::range_set::{DeletedRange, End};
    let dir = tempfile::tempdir().unwrap();
    let mut model = Model::new();
    for i in (0..3000u32).step_by(3) {
        model.insert(format!("key{i:05}").into_bytes(), Some(vec![1; 9]));
    }
    let t = table(dir.path(), &model);
    let mut x = 0x2545_F491_4F6C_DD1Du64;
    let mut rand = |n: u64| {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x % n
    };
    let (mut jumped, mut saved) = (0, 0);
    for _ in 0..600 {
        let key = |n: u64| format!("key{n:05}").into_bytes();
        let (a, b) = (rand(3100), rand(3100));
        let range = Arc::new(KeyRange::new(
            bound(rand(3), key(a)),
            bound(rand(3), key(b)),
        ));
        let lo = rand(3100);
        let span = if rand(2) == 0 { 30 } else { 1500 };
        let hi = lo + rand(span);
        let end = match rand(3) {
            0 => End::Before(key(hi)),
            1 => End::Through(key(hi)),
            _ => End::Unbounded,
        };
        let r = DeletedRange {
            start: key(lo),
            end,
        };
        for dir in [Direction::Forward, Direction::Backward] {
            let open = || TableCursor::new(Arc::clone(&t), None, Arc::clone(&range), dir).unwrap();
            let (mut a, mut b) = (open(), open());
            while a.key().is_some_and(|k| !r.covers(k)) {
                a.step().unwrap();
                b.step().unwrap();
            }
            if a.key().is_none() {
                continue;
            }
            let (before_a, before_b) = (a.stats.blocks, b.stats.blocks);
            a.skip_past(&r).unwrap();
            while b.key().is_some_and(|k| r.covers(k)) {
                b.step().unwrap();
            }
            assert_eq!(a.key(), b.key(), "{range:?} {r:?} {dir:?}");
            let (read_a, read_b) = (a.stats.blocks - before_a, b.stats.blocks - before_b);
            assert!(
                read_a <= read_b,
                "{read_a} > {read_b} blocks: {r:?} {dir:?}"
            );
            jumped += 1;
            saved += read_b - read_a;
            assert_eq!(walk(a), walk(b), "{range:?} {r:?} {dir:?}");
        }
    }
    assert!(
        jumped > 300 && saved > 1000,
        "{jumped} jumps saved {saved} blocks"
    );
}
