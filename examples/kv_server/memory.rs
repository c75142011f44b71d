//! How kv_server keeps its resident memory near what it holds: glibc's malloc raises its
//! mmap threshold (from 128 KiB up to 32 MiB) each time a block it had mapped is freed, so
//! after a burst of writes the memtables' and compactions' large buffers come from the heap
//! arenas instead, and their pages stay with the process once freed. Fixing the threshold at
//! 128 KiB (what `MALLOC_MMAP_THRESHOLD_=131072` does) gives them back at free. Measured
//! with `examples/bf_bench.rs` after loading 10^7 Bloom filter items: resident memory 187
//! MiB with the dynamic threshold, 98 MiB with it fixed; a restarted server holding the
//! same store, 31 MiB.

/// Fixes glibc's mmap threshold (module comment), unless the environment sets it.
pub fn give_back_large_frees() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    if std::env::var_os("MALLOC_MMAP_THRESHOLD_").is_none() {
        // SAFETY: `mallopt` only changes malloc's parameters; it is called at start, before
        // any other thread exists.
        #[expect(unsafe_code, reason = "glibc's mallopt has no safe wrapper")]
        unsafe {
            libc::mallopt(libc::M_MMAP_THRESHOLD, 128 * 1024);
        }
    }
}

/// How long the store's background work must have been quiet before freed memory is given
/// back.
const QUIET: std::time::Duration = std::time::Duration::from_secs(2);

/// Gives the allocator's free pages back to the system (`malloc_trim`) each time the store's
/// work — `work()`, the flushes, compactions, gets and scans done so far — has stopped for
/// `QUIET`: after a burst, the freed memtables, compaction buffers and connections' buffers
/// that the fixed threshold did not return (fragments of heap pages). Never while work goes
/// on: a trim walks the heap holding malloc's locks. Measured with `bf_bench` after loading
/// 10^7 items: malloc's in-use bytes were 61 MB of the 99 MB it held; resident memory 84 MiB
/// once trimmed.
pub fn trim_when_settled(work: impl Fn() -> u64 + Send + 'static) {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    {
        let trim = move || {
            let (mut last, mut since, mut trimmed) = (work(), std::time::Instant::now(), true);
            loop {
                std::thread::sleep(QUIET / 4);
                let now = work();
                if now != last {
                    (last, since, trimmed) = (now, std::time::Instant::now(), false);
                } else if !trimmed && since.elapsed() >= QUIET {
                    let t = std::time::Instant::now();
                    // SAFETY: `malloc_trim` only returns free pages; any thread may call it.
                    #[expect(unsafe_code, reason = "glibc's malloc_trim has no safe wrapper")]
                    unsafe {
                        libc::malloc_trim(0);
                    }
                    tracing::debug!(micros = t.elapsed().as_micros() as u64, "malloc_trim");
                    trimmed = true;
                }
            }
        };
        if let Err(e) = std::thread::Builder::new().name("trim".into()).spawn(trim) {
            tracing::warn!(error = %e, "no thread to give freed memory back");
        }
    }
    #[cfg(not(all(target_os = "linux", target_env = "gnu")))]
    drop(work);
}
