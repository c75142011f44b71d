//! An absent-key `get` that every filter answers allocates nothing: the read path's promise
//! (issue 9). A counting global allocator counts this thread's allocations around each get.

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;

use lsm_bloom::{Db, Options};

struct Counting;

thread_local! {
    static ALLOCS: Cell<u64> = const { Cell::new(0) };
}

// SAFETY: forwards to the system allocator; the counter is a const-initialised thread-local
// `Cell` (no allocation, no destructor), so counting cannot recurse.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        ALLOCS.with(|c| c.set(c.get() + 1));
        // SAFETY: same contract as ours.
        unsafe { System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: same contract as ours.
        unsafe { System.dealloc(ptr, layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        ALLOCS.with(|c| c.set(c.get() + 1));
        // SAFETY: same contract as ours.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

fn allocs() -> u64 {
    ALLOCS.with(Cell::get)
}

#[test]
fn absent_gets_that_filters_answer_allocate_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let db = Db::open(
        dir.path(),
        Options {
            memtable_size: 1 << 20,
            ..Options::default()
        },
    )
    .unwrap();
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
