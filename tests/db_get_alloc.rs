//! What a point lookup and a cursor walk allocate, counted by a global allocator that counts
//! this thread's allocations and bytes around each call: an absent-key `get` that every filter
//! answers allocates nothing, `get_with` lends a present value without copying it, and a
//! cursor's steps allocate nothing per entry.

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;

use lsm_bloom::{Db, Options};

struct Counting;

thread_local! {
    static ALLOCS: Cell<u64> = const { Cell::new(0) };
    static BYTES: Cell<u64> = const { Cell::new(0) };
}

fn count(bytes: usize) {
    ALLOCS.with(|c| c.set(c.get() + 1));
    BYTES.with(|c| c.set(c.get() + bytes as u64));
}

// SAFETY: forwards to the system allocator; the counter is a const-initialised thread-local
// `Cell` (no allocation, no destructor), so counting cannot recurse.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        count(layout.size());
        // SAFETY: same contract as ours.
        unsafe { System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: same contract as ours.
        unsafe { System.dealloc(ptr, layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        count(new_size);
        // SAFETY: same contract as ours.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

fn allocs() -> u64 {
    ALLOCS.with(Cell::get)
}

fn bytes() -> u64 {
    BYTES.with(Cell::get)
}

/// Bytes this thread allocates while `f` runs.
fn bytes_during<R>(f: impl FnOnce() -> R) -> (R, u64) {
    let b0 = bytes();
    let r = f();
    (r, bytes() - b0)
}

#[test]
fn get_with_lends_a_value_where_it_lies() {
    const VALUE: usize = 256 << 10;
    let value = |i: u8| vec![i; VALUE];
    // Each place a value can lie: a memtable; a table read through its map; a table whose
    // blocks the block cache holds (read twice: the cache's doorkeeper admits on the second
    // miss); a table read without either, whose block is read for the lookup.
    let places: [(&str, Options); 3] = [
        ("mapped", Options::default().with_mmap_reads(true)),
        ("cached", Options::default()),
        ("read", Options::default().with_block_cache_bytes(0)),
    ];
    for (place, opts) in places {
        let dir = tempfile::tempdir().unwrap();
        let db = Db::open(dir.path(), opts).unwrap();
        db.put(b"in-table", value(1)).unwrap();
        db.flush().unwrap();
        db.put(b"in-memtable", value(2)).unwrap();
        for _ in 0..3 {
            // Warm the thread, and the cache where there is one.
            assert_eq!(db.get(b"in-table").unwrap(), Some(value(1)), "{place}");
        }
        let (got, copied) = bytes_during(|| db.get(b"in-table").unwrap());
        assert_eq!(got, Some(value(1)));
        let (len, lent) = bytes_during(|| db.get_with(b"in-table", <[u8]>::len).unwrap());
        assert_eq!(len, Some(VALUE));
        println!("{place}: get allocated {copied} bytes, get_with {lent}");
        assert!(
            copied >= VALUE as u64,
            "{place}: get copies the value ({copied} bytes)"
        );
        // Where the block is read for the lookup, that read is the one allocation of its size.
        let block_read = if place == "read" {
            VALUE as u64 + 4096
        } else {
            0
        };
        assert!(
            lent <= block_read + 1024,
            "{place}: get_with allocated {lent} bytes for a {VALUE}-byte value"
        );
        let (len, lent) = bytes_during(|| db.get_with(b"in-memtable", <[u8]>::len).unwrap());
        assert_eq!((len, lent), (Some(VALUE), 0), "{place}: from the memtable");
        assert_eq!(db.get_with(b"absent", <[u8]>::len).unwrap(), None);
    }
}

#[test]
fn absent_gets_that_filters_answer_allocate_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let db = Db::open(dir.path(), Options::default().with_memtable_size(1 << 20)).unwrap();
    // Tables on two levels and in level 0, an immutable-free but non-empty memtable.
    for round in 0..3u32 {
        for i in 0..3_000u32 {
            db.put(format!("k{:07}", i * 3 + round), b"value").unwrap();
        }
        if round == 0 {
            db.compact().unwrap();
        } else {
            db.flush().unwrap();
        }
    }
    db.put(b"k-in-memtable", b"v").unwrap();
    let levels: Vec<u64> = db.stats().levels.iter().map(|l| l.tables).collect();
    assert!(
        levels[0] >= 1 && levels.iter().skip(1).sum::<u64>() >= 1,
        "{levels:?}"
    );

    assert_eq!(db.get(b"k0000001").unwrap().as_deref(), Some(&b"value"[..])); // warm this thread
    let (mut zero_read_gets, mut reads) = (0, 0);
    for i in 0..5_000u32 {
        // Inside the tables' key ranges, never written.
        let key = format!("k{:07}x", i * 3);
        let before = db.stats().total.data_block_reads + db.stats().block_cache_hits;
        let a0 = allocs();
        let found = db.get(key.as_bytes()).unwrap();
        let a1 = allocs();
        assert_eq!(found, None);
        let after = db.stats().total.data_block_reads + db.stats().block_cache_hits;
        if after == before {
            assert_eq!(
                a1 - a0,
                0,
                "absent get of {key} allocated {} times",
                a1 - a0
            );
            zero_read_gets += 1;
        } else {
            reads += 1; // a false positive: a block was read or looked up
        }
    }
    assert!(
        zero_read_gets > 4_500,
        "only {zero_read_gets} gets answered by filters ({reads} read)"
    );
}

/// A cursor walk, forward then backward, over memtable and tables: the steps allocate nothing
/// per entry, with blocks read into the thread's read buffers (no block cache) or lent by the
/// block cache once it holds them. Besides the seek (which builds its merge), what a walk
/// allocates is per table and backward only: where each entry of a block starts, a vector
/// reused within the table (a few doublings to a block's entry count).
#[test]
fn cursor_steps_allocate_nothing_per_entry() {
    for cache in [0, 32 << 20] {
        let dir = tempfile::tempdir().unwrap();
        let opts = Options::default()
            .with_memtable_size(256 << 10)
            .with_target_file_size(256 << 10)
            .with_block_cache_bytes(cache)
            .with_idle_compaction_after(None);
        let db = Db::open(dir.path(), opts).unwrap();
        let n = 20_000u32;
        for i in 0..n {
            db.put(format!("key{i:08}"), [b'v'; 100]).unwrap();
            if i == n / 2 {
                db.flush().unwrap();
                db.compact().unwrap();
            }
        }
        let tables: usize = db.levels().iter().map(Vec::len).sum();
        assert!(
            tables >= 4,
            "{tables} tables: the walk should cross several"
        );
        let blocks_read = || -> u64 { db.stats().levels.iter().map(|l| l.scan_block_reads).sum() };
        let walk = |forward: bool| {
            let mut c = db.cursor();
            let mut on = if forward {
                c.seek_to_first()
            } else {
                c.seek_to_last()
            }
            .unwrap();
            let (b0, a0, mut steps, mut bytes_seen) = (blocks_read(), allocs(), 0u32, 0usize);
            while on {
                bytes_seen += c.key().unwrap().len() + c.value().unwrap().len();
                on = if forward { c.next() } else { c.prev() }.unwrap();
                steps += 1;
            }
            assert_eq!(bytes_seen, n as usize * (11 + 100));
            let allocated = allocs() - a0;
            (steps, allocated, blocks_read() - b0)
        };
        for forward in [true, false, true, false] {
            let (steps, allocated, read) = walk(forward);
            println!(
                "cache {cache}, forward {forward}: {steps} steps, {read} blocks read from the \
                 file, {allocated} allocations"
            );
            assert_eq!(steps, n, "forward {forward}");
            // A block read from the file that the cache admits is copied into it (two
            // allocations, and now and then the cache's own tables grow); one read into a
            // read buffer allocates nothing.
            let admitted = if cache > 0 { 3 * read } else { 0 };
            let per_table = if forward { 0 } else { 6 };
            assert!(
                allocated <= (tables * per_table) as u64 + admitted + 4,
                "cache {cache}, forward {forward}: {allocated} allocations over {steps} steps, \
                 {read} blocks read and {tables} tables"
            );
        }
    }
}
