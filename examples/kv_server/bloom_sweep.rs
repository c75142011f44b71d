//! Reclaiming the items of filters that went without a delete. A filter that expires leaves
//! its header to the store's expiry, and its items — keyed by its generation (`bloom.rs`) —
//! behind, unreachable. A sweep (`BfChange::Sweep`, a change like the others: under the
//! exclusive write order on a single server, one call decided at apply in a cluster)
//! range-deletes, from generation 1 up to the last one given, each run of generations that
//! no live header names and that still holds an item. kv_server sweeps every database with
//! filters every `--bloom-sweep-secs` (a cluster: from the leader only), so an expired
//! filter's items leave the disk within that time plus a compaction's.

use std::sync::Arc;
use std::time::Duration;

use super::bloom::{header_key, item_key, BfChange, Header, GENERATION_KEY, HEADERS_END};
use super::commands::Server;
use super::resp::Reply;
use super::rmw::Change;
use super::rmw_view::{Place, Rmw};
use super::store::{Space, Store, StoreResult};
use super::values::Values;

/// Most filters a sweep reads; a database with more is not swept (its answer says so).
pub const MAX_SWEEP_FILTERS: usize = 100_000;

/// Sweeps the database `rmw` views: the count of runs of generations range-deleted.
pub fn sweep(rmw: &mut dyn Rmw) -> StoreResult<Reply> {
    let Some((last, _)) = rmw.read(Place::Filters, GENERATION_KEY)? else {
        return Ok(Reply::Int(0));
    };
    let Ok(last) = <[u8; 8]>::try_from(last.as_slice()).map(u64::from_le_bytes) else {
        return Ok(Reply::err("a damaged Bloom filter generation"));
    };
    let start = header_key(b"");
    let (headers, more) = rmw.entries(Place::Filters, (&start, HEADERS_END), MAX_SWEEP_FILTERS)?;
    if more {
        return Ok(Reply::err(format!(
            "more than {MAX_SWEEP_FILTERS} Bloom filters: not swept"
        )));
    }
    let mut live = Vec::with_capacity(headers.len());
    for (_, bytes) in headers {
        // A damaged header's items cannot be told apart: sweep nothing.
        match Header::decode(&bytes) {
            Ok(header) => live.push(header.generation),
            Err(e) => return Ok(Reply::err(e)),
        }
    }
    live.sort_unstable();
    live.dedup();
    let mut swept = 0;
    // Each gap between live generations, then the one after the last live up to `last`.
    let mut from = 1u64;
    let bounds = live.into_iter().filter(|&g| g <= last).map(Some);
    for next in bounds.chain([None]) {
        let gap_end = match next {
            Some(g) => item_key(g, b""),
            None => match last.checked_add(1) {
                Some(after) => item_key(after, b""),
                None => b"j".to_vec(),
            },
        };
        if next.is_none_or(|g| g > from) && from <= last {
            let gap_start = item_key(from, b"");
            if !rmw
                .entries(Place::Filters, (&gap_start, &gap_end), 1)?
                .0
                .is_empty()
            {
                rmw.delete_range(Place::Filters, &gap_start, &gap_end)?;
                swept += 1;
            }
        }
        match next {
            Some(g) => from = g.saturating_add(1),
            None => break,
        }
    }
    Ok(Reply::Int(swept))
}

/// Sweeps every database of `server` that has filters, every `every`, on a thread of its
/// own (a cluster's node sweeps only while it leads: one sweep per database per period).
pub fn sweep_every(server: Arc<Server>, every: Duration) {
    let run = move || loop {
        std::thread::sleep(every);
        for index in 0..server.db.databases() {
            if !has_filters(&server.db, index) {
                continue;
            }
            let values = Values {
                db: &server.db,
                writes: &server.writes,
                index,
            };
            match values.run_change(Change::Bf(BfChange::Sweep)) {
                Reply::Int(0) => {}
                Reply::Int(n) => {
                    tracing::info!(database = index, runs = n, "swept Bloom filter items")
                }
                other => tracing::warn!(database = index, reply = ?other, "Bloom filter sweep"),
            }
        }
    };
    if let Err(e) = std::thread::Builder::new()
        .name("bf-sweep".into())
        .spawn(run)
    {
        tracing::warn!(error = %e, "no thread to sweep Bloom filter items");
    }
}

/// Whether database `index` may hold filters this node should sweep.
fn has_filters(db: &Store, index: usize) -> bool {
    match db.space(index) {
        Ok(space @ Space::Local(..)) => !matches!(space.filters(false), Ok(Space::Unmade)),
        #[cfg(feature = "replication")]
        Ok(Space::Cluster(c, _)) => c.leads(),
        _ => false,
    }
}
