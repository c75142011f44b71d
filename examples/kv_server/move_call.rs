//! MOVE in a cluster: one call (`Change::Move`) decided when its entry is applied, on every
//! node alike, so the key is in one database or the other, never both or neither, whichever
//! nodes the clients talk to. A string goes with its value and expiry; a Bloom filter with
//! its header and expiry, under a new generation of the destination's
//! (`bloom::take_generation`), and its items: at most `MAX_MOVE_ITEMS`, the single server's
//! limit (`Values::move_filter`), counted from the replicated data so every node refuses
//! alike.

use super::bloom::{header_key, item_key, items_range, take_generation, Header};
use super::bloom_commands::MAX_MOVE_ITEMS;
use super::procs::CallRmw;
use super::resp::Reply;
use super::rmw_view::{Place, Rmw};
use super::store::StoreResult;

/// Moves `key` from the database of keyspace `from` to that of `to`: 1 if moved, 0 if
/// `from` has no `key` or `to` has one.
pub fn run_move<'c>(
    rmw: &mut CallRmw<'c, '_>,
    from: &'c str,
    to: &'c str,
    key: &[u8],
) -> StoreResult<Reply> {
    if from == to {
        return Ok(Reply::err("source and destination objects are the same"));
    }
    rmw.switch(from);
    let Some((place, value, expires)) = rmw.locate(key)? else {
        return Ok(Reply::Int(0));
    };
    rmw.switch(to);
    if rmw.exists(key)? {
        return Ok(Reply::Int(0));
    }
    match place {
        Place::Values => {
            rmw.put(key, value, expires)?;
            rmw.switch(from);
            rmw.delete(key)?;
        }
        Place::Filters => {
            let mut header = Header::decode(&value).map_err(Reply::err)?;
            rmw.switch(from);
            let (start, end) = items_range(header.generation);
            let (items, more) = rmw.keys(Place::Filters, &start, &end, MAX_MOVE_ITEMS)?;
            if more {
                return Ok(Reply::err(format!(
                    "MOVE of a Bloom filter of more than {MAX_MOVE_ITEMS} items is not supported"
                )));
            }
            rmw.drop_filter(key)?;
            rmw.switch(to);
            header.generation = take_generation(rmw)?;
            let h = header_key(key);
            rmw.write(Place::Filters, &h, Some((header.encode(), expires)))?;
            for item in items {
                let item = item.get(start.len()..).unwrap_or_default();
                let k = item_key(header.generation, item);
                rmw.write(Place::Filters, &k, Some((Vec::new(), None)))?;
            }
        }
    }
    Ok(Reply::Int(1))
}
